#include "server/sweep_tracker.h"

#include <algorithm>
#include <optional>

#include "shared/os/process.h"
#include "spdlog/spdlog.h"

namespace shoal {
namespace {

bool SkipsAfterOom(const v1::SweepSpec& s) { return !s.has_skip_after_oom() || s.skip_after_oom(); }

std::string OomSkipNote(const v1::SweepPoint& failed) {
  return "skipped: out of memory at point " + std::to_string(failed.index()) + " (" +
         DescribePoint(failed) + "), which needs less";
}

// Points of `grid` the admission refused: skipped with its reason, and the points that need
// strictly more than one of them with it. The first refusal when no runnable point is left.
Status SkipRefused(std::vector<GridPoint>& grid, const SweepTracker::Admit& admit, bool skip) {
  std::optional<Status> first;
  std::vector<const v1::SweepPoint*> refused;
  for (auto& g : grid) {
    if (!g.point.note().empty()) continue;
    Status st = admit(g.spec);
    if (st.ok()) continue;
    st = Status(st.code(), "sweep point " + std::to_string(g.point.index()) + " (" +
                               DescribePoint(g.point) + "): " + st.message());
    if (!skip || !IsOutOfMemory(st.message())) return st;
    if (!first) first = st;
    g.point.set_note("skipped: " + st.message());
    refused.push_back(&g.point);
  }
  for (auto& g : grid) {
    for (const v1::SweepPoint* r : refused)
      if (g.point.note().empty() && NeedsMoreThan(g.point, *r)) g.point.set_note(OomSkipNote(*r));
  }
  const bool runnable = std::any_of(grid.begin(), grid.end(),
                                    [](const GridPoint& g) { return g.point.note().empty(); });
  return runnable || !first ? Status::Ok() : *first;
}

}  // namespace

v1::Experiment NewExperimentRecord(const std::string& id, const v1::ExperimentSpec& spec,
                                   int64_t submitted_ms) {
  v1::Experiment e;
  e.set_id(id);
  *e.mutable_spec() = spec;
  e.set_state(v1::QUEUED);
  e.set_submitted_unix_ms(submitted_ms);
  return e;
}

SweepTracker::SweepTracker(Store* store, ExperimentQueue* queue, NewId new_id)
    : store_(store), queue_(queue), new_id_(std::move(new_id)) {}

StatusOr<std::string> SweepTracker::Submit(const v1::SweepSpec& spec, const std::string& submitter,
                                           const SpecLimits& limits, const Admit& admit,
                                           const Placement* elsewhere) {
  ASSIGN_OR_RETURN(std::vector<GridPoint> grid, ExpandGrid(spec, limits));
  RETURN_IF_ERROR(SkipRefused(grid, admit, SkipsAfterOom(spec)));
  v1::Sweep sw;
  sw.set_id(new_id_("s"));
  *sw.mutable_spec() = spec;
  sw.set_submitted_unix_ms(RealtimeMs());
  sw.set_submitter(submitter);
  std::vector<v1::Experiment> exps;
  for (auto& g : grid) {
    v1::SweepPoint* p = sw.add_points();
    *p = g.point;
    if (!p->note().empty()) continue;
    v1::Experiment e = NewExperimentRecord(new_id_("x"), g.spec, sw.submitted_unix_ms());
    e.set_sweep_id(sw.id());
    e.set_sweep_index(p->index());
    e.set_submitter(submitter);
    p->set_experiment_id(e.id());
    p->set_state(v1::QUEUED);
    p->set_attempts(1);
    exps.push_back(std::move(e));
  }
  sw.set_state(SweepState(sw, false));
  if (IsTerminal(sw.state())) sw.set_finished_unix_ms(RealtimeMs());  // nothing can run here
  if (elsewhere != nullptr && !exps.empty()) RETURN_IF_ERROR(elsewhere->place(&sw, &exps));
  Status stored;
  {
    // Under the lock: a point that starts at once cannot store its sweep before this first copy.
    std::lock_guard<std::mutex> l(mu_);
    // The points and their sweep in one transaction: on record together or not at all.
    stored = elsewhere != nullptr ? queue_->Adopt(exps, &sw) : queue_->Enqueue(exps, &sw);
    if (stored.ok()) sweeps_[sw.id()] = sw;
  }
  // Outside the lock: whoever follows the placed points tells the queue, whose listeners (this
  // tracker) take the lock.
  if (elsewhere != nullptr && !exps.empty()) elsewhere->placed(sw, exps, stored.ok());
  RETURN_IF_ERROR(stored);
  spdlog::info("queued sweep {}: {} points, {} to run", sw.id(), sw.points_size(), exps.size());
  return sw.id();
}

void SweepTracker::OnExperiment(const v1::Experiment& e) {
  if (e.sweep_id().empty()) return;
  std::vector<std::string> skipped;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sweeps_.find(e.sweep_id());
    if (it == sweeps_.end() || e.sweep_index() >= static_cast<uint32_t>(it->second.points_size()))
      return;
    v1::Sweep& sw = it->second;
    auto* p = sw.mutable_points(static_cast<int>(e.sweep_index()));
    if (p->experiment_id() != e.id()) return;  // an older attempt
    p->set_state(e.state());
    if (e.state() == v1::FAILED && RanOutOfMemory(e) && SkipsAfterOom(sw.spec()))
      skipped = SkipAfterOom(sw, *p);
    const v1::ExperimentState before = sw.state();
    sw.set_state(SweepState(sw, !sw.error().empty()));
    if (IsTerminal(sw.state()) && !IsTerminal(before)) {
      sw.set_finished_unix_ms(RealtimeMs());
      spdlog::info("sweep {} {}", sw.id(), v1::ExperimentState_Name(sw.state()));
    }
    if (held_.count(sw.id()) == 0) {
      Save(sw);
    } else {
      changed_.insert(sw.id());  // stored when let go
    }
  }
  // Outside the lock: cancelling tells the listeners, this one included.
  for (const auto& id : skipped) (void)queue_->Cancel(id);
}

std::vector<std::string> SweepTracker::SkipAfterOom(v1::Sweep& sw, const v1::SweepPoint& failed) {
  std::vector<std::string> out;
  for (auto& q : *sw.mutable_points()) {
    if (!q.note().empty() || q.state() != v1::QUEUED || !NeedsMoreThan(q, failed)) continue;
    q.set_note(OomSkipNote(failed));
    out.push_back(q.experiment_id());
  }
  if (!out.empty())
    spdlog::info("sweep {}: point {} ran out of memory; skipping {} bigger point(s)", sw.id(),
                 failed.index(), out.size());
  return out;
}

// Under the lock, so that an older copy can never land after a newer one.
void SweepTracker::Save(const v1::Sweep& sw) {
  if (Status st = store_->PutSweep(sw); !st.ok()) spdlog::error("{}", st.ToString());
}

StatusOr<v1::SweepReport> SweepTracker::Get(const std::string& id) {
  v1::SweepReport r;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sweeps_.find(id);
    if (it == sweeps_.end()) return NotFound("no sweep with id '" + id.substr(0, 40) + "'");
    *r.mutable_sweep() = it->second;
  }
  for (const auto& p : r.sweep().points()) {
    if (p.experiment_id().empty()) continue;
    auto e = queue_->Get(p.experiment_id());
    if (e.ok()) *r.add_experiments() = std::move(e).value();
  }
  return r;
}

StatusOr<std::vector<v1::Sweep>> SweepTracker::List() {
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

StatusOr<v1::Sweep> SweepTracker::Cancel(const std::string& id) {
  std::vector<std::string> to_cancel;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sweeps_.find(id);
    if (it == sweeps_.end()) return NotFound("no sweep with id '" + id.substr(0, 40) + "'");
    if (IsTerminal(it->second.state())) return it->second;  // idempotent
    it->second.set_error("cancelled by request");
    for (const auto& p : it->second.points())
      if (queue_->IsLive(p.experiment_id())) to_cancel.push_back(p.experiment_id());
    it->second.set_state(SweepState(it->second, true));
    RETURN_IF_ERROR(store_->PutSweep(it->second));
    held_.insert(id);
  }
  for (const auto& e : to_cancel) (void)queue_->Cancel(e);
  std::lock_guard<std::mutex> l(mu_);
  held_.erase(held_.find(id));  // this call's mark only: another cancel may hold one
  // Deleted meanwhile (its points had all ended): nothing to store, nothing to return.
  auto it = sweeps_.find(id);
  if (it == sweeps_.end()) return NotFound("sweep " + id + " was deleted while it was cancelled");
  Save(it->second);  // the points' ends, all at once
  return it->second;
}

void SweepTracker::WithSavesHeld(const std::string& id, const std::function<void()>& fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    held_.insert(id);
  }
  fn();
  std::lock_guard<std::mutex> l(mu_);
  held_.erase(held_.find(id));
  if (held_.count(id) > 0) return;  // another holder stores it when it lets go
  // Only when a point changed: a poll in which no task moved writes nothing.
  if (changed_.erase(id) == 0) return;
  if (auto it = sweeps_.find(id); it != sweeps_.end()) Save(it->second);
}

StatusOr<uint32_t> SweepTracker::Delete(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sweeps_.find(id);
  if (it == sweeps_.end()) return NotFound("no sweep with id '" + id + "'");
  if (!IsTerminal(it->second.state())) {
    return FailedPrecondition("sweep " + id + " is " +
                              v1::ExperimentState_Name(it->second.state()) + ": cancel it first");
  }
  for (const auto& p : it->second.points()) {
    if (queue_->IsLive(p.experiment_id()))
      return FailedPrecondition("sweep " + id + ": its experiment " + p.experiment_id() +
                                " is still stopping; try again when it has ended");
  }
  // Every record that names the sweep: its points', and the earlier attempts of points recovery
  // ran again, which are no point's now (and no other command could delete them).
  ASSIGN_OR_RETURN(std::vector<v1::Experiment> all, queue_->List());
  uint32_t deleted = 0;
  for (const auto& e : all) {
    if (e.sweep_id() != id) continue;
    RETURN_IF_ERROR(store_->DeleteExperiment(e.id()));
    ++deleted;
  }
  RETURN_IF_ERROR(store_->DeleteSweep(id));
  sweeps_.erase(it);
  return deleted;
}

void SweepTracker::Restore(const std::vector<v1::Sweep>& sweeps) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& sw : sweeps) sweeps_[sw.id()] = sw;
}

}  // namespace shoal
