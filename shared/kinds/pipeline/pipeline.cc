#include "shared/kinds/pipeline/pipeline.h"

#include <numeric>

#include "shared/ipc/batch_ring.h"
#include "shared/spec/spec.h"

namespace shoal {

StatusOr<std::vector<uint32_t>> ParseBalance(const std::string& text, uint32_t stages,
                                             uint32_t layers) {
  std::vector<uint32_t> out;
  if (text.empty()) {
    for (uint32_t s = 0; s < stages; ++s) out.push_back(layers / stages + (s < layers % stages));
  } else {
    ASSIGN_OR_RETURN(out, ParseCommaList("balance", text, "layer counts"));
  }
  if (out.size() != stages) {
    return InvalidArgument("balance: " + std::to_string(out.size()) + " stage(s) in '" + text +
                           "' but stages is " + std::to_string(stages));
  }
  const uint64_t sum = std::accumulate(out.begin(), out.end(), uint64_t(0));
  for (uint32_t n : out)
    if (n == 0) return InvalidArgument("balance: a stage with 0 layers in '" + text + "'");
  if (sum != layers) {
    return InvalidArgument("balance: '" + text + "' sums to " + std::to_string(sum) +
                           " but the model has " + std::to_string(layers) +
                           " layers (AmoebaNet-D: L + 6)");
  }
  return out;
}

std::pair<uint32_t, uint32_t> StageLayers(const std::vector<uint32_t>& balance, uint32_t stage) {
  const uint32_t begin = std::accumulate(balance.begin(), balance.begin() + stage, 0u);
  return {begin, begin + balance[stage]};
}

std::vector<std::vector<int64_t>> AmoebaStatesAfter(const std::vector<AmoebaLayer>& plan,
                                                    uint32_t layer, uint32_t batch) {
  const int64_t b = batch;
  int64_t side = kPipelineSide / 2;  // the stem's stride
  std::vector<std::vector<int64_t>> states = {{b, plan[0].channels, side, side}};
  for (uint32_t i = 1; i <= layer && i < plan.size(); ++i) {
    const AmoebaLayer& l = plan[i];
    if (!l.is_cell) return {{b, kPipelineClasses}};
    if (l.cell.reduction) side /= 2;
    const std::vector<int64_t> skip = states[0];
    states = {{b, int64_t(l.cell.out_channels()), side, side}, skip};
  }
  return states;
}

uint64_t StatesBytes(const std::vector<std::vector<int64_t>>& shapes) {
  uint64_t n = 0;
  for (const auto& s : shapes)
    n += 4 * uint64_t(std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>()));
  return n;
}

uint64_t PipelineSlotBytes(const std::vector<AmoebaLayer>& plan, uint32_t last_layer,
                           uint32_t micro_batch) {
  const auto shapes = AmoebaStatesAfter(plan, last_layer, micro_batch);
  return 8 + (kTensorHeaderBytes * shapes.size()) + StatesBytes(shapes);
}

StatusOr<PipelineLayout> PlanPipeline(const v1::ExperimentSpec& spec) {
  PipelineLayout out;
  ASSIGN_OR_RETURN(out.plan, PipelinePlan(spec));
  ASSIGN_OR_RETURN(out.balance, ParseBalance(spec.pipeline().balance(), spec.pipeline().stages(),
                                             uint32_t(out.plan.size())));
  if (spec.pipeline().chunks() == 0 || spec.batch_size() % spec.pipeline().chunks() != 0)
    return InvalidArgument("chunks: must split batch_size evenly");
  const uint32_t micro = spec.batch_size() / spec.pipeline().chunks();
  if (spec.pipeline().stages() > 1)  // the exports, a page or more
    out.total_bytes =
        (2 * (spec.pipeline().stages() - 1) * sizeof(CudaExport) + 4095) / 4096 * 4096;
  for (uint32_t b = 0; b + 1 < spec.pipeline().stages(); ++b) {
    PipelineRing r;
    r.slots = spec.pipeline().chunks();
    r.slot_bytes = PipelineSlotBytes(out.plan, StageLayers(out.balance, b).second - 1, micro);
    r.bytes = (BatchRing::Bytes(r.slots, r.slot_bytes) + 4095) / 4096 * 4096;
    for (int dir = 0; dir < 2; ++dir) {  // forward, then backward: the same shapes
      r.offset = out.total_bytes;
      out.rings.push_back(r);
      out.total_bytes += r.bytes;
    }
  }
  return out;
}

CudaExport* RingExport(void* base, uint32_t ring) { return static_cast<CudaExport*>(base) + ring; }

bool Checkpointed(const std::string& mode, uint32_t chunk, uint32_t chunks) {
  if (mode == "always") return true;
  if (mode == "except_last") return chunk + 1 < chunks;
  return false;
}

StatusOr<std::vector<AmoebaLayer>> PipelinePlan(const v1::ExperimentSpec& spec) {
  return PlanAmoebaNet(spec.pipeline().layers(), spec.pipeline().filters(), kPipelineClasses);
}

}  // namespace shoal
