#include "shared/sweep.h"

#include <set>

namespace shoal {
namespace {

template <typename T>
Status NoDuplicates(const std::string& field, const google::protobuf::RepeatedField<T>& v) {
  std::set<T> seen(v.begin(), v.end());
  if (seen.size() != static_cast<size_t>(v.size()))
    return InvalidArgument(field + ": a value is listed twice");
  return Status::Ok();
}

Status NoDuplicates(const std::string& field,
                    const google::protobuf::RepeatedPtrField<std::string>& v) {
  std::set<std::string> seen(v.begin(), v.end());
  if (seen.size() != static_cast<size_t>(v.size()))
    return InvalidArgument(field + ": a value is listed twice");
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<GridPoint>> ExpandGrid(const v1::SweepSpec& sweep, const SpecLimits& limits) {
  const v1::ExperimentSpec& base = sweep.base();
  std::vector<uint32_t> workers(sweep.workers().begin(), sweep.workers().end());
  std::vector<std::string> starts(sweep.start().begin(), sweep.start().end());
  std::vector<bool> shares(sweep.share().begin(), sweep.share().end());
  std::vector<std::string> devices(sweep.device().begin(), sweep.device().end());
  if (workers.empty()) workers.push_back(base.workers() ? base.workers() : 1);
  if (starts.empty()) starts.push_back(base.start().empty() ? "fork" : base.start());
  if (shares.empty()) shares.push_back(base.has_share() ? base.share() : true);
  if (devices.empty()) devices.push_back(base.device().empty() ? "cpu" : base.device());
  RETURN_IF_ERROR(NoDuplicates("workers", sweep.workers()));
  RETURN_IF_ERROR(NoDuplicates("start", sweep.start()));
  RETURN_IF_ERROR(NoDuplicates("share", sweep.share()));
  RETURN_IF_ERROR(NoDuplicates("device", sweep.device()));
  const size_t n = workers.size() * starts.size() * shares.size() * devices.size();
  if (n > 1000) return InvalidArgument("sweep: " + std::to_string(n) + " points, at most 1000");

  std::vector<GridPoint> out;
  for (const auto& start : starts) {
    for (bool share : shares) {
      for (const auto& device : devices) {
        for (uint32_t w : workers) {
          GridPoint g;
          auto& p = g.point;
          p.set_index(static_cast<uint32_t>(out.size()));
          p.set_workers(w);
          p.set_start(start);
          p.set_share(share);
          p.set_device(device);
          g.spec = base;
          g.spec.set_workers(w);
          g.spec.set_start(start);
          g.spec.set_share(share);
          g.spec.set_device(device);
          ApplyDefaults(&g.spec, limits);
          if (device == "cuda") {
            // Say why it cannot run, instead of a zero in the table.
            if (start == "fork" && share) {
              p.set_note(
                  "impossible: fork + cuda + shared weights (a forked child cannot use the CUDA "
                  "context of its parent)");
            } else {
              p.set_note("no GPU: this shoald runs CPU experiments only");
            }
            // The rest of the spec must still be valid.
            g.spec.set_device("cpu");
            RETURN_IF_ERROR(ValidateSpec(g.spec, limits));
            g.spec.set_device(device);
          } else {
            RETURN_IF_ERROR(ValidateSpec(g.spec, limits));
          }
          out.push_back(std::move(g));
        }
      }
    }
  }
  return out;
}

bool IsTerminal(v1::ExperimentState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED || s == v1::INTERRUPTED;
}

v1::ExperimentState SweepState(const v1::Sweep& s, bool cancelled) {
  bool any_started = false, all_done = true, any_bad = false;
  for (const auto& p : s.points()) {
    if (!p.note().empty()) continue;
    switch (p.state()) {
      case v1::QUEUED:
      case v1::STATE_UNSPECIFIED:
        all_done = false;
        break;
      case v1::INTERRUPTED:  // the next shoald runs it again, unless the sweep was cancelled
        any_started = true;
        if (!cancelled) all_done = false;
        if (cancelled) any_bad = true;
        break;
      case v1::RUNNING:
        any_started = true;
        all_done = false;
        break;
      case v1::SUCCEEDED:
        any_started = true;
        break;
      default:
        any_started = true;
        any_bad = true;
    }
  }
  if (cancelled) return all_done ? v1::CANCELLED : v1::RUNNING;
  if (!all_done) return any_started ? v1::RUNNING : v1::QUEUED;
  return any_bad ? v1::FAILED : v1::SUCCEEDED;
}

}  // namespace shoal
