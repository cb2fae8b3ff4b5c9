#include "worker/supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "shared/os/process.h"
#include "worker/fork_server_exits.h"

namespace shoal {
namespace {

// Training, or evaluating its final weights: either may deadlock, and both mark progress.
bool Busy(const WorkerSlot& w) {
  const uint32_t phase = w.phase.load();
  return phase == static_cast<uint32_t>(WorkerPhase::kTraining) ||
         phase == static_cast<uint32_t>(WorkerPhase::kEvaluating);
}

}  // namespace

WorkerSupervisor::WorkerSupervisor(const v1::ExperimentSpec& spec, const Scoreboard& board,
                                   WorkerLauncher& launcher, ProcessControl& proc, Clock& clock,
                                   Hooks hooks)
    : spec_(spec),
      board_(board),
      launcher_(launcher),
      proc_(proc),
      clock_(clock),
      hooks_(std::move(hooks)) {}

std::string WorkerSupervisor::OomNote(int status) {
  const std::optional<uint64_t> before = hooks_.oom_kills_before;
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL || !before || !hooks_.oom_kills)
    return "";
  const std::optional<uint64_t> now = hooks_.oom_kills();
  if (!now || *now <= *before) return "";
  // The count is the machine's: another process's OOM kill in the same window would count too.
  return " (likely out of memory: the kernel's OOM killer killed " +
         std::to_string(*now - *before) + " process(es) on this machine during this experiment)";
}

std::string WorkerSupervisor::Run(std::map<pid_t, uint32_t> live,
                                  std::vector<uint64_t> requested_mono, std::string failure) {
  Begin(std::move(live), std::move(requested_mono), std::move(failure));
  while (!Advance()) std::this_thread::sleep_for(std::chrono::milliseconds(kLookEveryMs));
  return failure_;
}

void WorkerSupervisor::Begin(std::map<pid_t, uint32_t> live, std::vector<uint64_t> requested_mono,
                             std::string failure) {
  live_ = std::move(live);
  requested_mono_ = std::move(requested_mono);
  next_report_ns_ = last_report_ns_ = clock_.MonotonicNs();  // the first look reports
  if (!failure.empty()) StopAll(failure);
}

bool WorkerSupervisor::Advance() {
  if (!done_) TakeStopSignal();  // before the exits: a cancel's SIGTERM kills workers too
  if (done_ || live_.empty() || !CollectExits() || live_.empty()) return done_ = true;
  const uint64_t now = clock_.MonotonicNs();
  const bool changed = PhaseChanged();  // first: a phase change is progress (NoProgress)
  if (changed) phase_changed_ns_ = now;
  if (!stopping_) CheckStalls(now);
  if (stopping_ && now >= kill_at_ns_) {
    for (auto& [p, i] : live_) Signal(p, SIGKILL);
  }
  // Phase changes are sampled at once, and a step plan being traced every kTracingReportMs.
  const uint64_t tracing_due = last_report_ns_ + uint64_t(kTracingReportMs) * 1000000;
  if (now >= next_report_ns_ || changed || (Tracing(board_) && now >= tracing_due)) {
    hooks_.progress();
    next_report_ns_ = now + uint64_t(spec_.sample_interval_ms()) * 1000000;
    last_report_ns_ = now;
  }
  return false;
}

bool WorkerSupervisor::CollectExits() {
  std::vector<WorkerLauncher::Exit> ended;
  Status polled = launcher_.Poll(&ended);
  if (!polled.ok()) {
    // The forkserver went away; its workers die with it (PR_SET_PDEATHSIG).
    StopAll("lost the forkserver: " + polled.message());
    for (auto& [p, i] : live_) Signal(p, SIGKILL);
    return false;
  }
  // A worker killed by a signal is the cause when its peers fail in the same poll (data_parallel's
  // replicas throw as soon as one is gone): report it first.
  std::stable_partition(ended.begin(), ended.end(),
                        [](const WorkerLauncher::Exit& x) { return WIFSIGNALED(x.status); });
  for (const auto& x : ended) {
    auto it = live_.find(x.pid);
    if (it == live_.end()) continue;
    ipc::v1::WorkerExited e;
    e.set_index(it->second);
    e.set_pid(x.pid);
    e.set_wait_status(x.status);
    live_.erase(it);
    exits_.push_back(e);
    hooks_.exited(e);
    if (!(WIFEXITED(x.status) && WEXITSTATUS(x.status) == 0)) {
      std::string why = SlotError(*board_.slot(e.index()));
      if (why.empty() && spec_.start() == "forkserver") why = ForkServerChildWhy(x.status);
      StopAll("worker " + std::to_string(e.index()) + " " + DescribeWaitStatus(x.status) +
              OomNote(x.status) + (why.empty() ? "" : ": " + why));
    }
  }
  return true;
}

void WorkerSupervisor::CheckStalls(uint64_t t) {
  for (auto& [p, i] : live_) {
    const WorkerSlot* w = board_.slot(i);
    if (w->phase.load() == static_cast<uint32_t>(WorkerPhase::kFinished)) continue;
    const uint64_t requested = i < requested_mono_.size() ? requested_mono_[i] : 0;
    if (std::string why = Stalled(*w, requested, t); !why.empty()) {
      Signal(p, SIGKILL);  // a stopped or wedged process does not act on SIGTERM
      StopAll("worker " + std::to_string(i) + " " + why);
      return;
    }
  }
  if (NoProgress(t)) {
    std::string steps;
    for (auto& [p, i] : live_) {
      if (!Busy(*board_.slot(i))) continue;
      Signal(p, SIGKILL);  // a deadlocked process may never act on SIGTERM
      steps += (steps.empty() ? "" : ", ") + std::string("worker ") + std::to_string(i) + ": " +
               std::to_string(board_.slot(i)->steps.load()) + LastMoved(*board_.slot(i), t);
    }
    const std::string why = StepBoundWhy();
    StopAll("no worker made progress for " + std::to_string(StepBoundMs()) + " ms" +
            (why.empty() ? "" : " (" + why + ")") +
            " while training (a step, batch or evaluation that does not end: a deadlock, or "
            "work slower than --step-timeout-ms); steps so far (the one that stopped first last "
            "moved longest ago): " +
            steps);
  }
}

// " (last moved 8012 ms ago)": the others wait on the one stuck, so they stop after it.
std::string WorkerSupervisor::LastMoved(const WorkerSlot& w, uint64_t t) {
  const uint64_t moved = w.progress_ns.load(std::memory_order_relaxed);
  if (moved == 0) return " (never moved)";
  return " (last moved " + std::to_string((t - std::min(t, moved)) / 1000000) + " ms ago)";
}

// No heartbeat: the process is stopped, or its heartbeat thread is not scheduled.
std::string WorkerSupervisor::Stalled(const WorkerSlot& w, uint64_t requested, uint64_t t) const {
  if (spec_.stall_timeout_ms() == 0) return "";  // the user turned stall detection off
  const uint64_t beat = std::max(w.heartbeat_ns.load(), requested);
  if (t <= beat + uint64_t(spec_.stall_timeout_ms()) * 1000000ull) return "";
  return "stalled (no heartbeat for " + std::to_string(spec_.stall_timeout_ms()) + " ms)";
}

// Alive but not moving, judged over the whole run: workers wait on each other (a pipeline's
// stages, replicas in an all-reduce, a trainer on its loaders, hogwild's peers at an epoch's end),
// so a worker that is only waiting is not at fault, and a worker deadlocked inside a step stops
// every other one soon after. True when no training worker has marked progress (MarkProgress)
// for step_timeout_ms since this supervisor first saw one training, and no worker changed phase
// since: one that starts training after waiting its turn (multi_model's variants), or evaluates
// after waiting for its peers, has not moved yet but is not stuck.
void WorkerSupervisor::MeasureSteps() {
  for (auto& [p, i] : live_) {
    const uint64_t moved = board_.slot(i)->progress_ns.load(std::memory_order_relaxed);
    uint64_t& last = last_progress_[i];
    if (moved == last) continue;
    if (last != 0 && moved > last) slowest_step_ns_ = std::max(slowest_step_ns_, moved - last);
    last = moved;
  }
}

uint64_t WorkerSupervisor::StepBoundMs() const {
  const uint64_t given = spec_.step_timeout_ms();
  if (spec_.step_timeout_why() != "the default") return given;
  if (slowest_step_ns_ == 0) return std::min(given, kFirstStepBoundMs);
  const uint64_t derived = kMeasuredStepFactor * slowest_step_ns_ / 1000000;
  return std::clamp<uint64_t>(derived, std::min(kMeasuredStepFloorMs, given), given);
}

std::string WorkerSupervisor::StepBoundWhy() const {
  if (spec_.step_timeout_why() != "the default") return spec_.step_timeout_why();
  if (slowest_step_ns_ == 0)
    return "the default until a step is measured, at most " +
           std::to_string(kFirstStepBoundMs / 1000) + " s; --step-timeout-ms gives another";
  char text[160];
  std::snprintf(text, sizeof text,
                "derived: %llux the slowest step seen, %.1f ms, at least %llu s; "
                "--step-timeout-ms gives another",
                static_cast<unsigned long long>(kMeasuredStepFactor), slowest_step_ns_ / 1e6,
                static_cast<unsigned long long>(kMeasuredStepFloorMs / 1000));
  return text;
}

bool WorkerSupervisor::NoProgress(uint64_t t) {
  if (spec_.step_timeout_ms() == 0) return false;
  MeasureSteps();
  uint64_t latest = 0;
  bool training = false;
  for (auto& [p, i] : live_) {
    const WorkerSlot* w = board_.slot(i);
    if (!Busy(*w)) continue;
    training = true;
    latest = std::max(latest, w->progress_ns.load(std::memory_order_relaxed));
  }
  if (!training) return false;
  if (training_seen_ns_ == 0) training_seen_ns_ = t;
  const uint64_t since = std::max({latest, training_seen_ns_, phase_changed_ns_});
  return t > since + StepBoundMs() * 1000000ull;
}

bool WorkerSupervisor::PhaseChanged() {
  bool changed = false;
  phases_.resize(size_t(board_.header()->workers));
  for (uint32_t i = 0; i < phases_.size(); ++i) {
    const uint32_t p = board_.slot(i)->phase.load(std::memory_order_relaxed);
    changed = changed || p != phases_[i];
    phases_[i] = p;
  }
  return changed;
}

void WorkerSupervisor::Signal(pid_t pid, int sig) { proc_.Signal(pid, sig); }

// Told to stop (a cancel, shoald's shutdown or death): SIGKILL, as the whole group got from the
// leader before it read the figures at the stop (issue 58's cancelled Slurm run counted 0 steps).
void WorkerSupervisor::TakeStopSignal() {
  if (stop_signal_ != 0 || !hooks_.stop_signal) return;
  const int sig = stop_signal_ = hooks_.stop_signal();
  if (sig == 0) return;
  const char* name = ::sigabbrev_np(sig);
  // Already stopping (a worker failed): that stays the reason, but nobody waits out its grace.
  StopAll("stopped by signal " + std::to_string(sig) +
          (name ? std::string(" (SIG") + name + ")" : ""));
  for (auto& [p, i] : live_) Signal(p, SIGKILL);
}

void WorkerSupervisor::StopAll(const std::string& why) {
  if (stopping_) return;
  failure_ = why;
  stopping_ = true;
  for (auto& [p, i] : live_) Signal(p, SIGTERM);
  kill_at_ns_ = clock_.MonotonicNs() + kKillGraceNs;
}

}  // namespace shoal
