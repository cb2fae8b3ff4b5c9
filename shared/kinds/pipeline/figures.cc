// pipeline's figures: its part of the result, its report tables, its lines in `shoal get`.
#include "shared/kinds/pipeline/figures.h"

#include <algorithm>

#include "shared/kinds/pipeline/pipeline.h"
#include "shared/report/text.h"

namespace shoal::pipeline {
namespace {

using namespace report;
using namespace text;
using Reports = google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>;

// pipeline: each stage's memory the seed's way and its share of the step; the whole's sums.
v1::StageResult StageFigures(const KindRunFacts& f, const ipc::v1::WorkerReading& w,
                             const std::vector<uint32_t>& balance) {
  v1::StageResult s;
  s.set_stage(w.index());
  if (w.index() < balance.size()) {
    const auto [begin, end] = StageLayers(balance, w.index());
    s.set_first_layer(begin);
    s.set_end_layer(end);
  }
  if (w.parameters() > 0) {  // every AmoebaNet stage has weights: 0 is a stage that died first
    s.set_parameters(w.parameters());
    s.set_model_memory_bytes(12 * w.parameters());
  }
  // On CUDA the stage's tensors are on the device: its allocator's figures are the seed's, and a
  // worker built without them has no known peak (its CPU allocations are not the model's). A
  // stage records its peak after each step: none finished, none known.
  const bool cuda = f.spec.device() == "cuda";
  if (cuda) s.set_cuda_device(CudaOrdinal(f.spec, w.index()));
  const bool known = w.steps() > 0 && (!cuda || w.has_device_alloc_peak_bytes());
  const uint64_t allocated = cuda ? w.device_alloc_peak_bytes() : w.alloc_peak_bytes();
  if (known) s.set_peak_allocated_bytes(allocated);
  if (known && s.has_model_memory_bytes() && allocated >= s.model_memory_bytes())
    s.set_peak_activation_bytes(allocated - s.model_memory_bytes());
  if (w.has_device_reserved_peak_bytes()) s.set_peak_reserved_bytes(w.device_reserved_peak_bytes());
  if (auto it = f.peak_gpu.find(w.pid()); it != f.peak_gpu.end())
    s.set_peak_gpu_memory_bytes(it->second);
  if (w.vmhwm_bytes() > 0) s.set_peak_rss_bytes(w.vmhwm_bytes());
  if (auto it = f.peak_pss.find(w.pid()); it != f.peak_pss.end()) s.set_peak_pss_bytes(it->second);
  if (w.steps() == 0) return s;  // no step: its times are unknown, not 0
  const double steps = double(w.steps());
  s.set_forward_ms(NsToMs(w.forward_ns()) / steps);
  s.set_backward_ms(NsToMs(w.backward_ns()) / steps);
  s.set_wait_ms(NsToMs(w.comm_ns()) / steps);
  s.set_optimizer_ms(NsToMs(w.optimizer_ns()) / steps);
  s.set_data_ms(NsToMs(w.data_ns()) / steps);
  const double timed =
      s.forward_ms() + s.backward_ms() + s.wait_ms() + s.optimizer_ms() + s.data_ms();
  s.set_step_ms(std::max(timed, NsToMs(w.pipeline().step_wall_ns()) / steps));
  s.set_other_ms(s.step_ms() - timed);
  return s;
}

void FillPipeline(const KindRunFacts& f, const Reports& ws, v1::Result* r) {
  auto layout = PlanPipeline(f.spec);
  if (!layout.ok()) return;
  v1::PipelineResult* p = r->mutable_pipeline();
  p->set_stages(f.spec.pipeline().stages());
  p->set_chunks(f.spec.pipeline().chunks());
  p->set_checkpoint(f.spec.pipeline().checkpoint());
  p->set_micro_batch(f.spec.batch_size() / std::max<uint32_t>(1, f.spec.pipeline().chunks()));
  double bubble = 0;
  uint32_t stepped = 0;
  bool allocated = !ws.empty(), activation = !ws.empty();  // every stage's known
  bool parameters = !ws.empty();
  uint64_t allocated_sum = 0, activation_sum = 0, parameter_sum = 0;
  for (const auto& w : ws) {
    v1::StageResult s = StageFigures(f, w, layout->balance);
    if (s.has_step_ms() && s.step_ms() > 0) {
      p->set_step_ms(std::max(p->step_ms(), s.step_ms()));
      bubble += s.wait_ms() / s.step_ms();
      ++stepped;
    }
    parameters = parameters && s.has_parameters();
    parameter_sum += s.parameters();
    allocated = allocated && s.has_peak_allocated_bytes();
    activation = activation && s.has_peak_activation_bytes();
    allocated_sum += s.peak_allocated_bytes();
    activation_sum += s.peak_activation_bytes();
    *p->add_stage() = s;
  }
  if (parameters) {
    p->set_parameters(parameter_sum);
    p->set_model_memory_bytes(12 * parameter_sum);
  }
  if (allocated) p->set_peak_allocated_sum_bytes(allocated_sum);
  if (activation) p->set_peak_activation_sum_bytes(activation_sum);
  if (stepped > 0) p->set_bubble(bubble / double(stepped));
}

// pipeline (seed 004): GPipe's Table 1 per point — parameters, model memory, peak activation
// memory (the seed's accounting), the counted peak it comes from, the step and its bubble.
Cell PipelineCell(const v1::Experiment& e, size_t col) {
  if (!e.result().has_pipeline()) return Missing();
  const v1::PipelineResult& p = e.result().pipeline();
  const double gib = double(1ull << 30);
  switch (col) {
    case 0:
      return ValueIf(p.has_parameters(), double(p.parameters()) / 1e6, "%.2f");
    case 1:
      return ValueIf(p.has_model_memory_bytes(), double(p.model_memory_bytes()) / gib, "%.3f");
    case 2:
      return ValueIf(p.has_peak_activation_sum_bytes(), double(p.peak_activation_sum_bytes()) / gib,
                     "%.3f");
    case 3:
      return ValueIf(p.has_peak_allocated_sum_bytes(), double(p.peak_allocated_sum_bytes()) / gib,
                     "%.3f");
    case 4:
      return ValueIf(p.has_step_ms(), p.step_ms(), "%.0f");
    default:
      return ValueIf(p.has_bubble(), 100 * p.bubble(), "%.0f");
  }
}

std::vector<Table> PipelineTables(const std::vector<PointView>& points,
                                  const std::vector<std::string>& fields) {
  return {PointTable(
      points, fields, "pipeline_memory",
      "pipeline (seed 004, GPipe's Table 1): parameters (millions), model memory "
      "(GiB: parameters x 12, the seed's), peak activation memory (GiB: each "
      "stage's counted peak allocation minus its model memory, summed over the "
      "stages, the seed's accounting), the peak allocations it comes from (GiB, "
      "summed), the step (ms, slowest stage) and its bubble (% of the step the "
      "stages sat waiting on a neighbour, their mean)",
      "figure",
      {"params (M)", "model GiB", "activation GiB", "allocated GiB", "step ms", "bubble %"},
      PipelineCell)};
}

bool AnyPipeline(const std::vector<PointView>& points) {
  return std::any_of(points.begin(), points.end(), [](const PointView& v) {
    return v.experiment != nullptr && v.experiment->result().has_pipeline();
  });
}

// pipeline: the whole, then a line per stage (the seed's table, one configuration).
std::string PipelineLines(const v1::Result& r) {
  if (!r.has_pipeline()) return "";
  const auto& p = r.pipeline();
  std::string o =
      F("  pipeline    %u stages x %u micro-batches of %u, checkpoint %s; %s parameters, model "
        "memory %s; peak allocated %s, activations %s (summed over stages); step %s ms, bubble "
        "%s\n",
        p.stages(), p.chunks(), p.micro_batch(), p.checkpoint().c_str(),
        p.has_parameters() ? F("%.2fM", double(p.parameters()) / 1e6).c_str() : "-",
        SizeIf(p.has_model_memory_bytes(), p.model_memory_bytes()).c_str(),
        SizeIf(p.has_peak_allocated_sum_bytes(), p.peak_allocated_sum_bytes()).c_str(),
        SizeIf(p.has_peak_activation_sum_bytes(), p.peak_activation_sum_bytes()).c_str(),
        MsIf(p.has_step_ms(), p.step_ms()).c_str(),
        p.has_bubble() ? F("%.0f%%", 100 * p.bubble()).c_str() : "-");
  o += F("  %-11s %-5s %-7s %-10s %-9s %-10s %-10s %-9s %-9s %-8s %-8s %-8s %-8s\n", "stages",
         "stage", "layers", "params", "model", "peak alloc", "activation", "peak RSS", "peak PSS",
         "fwd ms", "bwd ms", "wait ms", "other ms");
  auto ms = [](bool known, double v) { return known ? F("%.0f", v) : std::string("-"); };
  for (const auto& s : p.stage()) {
    o += F("  %-11s %-5u %-7s %-10s %-9s %-10s %-10s %-9s %-9s %-8s %-8s %-8s %-8s\n", "",
           s.stage(), F("%u-%u", s.first_layer(), s.end_layer() - 1).c_str(),
           s.has_parameters() ? F("%.2fM", double(s.parameters()) / 1e6).c_str() : "-",
           MibIf(s.has_model_memory_bytes(), s.model_memory_bytes()).c_str(),
           MibIf(s.has_peak_allocated_bytes(), s.peak_allocated_bytes()).c_str(),
           MibIf(s.has_peak_activation_bytes(), s.peak_activation_bytes()).c_str(),
           MibIf(s.has_peak_rss_bytes(), s.peak_rss_bytes()).c_str(),
           MibIf(s.has_peak_pss_bytes(), s.peak_pss_bytes()).c_str(),
           ms(s.has_forward_ms(), s.forward_ms()).c_str(),
           ms(s.has_backward_ms(), s.backward_ms()).c_str(),
           ms(s.has_wait_ms(), s.wait_ms()).c_str(), ms(s.has_other_ms(), s.other_ms()).c_str());
    if (s.has_cuda_device() || s.has_peak_reserved_bytes() || s.has_peak_gpu_memory_bytes()) {
      o += F("  %-11s %-5s cuda%s: peak reserved %s, peak GPU memory %s (NVML)\n", "", "",
             s.has_cuda_device() ? F(":%u", s.cuda_device()).c_str() : "",
             MibIf(s.has_peak_reserved_bytes(), s.peak_reserved_bytes()).c_str(),
             MibIf(s.has_peak_gpu_memory_bytes(), s.peak_gpu_memory_bytes()).c_str());
    }
  }
  return o;
}

}  // namespace

void Summarize(const KindRunFacts& f, v1::Result* r) { FillPipeline(f, f.workers, r); }

std::vector<Table> ReportTables(const KindTablesInput& in) {
  if (!AnyPipeline(in.points)) return {};
  return PipelineTables(in.points, in.fields);
}

std::string ResultLines(const v1::Result& r) { return PipelineLines(r); }

}  // namespace shoal::pipeline
