// One running experiment: launches its leader, reads the leader's typed events, samples its
// processes, and takes it to an end state through a small state machine:
//
//   running --stop requested--> stopping (SIGTERM to the group) --grace over--> killed (SIGKILL)
//      \__________________________|__________________________________|
//                leader exited and its pipe closed                    v
//                                                       draining (SIGKILL until the group is
//                                                       empty, at most 10 s) --> done
//
// Every OS action goes through the seams in RunnerEnv, so each transition is unit-tested on
// fakes (tests/runner_test.cc); RunToEnd drives it with a real pipe and the child reaper.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "server/child_reaper.h"
#include "server/daemon_seams.h"
#include "server/disturbance.h"
#include "server/energy.h"
#include "server/gpu_sampler.h"
#include "server/log_capture.h"
#include "server/run_cgroup.h"
#include "server/run_summary.h"
#include "server/sample_keeper.h"
#include "server/sampler.h"
#include "shared/ipc/ipc_codec.h"
#include "shared/os/os_seams.h"
#include "shared/os/procfs.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// What a runner is given: the daemon's seams (the same bundle the Coordinator holds), the
// reaper they feed, and the daemon's settings for a run.
struct RunnerEnv {
  DaemonSeams os;
  ChildReaper* reaper = nullptr;
  double disturbed_cores = kDisturbedCores;  // shoald --disturbed-cores
  ProcessSampler::CpuClock sampler_cpu;      // CPU time of the sampling thread
  SamplerOptions sampler;
  uint64_t grace_ns = 3'000'000'000ull;   // SIGTERM -> SIGKILL
  uint64_t drain_ns = 10'000'000'000ull;  // SIGKILL -> give up on the group (D state)
  std::string worker_bin, leader_bin, fork_server_socket;
  std::string logs_dir;  // where each run's output is kept (LogCapture); empty: not captured
  // Kind command: each run's ranks are told (SHOAL_PROFILE_DIR) to write their torch.profiler
  // traces to profiles_dir/ID, gathered into the record when it ends; empty: not offered.
  std::string profiles_dir;
  // A control group per run (run_cgroup.h); nullptr: none could be made, for `no_cgroup_why`.
  RunCgroups* cgroups = nullptr;
  std::string no_cgroup_why;
  uint64_t memory_limit_bytes = 0;  // each run's group's memory limit (shoald's); 0: none
  pid_t daemon_pid = 0;
  std::function<pid_t()> fork_server_pid;  // sampled with forkserver runs; -1 when none
  // How the forkserver last ended ("killed by signal 9"), once; empty when it has not. A
  // forkserver run reports it as an event: its workers' parent died under it.
  std::function<std::string()> fork_server_exit;
};

constexpr uint64_t kMaxKeptSamples = 512;  // per experiment, in the store

struct RunnerHooks {
  std::function<void(const v1::Experiment&)> update;  // the record changed (store + live copy)
  std::function<void(const v1::Experiment&)> live;    // the live copy only (every tick)
  // The live copy, stored (after a process starts, and every few seconds): may be empty.
  std::function<void(const v1::Experiment&)> checkpoint;
  std::function<void(const v1::Sample&)> sample;  // a tick's figures, to keep
  std::function<void()> thin_samples;             // halve what was kept (every other sample goes)
  std::function<void(const v1::WatchEvent&)> publish;
  std::function<void(double t_ms, const std::string& text)> event;
};

class ExperimentRunner {
 public:
  enum class Phase { kIdle, kRunning, kStopping, kKilled, kDraining, kDone };

  ExperimentRunner(v1::Experiment e, RunnerEnv env, RunnerHooks hooks);
  ~ExperimentRunner();

  // Marks it running and spawns the leader; false when it could not (it has then ended).
  bool Launch();
  int leader_fd() const { return fd_; }
  // The captured output's pipe (-1 when not captured) and what to do when it is readable.
  int log_fd() const { return log_ ? log_->read_fd() : -1; }
  void OnLogReadable() {
    if (log_) log_->Drain();
  }
  void OnBytes(const char* data, size_t n);
  void OnEof();
  // Cancel (shutdown false) or shoald stopping (true). Idempotent.
  void RequestStop(bool shutdown);
  // Acts on the clock: sample ticks, deadlines, the group's end. True once it is done.
  bool Advance();

  Phase phase() const { return phase_; }
  const v1::Experiment& experiment() const { return e_; }
  uint64_t next_tick_ns() const { return next_tick_; }

 private:
  void HandleEvent(const ipc::v1::LeaderEvent& ev);
  void OnWorkerStarted(const ipc::v1::WorkerStarted& w);
  void AnnounceFirstSteps(const ipc::v1::WorkerReading& w);
  void OnWorkerExit(pid_t pid, int status);
  void OnLeaderExit(int status);
  void Tick(uint64_t now);
  void TrackForkServerPool();
  void TrackDescendants();
  void AdoptLeadersStrangers(std::set<pid_t>* seen, std::vector<std::pair<pid_t, int>>* frontier);
  std::vector<pid_t> ChildrenOf(pid_t parent);
  void TrackChild(pid_t pid, int index);
  bool StillTheChild(pid_t pid);
  void StartClocks();
  void OpenLog(std::vector<std::pair<int, int>>* fd_map);
  bool AnyTraining() const;
  void FillGpu();
  void FillDisturbed();
  void ReadCpuEnergy(uint64_t now);
  void FillCpuEnergy();
  void LiveProcesses();
  void StartDraining(uint64_t now);
  void Finish();
  std::string ProfilePath() const;
  std::string ProfileDir();
  StatusOr<std::vector<std::string>> RunEnvironment();
  Status EnterCgroup(std::vector<std::string>* environment);
  void TrackCgroup(std::set<pid_t>* seen);
  int AncestorIndex(pid_t pid);
  void SignalAll(int sig);
  bool AllGone();
  bool in_cgroup_ = false;
  // Without a cgroup: the leader's children it has not reported (workers it is starting, or
  // orphans it adopted), and each tracked child's start time (a pid is reused once reaped).
  std::set<pid_t> leader_strangers_;
  std::map<pid_t, uint64_t> child_started_;
  void ReadCgroupMemory();
  void GatherProfiles();
  void AddEvent(const std::string& text);
  void PublishState();
  double TMs() const;

  v1::Experiment e_;
  RunnerEnv env_;
  RunnerHooks hooks_;
  Phase phase_ = Phase::kIdle;
  RunFacts facts_;
  std::unique_ptr<ProcessSampler> sampler_;
  std::unique_ptr<GpuSampler> gpu_;
  std::unique_ptr<LogCapture> log_;
  FrameReader frames_;
  int fd_ = -1;
  bool eof_ = false;
  bool stop_requested_ = false;
  uint64_t start_mono_ = 0, next_tick_ = 0, deadline_ = 0;
  uint64_t last_checkpoint_ = 0;
  bool checkpoint_due_ = false;  // a process started, or a worker changed phase, since
  LiveRate steps_rate_, samples_rate_;
  std::map<uint32_t, bool> announced_ready_, announced_stepped_;
  std::map<uint32_t, uint32_t> phases_;          // each worker's phase at the last progress
  std::set<pid_t> pool_;                         // the forkserver's idle children being sampled
  std::optional<CpuSnapshot> machine_at_start_;  // the disturbance meter's first reading
  EnergyWindow cpu_energy_;                      // the CPU packages' over training ticks
  std::string cpu_energy_why_;                   // the last reason a reading failed
  SampleKeeper keeper_{hooks_.sample, hooks_.thin_samples, kMaxKeptSamples};
};

// Launches and drives the runner to its end: reads the leader's pipe, polls the reaper, asks
// `stop()` each round whether to stop (and how), advances the state machine.
void RunToEnd(ExperimentRunner& r, ChildReaper& reaper,
              const std::function<int()>& stop);  // 0 none, 1 cancel, 2 shutdown

}  // namespace shoal
