#include "server/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "server/log_capture.h"
#include "server/paging.h"
#include "server/recovery.h"
#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/kinds/kind.h"
#include "shared/os/process.h"
#include "shared/os/shm.h"
#include "shared/spec/admission.h"
#include "shared/spec/spec.h"
#include "spdlog/spdlog.h"

namespace shoal {

constexpr int kSampleHistoryExperiments = 200;
// A forkserver loads and warms LibTorch before it listens: seconds, more on a loaded node.
constexpr uint64_t kForkServerBootNs = 60'000'000'000ull;

std::string NewId(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}() ^ RealtimeNs()};
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  uint64_t v = rng();
  for (int i = 0; i < 10; ++i) id += hex[(v >> (4 * i)) & 15];
  return id;
}

IdSource FreshIds(Store* store, IdSource draw) {
  // The ids handed out lately, not yet on record (a sweep's points are drawn before their batch
  // is stored): bounded, as a batch is.
  struct Recent {
    std::mutex mu;
    std::set<std::string> ids;
    std::deque<std::string> order;
  };
  auto recent = std::make_shared<Recent>();
  return [store, draw = std::move(draw), recent](const char* prefix) {
    for (;;) {
      std::string id = draw(prefix);
      std::lock_guard<std::mutex> l(recent->mu);
      if (recent->ids.count(id)) continue;
      // A store that cannot answer refuses a clash itself, when the record is inserted.
      if (StatusOr<bool> taken = store->Taken(id); taken.ok() && *taken) continue;
      recent->ids.insert(id);
      recent->order.push_back(id);
      // Every id one sweep draws is remembered until its records are stored together.
      if (recent->order.size() > 2 * kMaxSlurmSweepPoints) {
        recent->ids.erase(recent->order.front());
        recent->order.pop_front();
      }
      return id;
    }
  };
}

Coordinator::Coordinator(CoordinatorOptions opts, Store* store, TelemetryHub* hub,
                         DaemonSeams seams)
    : opts_(std::move(opts)),
      store_(store),
      hub_(hub),
      os_(seams),
      blobs_(opts_.blobs_dir, opts_.max_upload_bytes),
      reaper_(seams.waiter),
      fork_server_({opts_.worker_bin, opts_.fork_server_socket, opts_.fork_server_pool, ::getpid()},
                   seams.proc, seams.clock, &reaper_),
      queue_(store, opts_.max_queued),
      new_id_(FreshIds(store)),
      sweeps_(store, &queue_, new_id_) {
  if (seams.slurm != nullptr) {
    SlurmSweepOptions slurm = opts_.slurm;
    slurm.logs_dir = opts_.logs_dir;
    slurm.blobs_dir = opts_.blobs_dir;
    slurm_ = std::make_unique<SlurmSweeps>(
        seams.slurm, &queue_, store, slurm,
        [this](const std::string& id, const std::function<void()>& fn) {
          sweeps_.WithSavesHeld(id, fn);
        });
  }
  queue_.Listen([this](const v1::Experiment& e) { sweeps_.OnExperiment(e); });
  queue_.Listen([this](const v1::Experiment& e) {
    // Cancelled before it started, or run by Slurm: no runner here tells its watchers, so this
    // does.
    const bool here = !e.has_slurm();
    if (here && (e.state() != v1::CANCELLED || e.started_unix_ms() != 0)) return;
    v1::WatchEvent ev;
    ev.set_state(e.state());
    Publish(e.id(), ev);
    if (IsTerminal(e.state())) hub_->Close(e.id());
  });
}

Coordinator::~Coordinator() { Shutdown(); }

Status Coordinator::Recover() {
  if (!opts_.blobs_dir.empty()) RETURN_IF_ERROR(blobs_.Init());
  ASSIGN_OR_RETURN(Recovered r, shoal::Recover(store_, os_.segments, new_id_));
  queue_.Restore(r.queue);
  sweeps_.Restore(r.sweeps);
  FollowRecovered(r);
  return Status::Ok();
}

// Points placed on Slurm by a previous daemon: followed again from their sweep's job id (their
// tasks ran on meanwhile); a sweep cancelled before its array was has its points cancelled now.
void Coordinator::FollowRecovered(const Recovered& r) {
  if (r.elsewhere.empty()) return;
  queue_.RestoreAdopted(r.elsewhere);
  for (const auto& sw : r.sweeps) {
    std::vector<v1::Experiment> mine;
    for (const auto& e : r.elsewhere)
      if (e.sweep_id() == sw.id()) mine.push_back(e);
    if (mine.empty()) continue;
    if (!slurm_) {
      spdlog::error("sweep {}: {} points placed on Slurm, but this shoald has no Slurm", sw.id(),
                    mine.size());
      continue;
    }
    slurm_->Follow(sw, mine);
    spdlog::info("sweep {}: following its Slurm job arrays again ({} points not ended)", sw.id(),
                 mine.size());
    if (!sw.error().empty())
      for (const auto& e : mine) (void)queue_.Cancel(e.id());
  }
}

void Coordinator::Start() {
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  if (slurm_) slurm_poller_ = std::thread([this] { SlurmLoop(); });
}

// Looks at the followed arrays every slurm_poll: one scontrol each, whatever their size.
void Coordinator::SlurmLoop() {
  std::unique_lock<std::mutex> l(slurm_mu_);
  while (!slurm_stop_) {
    l.unlock();
    slurm_->Poll();
    l.lock();
    slurm_cv_.wait_for(l, opts_.slurm_poll, [this] { return slurm_stop_ || slurm_kick_; });
    slurm_kick_ = false;
  }
}

void Coordinator::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    std::lock_guard<std::mutex> l(slurm_mu_);
    slurm_stop_ = true;
  }
  slurm_cv_.notify_all();
  if (slurm_poller_.joinable()) slurm_poller_.join();
  queue_.Shutdown();
  if (scheduler_.joinable()) scheduler_.join();
}

// `queued`: at submit, behind the running experiment (if any), whose memory and segments are
// then free again; at the start of a run, nothing else runs.
Status Coordinator::Admit(const v1::ExperimentSpec& spec, bool queued) {
  if (spec.force()) return Status::Ok();
  const KindRules* kind = FindKind(spec.kind());
  if (kind == nullptr || kind->estimate == nullptr) return Status::Ok();
  ASSIGN_OR_RETURN(ExperimentEstimate need, kind->estimate(spec));
  ASSIGN_OR_RETURN(NodeCapacity have, ReadNodeCapacity());
  if (queued) {
    std::lock_guard<std::mutex> l(latest_mu_);
    if (latest_) {
      have.running_memory_bytes = latest_->sample.total_pss_bytes();
      have.running_shm_bytes = latest_->sample.shared_bytes();
    }
  }
  return shoal::Admit(need, have);
}

StatusOr<std::string> Coordinator::Submit(v1::ExperimentSpec spec, const std::string& submitter) {
  ApplyDefaults(&spec, opts_.limits);
  RETURN_IF_ERROR(ValidateSpec(spec, opts_.limits));
  RETURN_IF_ERROR(CheckDataset(spec.dataset(), opts_.limits.data_roots));
  RETURN_IF_ERROR(CheckModelFile(spec));
  RETURN_IF_ERROR(Admit(spec, /*queued=*/true));
  v1::Experiment e = NewExperimentRecord(new_id_("x"), spec, RealtimeMs());
  e.set_submitter(submitter);
  RETURN_IF_ERROR(queue_.Enqueue({e}));
  spdlog::info("queued {}: {} {} workers, start {}, share {}", e.id(), spec.kind(), spec.workers(),
               spec.start(), spec.share() ? "yes" : "no");
  return e.id();
}

StatusOr<v1::Experiment> Coordinator::Cancel(const std::string& id) { return queue_.Cancel(id); }

Status Coordinator::CheckModelFile(const v1::ExperimentSpec& spec) const {
  if (spec.has_model_file()) RETURN_IF_ERROR(blobs_.Find(spec.model_file()).status());
  if (!IsSha256Ref(spec.dataset())) return Status::Ok();
  auto f = blobs_.Find(spec.dataset());
  if (f.ok()) return Status::Ok();
  return Status(f.status().code(), "dataset: " + spec.dataset() + " is not stored on this daemon");
}

v1::Experiment Coordinator::WithStoredFile(v1::Experiment e) const {
  if (IsSha256Ref(e.spec().dataset())) {
    auto d = blobs_.Find(e.spec().dataset());
    if (d.ok()) *e.mutable_dataset_file() = *d;
  }
  if (!e.spec().has_model_file()) return e;
  auto f = blobs_.Find(e.spec().model_file());
  if (f.ok()) {
    *e.mutable_model_file() = *f;
  } else {
    e.mutable_model_file()->set_ref(e.spec().model_file());  // removed since: the hash stays
  }
  return e;
}

StatusOr<v1::Experiment> Coordinator::Get(const std::string& id) {
  ASSIGN_OR_RETURN(v1::Experiment e, queue_.Get(id));
  return WithStoredFile(std::move(e));
}

StatusOr<v1::SweepReport> Coordinator::GetSweep(const std::string& id) {
  ASSIGN_OR_RETURN(v1::SweepReport r, sweeps_.Get(id));
  for (auto& e : *r.mutable_experiments()) e = WithStoredFile(std::move(e));
  return r;
}

StatusOr<Page<v1::Experiment>> Coordinator::List(const PageRequest& page,
                                                 const ExperimentFilter& filter) {
  return CollectPage<v1::Experiment>(
      page,
      [this](const std::optional<RecordKey>& after, size_t n) {
        return queue_.ListAfter(after, n);
      },
      [&](const v1::Experiment& e) { return filter.Matches(e); });
}

StatusOr<Page<v1::Sweep>> Coordinator::ListSweeps(const PageRequest& page) {
  ASSIGN_OR_RETURN(std::vector<v1::Sweep> all, sweeps_.List());
  return TakePage(std::move(all), page);
}

StatusOr<v1::DeleteResponse> Coordinator::Delete(const std::string& id) {
  auto r = DeleteRecord(id);
  RemoveOrphanLogs();
  RemoveUnusedFiles();
  return r;
}

void Coordinator::RemoveUnusedFiles() {
  if (opts_.blobs_dir.empty()) return;
  std::set<std::string> in_use;
  auto experiments = queue_.List();
  auto sweeps = sweeps_.List();
  if (!experiments.ok() || !sweeps.ok()) return;  // keep everything rather than guess
  for (const auto& e : *experiments) {
    in_use.insert(e.spec().model_file());
    in_use.insert(e.spec().dataset());
  }
  for (const auto& sw : *sweeps) {  // points not made into experiments yet
    in_use.insert(sw.spec().base().model_file());
    in_use.insert(sw.spec().base().dataset());
    for (const auto& axis : sw.spec().axes())
      if (axis.field() == "model_file" || axis.field() == "dataset")
        in_use.insert(axis.values().begin(), axis.values().end());
  }
  const size_t removed =
      blobs_.RemoveUnreferenced(in_use, std::chrono::seconds(opts_.upload_grace_s));
  if (removed > 0) spdlog::info("removed {} uploaded file(s) no record uses", removed);
}

// A log whose experiment is no longer on record goes too (rm, prune, a sweep's points), and so
// does its folder of profiler traces.
void Coordinator::RemoveOrphanLogs() {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(opts_.profiles_dir, ec), end;
       !opts_.profiles_dir.empty() && !ec && it != end; it.increment(ec)) {
    auto e = queue_.Get(it->path().filename().string());
    std::error_code rm;
    if (!e.ok() && e.status().code() == Code::kNotFound)
      std::filesystem::remove_all(it->path(), rm);
  }
  if (opts_.logs_dir.empty()) return;
  ec.clear();
  // increment(ec), not ++: a read error would throw from a gRPC thread and end shoald.
  for (std::filesystem::directory_iterator it(opts_.logs_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::filesystem::path& f = it->path();
    if (f.extension() != ".log") continue;
    auto e = queue_.Get(f.stem().string());
    std::error_code rm;
    if (!e.ok() && e.status().code() == Code::kNotFound) std::filesystem::remove(f, rm);
  }
}

StatusOr<v1::LogsResponse> Coordinator::Logs(const v1::LogsRequest& req) {
  const uint32_t max = req.has_max_bytes() ? req.max_bytes() : 65536;
  if (max < 1 || max > (1u << 20))
    return InvalidArgument("max_bytes: " + std::to_string(max) +
                           " is outside the allowed range 1..1048576");
  ASSIGN_OR_RETURN(v1::Experiment e, queue_.Get(req.id()));
  const bool ended = IsTerminal(e.state()) && !queue_.IsLive(req.id());
  // Without capture there is no file: the log reads as empty.
  const std::string path = opts_.logs_dir.empty() ? "" : LogPath(opts_.logs_dir, req.id());
  return ReadLog(path, req.offset(), max, ended);
}

StatusOr<v1::DeleteResponse> Coordinator::DeleteRecord(const std::string& id) {
  v1::DeleteResponse resp;
  if (!id.empty() && id[0] == 's') {
    ASSIGN_OR_RETURN(uint32_t experiments, sweeps_.Delete(id));
    resp.set_experiments(experiments);
    resp.set_sweeps(1);
    return resp;
  }
  ASSIGN_OR_RETURN(v1::Experiment e, queue_.Get(id));
  if (queue_.IsUnsaved(id)) {
    return Unavailable("experiment " + id + " ended but its record is not stored yet (the " +
                       "database refused it; shoald retries): try again");
  }
  if (!IsTerminal(e.state())) {
    return FailedPrecondition("experiment " + id + " is " + v1::ExperimentState_Name(e.state()) +
                              ": cancel it first");
  }
  if (queue_.IsLive(id)) {  // ended, its runner still writing its last event
    return FailedPrecondition("experiment " + id + " is " + v1::ExperimentState_Name(e.state()) +
                              " and still ending (its last event is being written): try again");
  }
  if (!e.sweep_id().empty()) {
    return FailedPrecondition("experiment " + id + " is point " + std::to_string(e.sweep_index()) +
                              " of sweep " + e.sweep_id() + ": delete the sweep");
  }
  RETURN_IF_ERROR(store_->DeleteExperiment(id));
  resp.set_experiments(1);
  return resp;
}

namespace {

// Which of the ended records (newest first) go: beyond the newest `keep`, or ended before `cut`.
template <typename T>
std::vector<std::string> PruneVictims(std::vector<T> all, const v1::PruneRequest& req,
                                      int64_t cut_ms) {
  std::sort(all.begin(), all.end(),
            [](const T& a, const T& b) { return a.submitted_unix_ms() > b.submitted_unix_ms(); });
  std::vector<std::string> out;
  uint32_t kept = 0;
  for (const auto& r : all) {
    if (!IsTerminal(r.state())) continue;
    const bool too_many = req.has_keep() && kept >= req.keep();
    const bool too_old = req.has_older_than_ms() && r.finished_unix_ms() < cut_ms;
    if (too_many || too_old) {
      out.push_back(r.id());
    } else {
      ++kept;
    }
  }
  return out;
}

}  // namespace

StatusOr<v1::DeleteResponse> Coordinator::Prune(const v1::PruneRequest& req) {
  if (!req.has_older_than_ms() && !req.has_keep())
    return InvalidArgument("prune: give older_than_ms and/or keep");
  const int64_t cut = RealtimeMs() - int64_t(std::min<uint64_t>(req.older_than_ms(), 1ull << 52));
  ASSIGN_OR_RETURN(std::vector<v1::Experiment> experiments, queue_.List());
  experiments.erase(std::remove_if(experiments.begin(), experiments.end(),
                                   [](const v1::Experiment& e) { return !e.sweep_id().empty(); }),
                    experiments.end());
  ASSIGN_OR_RETURN(std::vector<v1::Sweep> sweeps, sweeps_.List());
  std::vector<std::string> victims = PruneVictims(std::move(sweeps), req, cut);
  for (auto& id : PruneVictims(std::move(experiments), req, cut)) victims.push_back(std::move(id));
  v1::DeleteResponse total;
  for (const auto& id : victims) {
    auto r = DeleteRecord(id);  // one that started stopping meanwhile is skipped, not an error
    if (!r.ok() && r.status().code() != Code::kFailedPrecondition) return r.status();
    if (!r.ok()) continue;
    total.set_experiments(total.experiments() + r->experiments());
    total.set_sweeps(total.sweeps() + r->sweeps());
  }
  RemoveOrphanLogs();
  RemoveUnusedFiles();
  return total;
}

// A sample that cannot be stored is logged, and the run goes on (its figures do not depend on it).
void Coordinator::KeepSample(const std::string& id, const v1::Sample& s) {
  if (Status st = store_->AddSample(id, s); !st.ok())
    spdlog::warn("{}: a sample was not kept: {}", id, st.message());
}

void Coordinator::ThinSamples(const std::string& id, std::optional<uint32_t> node) {
  if (Status st = store_->ThinSamples(id, node); !st.ok())
    spdlog::warn("{}: kept samples not thinned: {}", id, st.message());
}

StatusOr<std::vector<v1::Sample>> Coordinator::Samples(const std::string& id) {
  RETURN_IF_ERROR(queue_.Get(id).status());  // an unknown id is NOT_FOUND, not an empty list
  return store_->Samples(id);
}

StatusOr<std::vector<v1::Event>> Coordinator::Events(const std::string& id) {
  RETURN_IF_ERROR(queue_.Get(id).status());
  return store_->Events(id);
}

StatusOr<std::string> Coordinator::SubmitSweep(const v1::SweepSpec& spec,
                                               const std::string& submitter) {
  // Each data set is read once, however many points use it.
  std::map<std::string, Status> checked;
  auto check = [&](const std::string& dataset) {
    auto it = checked.find(dataset);
    if (it == checked.end())
      it = checked.emplace(dataset, CheckDataset(dataset, opts_.limits.data_roots)).first;
    return it->second;
  };
  if (spec.base().has_dataset()) RETURN_IF_ERROR(check(spec.base().dataset()));
  if (spec.has_slurm()) {
    return SubmitSlurmSweep(spec, submitter, [&](const v1::ExperimentSpec& s) -> Status {
      RETURN_IF_ERROR(check(s.dataset()));
      return CheckModelFile(s);  // stored here: the placement shares it with the nodes
    });
  }
  return sweeps_.Submit(spec, submitter, opts_.limits, [&](const v1::ExperimentSpec& s) -> Status {
    RETURN_IF_ERROR(check(s.dataset()));
    RETURN_IF_ERROR(CheckModelFile(s));
    Status st = Admit(s, /*queued=*/true);
    return st.ok() ? st : ResourceExhausted(st.message());
  });
}

// A sweep whose points run on Slurm's nodes: each point is checked as a spec (its files here
// too), not against this machine, which runs none of them.
StatusOr<std::string> Coordinator::SubmitSlurmSweep(const v1::SweepSpec& spec,
                                                    const std::string& submitter,
                                                    const SweepTracker::Admit& check) {
  if (!slurm_) return FailedPrecondition("slurm: this shoald has no Slurm to place a sweep on");
  SweepTracker::Placement placement;
  placement.place = [this](v1::Sweep* sw, std::vector<v1::Experiment>* exps) {
    return slurm_->Place(sw, exps);
  };
  placement.placed = [this](const v1::Sweep& sw, const std::vector<v1::Experiment>& exps,
                            bool stored) {
    if (!stored) return slurm_->Abandon(sw);
    slurm_->Follow(sw, exps);
    {
      std::lock_guard<std::mutex> l(slurm_mu_);
      slurm_kick_ = true;  // a first look now, not a poll later
    }
    slurm_cv_.notify_all();
  };
  SpecLimits limits = opts_.limits;
  limits.placed_on_slurm = true;  // a run over several nodes meets on its allocation's first
  return sweeps_.Submit(spec, submitter, limits, check, &placement);
}

void Coordinator::Publish(const std::string& id, v1::WatchEvent ev) {
  ev.set_experiment_id(id);
  if (ev.has_sample() || (ev.has_state() && IsTerminal(ev.state()))) {
    std::lock_guard<std::mutex> l(latest_mu_);
    if (ev.has_sample()) {
      latest_ = MetricsSnapshot::Running{id, "", "", "", ev.sample()};  // the kind: Metrics()
    } else if (latest_ && latest_->id == id) {
      latest_.reset();  // ended: it has no current memory
    }
  }
  hub_->Publish(id, ev);
}

StatusOr<MetricsSnapshot> Coordinator::Metrics() {
  MetricsSnapshot m;
  // Every state change is stored (ExperimentQueue::Update), so the store's counts are current.
  ASSIGN_OR_RETURN(m.experiments, store_->CountByState());
  {
    std::lock_guard<std::mutex> l(latest_mu_);
    m.running = latest_;
  }
  if (m.running) {
    auto e = queue_.Get(m.running->id);
    if (e.ok()) {
      m.running->kind = e->spec().kind();
      m.running->sweep = e->sweep_id();
      m.running->name = e->spec().name();
    }
  }
  m.node = NodeMetrics();
  return m;
}

MetricsSnapshot::Node Coordinator::NodeMetrics() {
  MetricsSnapshot::Node n;
  if (os_.gpu != nullptr) {
    if (auto r = os_.gpu->Read(); r.ok())
      for (const auto& d : r->devices) {
        n.gpus.push_back(DeviceSample(d));
        n.gpu_identity[d.index] = {d.uuid, d.name};
      }
  }
  if (const auto shm = ReadShmSpace()) {
    n.shm_free_bytes = shm->free_bytes;
    n.shm_total_bytes = shm->total_bytes;
  }
  if (os_.cpu_energy != nullptr) {
    if (auto e = os_.cpu_energy->Read(); e.ok()) {
      double joules = 0;
      for (uint64_t uj : e->energy_uj) joules += double(uj) / 1e6;
      n.cpu_energy_joules = joules;
    }
  }
  if (opts_.host) n.hostname = opts_.host->hostname();
  n.fork_server_up = fork_server_pid() > 0;
  n.fork_server_restarts = uint64_t(std::max(0, fork_server_restarts()));
  return n;
}

void Coordinator::AddEvent(const std::string& id, double t_ms, const std::string& text) {
  v1::Event e;
  e.set_t_ms(t_ms);
  e.set_text(text);
  // In the log too: a Slurm task's output is the only live view of its run (a handful a worker).
  spdlog::info("{}: {}", id, text);
  (void)store_->AddEvent(id, e);
  v1::WatchEvent ev;
  *ev.mutable_event() = e;
  Publish(id, ev);
}

void Coordinator::SchedulerLoop() {
  for (;;) {
    reaper_.Poll();
    queue_.RetryUnsaved();
    std::optional<v1::Experiment> e = queue_.Next(std::chrono::milliseconds(250));
    if (queue_.stopping()) break;
    if (!e) {
      fork_server_.EnsureRunning();  // idle: warm for the next forkserver run
      continue;
    }
    RunOne(std::move(*e));
  }
  queue_.RetryUnsaved();  // a last try; what still fails is logged, and lost with this process
  fork_server_.Stop();
}

// The forkserver's processes map the same libraries as every experiment's: while one that does
// not use it runs, it is not kept (its pages would lower that experiment's PSS). A forkserver run
// waits for it warm, so its start-up times measure the forkserver and not its boot; a cancel or
// a shutdown ends the wait at once, and one that never comes up fails the run.
Status Coordinator::PrepareForkServer(const v1::Experiment& e) {
  (void)fork_server_.TakeLastExit();  // an exit while idle is not this run's story
  if (e.spec().start() != "forkserver") {
    fork_server_.Stop();
    return Status::Ok();
  }
  return fork_server_.WaitReady(kForkServerBootNs, [this, &e] {
    return queue_.StopRequest(e.id()) != ExperimentQueue::kNone;
  });
}

RunnerEnv Coordinator::EnvFor() {
  RunnerEnv env;
  env.os = os_;
  env.reaper = &reaper_;
  env.disturbed_cores = opts_.disturbed_cores;
  env.sampler_cpu = ThreadCpuNs;
  env.sampler = opts_.sampler;
  env.grace_ns = uint64_t(opts_.grace_ms) * 1000000ull;
  env.worker_bin = opts_.worker_bin;
  env.leader_bin = opts_.leader_bin;
  env.fork_server_socket = opts_.fork_server_socket;
  env.logs_dir = opts_.logs_dir;
  env.profiles_dir = opts_.profiles_dir;
  env.cgroups = os_.cgroups;
  env.no_cgroup_why = os_.no_cgroup_why;
  env.memory_limit_bytes = opts_.run_memory_limit_bytes;
  env.daemon_pid = ::getpid();
  env.fork_server_pid = [this] { return fork_server_.pid(); };
  env.fork_server_exit = [this] { return fork_server_.TakeLastExit(); };
  return env;
}

RunnerHooks Coordinator::HooksFor(const std::string& id) {
  RunnerHooks h;
  h.update = [this](const v1::Experiment& x) { queue_.Update(x); };
  h.live = [this](const v1::Experiment& x) { queue_.SetLive(x); };
  h.checkpoint = [this](const v1::Experiment& x) { queue_.Checkpoint(x); };
  h.sample = [this, id](const v1::Sample& s) { KeepSample(id, s); };
  h.thin_samples = [this, id] { ThinSamples(id, std::nullopt); };
  h.publish = [this, id](const v1::WatchEvent& ev) { Publish(id, ev); };
  h.event = [this, id](double t, const std::string& text) { AddEvent(id, t, text); };
  return h;
}

// Ends a record that never started a process: failed (why) or cancelled.
void Coordinator::EndUnstarted(v1::Experiment e, v1::ExperimentState state,
                               const std::string& why) {
  e.set_state(state);
  if (!why.empty()) e.set_error(why);
  e.set_finished_unix_ms(RealtimeMs());
  queue_.Update(e);
  v1::WatchEvent ev;
  ev.set_state(e.state());
  Publish(e.id(), ev);
}

void Coordinator::RunOne(v1::Experiment e) {
  const std::string id = e.id();
  const Status ready = PrepareForkServer(e);
  const ExperimentQueue::Stop stop = queue_.StopRequest(id);
  if (stop == ExperimentQueue::kShutdown) {
    // Still queued in the store: the next shoald runs it.
  } else if (stop == ExperimentQueue::kCancel) {
    EndUnstarted(std::move(e), v1::CANCELLED, "");
  } else if (!ready.ok()) {
    EndUnstarted(std::move(e), v1::FAILED, "starting the workers: " + ready.message());
  } else if (Status admitted = Admit(e.spec(), /*queued=*/false);
             !admitted.ok()) {  // what fit at submit may not now
    EndUnstarted(std::move(e), v1::FAILED, admitted.message());
  } else {
    // Samples are kept for the newest experiments only: the store does not grow without bound.
    if (Status st = store_->PruneSamples(kSampleHistoryExperiments); !st.ok())
      spdlog::warn("pruning samples: {}", st.message());
    if (opts_.host) *e.mutable_host() = *opts_.host;  // where it ran, as it starts to
    ExperimentRunner runner(std::move(e), EnvFor(), HooksFor(id));
    RunToEnd(runner, reaper_, [this, id] { return int(queue_.StopRequest(id)); });
  }
  hub_->Close(id);
  queue_.Done(id);
}

}  // namespace shoal
