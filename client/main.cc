// shoal: the command-line client of shoald.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "shared/pbjson.h"
#include "shared/process.h"
#include "shared/report.h"
#include "shared/sweep.h"
#include "shoal/v1/shoal.grpc.pb.h"

namespace v1 = shoal::v1;
using Rpc = v1::Shoal::StubInterface;  // the generated gRPC client's interface

namespace {

std::string Gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}
std::string Mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0fM", double(b) / double(1ull << 20));
  return buf;
}
std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string StateName(v1::ExperimentState s) {
  std::string n = v1::ExperimentState_Name(s);
  for (auto& c : n) c = static_cast<char>(std::tolower(c));
  return n;
}

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "shoal: %s\n", msg.c_str());
  std::exit(1);
}

void Check(const grpc::Status& st, const std::string& socket) {
  if (st.ok()) return;
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    Die("cannot reach shoald at " + socket + " (is it running?): " + st.error_message());
  }
  Die(st.error_message());
}

std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 30) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return c;
}

void PrintJson(const google::protobuf::Message& m) { std::cout << shoal::ToJson(m).dump() << "\n"; }

void PrintExperiment(const v1::Experiment& e) {
  const auto& s = e.spec();
  const auto& r = e.result();
  std::printf("experiment %s  %s%s%s\n", e.id().c_str(), StateName(e.state()).c_str(),
              e.error().empty() ? "" : ": ", e.error().c_str());
  std::printf(
      "  spec        %s %s, %u workers, start %s, share %s, device %s, batch %u x %u, %u threads\n",
      s.kind().c_str(), s.model().c_str(), s.workers(), s.start().c_str(), s.share() ? "yes" : "no",
      s.device().c_str(), s.batch_size(), s.batches(), s.threads());
  std::printf("  dataset     %s\n", s.dataset().c_str());
  if (e.state() == v1::QUEUED) return;
  std::printf(
      "  memory      peak PSS sum %s, RSS sum %s, USS sum %s, VmHWM sum %s; shared %s (weights %s, "
      "data %s)\n",
      Gib(r.peak_pss_sum_bytes()).c_str(), Gib(r.peak_rss_sum_bytes()).c_str(),
      Gib(r.peak_uss_sum_bytes()).c_str(), Gib(r.peak_rss_hwm_sum_bytes()).c_str(),
      Mib(r.shared_bytes()).c_str(), Mib(r.weights_bytes()).c_str(), Mib(r.data_bytes()).c_str());
  std::printf(
      "  time        ready %.0f ms (request -> all workers training %.0f ms), wall %.1f s, "
      "training %.1f s, queued %.0f ms\n",
      r.ready_ms(), r.start_ms(), r.wall_ms() / 1000, r.train_ms() / 1000, r.queued_ms());
  std::printf("  throughput  %.1f samples/s (%lu samples, %lu steps)\n", r.samples_per_sec(),
              static_cast<unsigned long>(r.samples()), static_cast<unsigned long>(r.steps()));
  std::printf("  loss        first %.4f, last %.4f; test accuracy %s\n", r.first_loss(),
              r.last_loss(),
              r.has_test_accuracy() ? Fmt("%.3f", r.test_accuracy())
                                          .append(" on ")
                                          .append(std::to_string(s.eval_samples()))
                                          .append(" images (")
                                          .append(Fmt("%.1f s", r.eval_ms() / 1000))
                                          .append(")")
                                          .c_str()
                                    : "-");
  std::printf(
      "  step split  data %.0f ms, forward %.0f ms, backward %.0f ms, optimiser %.0f ms (all "
      "workers)\n",
      r.data_ms(), r.forward_ms(), r.backward_ms(), r.optimizer_ms());
  std::printf(
      "  sampler     %.2f%% of a core (%.1f ms CPU; %lu smaps_rollup walks, %lu statm/stat "
      "reads)\n",
      r.sampler_cpu_percent(), r.sampler_cpu_ms(), static_cast<unsigned long>(r.smaps_reads()),
      static_cast<unsigned long>(r.statm_reads()));
  std::printf("  processes   %-7s %-6s %-5s %-8s %-9s %-9s %-8s %s\n", "pid", "role", "index",
              "start", "peak RSS", "peak PSS", "steps", "exit");
  for (const auto& p : e.processes()) {
    std::string exit = p.alive()    ? "running"
                       : p.signal() ? "signal " + std::to_string(p.signal())
                                    : "code " + std::to_string(p.exit_code());
    std::printf("              %-7d %-6s %-5s %-8s %-9s %-9s %-8lu %s\n", p.pid(), p.role().c_str(),
                p.index() < 0 ? "-" : std::to_string(p.index()).c_str(),
                p.role() == "leader" ? "-" : Fmt("%.0f ms", p.start_ms()).c_str(),
                Mib(p.peak_rss_bytes()).c_str(), Mib(p.peak_pss_bytes()).c_str(),
                static_cast<unsigned long>(p.steps()), exit.c_str());
  }
}

// Prints the live view of one sample: a redrawn table on a terminal, one line otherwise.
void PrintSample(const v1::Sample& s, bool tty, uint64_t dropped) {
  const std::string loss = std::isnan(s.loss()) ? "-" : Fmt("%.4f", s.loss());
  if (!tty) {
    std::printf(
        "t=%.1fs steps %lu/%lu %.2f/s loss %s | PSS %s RSS %s USS %s shm %s | sampler %.2f%%",
        s.t_ms() / 1000, static_cast<unsigned long>(s.steps()),
        static_cast<unsigned long>(s.steps_total()), s.steps_per_sec(), loss.c_str(),
        Mib(s.total_pss_bytes()).c_str(), Mib(s.total_rss_bytes()).c_str(),
        Mib(s.total_uss_bytes()).c_str(), Mib(s.shared_bytes()).c_str(), s.sampler_cpu_percent());
    for (const auto& p : s.processes()) {
      std::printf(" | %s%s %s/%s/%s %.0f%%",
                  p.role() == "leader"   ? "L"
                  : p.role() == "zygote" ? "Z"
                                         : "w",
                  p.index() < 0 ? "" : std::to_string(p.index()).c_str(),
                  Mib(p.rss_bytes()).c_str(), Mib(p.pss_bytes()).c_str(),
                  Mib(p.uss_bytes()).c_str(), p.cpu_percent());
    }
    std::printf("\n");
    std::fflush(stdout);
    return;
  }
  std::printf("\033[H\033[J");
  std::printf(
      "t=%.1f s   steps %lu/%lu   %.2f steps/s   %.1f samples/s   loss %s   sampler %.2f%% "
      "core%s\n\n",
      s.t_ms() / 1000, static_cast<unsigned long>(s.steps()),
      static_cast<unsigned long>(s.steps_total()), s.steps_per_sec(), s.samples_per_sec(),
      loss.c_str(), s.sampler_cpu_percent(),
      dropped ? (", " + std::to_string(dropped) + " dropped").c_str() : "");
  std::printf("%-8s %-7s %10s %10s %10s %7s\n", "process", "pid", "RSS", "PSS", "USS", "CPU%");
  // Leader, fork-server, then workers by index.
  std::vector<const v1::ProcessSample*> procs;
  for (const auto& p : s.processes()) procs.push_back(&p);
  auto rank = [](const v1::ProcessSample* p) {
    return p->role() == "leader" ? -2 : p->role() == "zygote" ? -1 : p->index();
  };
  std::sort(procs.begin(), procs.end(), [&](auto* a, auto* b) { return rank(a) < rank(b); });
  for (const auto* pp : procs) {
    const auto& p = *pp;
    std::string name = p.role() == "worker" ? "worker " + std::to_string(p.index()) : p.role();
    std::printf("%-8s %-7d %10s %10s %10s %6.0f%%\n", name.c_str(), p.pid(),
                Mib(p.rss_bytes()).c_str(), Mib(p.pss_bytes()).c_str(), Mib(p.uss_bytes()).c_str(),
                p.cpu_percent());
  }
  std::printf("%-8s %-7s %10s %10s %10s\n", "total", "", Mib(s.total_rss_bytes()).c_str(),
              Mib(s.total_pss_bytes()).c_str(), Mib(s.total_uss_bytes()).c_str());
  std::printf("shared segments %s\n", Mib(s.shared_bytes()).c_str());
  std::fflush(stdout);
}

// Streams an experiment until it ends; returns its final state.
v1::ExperimentState Watch(Rpc& rpc, const std::string& socket, const std::string& id, bool json,
                          bool quiet) {
  grpc::ClientContext ctx;
  v1::WatchRequest req;
  req.set_id(id);
  auto reader = rpc.Watch(&ctx, req);
  v1::WatchEvent ev;
  v1::ExperimentState state = v1::STATE_UNSPECIFIED;
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  while (reader->Read(&ev)) {
    if (ev.has_state()) state = ev.state();
    if (quiet) continue;
    if (json) {
      std::cout << shoal::ToJson(ev).dump() << std::endl;
    } else if (ev.has_sample()) {
      PrintSample(ev.sample(), tty, ev.dropped());
    } else if (ev.has_event() && !tty) {
      std::printf("t=%.1fs event: %s\n", ev.event().t_ms() / 1000, ev.event().text().c_str());
    } else if (ev.has_state() && !tty) {
      std::printf("state: %s\n", StateName(ev.state()).c_str());
    }
  }
  Check(reader->Finish(), socket);
  return state;
}

shoal::ReportInput FetchReport(Rpc& rpc, const std::string& socket, const std::string& id) {
  v1::GetRequest g;
  g.set_id(id);
  v1::SweepReport r;
  Check(rpc.GetSweep(Ctx().get(), g, &r), socket);
  shoal::ReportInput in;
  in.sweep = r.sweep();
  for (const auto& e : r.experiments()) in.experiments[e.id()] = e;
  return in;
}

std::string Clock(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

void PrintSweep(const shoal::ReportInput& in) {
  const auto& sw = in.sweep;
  std::printf("sweep %s  %s%s%s\n", sw.id().c_str(), StateName(sw.state()).c_str(),
              sw.error().empty() ? "" : ": ", sw.error().c_str());
  std::printf("  %-5s %-7s %-10s %-5s %-6s %-12s %-11s %s\n", "point", "workers", "start", "share",
              "device", "experiment", "state", "note");
  for (const auto& p : sw.points()) {
    std::printf("  %-5u %-7u %-10s %-5s %-6s %-12s %-11s %s\n", p.index(), p.workers(),
                p.start().c_str(), p.share() ? "yes" : "no", p.device().c_str(),
                p.experiment_id().empty() ? "-" : p.experiment_id().c_str(),
                p.note().empty() ? StateName(p.state()).c_str() : "skipped", p.note().c_str());
  }
}

// Follows a sweep until it ends: a progress bar on a terminal, a line per finished point otherwise.
v1::ExperimentState WaitSweep(Rpc& rpc, const std::string& socket, const std::string& id,
                              bool quiet) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  int last_done = -1;
  for (;;) {
    shoal::ReportInput in = FetchReport(rpc, socket, id);
    int total = 0, done = 0;
    std::string current;
    for (const auto& p : in.sweep.points()) {
      if (!p.note().empty()) continue;
      ++total;
      if (shoal::IsTerminal(p.state())) ++done;
      if (p.state() == v1::RUNNING) {
        current = std::to_string(p.workers()) + " workers, " + p.start() + ", share " +
                  (p.share() ? "yes" : "no");
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string left = done > 0 ? Clock(elapsed / done * (total - done)) : "?";
    if (!quiet && tty) {
      const int width = 30, filled = total ? width * done / total : width;
      std::fprintf(stderr, "\r\033[K[%s%s] %d/%d  %s  elapsed %s  left ~%s",
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done,
                   total, current.empty() ? "" : current.c_str(), Clock(elapsed).c_str(),
                   left.c_str());
    } else if (!quiet && done != last_done) {
      std::fprintf(stderr, "sweep %s: %d/%d done, elapsed %s, left ~%s%s%s\n", id.c_str(), done,
                   total, Clock(elapsed).c_str(), left.c_str(),
                   current.empty() ? "" : ", running: ", current.c_str());
    }
    last_done = done;
    if (shoal::IsTerminal(in.sweep.state())) {
      if (!quiet && tty) std::fprintf(stderr, "\n");
      return in.sweep.state();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// What submit and sweep print without --wait.
int PrintId(const std::string& id, bool json) {
  if (json) {
    std::cout << nlohmann::json{{"id", id}}.dump() << "\n";
  } else {
    std::printf("%s\n", id.c_str());
  }
  return 0;
}

// Writes `data` to `path`, or stdout when path is empty.
void Emit(const std::string& data, const std::string& path) {
  if (path.empty()) {
    std::fwrite(data.data(), 1, data.size(), stdout);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out << data;
  if (!out) Die("cannot write " + path);
}

// The path of an executable found on PATH, or "".
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t end = p.find(':', pos);
    if (end == std::string::npos) end = p.size();
    std::string candidate = p.substr(pos, end - pos) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = end + 1;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal: submit, watch and inspect Shoal experiments"};
  app.require_subcommand(1);
  std::string socket = std::getenv("SHOAL_SOCKET")
                           ? std::getenv("SHOAL_SOCKET")
                           : "/tmp/shoal-" + std::to_string(getuid()) + ".sock";
  app.add_option("--socket", socket, "shoald's unix socket (env SHOAL_SOCKET)")
      ->capture_default_str();
  bool json = false;

  auto* node =
      app.add_subcommand("node", "what this node has: cores, memory, /dev/shm, GPUs, versions");
  node->add_flag("--json", json, "print one JSON object");

  // Options every experiment has; `submit` and `sweep` share them.
  struct Base {
    uint32_t batch_size = 64, batches = 20, threads = 0, interval = 200, eval = 1000,
             stall_ms = 60000;
    uint64_t seed = 1;
    double lr = 0.01, momentum = 0.5;
    std::string dataset = "synthetic", allocator = "cache", name;
    bool force = false;
    void Add(CLI::App* c) {
      c->add_option("--batches", batches, "batches per worker")->capture_default_str();
      c->add_option("--batch-size", batch_size, "samples per batch")->capture_default_str();
      c->add_option("--dataset", dataset, "directory of MNIST IDX files, or 'synthetic'")
          ->capture_default_str();
      c->add_option("--threads", threads, "intra-op threads per worker (0: cores / workers)")
          ->capture_default_str();
      c->add_option("--seed", seed, "random seed")->capture_default_str();
      c->add_option("--lr", lr, "SGD learning rate")->capture_default_str();
      c->add_option("--momentum", momentum, "SGD momentum")->capture_default_str();
      c->add_option("--sample-interval-ms", interval, "telemetry interval")->capture_default_str();
      c->add_option(
           "--allocator", allocator,
           "cache (exact-size reuse of step buffers) | retain (glibc heap, never trimmed) | system")
          ->capture_default_str();
      c->add_option("--eval-samples", eval, "test images evaluated at the end (0: none)")
          ->capture_default_str();
      c->add_option("--stall-timeout-ms", stall_ms, "fail when a worker has no heartbeat this long")
          ->capture_default_str();
      c->add_option("--name", name, "a label");
      c->add_flag("--force", force, "start even if the admission check says it will not fit");
    }
    v1::ExperimentSpec Spec() const {
      v1::ExperimentSpec spec;
      spec.set_kind("hogwild");
      spec.set_model("mnist_convnet");
      spec.set_batches(batches);
      spec.set_batch_size(batch_size);
      spec.set_dataset(dataset);
      spec.set_threads(threads);
      spec.set_seed(seed);
      spec.mutable_optimizer()->set_name("sgd");
      spec.mutable_optimizer()->set_lr(lr);
      spec.mutable_optimizer()->set_momentum(momentum);
      spec.set_sample_interval_ms(interval);
      spec.set_allocator(allocator);
      spec.set_eval_samples(eval);
      spec.set_name(name);
      spec.set_stall_timeout_ms(stall_ms);
      spec.set_force(force);
      return spec;
    }
  } base;
  std::string share = "yes", start = "fork", device = "cpu";
  uint32_t workers = 1;
  bool wait = false;
  auto* submit = app.add_subcommand("submit", "submit a Hogwild experiment");
  submit->add_option("--workers", workers, "worker processes")->capture_default_str();
  submit->add_option("--start", start, "fork | spawn | forkserver")->capture_default_str();
  submit->add_option("--share", share, "share the weights: yes | no")
      ->capture_default_str()
      ->check(CLI::IsMember({"yes", "no"}));
  submit->add_option("--device", device, "cpu")->capture_default_str();
  base.Add(submit);
  submit->add_flag("--wait", wait, "wait for the end, showing progress, then print the result");
  submit->add_flag("--json", json, "print one JSON object");

  std::vector<uint32_t> sweep_workers = {1, 2, 4};
  std::vector<std::string> sweep_start = {"fork", "spawn", "forkserver"},
                           sweep_share = {"yes", "no"}, sweep_device = {"cpu"};
  auto* sweep = app.add_subcommand(
      "sweep", "run a grid of experiments over worker counts, start methods, sharing");
  sweep->add_option("--workers", sweep_workers, "worker counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  sweep->add_option("--start", sweep_start, "start methods")->delimiter(',')->capture_default_str();
  sweep->add_option("--share", sweep_share, "yes, no or both")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"yes", "no"}));
  sweep->add_option("--device", sweep_device, "cpu, cuda")->delimiter(',')->capture_default_str();
  base.Add(sweep);
  sweep->add_flag("--wait", wait, "wait for the end, showing progress, then print the report");
  sweep->add_flag("--json", json, "print one JSON object");

  auto* sweeps = app.add_subcommand("sweeps", "all sweeps");
  sweeps->add_flag("--json", json, "print one JSON object");

  std::vector<std::string> report_ids;
  std::string format = "md", output;
  bool compare = false;
  auto* report =
      app.add_subcommand("report", "the tables of a sweep (or the ratio of two with --compare)");
  report->add_option("ids", report_ids, "SWEEP_ID, or SWEEP_A SWEEP_B with --compare")
      ->required()
      ->expected(1, 2);
  report->add_option("--format", format, "md | csv | json | svg | png")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "csv", "json", "svg", "png"}));
  report->add_option("--output,-o", output,
                     "write to this file instead of stdout (required for png)");
  report->add_flag("--compare", compare, "print B / A for every cell of two sweeps");

  std::string id;
  auto* watch = app.add_subcommand("watch", "live samples of an experiment until it ends");
  watch->add_option("id", id, "experiment id")->required();
  watch->add_flag("--json", json, "one JSON object per line");
  auto* list = app.add_subcommand("list", "all experiments");
  list->add_flag("--json", json, "print one JSON object");
  auto* get = app.add_subcommand("get", "one experiment (or sweep), with its result and processes");
  get->add_option("id", id, "experiment id")->required();
  get->add_flag("--json", json, "print one JSON object");
  auto* cancel = app.add_subcommand("cancel", "stop an experiment or a sweep (idempotent)");
  cancel->add_option("id", id, "experiment id")->required();
  cancel->add_flag("--json", json, "print one JSON object");

  CLI11_PARSE(app, argc, argv);

  const std::string target = "unix:" + socket;
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto rpc = v1::Shoal::NewStub(channel);

  if (*node) {
    v1::NodeInfoResponse r;
    Check(rpc->NodeInfo(Ctx().get(), {}, &r), target);
    if (json) {
      PrintJson(r);
      return 0;
    }
    std::printf("host %s: %u cores, memory %s (available %s), /dev/shm free %s of %s\n",
                r.hostname().c_str(), r.cores(), Gib(r.memory_total_bytes()).c_str(),
                Gib(r.memory_available_bytes()).c_str(), Gib(r.shm_free_bytes()).c_str(),
                Gib(r.shm_total_bytes()).c_str());
    if (r.gpus().empty()) std::printf("GPUs: none (%s)\n", r.gpu_status().c_str());
    for (const auto& g : r.gpus()) {
      std::printf("GPU %u: %s, %s\n", g.index(), g.name().c_str(),
                  Gib(g.memory_total_bytes()).c_str());
    }
    std::printf("versions:");
    for (const auto& [k, v] : r.versions()) std::printf(" %s %s;", k.c_str(), v.c_str());
    std::printf("\nstate dir %s, max workers %u, fork-server pid %d (%u restarts)\n",
                r.state_dir().c_str(), r.max_workers(), r.fork_server_pid(),
                r.fork_server_restarts());
    return 0;
  }
  if (*submit) {
    v1::ExperimentSpec spec = base.Spec();
    spec.set_workers(workers);
    spec.set_start(start);
    spec.set_share(share == "yes");
    spec.set_device(device);
    v1::SubmitRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitResponse resp;
    Check(rpc->Submit(Ctx().get(), req, &resp), target);
    if (!wait) return PrintId(resp.id(), json);
    if (!json) std::fprintf(stderr, "submitted %s\n", resp.id().c_str());
    Watch(*rpc, target, resp.id(), false, /*quiet=*/json);
    v1::GetRequest g;
    g.set_id(resp.id());
    v1::Experiment e;
    Check(rpc->Get(Ctx().get(), g, &e), target);
    json ? PrintJson(e) : PrintExperiment(e);
    if (e.state() != v1::SUCCEEDED) {
      std::fprintf(stderr, "shoal: experiment %s %s%s%s\n", e.id().c_str(),
                   StateName(e.state()).c_str(), e.error().empty() ? "" : ": ", e.error().c_str());
      return 1;
    }
    return 0;
  }
  if (*watch) {
    Watch(*rpc, target, id, json, false);
    return 0;
  }
  if (*list) {
    v1::ListResponse r;
    Check(rpc->List(Ctx().get(), {}, &r), target);
    if (json) {
      PrintJson(r);
      return 0;
    }
    std::printf("%-12s %-11s %7s %-6s %-5s %8s %12s %10s %9s\n", "id", "state", "workers", "start",
                "share", "wall s", "peak PSS", "samples/s", "ready ms");
    for (const auto& e : r.experiments()) {
      std::printf("%-12s %-11s %7u %-6s %-5s %8.1f %12s %10.1f %9.0f\n", e.id().c_str(),
                  StateName(e.state()).c_str(), e.spec().workers(), e.spec().start().c_str(),
                  e.spec().share() ? "yes" : "no", e.result().wall_ms() / 1000,
                  Gib(e.result().peak_pss_sum_bytes()).c_str(), e.result().samples_per_sec(),
                  e.result().ready_ms());
    }
    return 0;
  }
  if (*sweep) {
    v1::SubmitSweepRequest req;
    auto* sp = req.mutable_spec();
    *sp->mutable_base() = base.Spec();
    for (uint32_t w : sweep_workers) sp->add_workers(w);
    for (const auto& x : sweep_start) sp->add_start(x);
    for (const auto& x : sweep_share) sp->add_share(x == "yes");
    for (const auto& x : sweep_device) sp->add_device(x);
    sp->set_name(base.name);
    v1::SubmitResponse resp;
    Check(rpc->SubmitSweep(Ctx().get(), req, &resp), target);
    if (!wait) return PrintId(resp.id(), json);
    if (!json) std::fprintf(stderr, "submitted sweep %s\n", resp.id().c_str());
    const v1::ExperimentState st = WaitSweep(*rpc, target, resp.id(), json);
    shoal::ReportInput in = FetchReport(*rpc, target, resp.id());
    if (json) {
      std::cout << shoal::RenderJson(in).dump() << "\n";
    } else {
      std::printf("%s", shoal::RenderMarkdown(in).c_str());
    }
    if (st != v1::SUCCEEDED) {
      std::fprintf(stderr, "shoal: sweep %s %s\n", resp.id().c_str(), StateName(st).c_str());
      return 1;
    }
    return 0;
  }
  if (*sweeps) {
    v1::ListSweepsResponse r;
    Check(rpc->ListSweeps(Ctx().get(), {}, &r), target);
    if (json) {
      PrintJson(r);
      return 0;
    }
    std::printf("%-12s %-11s %7s %7s  %s\n", "id", "state", "done", "points", "name");
    for (const auto& sw : r.sweeps()) {
      int done = 0, runnable = 0;
      for (const auto& p : sw.points()) {
        if (!p.note().empty()) continue;
        ++runnable;
        done += shoal::IsTerminal(p.state()) ? 1 : 0;
      }
      std::printf("%-12s %-11s %7d %7d  %s\n", sw.id().c_str(), StateName(sw.state()).c_str(), done,
                  sw.points_size(), sw.spec().name().c_str());
      (void)runnable;
    }
    return 0;
  }
  if (*report) {
    if (compare) {
      if (report_ids.size() != 2) Die("report --compare takes two sweep ids: SWEEP_A SWEEP_B");
      if (format != "md") Die("report --compare prints Markdown only (--format md)");
      Emit(shoal::RenderCompareMarkdown(FetchReport(*rpc, target, report_ids[0]),
                                        FetchReport(*rpc, target, report_ids[1])),
           output);
      return 0;
    }
    if (report_ids.size() != 1) Die("report takes one sweep id (two only with --compare)");
    shoal::ReportInput in = FetchReport(*rpc, target, report_ids[0]);
    if (format == "md") Emit(shoal::RenderMarkdown(in), output);
    if (format == "csv") Emit(shoal::RenderCsv(in), output);
    if (format == "json") Emit(shoal::RenderJson(in).dump(2) + "\n", output);
    if (format == "svg") Emit(shoal::RenderSvg(in), output);
    if (format == "png") {
      if (output.empty()) Die("--format png needs --output FILE");
      const std::string conv = FindOnPath("rsvg-convert");
      if (conv.empty())
        Die("--format png needs rsvg-convert (Debian package librsvg2-bin); --format svg works "
            "without it");
      const std::string svg = output + ".svg";
      Emit(shoal::RenderSvg(in), svg);
      auto pid = shoal::SpawnProcess({conv, "-o", output, svg}, {});
      int st = 1;
      if (pid.ok()) ::waitpid(*pid, &st, 0);
      ::unlink(svg.c_str());
      if (!pid.ok() || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        Die("rsvg-convert failed to write " + output);
    }
    return 0;
  }
  if ((*get || *cancel) && !id.empty() && id[0] == 's') {
    if (*cancel) {
      v1::CancelRequest c;
      c.set_id(id);
      v1::Sweep sw;
      Check(rpc->CancelSweep(Ctx().get(), c, &sw), target);
    }
    shoal::ReportInput in = FetchReport(*rpc, target, id);
    if (json) {
      std::cout << shoal::RenderJson(in).dump() << "\n";
    } else {
      PrintSweep(in);
    }
    return 0;
  }
  if (*get || *cancel) {
    v1::Experiment e;
    if (*get) {
      v1::GetRequest g;
      g.set_id(id);
      Check(rpc->Get(Ctx().get(), g, &e), target);
    } else {
      v1::CancelRequest c;
      c.set_id(id);
      Check(rpc->Cancel(Ctx().get(), c, &e), target);
    }
    json ? PrintJson(e) : PrintExperiment(e);
    return 0;
  }
  return 0;
}
