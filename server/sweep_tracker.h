// Sweeps sit above the queue: a sweep's points are submitted to the queue as experiments, and the
// tracker learns of their state changes by listening to the queue. Each sweep is stored after
// every change of one of its points.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "server/experiment_queue.h"
#include "server/store.h"
#include "shared/spec/spec.h"
#include "shared/spec/sweep.h"
#include "shared/status.h"

namespace shoal {

class SweepTracker {
 public:
  using Admit = std::function<Status(const v1::ExperimentSpec&)>;
  using NewId = std::function<std::string(const char* prefix)>;
  SweepTracker(Store* store, ExperimentQueue* queue, NewId new_id);

  // Where a sweep's points run when not here (a Slurm array): `place` before they are stored
  // (it may fill their records in), `placed` after, told whether they were stored (if not,
  // whatever was placed must be undone).
  struct Placement {
    std::function<Status(v1::Sweep*, std::vector<v1::Experiment>*)> place;
    std::function<void(const v1::Sweep&, const std::vector<v1::Experiment>&, bool stored)> placed;
  };
  // Expands the grid, admits every runnable point (unless forced), stores it and queues it here,
  // or with a placement adopts it (the queue keeps it live but never runs it).
  StatusOr<std::string> Submit(const v1::SweepSpec& spec, const std::string& submitter,
                               const SpecLimits& limits, const Admit& admit,
                               const Placement* elsewhere = nullptr);
  StatusOr<v1::SweepReport> Get(const std::string& id);
  StatusOr<std::vector<v1::Sweep>> List();
  StatusOr<v1::Sweep> Cancel(const std::string& id);
  // Deletes an ended sweep and its points' experiments; returns how many experiments went.
  StatusOr<uint32_t> Delete(const std::string& id);

  // Sweeps as the store had them (recovery has brought them up to date).
  void Restore(const std::vector<v1::Sweep>& sweeps);
  // A queue listener: mirrors an experiment's state into its sweep's point.
  void OnExperiment(const v1::Experiment& e);
  // Runs `fn` with the sweep's saves held: the changes of its points that `fn` makes are kept in
  // memory and the sweep is stored once, after. A Slurm poll that starts or ends 1,000 tasks
  // would otherwise rewrite a 10,000-point record 1,000 times.
  void WithSavesHeld(const std::string& id, const std::function<void()>& fn);

 private:
  Store* store_;
  ExperimentQueue* queue_;
  NewId new_id_;
  void Save(const v1::Sweep& sw);  // under mu_
  // Under mu_: marks the queued points that need more memory than `failed` skipped; returns their
  // experiments, for the caller to cancel once it has let go of the lock.
  std::vector<std::string> SkipAfterOom(v1::Sweep& sw, const v1::SweepPoint& failed);
  std::mutex mu_;
  std::map<std::string, v1::Sweep> sweeps_;
  // Sweeps whose saves are held (Cancel stopping their points, WithSavesHeld): their points'
  // changes are kept in memory and the sweep stored once after (a write per point would rewrite a
  // 1,000-point record 1,000 times).
  std::multiset<std::string> held_;
  std::set<std::string> changed_;  // held sweeps whose points changed meanwhile
};

// A queued record for a spec, submitted at `submitted_ms`.
v1::Experiment NewExperimentRecord(const std::string& id, const v1::ExperimentSpec& spec,
                                   int64_t submitted_ms);

}  // namespace shoal
