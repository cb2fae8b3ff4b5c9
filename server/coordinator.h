// The daemon's domain core: validates and queues experiments, runs one at a time (the machine
// is the instrument), launches each experiment's leader with posix_spawn, samples its processes,
// and records everything. Knows nothing of gRPC.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/sampler.h"
#include "server/store.h"
#include "server/telemetry_hub.h"
#include "shared/spec.h"
#include "shared/status.h"
#include "shared/sweep.h"

namespace shoal {

struct CoordinatorOptions {
  std::string worker_bin;  // shoal-worker
  SpecLimits limits;
  SamplerOptions sampler;
  int grace_ms = 3000;        // SIGTERM -> SIGKILL
  std::string zygote_socket;  // where the fork-server listens
  uint32_t fork_server_pool = 16;
};

class Coordinator {
 public:
  Coordinator(CoordinatorOptions opts, Store* store, TelemetryHub* hub, ProcReader* proc);
  ~Coordinator();

  // Marks what was running when a previous daemon died as interrupted, removes segments no live
  // experiment owns, and queues again what was queued. Call before Start().
  Status Recover();
  void Start();
  // Stops the running experiment (it ends `interrupted`) and the scheduler.
  void Shutdown();

  StatusOr<std::string> Submit(v1::ExperimentSpec spec);
  StatusOr<v1::Experiment> Get(const std::string& id);
  StatusOr<std::vector<v1::Experiment>> List();
  StatusOr<v1::Experiment> Cancel(const std::string& id);
  // A grid of experiments, queued in grid order; see shared/sweep.h.
  StatusOr<std::string> SubmitSweep(const v1::SweepSpec& spec);
  StatusOr<v1::SweepReport> GetSweep(const std::string& id);
  StatusOr<std::vector<v1::Sweep>> ListSweeps();
  StatusOr<v1::Sweep> CancelSweep(const std::string& id);

  pid_t fork_server_pid() const { return zygote_pid_.load(); }
  int fork_server_restarts() const { return zygote_restarts_.load(); }

 private:
  void SchedulerLoop();
  void Run(const std::string& id);
  void Update(const v1::Experiment& e);  // store + live copy (+ its sweep point)
  // Mirrors an experiment's state into its sweep's point and persists the sweep.
  void SweepPointChanged(const v1::Experiment& e);
  v1::Experiment NewExperiment(const v1::ExperimentSpec& spec, int64_t submitted_ms);
  void Publish(const std::string& id, v1::WatchEvent ev);
  void AddEvent(const std::string& id, double t_ms, const std::string& text);
  // Starts the fork-server if it is not running (at most once a second). Scheduler thread only.
  void EnsureZygote();
  // Reaps children that are not part of a running experiment (the zygote). Scheduler thread only.
  void ReapIdle();
  void StopZygote();

  CoordinatorOptions opts_;
  Store* store_;
  TelemetryHub* hub_;
  ProcReader* proc_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::map<std::string, v1::Experiment> live_;  // queued and running
  std::string running_;
  std::map<std::string, v1::Sweep> sweeps_;
  bool cancel_running_ = false;
  bool stopping_ = false;
  std::thread scheduler_;
  std::atomic<pid_t> zygote_pid_{-1};  // written by the scheduler thread only
  uint64_t zygote_started_ns_ = 0;
  std::atomic<int> zygote_restarts_{0};
};

}  // namespace shoal
