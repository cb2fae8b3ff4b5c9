// multi_model's figures: its part of the result, its report tables, its lines in `shoal get`.
#include "shared/kinds/multi_model/figures.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "shared/kinds/multi_model/variants.h"
#include "shared/report/text.h"

namespace shoal::multi_model {
namespace {

using namespace report;
using namespace text;
using Reports = google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>;

// multi_model: each finished worker's variant, its phase times and memory.
void FillVariants(const KindRunFacts& f, const Reports& ws, v1::Result* r) {
  const std::vector<std::string> names = MultiModelVariants(f.spec.multi_model().models());
  for (const auto& w : ws) {
    if (w.phase() != ipc::v1::FINISHED || w.index() >= names.size()) continue;
    v1::VariantResult* v = r->mutable_multi_model()->add_variants();
    v->set_variant(names[w.index()]);
    v->set_models(f.spec.multi_model().models());
    v->set_iterations(w.steps());
    v->set_parameters(w.parameters());
    v->set_define_ms(NsToMs(w.multi_model().define_ns()));
    v->set_data_ms(NsToMs(w.data_ns()));
    v->set_zero_grad_ms(NsToMs(w.multi_model().zero_grad_ns()));
    v->set_forward_ms(NsToMs(w.forward_ns()));
    v->set_backward_ms(NsToMs(w.backward_ns()));
    v->set_optimizer_ms(NsToMs(w.optimizer_ns()));
    if (w.last_step_ns() > w.first_step_ns())
      v->set_total_ms(NsToMs(w.last_step_ns() - w.first_step_ns()));
    v->set_peak_allocated_bytes(w.alloc_peak_bytes());
    if (w.vmhwm_bytes() > 0) v->set_peak_rss_bytes(w.vmhwm_bytes());
    if (auto it = f.peak_pss.find(w.pid()); it != f.peak_pss.end())
      v->set_peak_pss_bytes(it->second);
    if (w.has_last_loss()) v->set_final_loss(w.last_loss());
  }
}

// multi_model: a figure of one variant of a point, for one phase (nullopt: none).
using VariantGetter = std::function<std::optional<double>(
    const v1::VariantResult&, const v1::Result&, const std::string& phase)>;

// Rows: the varying axes other than the column, then the variant (and the phase, when given).
Table VariantTable(const std::vector<PointView>& points, const ReportLayout& l, const char* key,
                   const char* title, const std::vector<std::string>& phases,
                   const VariantGetter& get, const char* format) {
  Table t;
  t.key = key;
  t.title = title;
  t.column_field = l.column_field;
  t.columns = l.columns;
  t.row_fields = l.row_fields;
  t.row_fields.push_back("variant");
  if (phases.size() > 1) t.row_fields.push_back("phase");
  for (const auto& v : points) {
    if (v.experiment == nullptr || v.experiment->state() != v1::SUCCEEDED) continue;
    for (const auto& vr : v.experiment->result().multi_model().variants()) {
      for (const auto& phase : phases) {
        auto labels = Labels(v, l.row_fields);
        labels.push_back(vr.variant());
        if (phases.size() > 1) labels.push_back(phase);
        auto row = std::find_if(t.rows.begin(), t.rows.end(),
                                [&](const Row& r) { return r.labels == labels; });
        if (row == t.rows.end())
          row =
              t.rows.insert(t.rows.end(), {labels, std::vector<Cell>(l.columns.size(), Missing())});
        if (const auto value = get(vr, v.experiment->result(), phase))
          row->cells[ColumnOf(v, l)] = Value(*value, format);
      }
    }
  }
  return t;
}

// The variant that trains n separate Linears at this point: what the others are compared with.
const v1::VariantResult* Separate(const v1::Result& r) {
  for (const auto& v : r.multi_model().variants())
    if (v.variant() == "linear" || v.variant() == "mlinear") return &v;
  return nullptr;
}

double PhaseMs(const v1::VariantResult& v, const std::string& phase) {
  if (phase == "data") return v.data_ms();
  if (phase == "zero_grad") return v.zero_grad_ms();
  if (phase == "forward") return v.forward_ms();
  if (phase == "backward") return v.backward_ms();
  return v.optimizer_ms();
}

std::optional<double> PerIteration(double ms, const v1::VariantResult& v) {
  if (v.iterations() == 0) return std::nullopt;
  return ms / double(v.iterations());
}

std::vector<Table> VariantTables(const std::vector<PointView>& points, const ReportLayout& l) {
  std::vector<Table> out;
  out.push_back(VariantTable(
      points, l, "variant_ms_per_iteration",
      "multi_model: time per iteration (ms), definition included", {""},
      [](const auto& v, const auto&, const auto&) -> std::optional<double> {
        if (!v.has_total_ms()) return std::nullopt;
        return PerIteration(v.total_ms(), v);
      },
      "%.3f"));
  out.push_back(VariantTable(
      points, l, "variant_vs_separate", "multi_model: time against n separate Linears (the same n)",
      {""},
      [](const auto& v, const auto& r, const auto&) -> std::optional<double> {
        const v1::VariantResult* base = Separate(r);
        if (base == nullptr || !base->has_total_ms() || base->total_ms() <= 0 || !v.has_total_ms())
          return std::nullopt;
        return v.total_ms() / base->total_ms();
      },
      "%.2f"));
  Table mem = VariantTable(
      points, l, "variant_peak_allocated_mib",
      "multi_model: peak allocated by LibTorch's CPU allocator (MiB)", {""},
      [](const auto& v, const auto&, const auto&) -> std::optional<double> {
        return double(v.peak_allocated_bytes()) / double(1 << 20);
      },
      "%.2f");
  mem.footnotes.push_back(
      "MiB. The original printed max_memory_allocated() // 2**10, i.e. KiB, labelled MB.");
  out.push_back(std::move(mem));
  out.push_back(VariantTable(
      points, l, "variant_phase_ms_per_iteration", "multi_model: each phase per iteration (ms)",
      {"data", "zero_grad", "forward", "backward", "optim"},
      [](const auto& v, const auto&, const auto& phase) {
        return PerIteration(PhaseMs(v, phase), v);
      },
      "%.4f"));
  return out;
}

bool AnyVariants(const std::vector<PointView>& points) {
  return std::any_of(points.begin(), points.end(), [](const PointView& v) {
    return v.experiment != nullptr && !v.experiment->result().multi_model().variants().empty();
  });
}

// multi_model: the original's block per variant (its "MB" were KiB; these are what they say).
std::string VariantBlocks(const v1::Result& r) {
  std::string o;
  for (const auto& v : r.multi_model().variants()) {
    o += F("  ==============================\n  >> [%s] %u models, %lu iterations\n",
           v.variant().c_str(), v.models(), UL(v.iterations()));
    o += F("  >> model define: %.3fs\n       param_cnt: %lu\n", v.define_ms() / 1000,
           UL(v.parameters()));
    o +=
        F("  >> data: %.3fs\n  >> zero grad: %.3fs\n  >> forward: %.3fs\n  >> backward: %.3fs\n"
          "  >> optim: %.3fs\n",
          v.data_ms() / 1000, v.zero_grad_ms() / 1000, v.forward_ms() / 1000,
          v.backward_ms() / 1000, v.optimizer_ms() / 1000);
    auto mib = [](uint64_t b) { return double(b) / double(1 << 20); };
    auto known = [](bool has, double x) { return has ? F("%.1f", x) : std::string("-"); };
    o +=
        F("  >> memory: max allocated %.2f MiB (LibTorch CPU allocator), peak RSS %s MiB, peak "
          "PSS %s MiB\n",
          mib(v.peak_allocated_bytes()),
          known(v.has_peak_rss_bytes(), mib(v.peak_rss_bytes())).c_str(),
          known(v.has_peak_pss_bytes(), mib(v.peak_pss_bytes())).c_str());
    o += F(
        "  >> %s done in %s\n", v.variant().c_str(),
        v.has_total_ms() ? F("%.3fs", v.total_ms() / 1000).c_str() : "- (its clock did not move)");
  }
  return o;
}

}  // namespace

void Summarize(const KindRunFacts& f, v1::Result* r) { FillVariants(f, f.workers, r); }

std::vector<Table> ReportTables(const KindTablesInput& in) {
  if (!AnyVariants(in.points)) return {};
  return VariantTables(in.points, in.layout);
}

std::string SpecLines(const v1::ExperimentSpec& s) {
  return F("  spec        multi_model: %u models, %u iterations, batch %u, %u workers (one per "
           "variant, in turn), start %s, device %s, %u threads, seed %lu\n",
           s.multi_model().models(), s.multi_model().iterations(), s.batch_size(), s.workers(),
           s.start().c_str(), s.device().c_str(), s.threads(), UL(s.seed())) +
         "  optimiser   " + Optimizer(s) + "\n";
}

std::string DetailLines(const v1::Result& r) { return VariantBlocks(r); }

}  // namespace shoal::multi_model
