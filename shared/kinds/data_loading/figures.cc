// data_loading's figures: its part of the result, its report tables, its lines in `shoal get`.
#include "shared/kinds/data_loading/figures.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "shared/report/text.h"

namespace shoal::data_loading {
namespace {

using namespace report;
using namespace text;
using Reports = google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>;

// The epoch's load CPU (DataLoadingResult); nullopt when not measured.
std::optional<double> LoadCpuMs(const v1::Result& r, uint32_t epoch) {
  for (const auto& x : r.data_loading().epochs())
    if (x.epoch() == epoch && x.has_load_cpu_ms()) return x.load_cpu_ms();
  return std::nullopt;
}

// data_loading: a per-epoch figure averaged over the epochs after the first (which warms up),
// or the only epoch; nullopt when an epoch lacks it.
std::optional<double> MeanEpoch(
    const v1::Result& r, const std::function<std::optional<double>(const v1::EpochResult&)>& get) {
  if (r.epochs().empty()) return std::nullopt;
  double sum = 0;
  int n = 0;
  for (int i = r.epochs_size() > 1 ? 1 : 0; i < r.epochs_size(); ++i) {
    const auto v = get(r.epochs(i));
    if (!v) return std::nullopt;
    sum += *v;
    ++n;
  }
  return sum / n;
}

Cell EpochSeconds(const v1::Experiment& e, size_t column) {
  const v1::Result& r = e.result();
  const auto v = MeanEpoch(r, [column, &r](const v1::EpochResult& x) -> std::optional<double> {
    if (column == 0) return x.has_data_ms() ? std::optional<double>(x.data_ms()) : std::nullopt;
    if (column == 1) return x.has_train_ms() ? std::optional<double>(x.train_ms()) : std::nullopt;
    if (column == 2) return x.wall_ms();
    return LoadCpuMs(r, x.epoch());
  });
  // Load CPU to the millisecond: a trainer's own batch making takes a few (0.00 read as none).
  return v ? Value(*v / 1000, column == 3 ? "%.3f" : "%.2f") : Missing();
}

// The trainer's peak PSS, the loaders' summed (every loader sampled, else unknown), and the peak
// of the sum over all processes.
Cell LoadingMemory(const v1::Experiment& e, size_t column) {
  const double mib = double(1 << 20);
  if (column == 2)
    return ValueIf(e.result().has_peak_pss_sum_bytes(),
                   double(e.result().peak_pss_sum_bytes()) / mib, "%.0f");
  uint64_t trainer = 0, loaders = 0;
  uint32_t seen = 0;
  for (const auto& p : e.processes()) {
    if (p.role() != "worker" || !p.has_peak_pss_bytes()) continue;
    if (p.index() == 0) trainer = p.peak_pss_bytes();
    if (p.index() > 0) {
      loaders += p.peak_pss_bytes();
      ++seen;
    }
  }
  if (column == 0) return trainer > 0 ? Value(double(trainer) / mib, "%.0f") : Missing();
  if (e.spec().data_loading().loaders() == 0 || seen != e.spec().data_loading().loaders())
    return Missing();
  return Value(double(loaders) / mib, "%.0f");
}

std::vector<Table> DataLoadingTables(const std::vector<PointView>& points,
                                     const std::vector<std::string>& fields) {
  return {PointTable(points, fields, "data_loading_epoch_s",
                     "data_loading (seed 003), per epoch (s): the trainer's wait for data, its "
                     "compute (forward, backward, update), the whole epoch, and the CPU time spent "
                     "making the batches; mean over the epochs after the first",
                     "figure", {"data wait", "compute", "epoch", "load CPU"}, EpochSeconds),
          PointTable(points, fields, "data_loading_memory_mib",
                     "data_loading: peak PSS (MiB) of the trainer, of the loaders summed, and of "
                     "all processes together (the peak of their sum, leader included)",
                     "process", {"trainer", "loaders", "all"}, LoadingMemory)};
}

bool AnyDataLoading(const std::vector<PointView>& points) {
  return std::any_of(points.begin(), points.end(), [](const PointView& v) {
    return v.experiment != nullptr && v.experiment->spec().kind() == "data_loading";
  });
}

}  // namespace

void Summarize(const KindRunFacts& f, v1::Result* r) {
  // Summed over the processes that made batches: the loaders, or the trainer with none.
  std::map<uint32_t, uint64_t> load_cpu;
  for (const auto& w : f.workers) {
    const auto& ns = w.data_loading().epoch_load_cpu_ns();
    for (int e = 0; e < ns.size(); ++e) load_cpu[uint32_t(e + 1)] += ns[e];
  }
  for (const auto& epoch : r->epochs()) {  // the epochs someone trained
    const uint64_t ns = load_cpu[epoch.epoch()];
    if (ns == 0) continue;
    auto* x = r->mutable_data_loading()->add_epochs();
    x->set_epoch(epoch.epoch());
    x->set_load_cpu_ms(NsToMs(ns));
  }
}

std::string EpochCell(const v1::Result& r, uint32_t epoch) {
  // To the millisecond: a trainer's own batch making takes a few (0.00 read as none).
  const auto ms = LoadCpuMs(r, epoch);
  return ms ? F(" %11.3f", *ms / 1000) : "";
}

std::vector<Table> ReportTables(const KindTablesInput& in) {
  if (!AnyDataLoading(in.points)) return {};
  return DataLoadingTables(in.points, in.fields);
}

std::string SpecLines(const v1::ExperimentSpec& s) {
  return F("  spec        data_loading %s: %u loaders (+ the trainer), prefetch %u, start %s, "
           "device %s, %s, trainer threads %u, seed %lu\n",
           s.model().c_str(), s.data_loading().loaders(), s.data_loading().prefetch(),
           s.start().c_str(), s.device().c_str(), Length(s).c_str(), s.threads(), UL(s.seed())) +
         "  optimiser   " + Optimizer(s) + "\n  dataset     " + s.dataset() + "\n";
}

// Its workers are its trainer (0) and its loaders (1..L).
std::string RoleName(const v1::ProcessInfo& p) {
  if (p.role() != "worker") return p.role();
  return p.index() == 0 ? "trainer" : "loader";
}

}  // namespace shoal::data_loading
