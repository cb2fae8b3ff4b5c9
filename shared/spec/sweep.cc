#include "shared/spec/sweep.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <set>

#include "shared/spec/spec_fields.h"

namespace shoal {
namespace {

// The lists of sweeps stored before axes existed, as axes.
std::vector<v1::Axis> LegacyAxes(const v1::SweepSpec& sweep) {
  std::vector<v1::Axis> out;
  auto add = [&](const char* field, auto values, auto text) {
    if (values.empty()) return;
    v1::Axis a;
    a.set_field(field);
    for (const auto& v : values) a.add_values(text(v));
    out.push_back(a);
  };
  add("workers", sweep.workers(), [](uint32_t v) { return std::to_string(v); });
  add("start", sweep.start(), [](const std::string& v) { return v; });
  add("share", sweep.share(), [](bool v) { return std::string(v ? "yes" : "no"); });
  add("device", sweep.device(), [](const std::string& v) { return v; });
  return out;
}

size_t FieldRank(const std::string& name) {
  const auto& fields = SpecFields();
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].name == name) return i;
  return fields.size();
}

// "env.NAME": kind command's environment variable NAME, its values the axis's.
std::string EnvAxisName(const std::string& field) {
  if (field.rfind("env.", 0) != 0) return "";
  const std::string name = field.substr(4);
  return IsEnvironmentName(name) ? name : "";
}

// An environment axis: its values distinct, its variable not also fixed in the base.
Status CheckEnvAxis(const v1::Axis& a, const std::string& name, const v1::ExperimentSpec& base) {
  if (a.values().empty()) return InvalidArgument(a.field() + ": an axis needs at least one value");
  if (a.values_size() > int(kMaxSweepPoints))
    return InvalidArgument(a.field() + ": more than " + std::to_string(kMaxSweepPoints) +
                           " values");
  const std::set<std::string> distinct(a.values().begin(), a.values().end());
  if (distinct.size() != size_t(a.values_size()))
    return InvalidArgument(a.field() + ": a value is listed twice");
  for (const auto& kv : base.command().env())
    if (kv.rfind(name + "=", 0) == 0)
      return InvalidArgument(a.field() + ": given both as a fixed value and as an axis");
  return Status::Ok();
}

Status CheckAxis(const v1::Axis& a, const v1::ExperimentSpec& base) {
  if (const std::string env = EnvAxisName(a.field()); !env.empty())
    return CheckEnvAxis(a, env, base);
  const SpecField* f = FindSpecField(a.field());
  if (f == nullptr || !f->axis) {
    std::string list;
    for (const auto& x : SpecFields())
      if (x.axis) list += (list.empty() ? "" : ", ") + x.name;
    std::string shown = a.field().substr(0, 40);
    return InvalidArgument("axes: '" + shown +
                           "' is not a field a sweep can vary (fields: " + list + ")");
  }
  if (a.values().empty()) return InvalidArgument(f->name + ": an axis needs at least one value");
  if (a.values_size() > int(kMaxSweepPoints))
    return InvalidArgument(f->name + ": more than " + std::to_string(kMaxSweepPoints) + " values");
  // Compared as values, not text: "16" and "016", "yes" and "true" are one value.
  std::set<std::string> seen;
  for (const auto& text : a.values()) {
    v1::ExperimentSpec probe;
    RETURN_IF_ERROR(SetSpecField(&probe, *f, text));
    if (!seen.insert(SpecFieldText(probe, *f)).second)
      return InvalidArgument(f->name + ": a value is listed twice");
  }
  if (HasSpecField(base, *f))
    return InvalidArgument(f->name + ": given both as a fixed value and as an axis");
  return Status::Ok();
}

// Why a point cannot run on this daemon, or "" when it can.
std::string CannotRunNote(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (s.device() != "cuda") return "";
  if (ForkCudaShare(s)) {
    return "impossible: fork + cuda + shared weights (a forked child cannot use the CUDA "
           "context of its parent)";
  }
  return limits.cuda_missing;
}

StatusOr<GridPoint> MakePoint(const v1::SweepSpec& sweep, const std::vector<v1::Axis>& axes,
                              const std::vector<int>& pick, uint32_t index,
                              const SpecLimits& limits) {
  GridPoint g;
  g.spec = sweep.base();
  g.point.set_index(index);
  for (size_t k = 0; k < axes.size(); ++k) {
    const std::string& text = axes[k].values(pick[k]);
    if (const std::string env = EnvAxisName(axes[k].field()); !env.empty()) {
      g.spec.mutable_command()->add_env(env + "=" + text);
    } else {
      RETURN_IF_ERROR(SetSpecField(&g.spec, *FindSpecField(axes[k].field()), text));
    }
    auto* v = g.point.add_values();
    v->set_field(axes[k].field());
    v->set_value(text);
  }
  ApplyDefaults(&g.spec, limits);
  g.point.set_workers(g.spec.workers());
  g.point.set_start(g.spec.start());
  g.point.set_share(g.spec.share());
  g.point.set_device(g.spec.device());
  g.point.set_note(CannotRunNote(g.spec, limits));
  // A point that cannot run here must still be a valid spec elsewhere (on a GPU node; and the
  // impossible ones, on the CPU).
  v1::ExperimentSpec check = g.spec;
  SpecLimits elsewhere = limits;
  elsewhere.cuda_missing.clear();
  if (ForkCudaShare(check)) {  // checked as the CPU point it would be, without CUDA's fields
    check.set_device("cpu");
    for (const auto& name : CudaOnlyFields()) ClearSpecField(&check, *FindSpecField(name));
  }
  Status st = ValidateSpec(check, elsewhere);
  if (!st.ok())
    return InvalidArgument("sweep point " + std::to_string(index) + ": " + st.message());
  return g;
}

}  // namespace

StatusOr<std::vector<v1::Axis>> SweepAxes(const v1::SweepSpec& sweep) {
  std::vector<v1::Axis> axes(sweep.axes().begin(), sweep.axes().end());
  for (auto& a : LegacyAxes(sweep)) axes.push_back(a);
  std::set<std::string> fields;
  for (auto& a : axes) {
    RETURN_IF_ERROR(CheckAxis(a, sweep.base()));
    if (EnvAxisName(a.field()).empty())
      a.set_field(FindSpecField(a.field())->name);  // "batch-size" -> "batch_size"
    if (!fields.insert(a.field()).second)
      return InvalidArgument(a.field() + ": swept twice (give one list)");
  }
  std::stable_sort(axes.begin(), axes.end(), [](const v1::Axis& a, const v1::Axis& b) {
    return FieldRank(a.field()) < FieldRank(b.field());
  });
  return axes;
}

StatusOr<std::vector<GridPoint>> ExpandGrid(const v1::SweepSpec& sweep, const SpecLimits& limits) {
  ASSIGN_OR_RETURN(std::vector<v1::Axis> axes, SweepAxes(sweep));
  if (sweep.has_repeats() && (sweep.repeats() < 1 || sweep.repeats() > kMaxRepeats))
    return InvalidArgument("repeats: " + std::to_string(sweep.repeats()) + " is not in 1.." +
                           std::to_string(kMaxRepeats));
  const size_t repeats = Repeats(sweep);
  const size_t most = sweep.has_slurm() ? kMaxSlurmSweepPoints : kMaxSweepPoints;
  size_t n = 1;
  for (const auto& a : axes) {
    n *= size_t(a.values_size());
    if (n * repeats > most)
      return InvalidArgument("sweep: more than " + std::to_string(most) + " points" +
                             (repeats > 1 ? " (runs: grid points x repeats)" : "") +
                             (sweep.has_slurm() ? " on Slurm"
                                                : "; on Slurm (--slurm), up to " +
                                                      std::to_string(kMaxSlurmSweepPoints)));
  }
  std::vector<GridPoint> out;
  std::vector<int> pick(axes.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(GridPoint g, MakePoint(sweep, axes, pick, uint32_t(i), limits));
    out.push_back(std::move(g));
    for (size_t k = axes.size(); k-- > 0;) {  // odometer: the last axis turns fastest
      if (++pick[k] < axes[k].values_size()) break;
      pick[k] = 0;
    }
  }
  // Run-major: every cell's first run, then every cell's second, ...
  for (size_t r = 1; r < repeats; ++r) {
    for (size_t c = 0; c < n; ++c) {
      GridPoint g = out[c];
      g.point.set_index(uint32_t(r * n + c));
      g.point.set_repeat(uint32_t(r));
      out.push_back(std::move(g));
    }
  }
  return out;
}

uint32_t Repeats(const v1::SweepSpec& s) { return s.has_repeats() ? std::max(1u, s.repeats()) : 1; }

size_t Cells(const v1::Sweep& s) {
  const size_t runs = Repeats(s.spec());
  return size_t(s.points_size()) % runs == 0 ? size_t(s.points_size()) / runs
                                             : size_t(s.points_size());
}

size_t CellOf(const v1::Sweep& s, const v1::SweepPoint& p) {
  const size_t cells = Cells(s);
  return cells == 0 ? 0 : p.index() % cells;
}

bool IsOutOfMemory(const std::string& error) {
  std::string e = error;
  for (auto& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* sign : {"out of memory", "does not fit:", "can't allocate memory",
                           "cannot allocate memory", "std::bad_alloc"})
    if (e.find(sign) != std::string::npos) return true;
  return false;
}

bool RanOutOfMemory(const v1::Experiment& e) {
  return e.result().oom_kills() > 0 || IsOutOfMemory(e.error());
}

bool GrowsMemory(const std::string& field) {
  static const std::set<std::string> kGrowing = {"workers", "batch_size", "models",  "layers",
                                                 "filters", "loaders",    "prefetch"};
  return kGrowing.count(field) > 0;
}

namespace {

std::optional<double> Number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0') return std::nullopt;
  return v;
}

}  // namespace

bool NeedsMoreThan(const v1::SweepPoint& q, const v1::SweepPoint& p) {
  if (q.values_size() != p.values_size()) return false;
  bool more = false;
  for (int i = 0; i < p.values_size(); ++i) {
    const auto &a = p.values(i), &b = q.values(i);
    if (a.field() != b.field()) return false;
    if (a.value() == b.value()) continue;
    const auto x = Number(a.value()), y = Number(b.value());
    if (!GrowsMemory(a.field()) || !x || !y || *y < *x) return false;
    more = true;
  }
  return more;
}

std::string DescribePoint(const v1::SweepPoint& p) {
  std::string out;
  for (const auto& v : p.values()) out += (out.empty() ? "" : ", ") + v.field() + " " + v.value();
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
