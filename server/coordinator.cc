#include "server/coordinator.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

#include "shared/admission.h"
#include "shared/process.h"
#include "shared/shm.h"
#include "shared/sweep.h"
#include "spdlog/spdlog.h"

namespace shoal {
namespace {

using nlohmann::json;

int64_t NowUnixMs() { return static_cast<int64_t>(RealtimeNs() / 1000000); }

std::string NewId(const char* prefix = "x") {
  static std::mt19937_64 rng{std::random_device{}() ^ RealtimeNs()};
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  uint64_t v = rng();
  for (int i = 0; i < 10; ++i) id += hex[(v >> (4 * i)) & 15];
  return id;
}

double NsToMs(uint64_t ns) { return double(ns) / 1e6; }

// Everything the runner learns about one experiment while it runs.
struct RunState {
  pid_t leader = -1;
  bool leader_exited = false;
  int leader_status = 0;
  bool eof = false;
  std::string error;  // from the leader
  json result;        // the leader's last word
  json progress;      // the leader's latest progress line
  uint64_t shared_bytes = 0, weights_bytes = 0, data_bytes = 0;
  std::map<pid_t, v1::ProcessInfo> procs;
  uint64_t prev_steps = 0;
  uint64_t prev_steps_ns = 0;
  double steps_per_sec = 0;
  std::set<int> ready;  // workers whose first step has been announced
};

v1::ProcessInfo* FindWorker(RunState& rs, int index) {
  for (auto& [pid, p] : rs.procs)
    if (p.role() == "worker" && p.index() == index) return &p;
  return nullptr;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions opts, Store* store, TelemetryHub* hub, ProcReader* proc)
    : opts_(std::move(opts)), store_(store), hub_(hub), proc_(proc) {}

Coordinator::~Coordinator() { Shutdown(); }

Status Coordinator::Recover() {
  ASSIGN_OR_RETURN(auto all, store_->List());
  ASSIGN_OR_RETURN(auto sweeps, store_->ListSweeps());
  std::set<std::string> cancelled_sweeps;
  for (const auto& sw : sweeps)
    if (!sw.error().empty()) cancelled_sweeps.insert(sw.id());
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : all) {
    if (e.state() == v1::RUNNING) {
      e.set_state(v1::INTERRUPTED);
      e.set_error("shoald stopped while this experiment ran");
      e.set_finished_unix_ms(NowUnixMs());
      for (auto& p : *e.mutable_processes()) p.set_alive(false);
      RETURN_IF_ERROR(store_->Put(e));
      spdlog::warn("experiment {} was running when shoald stopped: marked interrupted", e.id());
    }
    if (e.state() == v1::QUEUED && cancelled_sweeps.count(e.sweep_id())) {
      // Its sweep was cancelled but the daemon died before this point was.
      e.set_state(v1::CANCELLED);
      e.set_finished_unix_ms(NowUnixMs());
      RETURN_IF_ERROR(store_->Put(e));
    }
    if (e.state() == v1::QUEUED) {
      queue_.push_back(e.id());
      live_[e.id()] = e;
    }
    // Nothing runs yet, so no experiment of ours owns a segment.
    if (int n = RemoveSegments(SegmentPrefix(e.id())); n > 0) {
      spdlog::warn("removed {} leftover shared memory segment(s) of {}", n, e.id());
    }
  }
  // Sweeps: bring each point up to date with its experiment (the daemon may have died between
  // the two writes), and run again the point whose experiment was interrupted.
  std::map<std::string, const v1::Experiment*> by_id;
  for (const auto& e : all) by_id[e.id()] = &e;
  std::vector<v1::Experiment> reruns;
  for (auto& sw : sweeps) {
    const bool cancelled = !sw.error().empty();
    for (auto& p : *sw.mutable_points()) {
      auto it = by_id.find(p.experiment_id());
      if (it == by_id.end()) continue;
      p.set_state(it->second->state());
      if (p.state() == v1::INTERRUPTED && !cancelled) {
        v1::Experiment e = NewExperiment(it->second->spec(), sw.submitted_unix_ms());
        e.set_sweep_id(sw.id());
        e.set_sweep_index(p.index());
        p.set_experiment_id(e.id());
        p.set_state(v1::QUEUED);
        p.set_attempts(p.attempts() + 1);
        RETURN_IF_ERROR(store_->Put(e));
        reruns.push_back(e);
        spdlog::warn("sweep {}: point {} was interrupted; running it again as {}", sw.id(),
                     p.index(), e.id());
      }
    }
    const bool was_terminal = IsTerminal(sw.state());
    sw.set_state(SweepState(sw, cancelled));
    if (IsTerminal(sw.state()) && !was_terminal) sw.set_finished_unix_ms(NowUnixMs());
    if (!IsTerminal(sw.state())) sw.set_finished_unix_ms(0);
    RETURN_IF_ERROR(store_->PutSweep(sw));
    sweeps_[sw.id()] = sw;
  }
  for (auto& e : reruns) {
    live_[e.id()] = e;
    queue_.push_back(e.id());
  }
  // Queue order: submission time, then a sweep's own grid order.
  std::stable_sort(queue_.begin(), queue_.end(), [&](const std::string& a, const std::string& b) {
    const auto& x = live_[a];
    const auto& y = live_[b];
    return std::make_tuple(x.submitted_unix_ms(), x.sweep_id(), x.sweep_index()) <
           std::make_tuple(y.submitted_unix_ms(), y.sweep_id(), y.sweep_index());
  });
  return Status::Ok();
}

void Coordinator::Start() {
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

void Coordinator::Shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ && !scheduler_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
}

StatusOr<std::string> Coordinator::Submit(v1::ExperimentSpec spec) {
  ApplyDefaults(&spec, opts_.limits);
  RETURN_IF_ERROR(ValidateSpec(spec, opts_.limits));
  RETURN_IF_ERROR(CheckDataset(spec.dataset(), opts_.limits.data_roots));
  if (!spec.force()) {
    ASSIGN_OR_RETURN(ExperimentEstimate need, EstimateExperiment(spec));
    ASSIGN_OR_RETURN(NodeCapacity have, ReadNodeCapacity());
    RETURN_IF_ERROR(Admit(need, have));
  }
  v1::Experiment e;
  e.set_id(NewId());
  *e.mutable_spec() = spec;
  e.set_state(v1::QUEUED);
  e.set_submitted_unix_ms(NowUnixMs());
  {
    // Checked and written under the lock: a shutdown must not leave a record it then runs later.
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return Unavailable("shoald is shutting down");
    RETURN_IF_ERROR(store_->Put(e));
    live_[e.id()] = e;
    queue_.push_back(e.id());
  }
  cv_.notify_all();
  spdlog::info("queued {}: {} workers, start {}, share {}", e.id(), spec.workers(), spec.start(),
               spec.share() ? "yes" : "no");
  return e.id();
}

StatusOr<v1::Experiment> Coordinator::Get(const std::string& id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = live_.find(id); it != live_.end()) return it->second;
  }
  return store_->Get(id);
}

StatusOr<std::vector<v1::Experiment>> Coordinator::List() {
  ASSIGN_OR_RETURN(auto all, store_->List());
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : all) {
    if (auto it = live_.find(e.id()); it != live_.end()) e = it->second;
  }
  return all;
}

StatusOr<v1::Experiment> Coordinator::Cancel(const std::string& id) {
  std::unique_lock<std::mutex> l(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) {
    l.unlock();
    return store_->Get(id);  // already ended (or unknown): cancelling is a no-op
  }
  if (running_ == id) {
    cancel_running_ = true;
    return it->second;  // the runner moves it to cancelled once every process is gone
  }
  v1::Experiment e = it->second;
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  live_.erase(it);
  l.unlock();
  e.set_state(v1::CANCELLED);
  e.set_finished_unix_ms(NowUnixMs());
  RETURN_IF_ERROR(store_->Put(e));
  SweepPointChanged(e);
  v1::WatchEvent ev;
  ev.set_state(v1::CANCELLED);
  Publish(id, ev);
  hub_->Close(id);
  return e;
}

void Coordinator::Update(const v1::Experiment& e) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (IsTerminal(e.state())) {
      live_.erase(e.id());
    } else {
      live_[e.id()] = e;
    }
  }
  Status st = store_->Put(e);
  if (!st.ok()) spdlog::error("{}", st.ToString());
  SweepPointChanged(e);
}

void Coordinator::SweepPointChanged(const v1::Experiment& e) {
  if (e.sweep_id().empty()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sweeps_.find(e.sweep_id());
    if (it == sweeps_.end() || e.sweep_index() >= static_cast<uint32_t>(it->second.points_size()))
      return;
    auto* p = it->second.mutable_points(static_cast<int>(e.sweep_index()));
    if (p->experiment_id() != e.id()) return;  // an older attempt
    p->set_state(e.state());
    v1::Sweep& sw = it->second;
    const v1::ExperimentState before = sw.state();
    sw.set_state(SweepState(sw, !sw.error().empty()));
    if (IsTerminal(sw.state()) && !IsTerminal(before)) {
      sw.set_finished_unix_ms(NowUnixMs());
      spdlog::info("sweep {} {}", sw.id(), v1::ExperimentState_Name(sw.state()));
    }
    // Written under the lock so that an older copy can never land after a newer one.
    Status st = store_->PutSweep(sw);
    if (!st.ok()) spdlog::error("{}", st.ToString());
  }
}

v1::Experiment Coordinator::NewExperiment(const v1::ExperimentSpec& spec, int64_t submitted_ms) {
  v1::Experiment e;
  e.set_id(NewId());
  *e.mutable_spec() = spec;
  e.set_state(v1::QUEUED);
  e.set_submitted_unix_ms(submitted_ms);
  return e;
}

StatusOr<std::string> Coordinator::SubmitSweep(const v1::SweepSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<GridPoint> grid, ExpandGrid(spec, opts_.limits));
  RETURN_IF_ERROR(CheckDataset(spec.base().dataset(), opts_.limits.data_roots));
  if (!spec.base().force()) {
    ASSIGN_OR_RETURN(NodeCapacity have, ReadNodeCapacity());
    for (const auto& g : grid) {
      if (!g.point.note().empty()) continue;
      ASSIGN_OR_RETURN(ExperimentEstimate need, EstimateExperiment(g.spec));
      Status st = Admit(need, have);
      if (!st.ok()) {
        return ResourceExhausted("sweep point " + std::to_string(g.point.index()) + " (" +
                                 std::to_string(g.point.workers()) + " workers, " +
                                 g.point.start() + "): " + st.message());
      }
    }
  }
  v1::Sweep sw;
  sw.set_id(NewId("s"));
  *sw.mutable_spec() = spec;
  sw.set_submitted_unix_ms(NowUnixMs());
  std::vector<v1::Experiment> exps;
  for (auto& g : grid) {
    v1::SweepPoint* p = sw.add_points();
    *p = g.point;
    if (!p->note().empty()) continue;
    v1::Experiment e = NewExperiment(g.spec, sw.submitted_unix_ms());
    e.set_sweep_id(sw.id());
    e.set_sweep_index(p->index());
    p->set_experiment_id(e.id());
    p->set_state(v1::QUEUED);
    p->set_attempts(1);
    exps.push_back(std::move(e));
  }
  sw.set_state(SweepState(sw, false));
  if (IsTerminal(sw.state())) sw.set_finished_unix_ms(NowUnixMs());  // nothing can run here
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return Unavailable("shoald is shutting down");
    // Experiments first: a sweep on record always points at experiments that exist.
    for (const auto& e : exps) RETURN_IF_ERROR(store_->Put(e));
    RETURN_IF_ERROR(store_->PutSweep(sw));
    sweeps_[sw.id()] = sw;
    for (const auto& e : exps) {
      live_[e.id()] = e;
      queue_.push_back(e.id());
    }
  }
  cv_.notify_all();
  spdlog::info("queued sweep {}: {} points, {} to run", sw.id(), sw.points_size(), exps.size());
  return sw.id();
}

StatusOr<v1::SweepReport> Coordinator::GetSweep(const std::string& id) {
  v1::SweepReport r;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sweeps_.find(id);
    if (it == sweeps_.end()) return NotFound("no sweep with id '" + id + "'");
    *r.mutable_sweep() = it->second;
  }
  for (const auto& p : r.sweep().points()) {
    if (p.experiment_id().empty()) continue;
    auto e = Get(p.experiment_id());
    if (e.ok()) *r.add_experiments() = std::move(e).value();
  }
  return r;
}

StatusOr<std::vector<v1::Sweep>> Coordinator::ListSweeps() {
  std::vector<v1::Sweep> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, sw] : sweeps_) out.push_back(sw);
  std::sort(out.begin(), out.end(), [](const v1::Sweep& a, const v1::Sweep& b) {
    return a.submitted_unix_ms() != b.submitted_unix_ms()
               ? a.submitted_unix_ms() < b.submitted_unix_ms()
               : a.id() < b.id();
  });
  return out;
}

StatusOr<v1::Sweep> Coordinator::CancelSweep(const std::string& id) {
  std::vector<std::string> to_cancel;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sweeps_.find(id);
    if (it == sweeps_.end()) return NotFound("no sweep with id '" + id + "'");
    if (IsTerminal(it->second.state())) return it->second;  // idempotent
    it->second.set_error("cancelled by request");
    for (const auto& p : it->second.points())
      if (live_.count(p.experiment_id())) to_cancel.push_back(p.experiment_id());
    it->second.set_state(SweepState(it->second, true));
    RETURN_IF_ERROR(store_->PutSweep(it->second));
  }
  for (const auto& e : to_cancel) (void)Cancel(e);
  std::lock_guard<std::mutex> l(mu_);
  return sweeps_[id];
}

void Coordinator::Publish(const std::string& id, v1::WatchEvent ev) {
  ev.set_experiment_id(id);
  hub_->Publish(id, ev);
}

void Coordinator::AddEvent(const std::string& id, double t_ms, const std::string& text) {
  v1::Event e;
  e.set_t_ms(t_ms);
  e.set_text(text);
  (void)store_->AddEvent(id, e);
  v1::WatchEvent ev;
  *ev.mutable_event() = e;
  Publish(id, ev);
}

void Coordinator::EnsureZygote() {
  if (zygote_pid_ > 0 || opts_.zygote_socket.empty()) return;
  const uint64_t now = MonotonicNs();
  if (zygote_started_ns_ != 0 && now - zygote_started_ns_ < 1'000'000'000ull) return;  // back off
  zygote_started_ns_ = now;
  auto pid = SpawnProcess(
      {opts_.worker_bin, "--role", "zygote", "--socket", opts_.zygote_socket, "--parent",
       std::to_string(getpid()), "--pool", std::to_string(opts_.fork_server_pool)},
      {{}, /*new_process_group=*/true});
  if (!pid.ok()) {
    spdlog::error("cannot start the fork-server: {}", pid.status().message());
    return;
  }
  zygote_pid_ = *pid;
  spdlog::info(
      "fork-server started, pid {}{}", zygote_pid_.load(),
      zygote_restarts_ > 0 ? " (restart " + std::to_string(zygote_restarts_.load()) + ")" : "");
}

void Coordinator::ReapIdle() {
  int st;
  pid_t p;
  while ((p = ::waitpid(-1, &st, WNOHANG)) > 0) {
    if (p == zygote_pid_) {
      spdlog::warn("fork-server pid {} {}; restarting it", p, DescribeWaitStatus(st));
      zygote_pid_ = -1;
      ++zygote_restarts_;
    }
  }
}

void Coordinator::StopZygote() {
  if (zygote_pid_ <= 0) return;
  ::kill(zygote_pid_.load(), SIGKILL);
  int st;
  ::waitpid(zygote_pid_.load(), &st, 0);
  zygote_pid_ = -1;
}

void Coordinator::SchedulerLoop() {
  for (;;) {
    ReapIdle();
    EnsureZygote();
    std::string id;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(250), [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        l.unlock();
        StopZygote();
        return;
      }
      if (queue_.empty()) continue;
      id = queue_.front();
      queue_.pop_front();
      running_ = id;
      cancel_running_ = false;
    }
    Run(id);
    std::lock_guard<std::mutex> l(mu_);
    running_.clear();
  }
}

void Coordinator::Run(const std::string& id) {
  v1::Experiment e;
  {
    std::lock_guard<std::mutex> l(mu_);
    e = live_[id];
  }
  const auto& spec = e.spec();
  const uint64_t start_mono = MonotonicNs();
  const uint64_t start_real = RealtimeNs();
  e.set_state(v1::RUNNING);
  e.set_started_unix_ms(static_cast<int64_t>(start_real / 1000000));
  e.mutable_result()->set_queued_ms(double(e.started_unix_ms() - e.submitted_unix_ms()));
  Update(e);
  {
    v1::WatchEvent ev;
    ev.set_state(v1::RUNNING);
    Publish(id, ev);
  }
  auto t_ms = [&] { return NsToMs(MonotonicNs() - start_mono); };

  ProcessSampler sampler(proc_, opts_.sampler, ThreadCpuNs);
  RunState rs;
  int fds[2] = {-1, -1};
  Status admitted = Status::Ok();
  if (!spec.force()) {  // what fit at submit may not fit now
    auto need = EstimateExperiment(spec);
    auto have = ReadNodeCapacity();
    admitted = !need.ok() ? need.status() : !have.ok() ? have.status() : Admit(*need, *have);
  }
  if (!admitted.ok()) {
    e.set_state(v1::FAILED);
    e.set_error(admitted.message());
  } else if (::pipe2(fds, O_CLOEXEC) != 0) {
    e.set_state(v1::FAILED);
    e.set_error(std::string("pipe: ") + std::strerror(errno));
  } else {
    auto pid =
        SpawnProcess({opts_.worker_bin, "--role", "leader", "--experiment", id, "--spec-json",
                      SpecToJson(spec), "--status-fd", "3", "--parent", std::to_string(getpid()),
                      "--worker-bin", opts_.worker_bin, "--zygote-socket", opts_.zygote_socket},
                     {{{fds[1], 3}}, /*new_process_group=*/true});
    ::close(fds[1]);
    if (!pid.ok()) {
      ::close(fds[0]);
      e.set_state(v1::FAILED);
      e.set_error(pid.status().message());
    } else {
      rs.leader = *pid;
    }
  }
  if (rs.leader <= 0) {
    e.set_finished_unix_ms(NowUnixMs());
    Update(e);
    v1::WatchEvent ev;
    ev.set_state(e.state());
    Publish(id, ev);
    hub_->Close(id);
    return;
  }
  const pid_t pgid = rs.leader;
  {
    v1::ProcessInfo li;
    li.set_pid(rs.leader);
    li.set_role("leader");
    li.set_index(-1);
    li.set_alive(true);
    rs.procs[rs.leader] = li;
  }
  sampler.Track(rs.leader, "leader", -1);
  if (spec.start() == "forkserver") {
    EnsureZygote();
    // Its workers share its pages: its own memory counts, on its own line.
    if (zygote_pid_ > 0) sampler.Track(zygote_pid_, "zygote", -1);
  }
  AddEvent(id, t_ms(), "leader started, pid " + std::to_string(rs.leader));
  spdlog::info("running {}: leader pid {}", id, rs.leader);

  auto handle_line = [&](const std::string& line) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return;
    const std::string type = j.value("type", "");
    if (type == "segment") {
      const uint64_t bytes = j.value("bytes", uint64_t{0});
      rs.shared_bytes += bytes;
      if (j.value("what", "") == "weights") rs.weights_bytes = bytes;
      if (j.value("what", "") == "data") rs.data_bytes = bytes;
      AddEvent(id, t_ms(),
               "segment " + j.value("what", "") + ": " + std::to_string(bytes) + " bytes");
    } else if (type == "worker") {
      const pid_t pid = j.value("pid", 0);
      v1::ProcessInfo p;
      p.set_pid(pid);
      p.set_role("worker");
      p.set_index(j.value("index", 0));
      p.set_alive(true);
      rs.procs[pid] = p;
      sampler.Track(pid, "worker", p.index());
    } else if (type == "exit") {
      AddEvent(id, t_ms(),
               "worker " + std::to_string(j.value("index", 0)) + " " + j.value("status", ""));
    } else if (type == "progress") {
      rs.progress = j;
    } else if (type == "result") {
      rs.result = j;
      rs.progress = j;
    } else if (type == "error") {
      rs.error = j.value("message", "");
      AddEvent(id, t_ms(), "error: " + rs.error);
    }
  };

  auto reap = [&] {
    int st = 0;
    pid_t p;
    // shoald is a child subreaper: workers orphaned by a dead leader come to us and are reaped
    // here.
    while ((p = ::waitpid(-1, &st, WNOHANG)) > 0) {
      if (p == zygote_pid_) {
        spdlog::warn("fork-server pid {} {}; restarting it", p, DescribeWaitStatus(st));
        AddEvent(id, t_ms(), "fork-server " + DescribeWaitStatus(st));
        zygote_pid_ = -1;
        ++zygote_restarts_;
      }
      if (p == rs.leader) {
        rs.leader_exited = true;
        rs.leader_status = st;
      }
      if (auto it = rs.procs.find(p); it != rs.procs.end() && it->second.role() == "leader") {
        it->second.set_alive(false);
        it->second.set_exit_code(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        it->second.set_signal(WIFSIGNALED(st) ? WTERMSIG(st) : 0);
      }
      sampler.Untrack(p);
    }
  };

  auto tick = [&] {
    v1::Sample s;
    sampler.Tick(MonotonicNs(), &s);
    s.set_t_ms(t_ms());
    s.set_shared_bytes(rs.shared_bytes);
    uint64_t steps = 0, samples = 0;
    double loss_sum = 0;
    int loss_n = 0;
    if (rs.progress.contains("workers")) {
      for (auto& w : rs.progress["workers"]) {
        const int index = w.value("index", -1);
        const uint64_t fs = w.value("first_step_ns", uint64_t{0});
        const uint64_t req = w.value("requested_ns", uint64_t{0});
        if (fs > 0 && rs.ready.insert(index).second) {
          if (auto* p = FindWorker(rs, index)) {
            p->set_ready_ms(NsToMs(fs - std::min(fs, start_real)));
            p->set_start_ms(NsToMs(fs - std::min(fs, req)));
            AddEvent(id, t_ms(),
                     "worker " + std::to_string(index) + " training " +
                         std::to_string(int(p->start_ms())) + " ms after its request");
          }
        }
        steps += w.value("steps", uint64_t{0});
        samples += w.value("samples", uint64_t{0});
        if (w.value("steps", uint64_t{0}) > 0 && w["last_loss"].is_number()) {
          loss_sum += w["last_loss"].get<double>();
          ++loss_n;
        }
      }
    }
    const uint64_t now = MonotonicNs();
    if (rs.prev_steps_ns != 0 && now > rs.prev_steps_ns) {
      const double inst =
          double(steps - std::min(steps, rs.prev_steps)) / (double(now - rs.prev_steps_ns) / 1e9);
      rs.steps_per_sec = rs.steps_per_sec == 0 ? inst : 0.7 * rs.steps_per_sec + 0.3 * inst;
    }
    rs.prev_steps = steps;
    rs.prev_steps_ns = now;
    s.set_steps(steps);
    s.set_steps_total(uint64_t(spec.workers()) * spec.batches());
    s.set_steps_per_sec(rs.steps_per_sec);
    s.set_samples_per_sec(rs.steps_per_sec * spec.batch_size());
    s.set_loss(loss_n ? loss_sum / loss_n : std::nan(""));
    s.set_sampler_cpu_percent(100.0 * double(sampler.cpu_ns()) /
                              std::max<double>(1, double(now - start_mono)));
    (void)samples;
    (void)store_->AddSample(id, s);
    v1::WatchEvent ev;
    *ev.mutable_sample() = s;
    Publish(id, ev);
    // Keep the live record's process list current for `get` while it runs.
    e.clear_processes();
    for (auto& [pid, p] : rs.procs) *e.add_processes() = p;
    std::lock_guard<std::mutex> l(mu_);
    live_[id] = e;
  };

  const uint64_t interval_ns = uint64_t(spec.sample_interval_ms()) * 1000000ull;
  uint64_t next_tick = MonotonicNs();
  bool term_sent = false, kill_sent = false;
  uint64_t kill_deadline = 0;
  uint64_t leader_exit_ns = 0;
  std::string buf;
  bool cancelled = false, interrupted = false;
  for (;;) {
    const uint64_t now = MonotonicNs();
    int timeout_ms = now >= next_tick ? 0 : int((next_tick - now) / 1000000) + 1;
    if (rs.eof) timeout_ms = std::min(timeout_ms, 20);
    pollfd pfd{fds[0], POLLIN, 0};
    if (!rs.eof && ::poll(&pfd, 1, std::min(timeout_ms, 50)) > 0) {
      char chunk[65536];
      ssize_t n = ::read(fds[0], chunk, sizeof chunk);
      if (n > 0) {
        buf.append(chunk, size_t(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          handle_line(buf.substr(0, nl));
          buf.erase(0, nl + 1);
        }
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        rs.eof = true;
      }
    } else if (rs.eof) {
      ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    }
    reap();
    if (MonotonicNs() >= next_tick) {
      tick();
      next_tick += interval_ns;
      if (next_tick < MonotonicNs()) next_tick = MonotonicNs() + interval_ns;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cancel_running_ && !cancelled && !interrupted) {
        (stopping_ ? interrupted : cancelled) = true;
      }
      if (stopping_ && !interrupted && !cancelled) interrupted = true;
    }
    const uint64_t t = MonotonicNs();
    if ((cancelled || interrupted) && !term_sent) {
      AddEvent(id, t_ms(),
               cancelled ? "cancel: SIGTERM to the process group"
                         : "shoald stopping: SIGTERM to the process group");
      ::kill(-pgid, SIGTERM);
      term_sent = true;
      kill_deadline = t + uint64_t(opts_.grace_ms) * 1000000ull;
    }
    if (rs.leader_exited && leader_exit_ns == 0) {
      leader_exit_ns = t;
      if (!term_sent) kill_deadline = t + uint64_t(opts_.grace_ms) * 1000000ull;
    }
    if (!kill_sent && kill_deadline != 0 && t >= kill_deadline) {
      if (!rs.eof || !rs.leader_exited)
        AddEvent(id, t_ms(), "grace period over: SIGKILL to the process group");
      ::kill(-pgid, SIGKILL);
      kill_sent = true;
    }
    if (rs.leader_exited && rs.eof) break;
    if (kill_sent && t > kill_deadline + 10'000'000'000ull) {
      rs.error += (rs.error.empty() ? "" : "; ") +
                  std::string("processes did not exit 10 s after SIGKILL (D state?)");
      break;
    }
  }
  ::close(fds[0]);
  // Whatever is left of the group goes now; then wait (bounded) until the group is empty.
  ::kill(-pgid, SIGKILL);
  const uint64_t wait_until = MonotonicNs() + 10'000'000'000ull;
  while (::kill(-pgid, 0) == 0 && MonotonicNs() < wait_until) {
    ::kill(-pgid, SIGKILL);  // a fork-server child may join the group late
    reap();
    ::usleep(2000);
  }
  reap();
  const bool group_gone = ::kill(-pgid, 0) != 0;
  if (!group_gone) {
    rs.error += (rs.error.empty() ? "" : "; ") +
                std::string("some processes of the experiment could not be stopped (D state?)");
  }
  const int removed = RemoveSegments(SegmentPrefix(id));
  if (removed > 0)
    AddEvent(id, t_ms(), "removed " + std::to_string(removed) + " segment(s) the leader left");
  if (!ListSegments(SegmentPrefix(id)).empty())
    spdlog::error("{}: segments remain in /dev/shm", id);

  // Final figures.
  const uint64_t end_mono = MonotonicNs();
  auto* r = e.mutable_result();
  r->set_wall_ms(NsToMs(end_mono - start_mono));
  r->set_peak_pss_sum_bytes(sampler.peak_pss_sum());
  r->set_peak_rss_sum_bytes(sampler.peak_rss_sum());
  r->set_peak_uss_sum_bytes(sampler.peak_uss_sum());
  r->set_shared_bytes(rs.shared_bytes);
  r->set_weights_bytes(rs.weights_bytes);
  r->set_data_bytes(rs.data_bytes);
  r->set_sampler_cpu_ms(NsToMs(sampler.cpu_ns()));
  r->set_sampler_cpu_percent(100.0 * double(sampler.cpu_ns()) /
                             double(std::max<uint64_t>(1, end_mono - start_mono)));
  r->set_smaps_reads(sampler.smaps_reads());
  r->set_statm_reads(sampler.statm_reads());
  r->set_threads(spec.threads());
  const json& res = rs.result;
  uint64_t hwm_sum = 0;
  if (res.is_object()) {
    r->set_initial_weights_checksum(res.value("initial_checksum", ""));
    r->set_final_shared_checksum(res.value("final_checksum", ""));
    hwm_sum += res.value("leader_vmhwm_bytes", uint64_t{0});
    if (auto it = rs.procs.find(rs.leader); it != rs.procs.end()) {
      it->second.set_peak_rss_bytes(res.value("leader_vmhwm_bytes", uint64_t{0}));
    }
  }
  if (rs.progress.contains("workers")) {
    uint64_t first_ns = UINT64_MAX, last_first_ns = 0, end_ns = 0, samples = 0, steps = 0;
    uint32_t started = 0;
    uint64_t first_req_ns = UINT64_MAX;
    double first_loss = 0, tail_loss = 0, data = 0, fwd = 0, bwd = 0, opt = 0;
    int nloss = 0;
    for (auto& w : rs.progress["workers"]) {
      const uint64_t fs = w.value("first_step_ns", uint64_t{0});
      const uint64_t tn = w.value("train_ns", uint64_t{0});
      if (fs > 0) {
        ++started;
        first_ns = std::min(first_ns, fs);
        last_first_ns = std::max(last_first_ns, fs);
        end_ns = std::max(end_ns, fs + tn);
      }
      samples += w.value("samples", uint64_t{0});
      steps += w.value("steps", uint64_t{0});
      data += NsToMs(w.value("data_ns", uint64_t{0}));
      fwd += NsToMs(w.value("forward_ns", uint64_t{0}));
      bwd += NsToMs(w.value("backward_ns", uint64_t{0}));
      opt += NsToMs(w.value("optimizer_ns", uint64_t{0}));
      if (w["first_loss"].is_number() && w["tail_loss"].is_number() &&
          w.value("train_ns", uint64_t{0}) > 0) {
        first_loss += w["first_loss"].get<double>();
        tail_loss += w["tail_loss"].get<double>();
        ++nloss;
      }
      if (w.value("index", -1) == 0 && w["accuracy"].is_number()) {
        r->set_test_accuracy(w["accuracy"].get<double>());
        r->set_eval_ms(NsToMs(w.value("eval_ns", uint64_t{0})));
      }
      if (auto* p = FindWorker(rs, w.value("index", -1))) {
        p->set_peak_rss_bytes(w.value("vmhwm_bytes", uint64_t{0}));
        hwm_sum += w.value("vmhwm_bytes", uint64_t{0});
        p->set_steps(w.value("steps", uint64_t{0}));
        if (w["last_loss"].is_number()) p->set_last_loss(w["last_loss"].get<double>());
        if (fs > 0) p->set_ready_ms(NsToMs(fs - std::min(fs, start_real)));
        const uint64_t req = w.value("requested_ns", uint64_t{0});
        if (fs > 0 && req > 0) {
          p->set_start_ms(NsToMs(fs - std::min(fs, req)));
          first_req_ns = std::min(first_req_ns, req);
        }
        if (w.value("phase", 0) == 2) p->set_weights_checksum(w.value("weights_checksum", ""));
      }
    }
    r->set_samples(samples);
    r->set_steps(steps);
    r->set_data_ms(data);
    r->set_forward_ms(fwd);
    r->set_backward_ms(bwd);
    r->set_optimizer_ms(opt);
    if (started == spec.workers()) {  // every worker reached its first step
      r->set_ready_ms(NsToMs(last_first_ns - std::min(last_first_ns, start_real)));
      if (first_req_ns != UINT64_MAX)
        r->set_start_ms(NsToMs(last_first_ns - std::min(last_first_ns, first_req_ns)));
    }
    if (end_ns > first_ns && first_ns != UINT64_MAX) {
      r->set_train_ms(NsToMs(end_ns - first_ns));
      r->set_samples_per_sec(double(samples) / (double(end_ns - first_ns) / 1e9));
    }
    if (nloss > 0) {
      r->set_first_loss(first_loss / nloss);
      r->set_last_loss(tail_loss / nloss);
    }
  }
  r->set_peak_rss_hwm_sum_bytes(hwm_sum);
  if (res.is_object() && res.contains("exits")) {
    for (auto& x : res["exits"]) {
      if (auto* p = FindWorker(rs, x.value("index", -1))) {
        p->set_exit_code(x.value("exit_code", 0));
        p->set_signal(x.value("signal", 0));
      }
    }
  }
  e.clear_processes();
  for (auto& [pid, p] : rs.procs) {
    p.set_alive(group_gone ? false : ::kill(pid, 0) == 0);
    p.set_peak_pss_bytes(sampler.PeakPss(pid));
    *e.add_processes() = p;
  }

  const bool leader_ok = WIFEXITED(rs.leader_status) && WEXITSTATUS(rs.leader_status) == 0;
  const bool result_ok = res.is_object() && res.value("ok", false);
  if (leader_ok && result_ok && group_gone) {
    e.set_state(v1::SUCCEEDED);  // it finished before a late cancel could stop it
  } else if (cancelled) {
    e.set_state(v1::CANCELLED);
    e.set_error("cancelled by request");
  } else if (interrupted) {
    e.set_state(v1::INTERRUPTED);
    e.set_error("shoald was stopped while this experiment ran");
  } else {
    e.set_state(v1::FAILED);
    std::string why = res.is_object() ? res.value("error", "") : "";
    if (why.empty()) why = rs.error;
    if (why.empty()) why = "leader " + DescribeWaitStatus(rs.leader_status);
    e.set_error(why);
  }
  e.set_finished_unix_ms(NowUnixMs());
  Update(e);
  AddEvent(id, t_ms(),
           "finished: " + v1::ExperimentState_Name(e.state()) +
               (e.error().empty() ? "" : " (" + e.error() + ")"));
  v1::WatchEvent ev;
  ev.set_state(e.state());
  Publish(id, ev);
  hub_->Close(id);
  spdlog::info("{} {} in {:.1f} s; peak PSS sum {:.1f} MiB; sampler {:.2f}% of a core", id,
               v1::ExperimentState_Name(e.state()), r->wall_ms() / 1000,
               double(r->peak_pss_sum_bytes()) / (1 << 20), r->sampler_cpu_percent());
}

}  // namespace shoal
