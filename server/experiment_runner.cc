#include "server/experiment_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "shared/os/shm.h"
#include "shared/spec/spec.h"
#include "shared/spec/sweep.h"
#include "spdlog/spdlog.h"

namespace shoal {
namespace {

v1::ProcessInfo NewProcess(pid_t pid, const std::string& role, int index) {
  v1::ProcessInfo p;
  p.set_pid(pid);
  p.set_role(role);
  p.set_index(index);
  p.set_alive(true);
  return p;
}

// Each sampled process's peak PSS; those that are not the experiment's are its helpers.
void TakePeaks(const ProcessSampler& sampler, const std::map<pid_t, v1::ProcessInfo>& procs,
               SamplerFigures* f) {
  for (const auto& [pid, peak] : sampler.Peaks()) {
    f->peak_pss[pid] = peak.pss;
    if (!procs.count(pid)) f->helpers[pid] = peak.role;
  }
}

}  // namespace

ExperimentRunner::ExperimentRunner(v1::Experiment e, RunnerEnv env, RunnerHooks hooks)
    : e_(std::move(e)), env_(std::move(env)), hooks_(std::move(hooks)) {}

ExperimentRunner::~ExperimentRunner() {
  if (fd_ >= 0) ::close(fd_);
}

double ExperimentRunner::TMs() const { return NsToMs(env_.os.clock->MonotonicNs() - start_mono_); }

void ExperimentRunner::AddEvent(const std::string& text) { hooks_.event(TMs(), text); }

void ExperimentRunner::PublishState() {
  v1::WatchEvent ev;
  ev.set_state(e_.state());
  hooks_.publish(ev);
}

// The run's clocks: wall_ms, ready_ms and the samples' times count from here.
void ExperimentRunner::StartClocks() {
  start_mono_ = env_.os.clock->MonotonicNs();
  facts_.start_real_ns = env_.os.clock->RealtimeNs();
  e_.set_started_unix_ms(static_cast<int64_t>(facts_.start_real_ns / 1000000));
  e_.mutable_result()->set_queued_ms(double(e_.started_unix_ms() - e_.submitted_unix_ms()));
}

bool ExperimentRunner::Launch() {
  facts_.spec = e_.spec();
  e_.set_state(v1::RUNNING);
  StartClocks();
  if (env_.os.machine) machine_at_start_ = TakeCpuSnapshot(*env_.os.machine, start_mono_);
  hooks_.update(e_);
  PublishState();
  // Again after the record is stored, which may wait (for SQLite's lock held by another process,
  // or for a sweep being deleted): that wait is the daemon's, not the run's.
  StartClocks();
  sampler_ = std::make_unique<ProcessSampler>(env_.os.procfs, env_.sampler, env_.sampler_cpu);
  gpu_ = std::make_unique<GpuSampler>(env_.os.gpu, env_.sampler_cpu, env_.sampler.budget_fraction);
  // A run that would go unlimited where a limit was asked does not start.
  StatusOr<std::vector<std::string>> env = RunEnvironment();
  int fds[2];
  if (env.ok() && ::pipe2(fds, O_CLOEXEC) != 0)
    env = Internal(std::string("pipe: ") + std::strerror(errno));
  if (!env.ok()) {
    facts_.runtime_error = env.status().message();
    Finish();
    return false;
  }
  const std::vector<std::string>& environment = *env;
  std::vector<std::pair<int, int>> fd_map = {{fds[1], 3}};
  OpenLog(&fd_map);
  const LeaderChoice choice = ChooseLeader(e_.spec());
  const bool light = !choice.libtorch && !env_.leader_bin.empty();
  const bool hands_off = choice.hands_off && !env_.leader_bin.empty();
  const std::string& leader_bin = light ? env_.leader_bin : env_.worker_bin;
  facts_.leader_program =
      light ? "shoal-leader" : (hands_off ? "shoal-worker, then shoal-leader" : "shoal-worker");
  facts_.leader_why = choice.why;
  if (!light && !choice.libtorch) facts_.leader_why = "shoald has no shoal-leader";
  if (choice.hands_off && !hands_off)
    facts_.leader_why = "the leader loads and probes the model file; shoald has no shoal-leader";
  std::vector<std::string> argv = LeaderArgv(
      {leader_bin, e_.id(), 3, int(env_.daemon_pid), env_.worker_bin, env_.fork_server_socket},
      e_.spec());
  if (hands_off) argv.insert(argv.end(), {"--leader-bin", env_.leader_bin});
  auto pid = env_.os.proc->Spawn(argv, {fd_map, /*new_process_group=*/true, &environment});
  ::close(fds[1]);
  if (log_) log_->CloseWriteEnd();
  if (!pid.ok()) {
    ::close(fds[0]);
    facts_.runtime_error = pid.status().message();
    Finish();
    return false;
  }
  fd_ = fds[0];
  facts_.leader = *pid;
  if (in_cgroup_) (void)env_.cgroups->Join(e_.id(), *pid);  // the leader joins itself, too
  v1::ProcessInfo& leader = facts_.procs[*pid] = NewProcess(*pid, "leader", -1);
  // Shared weights on CUDA: the leader allocates their buffer, on the workers' one device.
  if (e_.spec().device() == "cuda" && e_.spec().share())
    leader.set_cuda_device(CudaOrdinal(e_.spec(), 0));
  sampler_->Track(*pid, "leader", -1);
  env_.reaper->Watch(*pid, [this](pid_t, int st) { OnLeaderExit(st); });
  if (e_.spec().start() == "forkserver" && env_.fork_server_pid) {
    // Its workers share its pages: its own memory counts, on its own line.
    if (pid_t z = env_.fork_server_pid(); z > 0) sampler_->Track(z, "forkserver", -1);
  }
  AddEvent("leader started, pid " + std::to_string(*pid));
  checkpoint_due_ = true;
  phase_ = Phase::kRunning;
  next_tick_ = start_mono_;
  return true;
}

// The run's stdout and stderr into its log (a failure to open one is an event, not a failure).
void ExperimentRunner::OpenLog(std::vector<std::pair<int, int>>* fd_map) {
  if (env_.logs_dir.empty()) return;
  ::mkdir(env_.logs_dir.c_str(), 0700);
  auto log = LogCapture::Open(LogPath(env_.logs_dir, e_.id()));
  if (!log.ok()) {
    AddEvent("output not captured: " + log.status().message());
    return;
  }
  log_ = std::move(log).value();
  fd_map->push_back({log_->write_fd(), 1});
  fd_map->push_back({log_->write_fd(), 2});
}

void ExperimentRunner::OnBytes(const char* data, size_t n) {
  frames_.Feed(data, n);
  for (;;) {
    ipc::v1::LeaderEvent ev;
    auto got = frames_.Next(&ev);
    if (!got.ok()) {
      // A leader that cannot speak its protocol is broken: stop the experiment.
      facts_.runtime_error = "the leader's status stream is corrupt: " + got.status().message();
      AddEvent(facts_.runtime_error);
      OnEof();
      if (phase_ == Phase::kRunning) {
        env_.os.proc->SignalGroup(facts_.leader, SIGTERM);
        deadline_ = env_.os.clock->MonotonicNs() + env_.grace_ns;
        phase_ = Phase::kStopping;
      }
      return;
    }
    if (!*got) return;
    HandleEvent(ev);
  }
}

void ExperimentRunner::OnEof() {
  eof_ = true;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void ExperimentRunner::HandleEvent(const ipc::v1::LeaderEvent& ev) {
  if (ev.has_segment()) {
    facts_.segments[ev.segment().what()] = ev.segment().bytes();
    AddEvent("segment " + ev.segment().what() + ": " + std::to_string(ev.segment().bytes()) +
             " bytes");
  } else if (ev.has_worker_started()) {
    OnWorkerStarted(ev.worker_started());
  } else if (ev.has_worker_exited()) {
    const auto& x = ev.worker_exited();
    if (auto it = facts_.procs.find(x.pid()); it != facts_.procs.end())
      RecordExit(&it->second, x.wait_status());
    sampler_->Untrack(x.pid());
    AddEvent("worker " + std::to_string(x.index()) + " " + DescribeWaitStatus(x.wait_status()));
  } else if (ev.has_progress()) {
    facts_.progress = ev.progress();
    bool moved = false;  // a worker started training or finished: sample it now, not later
    for (const auto& w : ev.progress().workers()) {
      uint32_t& phase = phases_[w.index()];
      moved = moved || phase != uint32_t(w.phase());
      phase = uint32_t(w.phase());
      for (auto& [pid, p] : facts_.procs)  // the live record shows each worker as it goes
        if (p.role() == "worker" && p.index() == int(w.index()))
          ApplyWorkerReading(w, facts_.start_real_ns, &p);
      AnnounceFirstSteps(w);
    }
    if (moved) {
      checkpoint_due_ = true;  // its start or end is worth keeping at once
      sampler_->MarkAllDue();
    }
    // A step plan being traced peaks and falls within a second: sampled at each report then.
    if (moved || ev.progress().tracing())
      next_tick_ = std::min(next_tick_, env_.os.clock->MonotonicNs());
  } else if (ev.has_self_memory()) {
    const auto& m = ev.self_memory();
    sampler_->NoteOwnReading(facts_.leader, m.pss_bytes(),
                             m.has_uss_bytes() ? std::optional(m.uss_bytes()) : std::nullopt);
  } else if (ev.has_result()) {
    facts_.result = ev.result();
  } else if (ev.has_error()) {
    facts_.leader_error = ev.error().message();
    AddEvent("error: " + facts_.leader_error);
  }
}

// A worker's first step as the events say it: when it began (after its request), and once it
// ended (its length where this report is the first to see it; a first step may be a traced or
// warm-up one, many times the others).
void ExperimentRunner::AnnounceFirstSteps(const ipc::v1::WorkerReading& w) {
  const std::string who = "worker " + std::to_string(w.index());
  if (w.first_step_ns() != 0 && !announced_ready_[w.index()]) {
    announced_ready_[w.index()] = true;
    const uint64_t ready = ReadyNs(w);
    const double ms = NsToMs(ready - std::min(ready, w.requested_ns()));
    AddEvent(who + (w.has_ready_ns() ? " ready " : " training ") + std::to_string(std::lround(ms)) +
             " ms after its request" +  // as tables round
             (w.has_ready_ns() ? ", training now (its turn)" : ""));
  }
  if (w.steps() == 0 || announced_stepped_[w.index()]) return;
  announced_stepped_[w.index()] = true;
  if (w.steps() == 1 && w.last_step_ns() > w.first_step_ns() && w.first_step_ns() != 0)
    AddEvent(who + " finished its first step in " +
             std::to_string(std::lround(NsToMs(w.last_step_ns() - w.first_step_ns()))) + " ms");
  else
    AddEvent(who + " finished its first " + std::to_string(w.steps()) + " steps");
}

void ExperimentRunner::OnWorkerStarted(const ipc::v1::WorkerStarted& w) {
  v1::ProcessInfo& p = facts_.procs[w.pid()] = NewProcess(w.pid(), "worker", int(w.index()));
  if (e_.spec().device() == "cuda") p.set_cuda_device(CudaOrdinal(e_.spec(), w.index()));
  sampler_->Track(w.pid(), "worker", int(w.index()));
  // A forkserver's child is not the leader's: into the run's group with what it starts later.
  if (in_cgroup_) (void)env_.cgroups->Join(e_.id(), w.pid());
  checkpoint_due_ = true;
  // A worker orphaned by a dead leader is reaped by shoald (a subreaper): its real exit is kept.
  env_.reaper->Watch(w.pid(), [this](pid_t p, int st) { OnWorkerExit(p, st); });
}

void ExperimentRunner::OnWorkerExit(pid_t pid, int status) {
  auto it = facts_.procs.find(pid);
  if (it == facts_.procs.end() || it->second.exit_known()) return;
  RecordExit(&it->second, status);
  sampler_->Untrack(pid);
}

void ExperimentRunner::OnLeaderExit(int status) {
  facts_.leader_exited = true;
  facts_.leader_status = status;
  if (auto it = facts_.procs.find(facts_.leader); it != facts_.procs.end())
    RecordExit(&it->second, status);
  sampler_->Untrack(facts_.leader);
}

void ExperimentRunner::RequestStop(bool shutdown) {
  if (phase_ != Phase::kRunning || stop_requested_) return;
  stop_requested_ = true;
  (shutdown ? facts_.interrupted : facts_.cancelled) = true;
  AddEvent(shutdown ? "shoald stopping: SIGTERM to the process group"
                    : "cancel: SIGTERM to the process group");
  SignalAll(SIGTERM);
  deadline_ = env_.os.clock->MonotonicNs() + env_.grace_ns;
  phase_ = Phase::kStopping;
}

bool ExperimentRunner::Advance() {
  if (phase_ == Phase::kDone || phase_ == Phase::kIdle) return phase_ == Phase::kDone;
  const uint64_t now = env_.os.clock->MonotonicNs();
  if (phase_ != Phase::kDraining && now >= next_tick_) {
    Tick(now);
    const uint64_t interval = uint64_t(e_.spec().sample_interval_ms()) * 1000000ull;
    next_tick_ += interval;
    if (next_tick_ < now) next_tick_ = now + interval;
  }
  const bool leader_done = facts_.leader_exited && eof_;
  switch (phase_) {
    case Phase::kRunning:
      if (leader_done) {
        StartDraining(now);
      } else if (facts_.leader_exited) {  // exited, pipe still open: give it the grace period
        if (deadline_ == 0) deadline_ = now + env_.grace_ns;
        if (now >= deadline_) StartDraining(now);
      }
      break;
    case Phase::kStopping:
      if (leader_done) {
        StartDraining(now);
      } else if (now >= deadline_) {
        AddEvent("grace period over: SIGKILL to the process group");
        SignalAll(SIGKILL);
        deadline_ = now + env_.drain_ns;
        phase_ = Phase::kKilled;
      }
      break;
    case Phase::kKilled:
      if (leader_done) {
        StartDraining(now);
      } else if (now >= deadline_) {
        facts_.runtime_error = "processes did not exit " + std::to_string(env_.drain_ns / 1000000) +
                               " ms after SIGKILL (D state?)";
        StartDraining(now);
      }
      break;
    case Phase::kDraining:
      SignalAll(SIGKILL);  // a forkserver child may join it late
      if (AllGone()) {
        Finish();
      } else if (now >= deadline_) {
        facts_.group_gone = false;
        std::string& err = facts_.runtime_error;
        err += (err.empty() ? "" : "; ") +
               std::string("some processes of the experiment could not be stopped (D state?)");
        Finish();
      }
      break;
    default:
      break;
  }
  return phase_ == Phase::kDone;
}

void ExperimentRunner::StartDraining(uint64_t now) {
  OnEof();
  SignalAll(SIGKILL);
  deadline_ = now + env_.drain_ns;
  phase_ = Phase::kDraining;
}

// In a forkserver run the forkserver's idle children share its pages with the workers: they are
// sampled too, as "pool" (a child that becomes a worker is a worker from then on).
void ExperimentRunner::TrackForkServerPool() {
  if (e_.spec().start() != "forkserver" || !env_.fork_server_pid) return;
  if (env_.fork_server_exit)
    if (const std::string how = env_.fork_server_exit(); !how.empty())
      hooks_.event(TMs(), "the forkserver " + how + "; the daemon restarts it");
  const pid_t z = env_.fork_server_pid();
  if (z <= 0) return;
  const std::string file = "task/" + std::to_string(z) + "/children";
  auto text = env_.os.procfs->Read(z, file.c_str());
  if (!text.ok()) return;
  std::set<pid_t> now;
  std::istringstream in(*text);
  for (pid_t pid; in >> pid;) now.insert(pid);
  for (pid_t pid : now)
    if (!facts_.procs.count(pid) && pool_.insert(pid).second) sampler_->Track(pid, "pool", -1);
  for (auto it = pool_.begin(); it != pool_.end();) {
    const bool left = !now.count(*it) || facts_.procs.count(*it);  // gone, or now a worker
    if (left && !facts_.procs.count(*it)) sampler_->Untrack(*it);
    it = left ? pool_.erase(it) : std::next(it);
  }
}

// A worker's own children (a DataLoader's worker processes, a program's helpers), and theirs,
// are the experiment's too: sampled with it and listed as "child" with the index of the worker
// they descend from. Found through each process's children (procfs): its main thread's where the
// run's cgroup holds the rest (TrackCgroup), every thread's without one, and then the leader's
// too, which adopts what they orphan (AdoptOrphansWithoutCgroup: a double fork's grandchild).
void ExperimentRunner::TrackDescendants() {
  constexpr size_t kMaxDescendants = 1024;
  std::vector<std::pair<pid_t, int>> frontier;
  for (const auto& [pid, p] : facts_.procs)
    if (p.alive() && (p.role() == "worker" || p.role() == "child"))
      frontier.push_back({pid, p.index()});
  std::set<pid_t> seen;
  if (!in_cgroup_ && !facts_.leader_exited) AdoptLeadersStrangers(&seen, &frontier);
  while (!frontier.empty() && seen.size() < kMaxDescendants) {
    const auto [parent, index] = frontier.back();
    frontier.pop_back();
    for (pid_t pid : ChildrenOf(parent)) {
      if (pool_.count(pid) || !seen.insert(pid).second) continue;
      auto known = facts_.procs.find(pid);
      if (known == facts_.procs.end()) {
        TrackChild(pid, index);
      } else if (known->second.role() != "child") {
        continue;  // a worker (the forkserver's child, say): it is tracked as one
      }
      frontier.push_back({pid, index});
    }
  }
  TrackCgroup(&seen);
  for (auto& [pid, p] : facts_.procs) {  // gone: not ours to reap, its exit is unknown
    if (p.role() != "child" || !p.alive() || seen.count(pid)) continue;
    if (!in_cgroup_ && StillTheChild(pid)) continue;  // orphaned to shoald, say: still the run's
    p.set_alive(false);
    sampler_->Untrack(pid);
  }
}

// Without a cgroup, the leader's children that are not its workers: what it adopted (a double
// fork's grandchild, a worker's child once the worker is gone), measured as children of no
// worker (-1). Its workers are reported as they start: a stranger at two ticks running is not one.
void ExperimentRunner::AdoptLeadersStrangers(std::set<pid_t>* seen,
                                             std::vector<std::pair<pid_t, int>>* frontier) {
  std::set<pid_t> strangers;
  for (pid_t pid : ChildrenOf(facts_.leader)) {
    if (pool_.count(pid)) continue;
    if (auto known = facts_.procs.find(pid); known != facts_.procs.end()) {
      if (known->second.role() == "child") seen->insert(pid);
      continue;
    }
    strangers.insert(pid);
    if (!leader_strangers_.count(pid)) continue;
    TrackChild(pid, -1);
    seen->insert(pid);
    frontier->push_back({pid, -1});
  }
  leader_strangers_ = std::move(strangers);
}

// A process's children: its main thread's, or every thread's without a cgroup (a child a
// worker's other thread started is that thread's in procfs).
std::vector<pid_t> ExperimentRunner::ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  const std::vector<pid_t> threads =
      in_cgroup_ ? std::vector<pid_t>{parent} : env_.os.procfs->Threads(parent);
  for (pid_t tid : threads) {
    const std::string file = "task/" + std::to_string(tid) + "/children";
    auto text = env_.os.procfs->Read(parent, file.c_str());
    if (!text.ok()) continue;
    std::istringstream in(*text);
    for (pid_t pid; in >> pid;) out.push_back(pid);
  }
  return out;
}

void ExperimentRunner::TrackChild(pid_t pid, int index) {
  facts_.procs[pid] = NewProcess(pid, "child", index);
  sampler_->Track(pid, "child", index);
  if (in_cgroup_) return;
  auto stat = env_.os.procfs->Read(pid, "stat");
  if (!stat.ok()) return;
  auto parsed = ParseProcStat(*stat);
  if (parsed.ok() && parsed->start_ticks) child_started_[pid] = *parsed->start_ticks;
}

// Without a cgroup, whether a child tracked before is still that process and alive (its pid not
// reused: the same start time), wherever it was reparented.
bool ExperimentRunner::StillTheChild(pid_t pid) {
  auto stat = env_.os.procfs->Read(pid, "stat");
  if (!stat.ok()) return false;
  auto s = ParseProcStat(*stat);
  if (!s.ok() || s->state == 'Z' || s->state == 'X') return false;
  auto started = child_started_.find(pid);
  return started == child_started_.end() || s->start_ticks == started->second;
}

void ExperimentRunner::Tick(uint64_t now) {
  TrackForkServerPool();
  TrackDescendants();
  v1::Sample s;
  sampler_->Tick(now, &s);
  gpu_->Tick(now, AnyTraining(), &s);
  if (AnyTraining()) ReadCpuEnergy(now);
  s.set_t_ms(TMs());
  uint64_t shared = 0;
  for (const auto& [what, bytes] : facts_.segments) shared += bytes;
  s.set_shared_bytes(shared);
  const LiveFigures live = facts_.progress ? Live(*facts_.progress) : LiveFigures{};
  steps_rate_.Feed(live.steps, now);
  // From the samples the workers count, as the result's throughput: a step is not batch_size
  // samples in every kind (a pipeline's stages step on the same samples, a strong-scaling
  // replica takes a share of the batch, a multi_model step feeds n models).
  samples_rate_.Feed(live.samples, now);
  const auto& spec = e_.spec();
  s.set_steps(live.steps);
  if (spec.has_batches()) s.set_steps_total(uint64_t(spec.workers()) * spec.batches());
  if (spec.multi_model().has_iterations())
    s.set_steps_total(uint64_t(spec.workers()) * spec.multi_model().iterations());
  if (auto r = steps_rate_.per_sec()) s.set_steps_per_sec(*r);
  if (auto r = samples_rate_.per_sec()) s.set_samples_per_sec(*r);
  s.set_loss(live.loss ? *live.loss : std::nan(""));
  s.set_sampler_cpu_percent(100.0 * double(sampler_->cpu_ns() + gpu_->cpu_ns()) /
                            std::max<double>(1, double(now - start_mono_)));
  // With no process alive to read (before the first starts, after the last has gone) the memory
  // figures are unknown, not 0: no sample at all.
  if (s.processes_size() > 0) {
    keeper_.Offer(s);
    v1::WatchEvent ev;
    *ev.mutable_sample() = s;
    hooks_.publish(ev);
  }
  LiveProcesses();
  if (hooks_.live) hooks_.live(e_);
  // Stored now and then, so that a shoald killed mid-run leaves the record its successor marks
  // interrupted with its processes, environment and steps, not a bare spec.
  constexpr uint64_t kCheckpointNs = 5'000'000'000;
  if (hooks_.checkpoint && (checkpoint_due_ || now - last_checkpoint_ >= kCheckpointNs)) {
    hooks_.checkpoint(e_);
    checkpoint_due_ = false;
    last_checkpoint_ = now;
  }
}

void ExperimentRunner::Finish() {
  OnEof();
  if (log_) log_->Finish();  // every writer is gone: the rest, and what the cap dropped
  const std::string prefix = SegmentPrefix(e_.id());
  if (int removed = env_.os.segments->Remove(prefix); removed > 0)
    AddEvent("removed " + std::to_string(removed) + " segment(s) the leader left");
  if (env_.os.segments->Count(prefix) > 0)
    spdlog::error("{}: segments remain in /dev/shm", e_.id());
  for (const auto& [pid, p] : facts_.procs) env_.reaper->Forget(pid);
  ReadCgroupMemory();
  facts_.wall_ns = env_.os.clock->MonotonicNs() - start_mono_;
  if (sampler_) {
    SamplerFigures& f = facts_.sampler;
    f.peak_pss_sum = sampler_->peak_pss_sum();
    f.peak_rss_sum = sampler_->peak_rss_sum();
    f.peak_uss_sum = sampler_->peak_uss_sum();
    f.sum_of_peak_pss = sampler_->sum_of_peak_pss();
    f.cpu_ns = sampler_->cpu_ns() + gpu_->cpu_ns();
    f.smaps_reads = sampler_->smaps_reads();
    f.statm_reads = sampler_->statm_reads();
    TakePeaks(*sampler_, facts_.procs, &f);
  }
  if (gpu_)
    for (const auto& [pid, p] : facts_.procs)
      if (auto peak = gpu_->PeakOf(pid)) facts_.sampler.peak_gpu[pid] = *peak;
  FillResult(facts_, e_.mutable_result());
  FillProcesses(facts_, &e_);
  if (gpu_) FillGpu();
  FillCpuEnergy();
  FillDisturbed();
  GatherProfiles();
  auto [state, error] = FinalState(facts_);
  // The kernel's word for this run alone: processes of its group the OOM killer took, whatever
  // the run said (the leader's note counts the whole machine's kills).
  if (state == v1::FAILED && e_.result().oom_kills() > 0)
    error += std::string(IsOutOfMemory(error) ? "; " : " (out of memory) ") +
             "the kernel's OOM killer killed " + std::to_string(e_.result().oom_kills()) +
             " process(es) of this run (its cgroup's count)";
  e_.set_state(state);
  e_.set_error(error);
  e_.set_finished_unix_ms(static_cast<int64_t>(env_.os.clock->RealtimeNs() / 1000000));
  phase_ = Phase::kDone;
  hooks_.update(e_);
  AddEvent("finished: " + v1::ExperimentState_Name(state) +
           (error.empty() ? "" : " (" + error + ")"));
  PublishState();
  const auto& r = e_.result();
  const std::string pss =
      r.has_peak_pss_sum_bytes()
          ? fmt::format("{:.1f} MiB", double(r.peak_pss_sum_bytes()) / (1 << 20))
          : "unknown (no tick read a process)";
  spdlog::info("{} {} in {:.1f} s; peak PSS sum {}; sampler {:.2f}% of a core", e_.id(),
               v1::ExperimentState_Name(state), r.wall_ms() / 1000, pss, r.sampler_cpu_percent());
}

// What the leader is started with, as the record keeps it: shoald's passed variables, where a
// command's ranks write profiler traces (this run's folder, whatever shoald inherited) and the
// run's control groups.
StatusOr<std::vector<std::string>> ExperimentRunner::RunEnvironment() {
  std::vector<std::string> environment = CleanEnvironment();
  environment.erase(
      std::remove_if(environment.begin(), environment.end(),
                     [](const std::string& kv) { return kv.rfind("SHOAL_PROFILE_DIR=", 0) == 0; }),
      environment.end());
  if (const std::string dir = ProfileDir(); !dir.empty())
    environment.push_back("SHOAL_PROFILE_DIR=" + dir);
  RETURN_IF_ERROR(EnterCgroup(&environment));
  for (const auto& kv : environment) {
    const size_t eq = kv.find('=');
    (*e_.mutable_environment())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return environment;
}

// The run's own control group, where one can be made: the leader is told it (SHOAL_CGROUP) and
// joins it before it starts anything, so every process of the run is in it however started.
Status ExperimentRunner::EnterCgroup(std::vector<std::string>* environment) {
  std::string why = env_.no_cgroup_why;
  if (env_.cgroups != nullptr) {
    auto dir = env_.cgroups->Create(e_.id());
    if (dir.ok()) {
      in_cgroup_ = true;
      for (std::string& kv : env_.cgroups->Environment(e_.id())) environment->push_back(kv);
      const std::string memory = env_.cgroups->memory();
      e_.set_containment("cgroup " + *dir + (memory.empty() ? "" : "; memory: " + memory));
      if (env_.memory_limit_bytes > 0)
        if (Status st = env_.cgroups->SetMemoryLimit(e_.id(), env_.memory_limit_bytes); !st.ok())
          return Internal("the run's memory limit could not be set: " + st.message());
      return Status::Ok();
    }
    why = dir.status().message();
  }
  e_.set_containment("process group and /proc (" + (why.empty() ? "no cgroup" : why) + ")");
  return Status::Ok();
}

// The kernel's figures of the run's group, read once every process has left it, which then goes.
void ExperimentRunner::ReadCgroupMemory() {
  if (!in_cgroup_) return;
  const RunMemory m = env_.cgroups->Memory(e_.id());
  if (m.peak_bytes) e_.mutable_result()->set_cgroup_memory_peak_bytes(*m.peak_bytes);
  if (m.oom_kills) e_.mutable_result()->set_oom_kills(*m.oom_kills);
  env_.cgroups->Remove(e_.id());
}

// Processes in the run's group that no walk of children found (a child of a worker's thread, one
// that left with setsid, a double fork's grandchild): the run's too, as "child" of the worker
// they descend from where their ancestry still says (-1 otherwise).
void ExperimentRunner::TrackCgroup(std::set<pid_t>* seen) {
  if (!in_cgroup_) return;
  constexpr size_t kMaxChildren = 1024;  // as the walk of children: a fork storm costs no more
  for (pid_t pid : env_.cgroups->Procs(e_.id())) {
    if (seen->size() >= kMaxChildren) break;
    auto known = facts_.procs.find(pid);
    if (known != facts_.procs.end()) {
      if (known->second.role() == "child") seen->insert(pid);
      continue;
    }
    if (pool_.count(pid)) continue;
    TrackChild(pid, AncestorIndex(pid));
    seen->insert(pid);
  }
}

// The index of the worker (or child) `pid` descends from, by its parents in /proc; -1 when its
// line of parents reaches none (it was orphaned and adopted elsewhere).
int ExperimentRunner::AncestorIndex(pid_t pid) {
  for (int hops = 0; hops < 32 && pid > 1; ++hops) {
    auto stat = env_.os.procfs->Read(pid, "stat");
    if (!stat.ok()) return -1;
    const size_t close = stat->rfind(')');
    if (close == std::string::npos) return -1;
    std::istringstream rest(stat->substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    rest >> state >> parent;
    auto p = facts_.procs.find(parent);
    if (p != facts_.procs.end() && (p->second.role() == "worker" || p->second.role() == "child"))
      return p->second.index();
    pid = parent;
  }
  return -1;
}

// A signal to every process of the run: its process group, and its control group (which holds
// those that left the group: setsid, a daemonised child); without one, each child it tracked that
// is still that process (one that left the process group with setsid, say).
void ExperimentRunner::SignalAll(int sig) {
  env_.os.proc->SignalGroup(facts_.leader, sig);
  if (in_cgroup_) {
    env_.cgroups->Signal(e_.id(), sig);
    return;
  }
  for (const auto& [pid, p] : facts_.procs)
    if (p.role() == "child" && p.alive() && StillTheChild(pid)) env_.os.proc->Signal(pid, sig);
}

bool ExperimentRunner::AllGone() {
  if (env_.os.proc->GroupExists(facts_.leader)) return false;
  if (in_cgroup_) return env_.cgroups->Procs(e_.id()).empty();
  for (const auto& [pid, p] : facts_.procs)
    if (p.role() == "child" && p.alive() && StillTheChild(pid)) return false;
  return true;
}

// Kind command: the folder its ranks write profiler traces to; "" for the other kinds or without
// a profiles folder.
std::string ExperimentRunner::ProfilePath() const {
  if (env_.profiles_dir.empty() || e_.spec().kind() != "command") return "";
  return env_.profiles_dir + "/" + e_.id();
}

// That folder, made private to this daemon's user before the ranks start.
std::string ExperimentRunner::ProfileDir() {
  const std::string dir = ProfilePath();
  if (dir.empty()) return "";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::filesystem::permissions(env_.profiles_dir, std::filesystem::perms::owner_all, ec);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  return ec ? "" : dir;
}

// What the ranks wrote there, by name; the folder goes when they wrote nothing.
void ExperimentRunner::GatherProfiles() {
  const std::string path = ProfilePath();
  if (path.empty()) return;
  const std::filesystem::path dir = path;
  std::error_code ec;
  std::vector<v1::ProfileTrace> found;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code size_ec;
    if (!it->is_regular_file(size_ec)) continue;
    v1::ProfileTrace t;
    t.set_name(std::filesystem::relative(it->path(), dir, size_ec).string());
    t.set_size_bytes(it->file_size(size_ec));
    found.push_back(std::move(t));
  }
  if (found.empty()) {
    std::filesystem::remove_all(dir, ec);
    return;
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
  e_.set_profile_dir(dir.string());
  for (auto& t : found) *e_.add_profile_traces() = std::move(t);
  AddEvent(std::to_string(found.size()) + " profiler trace(s) gathered in " + dir.string());
}

void ExperimentRunner::ReadCpuEnergy(uint64_t now) {
  if (env_.os.cpu_energy == nullptr) return;
  auto r = env_.os.cpu_energy->Read();
  if (!r.ok()) {
    cpu_energy_why_ = r.status().message();
    return;
  }
  cpu_energy_.Add(now, r->energy_uj, r->range_uj);
}

// The CPU packages' energy over the training window, and per sample (server/energy.h).
void ExperimentRunner::FillCpuEnergy() {
  v1::Result* r = e_.mutable_result();
  if (env_.os.cpu_energy == nullptr) {
    r->set_cpu_energy_status("CPU energy: not measured by this shoald");
    return;
  }
  const EnergyWindow::Figures f = cpu_energy_.Result(1e-6);
  if (!f.joules) {
    r->set_cpu_energy_status(!cpu_energy_why_.empty() ? cpu_energy_why_ : "CPU energy: " + f.why);
    return;
  }
  r->set_cpu_energy_j(*f.joules);
  r->set_cpu_power_mean_w(*f.watts);
  if (r->has_samples_per_sec() && r->samples_per_sec() > 0)
    r->set_cpu_joules_per_sample(*f.watts / r->samples_per_sec());
}

// What the rest of the machine did meanwhile (server/disturbance.h): read now that every process
// of the experiment has been reaped, its CPU time in its parents'.
// A GPU process of shoald's own (its forkserver and pool, another experiment's leftover child
// still exiting) is Shoal's, not the rest of the machine's: only those outside its tree disturb.
void ExperimentRunner::FillDisturbed() {
  std::optional<OutsideCpu> outside;
  std::set<pid_t> foreign = gpu_ ? gpu_->foreign_on_devices() : std::set<pid_t>{};
  if (env_.os.machine && machine_at_start_) {
    const CpuSnapshot end = TakeCpuSnapshot(*env_.os.machine, env_.os.clock->MonotonicNs());
    outside = OutsideOf(*machine_at_start_, end, env_.daemon_pid, uint64_t(::sysconf(_SC_CLK_TCK)));
    for (const CpuSnapshot* s : {static_cast<const CpuSnapshot*>(&*machine_at_start_), &end})
      for (pid_t p : ProcessTree(*s, env_.daemon_pid)) foreign.erase(p);
  }
  FillDisturbance(outside, foreign, env_.disturbed_cores, e_.mutable_result());
}

bool ExperimentRunner::AnyTraining() const {
  return std::any_of(phases_.begin(), phases_.end(),
                     [](const auto& kv) { return kv.second == uint32_t(ipc::v1::TRAINING); });
}

// The live record's process list stays current for `get`, with the peaks sampled so far (the
// final record's come from the same sampler).
void ExperimentRunner::LiveProcesses() {
  SamplerFigures f;
  TakePeaks(*sampler_, facts_.procs, &f);
  e_.clear_processes();
  for (const auto& [pid, known] : facts_.procs) {
    v1::ProcessInfo* p = e_.add_processes();
    *p = known;
    if (auto it = f.peak_pss.find(pid); it != f.peak_pss.end()) p->set_peak_pss_bytes(it->second);
    if (auto peak = gpu_->PeakOf(pid)) p->set_peak_gpu_memory_bytes(*peak);
  }
  SetHelperRows(f, &e_);
  v1::Result* r = e_.mutable_result();  // and the memory peaks so far (Finish writes the last)
  if (auto v = sampler_->peak_pss_sum()) r->set_peak_pss_sum_bytes(*v);
  if (auto v = sampler_->peak_rss_sum()) r->set_peak_rss_sum_bytes(*v);
  if (auto v = sampler_->peak_uss_sum()) r->set_peak_uss_sum_bytes(*v);
  if (auto v = sampler_->sum_of_peak_pss()) r->set_sum_of_peak_pss_bytes(*v);
}

void ExperimentRunner::FillGpu() {
  gpu_->Fill(e_.mutable_result());
  for (auto& p : *e_.mutable_processes())
    if (auto peak = gpu_->PeakOf(p.pid())) p.set_peak_gpu_memory_bytes(*peak);
}

void RunToEnd(ExperimentRunner& r, ChildReaper& reaper, const std::function<int()>& stop) {
  if (!r.Launch()) return;
  for (;;) {
    pollfd pfd[2] = {{r.leader_fd(), POLLIN, 0}, {r.log_fd(), POLLIN, 0}};
    if (pfd[0].fd < 0 && pfd[1].fd < 0) {
      ::usleep(2000);
    } else if (::poll(pfd, 2, 20) > 0) {  // a negative fd is ignored by poll
      if (pfd[1].revents != 0) r.OnLogReadable();
      if (pfd[0].revents != 0) {
        char chunk[65536];
        const ssize_t n = ::read(r.leader_fd(), chunk, sizeof chunk);
        if (n > 0) {
          r.OnBytes(chunk, size_t(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          r.OnEof();
        }
      }
    }
    reaper.Poll();
    if (int s = stop(); s != 0) r.RequestStop(s == 2);
    if (r.Advance()) return;
  }
}

}  // namespace shoal
