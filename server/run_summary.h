// Pure functions that turn what an experiment's processes reported (the leader's typed events,
// the sampler's figures, the exits the kernel gave) into its result, process list and end state.
// No clock, no OS: unit-tested on made-up reports.
#pragma once

#include <sys/types.h>

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "shoal/ipc/v1/ipc.pb.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct SamplerFigures {
  // Absent when no tick read a process (the run ended before the first).
  std::optional<uint64_t> peak_pss_sum, peak_rss_sum, peak_uss_sum, sum_of_peak_pss;
  uint64_t cpu_ns = 0, smaps_reads = 0, statm_reads = 0;
  std::map<pid_t, uint64_t> peak_pss;  // per process
  // Sampled but not the experiment's (the forkserver, "forkserver", and its idle children, "pool"):
  // their pages are shared with its workers, and their peaks are in sum_of_peak_pss.
  std::map<pid_t, std::string> helpers;
  std::map<pid_t, uint64_t> peak_gpu;  // per process seen on a GPU (NVML)
};

struct RunFacts {
  v1::ExperimentSpec spec;
  uint64_t start_real_ns = 0;  // the experiment left the queue (CLOCK_REALTIME)
  uint64_t wall_ns = 0;        // left the queue -> every process gone
  pid_t leader = -1;
  bool leader_exited = false;
  int leader_status = 0;
  std::map<pid_t, v1::ProcessInfo> procs;     // leader and workers, exits filled in as they came
  std::optional<ipc::v1::Progress> progress;  // the latest
  std::optional<ipc::v1::LeaderResult> result;
  std::map<std::string, uint64_t> segments;  // what -> bytes
  std::string leader_error;                  // what the leader said went wrong
  std::string leader_program, leader_why;    // which program led it, and why (ChooseLeader)
  std::string runtime_error;                 // what the runner saw go wrong
  bool cancelled = false, interrupted = false, group_gone = true;
  SamplerFigures sampler;
};

// The workers' reports: the final ones when the leader sent a result, else the latest progress.
const google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>* WorkerReadings(const RunFacts& f);

// fork_server_processes: the forkserver's processes sampled with the run (f.helpers), with pid,
// role and peak PSS, so that the process table adds up to the sum of peak PSS.
void SetHelperRows(const SamplerFigures& f, v1::Experiment* e);

// Fills every figure of the result that the facts determine; leaves unknown ones absent.
void FillResult(const RunFacts& f, v1::Result* r);
// Per-epoch figures: for each epoch the slowest worker's times, losses over all workers; its data
// and training split only where `phases_timed` (not cuda_sync step).
void FillEpochs(const google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>& workers,
                bool phases_timed, v1::Result* r);
// The final process list (ready/start times, steps, losses, peaks, exits, checksums).
void FillProcesses(const RunFacts& f, v1::Experiment* e);
// A worker's process record from its report: ready/start times, steps, last loss, peak RSS and
// (once finished) its weights' fingerprint. Used live and at the end.
// When the worker was up and ready to train: its first step, or earlier where it then waits
// (multi_model's workers, one variant at a time); 0 before either.
uint64_t ReadyNs(const ipc::v1::WorkerReading& w);
void ApplyWorkerReading(const ipc::v1::WorkerReading& w, uint64_t start_real_ns,
                        v1::ProcessInfo* p);
// Marks a process ended with a waitpid status.
void RecordExit(v1::ProcessInfo* p, int wait_status);
// How it ended: succeeded only if the leader exited 0 with an ok result and the group is gone.
std::pair<v1::ExperimentState, std::string> FinalState(const RunFacts& f);

struct LiveFigures {
  uint64_t steps = 0, samples = 0;
  std::optional<double> loss;  // mean of the workers' last losses
};
LiveFigures Live(const ipc::v1::Progress& p);

// The live rate of a growing count (steps, samples), fed at each tick: an exponential average of
// each tick's increase per second, 0.3 the newest; unknown until a second tick gives an increase.
// A live rate of a count fed every tick: the rise between its first and last change within the
// last 10 s (at least its last two changes) over the time between them, so that steps longer
// than a tick read steadily (200 ms ticks against 2.5 s steps swung from 2.8 to 340 per second
// with a per-tick average, where the run's rate was 25). Once the count has stood still for
// longer than its mean interval, the time since the last change counts too: a stall shows as a
// falling rate. Unknown until the count has changed twice.
class LiveRate {
 public:
  void Feed(uint64_t count, uint64_t now_ns);
  std::optional<double> per_sec() const;

 private:
  std::optional<uint64_t> last_;
  uint64_t now_ns_ = 0;
  std::deque<std::pair<uint64_t, uint64_t>> changes_;  // (when, count) as it changed
};

}  // namespace shoal
