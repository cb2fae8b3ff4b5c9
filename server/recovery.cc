#include "server/recovery.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "server/sweep_tracker.h"
#include "shared/os/process.h"
#include "shared/os/shm.h"
#include "shared/spec/sweep.h"
#include "spdlog/spdlog.h"

namespace shoal {
namespace {

// Fixes the records of experiments; returns those still queued.
Status RecoverExperiments(Store* store, std::vector<v1::Experiment>& all,
                          const std::set<std::string>& cancelled, SegmentJanitor* segments,
                          Recovered* out) {
  std::vector<v1::Experiment>& queued = out->queue;
  // Segments first: nothing runs yet, so no experiment of ours owns one, and a store write that
  // fails below (ending the start-up) must not leave them in /dev/shm.
  for (const auto& e : all) {
    if (int n = segments->Remove(SegmentPrefix(e.id())); n > 0)
      spdlog::warn("removed {} leftover shared memory segment(s) of {}", n, e.id());
  }
  for (auto& e : all) {
    if (e.has_slurm() && !IsTerminal(e.state())) {
      out->elsewhere.push_back(e);
      continue;
    }
    if (e.state() == v1::RUNNING) {
      e.set_state(v1::INTERRUPTED);
      e.set_error("shoald stopped while this experiment ran");
      e.set_finished_unix_ms(RealtimeMs());
      for (auto& p : *e.mutable_processes()) p.set_alive(false);
      RETURN_IF_ERROR(store->Put(e));
      spdlog::warn("experiment {} was running when shoald stopped: marked interrupted", e.id());
      out->interrupted.push_back(e);
    }
    if (e.state() == v1::QUEUED && cancelled.count(e.sweep_id())) {
      // Its sweep was cancelled but the daemon died before this point was.
      e.set_state(v1::CANCELLED);
      e.set_finished_unix_ms(RealtimeMs());
      RETURN_IF_ERROR(store->Put(e));
    }
    if (e.state() == v1::QUEUED) queued.push_back(e);
  }
  return Status::Ok();
}

// Brings a sweep's points up to date with their experiments (the daemon may have died between
// the two writes) and queues again a point whose experiment was interrupted.
Status RecoverSweep(Store* store, v1::Sweep& sw,
                    const std::map<std::string, const v1::Experiment*>& by_id,
                    const std::function<std::string(const char*)>& new_id,
                    std::vector<v1::Experiment>* reruns) {
  const bool cancelled = !sw.error().empty();
  for (auto& p : *sw.mutable_points()) {
    auto it = by_id.find(p.experiment_id());
    if (it == by_id.end()) continue;
    p.set_state(it->second->state());
    if (p.state() != v1::INTERRUPTED || cancelled) continue;
    v1::Experiment e = NewExperimentRecord(new_id("x"), it->second->spec(), sw.submitted_unix_ms());
    e.set_sweep_id(sw.id());
    e.set_sweep_index(p.index());
    p.set_experiment_id(e.id());
    p.set_state(v1::QUEUED);
    p.set_attempts(p.attempts() + 1);
    RETURN_IF_ERROR(store->Put(e));
    reruns->push_back(e);
    spdlog::warn("sweep {}: point {} was interrupted; running it again as {}", sw.id(), p.index(),
                 e.id());
  }
  const bool was_terminal = IsTerminal(sw.state());
  sw.set_state(SweepState(sw, cancelled));
  if (IsTerminal(sw.state()) && !was_terminal) sw.set_finished_unix_ms(RealtimeMs());
  if (!IsTerminal(sw.state())) sw.set_finished_unix_ms(0);
  return store->PutSweep(sw);
}

}  // namespace

StatusOr<Recovered> Recover(Store* store, SegmentJanitor* segments,
                            const std::function<std::string(const char*)>& new_id) {
  ASSIGN_OR_RETURN(auto all, store->List());
  Recovered out;
  ASSIGN_OR_RETURN(out.sweeps, store->ListSweeps());
  std::set<std::string> cancelled;
  for (const auto& sw : out.sweeps)
    if (!sw.error().empty()) cancelled.insert(sw.id());
  RETURN_IF_ERROR(RecoverExperiments(store, all, cancelled, segments, &out));
  std::map<std::string, const v1::Experiment*> by_id;
  for (const auto& e : all) by_id[e.id()] = &e;
  for (auto& sw : out.sweeps) RETURN_IF_ERROR(RecoverSweep(store, sw, by_id, new_id, &out.queue));
  // Queue order: submission time, then a sweep's own grid order.
  std::stable_sort(out.queue.begin(), out.queue.end(),
                   [](const v1::Experiment& x, const v1::Experiment& y) {
                     return std::make_tuple(x.submitted_unix_ms(), x.sweep_id(), x.sweep_index()) <
                            std::make_tuple(y.submitted_unix_ms(), y.sweep_id(), y.sweep_index());
                   });
  return out;
}

}  // namespace shoal
