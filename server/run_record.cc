#include "server/run_record.h"

#include <google/protobuf/util/json_util.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "server/log_capture.h"
#include "shared/os/procfs.h"
#include "shared/spec/sweep.h"
#include "spdlog/spdlog.h"

namespace shoal {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);

// The run's captured output, read to its end once the run has ended (the log is complete).
StatusOr<std::string> WholeLog(ExperimentService* service, const std::string& id) {
  std::string log;
  v1::LogsRequest req;
  req.set_id(id);
  req.set_max_bytes(1 << 20);
  for (;;) {
    req.set_offset(log.size());
    ASSIGN_OR_RETURN(v1::LogsResponse r, service->Logs(req));
    log += r.data();
    if (r.complete()) return log;
    if (r.data().empty()) std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

StatusOr<v1::PointOrder> ReadPointOrder(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("run-point: cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  v1::PointOrder order;
  // Unknown fields are dropped, not refused: an order written before data_parallel's node fields
  // moved to the spec (by an older shoald, its task still pending across the upgrade) holds them
  // at their defaults (1 node, rank 0: runs across nodes came after), which the spec's defaults
  // give again.
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (auto st = google::protobuf::util::JsonStringToMessage(text.str(), &order, options); !st.ok())
    return InvalidArgument("run-point: " + path +
                           " is not a point order: " + std::string(st.message()));
  if (order.sweep_id().empty() || order.experiment_id().empty())
    return InvalidArgument("run-point: " + path + " names no sweep_id or experiment_id");
  return order;
}

bool WrittenOnlyByMe(const std::string& path) {
  const std::string folder = std::filesystem::path(path).parent_path().string();
  for (const std::string& p : {path, folder.empty() ? std::string(".") : folder}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || st.st_uid != ::geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
      return false;
  }
  return true;
}

StatusOr<v1::RunRecord> RunPoint(ExperimentService* service, Store* store,
                                 const v1::PointOrder& order, const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(const std::string id,
                   service->Submit(order.spec(), "point " + order.sweep_id() + "/" +
                                                     std::to_string(order.index())));
  // The task's output names the run by this throwaway daemon's id: say whose point it is.
  spdlog::info("{}: point {} of sweep {}, experiment {} on record", id, order.index(),
               order.sweep_id(), order.experiment_id());
  v1::RunRecord r;
  bool cancelled = false;
  for (;;) {
    ASSIGN_OR_RETURN(v1::Experiment e, service->Get(id));
    if (IsTerminal(e.state())) break;
    if (stop != nullptr && *stop && !cancelled) {
      cancelled = true;
      (void)service->Cancel(id);  // it ends CANCELLED, and is recorded so
    }
    std::this_thread::sleep_for(kPoll);
  }
  ASSIGN_OR_RETURN(std::string log, WholeLog(service, id));  // complete: the run has left
  ASSIGN_OR_RETURN(*r.mutable_experiment(), service->Get(id));
  ASSIGN_OR_RETURN(auto samples, service->Samples(id));
  for (auto& s : samples) *r.add_samples() = std::move(s);
  ASSIGN_OR_RETURN(auto events, store->Events(id));
  for (auto& ev : events) *r.add_events() = std::move(ev);
  r.set_log(std::move(log));
  v1::Experiment& e = *r.mutable_experiment();
  e.set_id(order.experiment_id());
  e.set_sweep_id(order.sweep_id());
  e.set_sweep_index(order.index());
  return r;
}

std::string NewRecordKey() {
  std::string key(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), int(key.size())) != 1)
    std::abort();  // no randomness: nothing could be sealed safely
  return key;
}

std::string KeyToHex(const std::string& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : key) hex += {kDigits[c >> 4], kDigits[c & 15]};
  return hex;
}

StatusOr<std::string> KeyFromHex(const std::string& hex) {
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  if (hex.size() != 64) return InvalidArgument("a record key is 64 hex digits");
  std::string key;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgument("a record key is 64 hex digits");
    key += char(hi << 4 | lo);
  }
  return key;
}

namespace {

std::string Hmac(const std::string& key, const std::string& bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), int(key.size()),
       reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out, &n);
  return std::string(reinterpret_cast<char*>(out), n);
}

}  // namespace

Status WriteRunRecord(const v1::RunRecord& r, const std::string& path, const std::string& key) {
  std::string bytes;
  if (!r.SerializeToString(&bytes)) return Internal("cannot serialize the record for " + path);
  if (!key.empty()) {
    v1::SealedRecord sealed;
    sealed.set_hmac_sha256(Hmac(key, bytes));
    sealed.set_record(std::move(bytes));
    bytes = sealed.SerializeAsString();
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(bytes.data(), std::streamsize(bytes.size())) || !out.flush())
      return Internal("writing " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Internal("cannot move the record into " + path);
  }
  return {};
}

StatusOr<v1::RunRecord> ReadRunRecord(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  // No file is no record; a file that cannot be opened now (permissions, a shared file system's
  // hiccup) may be read later: UNAVAILABLE, and it is not to be taken for missing.
  if (!in)
    return errno == ENOENT ? NotFound(path + ": no record")
                           : Unavailable(path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  std::string bytes = text.str();
  if (!key.empty()) {
    v1::SealedRecord sealed;
    const std::string want = Hmac(key, sealed.ParseFromString(bytes) ? sealed.record() : "");
    if (sealed.hmac_sha256().size() != want.size() ||
        CRYPTO_memcmp(sealed.hmac_sha256().data(), want.data(), want.size()) != 0)
      return InvalidArgument(path +
                             ": not sealed with its sweep's key (a record comes back "
                             "sealed by the task the sweep's job ran)");
    bytes = sealed.record();
  }
  v1::RunRecord r;
  if (!r.ParseFromString(bytes)) return InvalidArgument(path + ": not a run record");
  return r;
}

namespace {

v1::NodePart PartOf(uint32_t node, const StatusOr<v1::RunRecord>& r) {
  v1::NodePart p;
  p.set_node_rank(node);
  if (!r.ok()) {
    p.set_state(v1::FAILED);
    p.set_error("node " + std::to_string(node) + " wrote no record");
    return p;
  }
  const v1::Experiment& e = r->experiment();
  if (e.has_host()) p.set_daemon(e.host().hostname());
  p.set_experiment_id(e.id());
  p.set_state(e.state());
  p.set_error(e.error());
  const v1::Result& res = e.result();
  if (res.has_samples_per_sec()) p.set_samples_per_sec(res.samples_per_sec());
  if (res.has_peak_pss_sum_bytes()) p.set_peak_pss_sum_bytes(res.peak_pss_sum_bytes());
  if (res.has_sum_of_peak_pss_bytes()) p.set_sum_of_peak_pss_bytes(res.sum_of_peak_pss_bytes());
  return p;
}

// Node `node`'s processes, samples, events and log added to `out`, its samples' and events' times
// moved by `offset_ms` onto the run's clock.
void AddNodeTelemetry(uint32_t node, const v1::RunRecord& r, double offset_ms, v1::RunRecord* out) {
  for (auto p : r.experiment().processes()) {
    p.set_node(node);
    *out->mutable_experiment()->add_processes() = std::move(p);
  }
  for (auto s : r.samples()) {
    s.set_node(node);
    s.set_t_ms(s.t_ms() + offset_ms);
    *out->add_samples() = std::move(s);
  }
  for (auto ev : r.events()) {
    ev.set_t_ms(ev.t_ms() + offset_ms);
    *out->add_events() = std::move(ev);
  }
  out->mutable_log()->append("== node " + std::to_string(node) + " ==\n" + r.log());
}

}  // namespace

void ShipProfileTraces(v1::RunRecord* r, const std::string& out) {
  v1::Experiment& e = *r->mutable_experiment();
  if (e.profile_traces_size() == 0) return;
  namespace fs = std::filesystem;
  std::vector<v1::ProfileTrace> shipped;
  for (const auto& t : e.profile_traces()) {
    std::error_code ec;
    const fs::path to = fs::path(out) / t.name();
    fs::create_directories(to.parent_path(), ec);
    if (!ec)
      fs::copy_file(fs::path(e.profile_dir()) / t.name(), to, fs::copy_options::overwrite_existing,
                    ec);
    if (ec) {
      spdlog::warn("profiler trace {} not shipped to {}: {}", t.name(), out, ec.message());
      continue;
    }
    shipped.push_back(t);
  }
  e.clear_profile_traces();
  for (auto& t : shipped) *e.add_profile_traces() = std::move(t);
  e.set_profile_dir(out);
}

StatusOr<v1::RunRecord> MergeNodeRecords(const std::vector<StatusOr<v1::RunRecord>>& records) {
  const StatusOr<v1::RunRecord>* base = nullptr;
  for (const auto& r : records) {
    if (!r.ok() && r.status().code() != Code::kNotFound) return r.status();
    if (r.ok() && base == nullptr) base = &r;
  }
  if (base == nullptr) return NotFound("no node wrote a record");
  v1::RunRecord out;
  *out.mutable_experiment() = base->value().experiment();
  v1::Experiment& e = *out.mutable_experiment();
  e.clear_processes();
  e.clear_parts();
  e.clear_profile_traces();  // every node's, below
  e.clear_profile_dir();
  double samples_per_sec = 0;
  bool rate = false;
  uint64_t samples = 0, steps = 0;  // every node's workers', as one node's are summed
  std::string failed;
  // Each node's times count from its own run's start: moved onto the earliest node's start (the
  // run's, as the record now says) by the nodes' wall clocks, so one timeline holds every node
  // and no time is before it (srun starts the nodes together: node 0 is not always first).
  int64_t start0 = 0;
  for (const auto& r : records)
    if (const int64_t t = r.ok() ? r.value().experiment().started_unix_ms() : 0; t > 0)
      start0 = start0 == 0 ? t : std::min(start0, t);
  if (start0 > 0) e.set_started_unix_ms(start0);
  for (uint32_t k = 0; k < records.size(); ++k) {
    v1::NodePart part = PartOf(k, records[k]);
    const int64_t start = records[k].ok() ? records[k].value().experiment().started_unix_ms() : 0;
    if (start0 > 0 && start > 0) part.set_clock_offset_ms(double(start - start0));
    *e.add_parts() = part;
    if (records[k].ok()) {
      AddNodeTelemetry(k, records[k].value(), part.clock_offset_ms(), &out);
      // Each node's profiler traces, under its node's folder of the task's (node-K/).
      for (const auto& t : records[k].value().experiment().profile_traces()) {
        v1::ProfileTrace* mine = e.add_profile_traces();
        *mine = t;
        mine->set_name("node-" + std::to_string(k) + "/" + t.name());
      }
      samples += records[k].value().experiment().result().samples();
      steps += records[k].value().experiment().result().steps();
    }
    if (part.has_samples_per_sec()) {
      samples_per_sec += part.samples_per_sec();
      rate = true;
    }
    if (failed.empty() && part.state() == v1::FAILED)
      failed = part.error().rfind("node ", 0) == 0
                   ? part.error()
                   : "node " + std::to_string(k) + ": " + part.error();
  }
  if (rate) e.mutable_result()->set_samples_per_sec(samples_per_sec);
  if (e.result().has_samples()) e.mutable_result()->set_samples(samples);
  if (e.result().has_steps()) e.mutable_result()->set_steps(steps);
  const bool cancelled = std::any_of(e.parts().begin(), e.parts().end(), [](const v1::NodePart& p) {
    return p.state() == v1::CANCELLED;
  });
  if (!failed.empty()) {
    e.set_state(v1::FAILED);
    e.set_error(failed);
  } else if (cancelled) {
    e.set_state(v1::CANCELLED);
  }
  return out;
}

Status StoreRunRecord(Store* store, const std::string& logs_dir, const v1::PointOrder& order,
                      const v1::RunRecord& r, const PutRecord& put) {
  const v1::Experiment& e = r.experiment();
  const std::string where = "point " + std::to_string(order.index()) + "'s record: ";
  if (!IsTerminal(e.state()))
    return InvalidArgument(where + "its run has not ended (" + v1::ExperimentState_Name(e.state()) +
                           ")");
  if (e.sweep_id() != order.sweep_id() || e.sweep_index() != order.index() ||
      e.id() != order.experiment_id())
    return InvalidArgument(where + "it names " + e.sweep_id() + " point " +
                           std::to_string(e.sweep_index()) + " (" + e.id() + "), not " +
                           order.sweep_id() + " point " + std::to_string(order.index()) + " (" +
                           order.experiment_id() + ")");
  if (!logs_dir.empty() && !r.log().empty()) {
    std::ofstream log(LogPath(logs_dir, e.id()), std::ios::binary | std::ios::trunc);
    log.write(r.log().data(), std::streamsize(std::min<size_t>(r.log().size(), kLogCapBytes)));
  }
  // One transaction, replacing what an earlier try stored: a daemon killed mid-store and
  // restarted stores the record again, not its samples twice.
  RETURN_IF_ERROR(store->ReplaceTelemetry(e.id(), {r.samples().begin(), r.samples().end()},
                                          {r.events().begin(), r.events().end()}));
  // Last: a reader that sees the ended record finds its samples.
  return put ? put(e) : store->Put(e);
}

}  // namespace shoal
