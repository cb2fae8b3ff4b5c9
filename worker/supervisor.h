// The leader's watch over its workers: collects their exits, detects stalls (no heartbeat for
// stall_timeout_ms on the monotonic clock) and runs that make no progress (no training worker
// steps for step_timeout_ms), and stops everyone at the first failure (SIGTERM,
// then SIGKILL after a grace period). Its clock and its signals go through the OS seams
// (shared/os/os_seams.h), so its tests drive it on a fake clock, look by look, as shoald's
// runner's do.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared/os/os_seams.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "shoal/v1/shoal.pb.h"
#include "worker/launchers.h"
#include "worker/scoreboard.h"

namespace shoal {

constexpr uint64_t kMeasuredStepFactor = 100;
constexpr uint64_t kMeasuredStepFloorMs = 30000;
// Until a step is measured: a hang in the first step fails the run in 10 minutes, not the spec's
// half-hour default (issue 58); a first step slower than that needs --step-timeout-ms.
constexpr uint64_t kFirstStepBoundMs = 600000;

// How often the leader reports while a worker traces a step plan.
constexpr int kTracingReportMs = 20;

// A worker is tracing a step plan (--allocator planned): its traced step's buffers, each in a
// mapping of its own, rise and fall within a second, above what its replayed steps hold; or a
// model file's worker runs its warm-up passes (worker/model_file.cc), likewise; or the plan of
// the shared arenas (worker/shared_arenas.h) is being made.
inline bool Tracing(const Scoreboard& board) {
  const BoardHeader& h = *board.header();
  if (h.arenas_state.load(std::memory_order_relaxed) == uint32_t(ArenasState::kMaking)) return true;
  for (uint32_t i = 0; i < h.workers; ++i)
    if (board.slot(i)->tracing_step.load(std::memory_order_relaxed) != 0) return true;
  return false;
}

class WorkerSupervisor {
 public:
  struct Hooks {
    std::function<void(const ipc::v1::WorkerExited&)> exited;
    std::function<void()> progress;  // every sample interval
    // The kernel's count of OOM kills now (ReadOomKills), and before the first worker started;
    // unset or nullopt: not known.
    std::function<std::optional<uint64_t>()> oom_kills;
    std::optional<uint64_t> oom_kills_before;
    // A signal the leader was told to stop by (a cancel's SIGTERM), 0 while none: the workers
    // are killed at once and the run ends with its figures read at that moment.
    std::function<int()> stop_signal;
  };
  // SIGTERM first; SIGKILL to whoever is left this long after.
  static constexpr uint64_t kKillGraceNs = 3'000'000'000ull;
  // How long Run waits between looks (real time).
  static constexpr int kLookEveryMs = 5;

  // `proc` signals the workers; `clock` is the monotonic clock their slots' heartbeats and
  // progress are read on (RealClock in the leader, where the workers write MonotonicNs()).
  WorkerSupervisor(const v1::ExperimentSpec& spec, const Scoreboard& board,
                   WorkerLauncher& launcher, ProcessControl& proc, Clock& clock, Hooks hooks);

  // Watches workers (pid -> index, requested at requested_mono[index]) until all have ended:
  // Begin, then Advance every kLookEveryMs. `failure` non-empty: stop them at once. Returns the
  // first failure, "" when there was none.
  std::string Run(std::map<pid_t, uint32_t> live, std::vector<uint64_t> requested_mono,
                  std::string failure);
  // Run's parts, for a driver of its own (a test's, on a fake clock).
  void Begin(std::map<pid_t, uint32_t> live, std::vector<uint64_t> requested_mono,
             std::string failure);
  // One look: exits, stalls, progress, the report, the grace's SIGKILL. True once every worker
  // has ended (or the launcher lost them).
  bool Advance();
  const std::string& failure() const { return failure_; }
  const std::vector<ipc::v1::WorkerExited>& exits() const { return exits_; }

 private:
  bool CollectExits();  // false when the launcher lost track of the workers
  void CheckStalls(uint64_t t);
  void TakeStopSignal();
  // Why worker `w` is stalled at monotonic time `t` ("" when it is not).
  std::string Stalled(const WorkerSlot& w, uint64_t requested, uint64_t t) const;
  static std::string LastMoved(const WorkerSlot& w, uint64_t t);
  bool NoProgress(uint64_t t);
  // A run not given --step-timeout-ms (its bound "the default") is held, once a worker has
  // moved twice, to kMeasuredStepFactor times the slowest interval between one worker's two
  // progress marks seen so far, at least kMeasuredStepFloorMs and at most the default: a step
  // that hangs fails the run in minutes, not half an hour. Before, to kFirstStepBoundMs.
  void MeasureSteps();
  uint64_t StepBoundMs() const;
  std::string StepBoundWhy() const;
  void StopAll(const std::string& why);
  void Signal(pid_t pid, int sig);
  bool PhaseChanged();  // a worker started training or finished since the last look
  // " (out of memory: ...)" when a SIGKILL that Shoal did not send came with an OOM kill.
  std::string OomNote(int status);

  const v1::ExperimentSpec& spec_;
  const Scoreboard& board_;
  WorkerLauncher& launcher_;
  ProcessControl& proc_;
  Clock& clock_;
  Hooks hooks_;
  std::map<pid_t, uint32_t> live_;
  std::vector<uint64_t> requested_mono_;
  bool done_ = false;
  std::vector<ipc::v1::WorkerExited> exits_;
  std::string failure_;
  bool stopping_ = false;
  int stop_signal_ = 0;  // the leader's stop signal, once acted on
  std::vector<uint32_t> phases_;
  uint64_t training_seen_ns_ = 0;               // monotonic, when a worker was first seen training
  uint64_t phase_changed_ns_ = 0;               // monotonic, when a worker's phase last changed
  std::map<uint32_t, uint64_t> last_progress_;  // each worker's progress mark at the last look
  uint64_t slowest_step_ns_ = 0;  // between two of one worker's marks (0: none measured yet)
  uint64_t kill_at_ns_ = 0;       // monotonic: SIGKILL whoever is left (once stopping)
  uint64_t next_report_ns_ = 0, last_report_ns_ = 0;
};

}  // namespace shoal
