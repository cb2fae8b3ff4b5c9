// baseline's figures: how long its workers took to touch their pages, per page.
#include "shared/kinds/baseline/figures.h"

#include "shared/report/text.h"

namespace shoal::baseline {

using namespace report;
using namespace text;

namespace {

constexpr double kPageBytes = 4096;

// It trains nothing: no samples, steps, phases or training time (absent, never 0; the touch
// is its "step" only for the progress the supervisor watches).
void ClearTrainingFigures(v1::Result* r) {
  for (auto clear :
       {&v1::Result::clear_samples, &v1::Result::clear_samples_per_sec, &v1::Result::clear_steps,
        &v1::Result::clear_train_ms, &v1::Result::clear_data_ms, &v1::Result::clear_forward_ms,
        &v1::Result::clear_backward_ms, &v1::Result::clear_optimizer_ms,
        &v1::Result::clear_threads})
    (r->*clear)();
}

}  // namespace

// Over the workers that touched their memory: absent when none did (a run cut before).
void Summarize(const KindRunFacts& f, v1::Result* r) {
  ClearTrainingFigures(r);
  uint64_t bytes = 0, ns = 0, faults = 0, touched = 0;
  for (const auto& w : f.workers) {
    if (!w.has_baseline()) continue;
    bytes += w.baseline().touched_bytes();
    ns += w.baseline().touch_ns();
    faults += w.baseline().minor_faults();
    ++touched;
  }
  auto* b = r->mutable_baseline();
  b->set_touch_mib(f.spec.baseline().touch_mib());
  if (touched == 0 || bytes == 0) return;
  b->set_workers_touched(uint32_t(touched));
  b->set_touch_ms(NsToMs(ns) / double(touched));
  b->set_ns_per_page(double(ns) / (double(bytes) / kPageBytes));
  b->set_minor_faults(faults);
}

std::vector<Table> ReportTables(const KindTablesInput& in) {
  return {PointTable(in.points, in.fields, "baseline_touch",
                     "baseline: first touch of a worker's memory (ns per 4 KiB page)", "figure",
                     {"ns/page"}, [](const v1::Experiment& e, size_t) {
                       const auto& b = e.result().baseline();
                       return ValueIf(b.has_ns_per_page(), b.ns_per_page(), "%.0f");
                     })};
}

std::string SpecLines(const v1::ExperimentSpec& s) {
  return F(
      "  spec        baseline, %u workers, start %s, device %s; touch %u MiB a worker, hold "
      "%u ms\n",
      s.workers(), s.start().c_str(), s.device().c_str(), s.baseline().touch_mib(),
      s.baseline().hold_ms());
}

std::string ResultLines(const v1::Result& r) {
  const auto& b = r.baseline();
  if (!b.has_touch_ms()) return "";
  return F("  touch       %u MiB a worker in %.1f ms: %.0f ns a 4 KiB page, %lu minor faults\n",
           b.touch_mib(), b.touch_ms(), b.ns_per_page(), UL(b.minor_faults()));
}

}  // namespace shoal::baseline
