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

namespace shoal {

struct CoordinatorOptions {
  std::string worker_bin;  // shoal-worker
  SpecLimits limits;
  SamplerOptions sampler;
  int grace_ms = 3000;  // SIGTERM -> SIGKILL
};

bool IsTerminal(v1::ExperimentState s);

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

 private:
  void SchedulerLoop();
  void Run(const std::string& id);
  void Update(const v1::Experiment& e);  // store + live copy
  void Publish(const std::string& id, v1::WatchEvent ev);
  void AddEvent(const std::string& id, double t_ms, const std::string& text);

  CoordinatorOptions opts_;
  Store* store_;
  TelemetryHub* hub_;
  ProcReader* proc_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::map<std::string, v1::Experiment> live_;  // queued and running
  std::string running_;
  bool cancel_running_ = false;
  bool stopping_ = false;
  std::thread scheduler_;
};

}  // namespace shoal
