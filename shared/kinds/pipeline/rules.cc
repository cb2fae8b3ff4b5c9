// pipeline (seed 004): AmoebaNet-D cut into stages, one process each, on a GPipe schedule of
// micro-batches; activations and their gradients cross stage boundaries through shared memory.
#include <algorithm>

#include "shared/ipc/layout.h"
#include "shared/kinds/kind.h"
#include "shared/kinds/pipeline/board.h"
#include "shared/kinds/pipeline/figures.h"
#include "shared/kinds/pipeline/pipeline.h"

namespace shoal {
namespace {

// A micro-batch's activations inside a stage, kept for backward, per byte of the states that
// leave each of its layers: measured 3.5-4.1x on (18, 64) at batch 8 (stage peaks of 544 and
// 170 MB against 133 and 49 MB of states; 726 against 182 MB unsplit), so 5x with a margin.
constexpr uint64_t kActivationFactor = 5;

void Defaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->has_model()) s->set_model("amoebanet_d");
  if (!s->pipeline().has_layers()) s->mutable_pipeline()->set_layers(18);  // the seed's L
  if (!s->pipeline().has_filters())
    s->mutable_pipeline()->set_filters(64);  // the seed's D = 208 scaled by 1/3.25 for a CPU
  if (!s->pipeline().has_stages()) s->mutable_pipeline()->set_stages(1);
  // One process per stage; kept in range so that a bad stages is refused as stages, not as
  // workers, which the user did not type.
  if (!s->has_workers()) s->set_workers(std::clamp(s->pipeline().stages(), 1u, limits.max_workers));
  if (!s->pipeline().has_chunks()) s->mutable_pipeline()->set_chunks(1);
  if (!s->pipeline().has_checkpoint())
    s->mutable_pipeline()->set_checkpoint("except_last");  // torchgpipe's default
  if (!s->has_batch_size()) s->set_batch_size(8);
  if (!s->has_batches() && !s->has_epochs()) s->set_batches(2);  // the seed measures 2 steps
  if (!s->has_share()) s->set_share(false);
  if (!s->has_eval_samples()) s->set_eval_samples(0);
  if (!s->optimizer().has_name()) s->mutable_optimizer()->set_name("rmsprop");  // the seed's
}

Status ValidateShape(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  ASSIGN_OR_RETURN(std::vector<AmoebaLayer> plan, PipelinePlan(s));
  if (s.pipeline().stages() < 1 || s.pipeline().stages() > plan.size()) {
    return InvalidArgument("stages: " + std::to_string(s.pipeline().stages()) + " is outside 1.." +
                           std::to_string(plan.size()) + " (a stage holds at least one layer)");
  }
  if (s.pipeline().stages() > limits.max_workers) {
    return InvalidArgument("stages: " + std::to_string(s.pipeline().stages()) +
                           " is more than max workers " + std::to_string(limits.max_workers) +
                           " (a process per stage)");
  }
  if (s.pipeline().has_balance() && s.pipeline().balance().empty())
    return InvalidArgument(
        "balance: empty; give layers per stage, or leave it out for an even split");
  return ParseBalance(s.pipeline().balance(), s.pipeline().stages(), uint32_t(plan.size()))
      .status();
}

// A ring slot's message length is 32 bits: a micro-batch's activations at a stage boundary
// must fit in it (on CUDA too, where the slot's data is a device buffer of the same size).
Status ValidateSlots(const v1::ExperimentSpec& s) {
  ASSIGN_OR_RETURN(PipelineLayout layout, PlanPipeline(s));
  for (size_t r = 0; r < layout.rings.size(); r += 2) {
    if (layout.rings[r].slot_bytes <= UINT32_MAX) continue;
    return InvalidArgument(
        "batch_size: a micro-batch of " + std::to_string(s.batch_size() / s.pipeline().chunks()) +
        " images leaves stage " + std::to_string(r / 2) + " as " +
        std::to_string(layout.rings[r].slot_bytes) +
        " bytes of activations, more than a slot holds (4 GiB); give more chunks or a smaller "
        "batch_size or filters");
  }
  return Status::Ok();
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  RETURN_IF_ERROR(ValidateShape(s, limits));
  if (s.workers() != s.pipeline().stages()) {
    return InvalidArgument("workers: " + std::to_string(s.workers()) +
                           " but a pipeline runs one process per stage (stages " +
                           std::to_string(s.pipeline().stages()) + "); leave workers out");
  }
  if (s.pipeline().chunks() < 1 || s.batch_size() % s.pipeline().chunks() != 0) {
    return InvalidArgument("chunks: " + std::to_string(s.pipeline().chunks()) +
                           " micro-batches must split batch_size " +
                           std::to_string(s.batch_size()) + " evenly");
  }
  if (s.pipeline().checkpoint() != "never" && s.pipeline().checkpoint() != "except_last" &&
      s.pipeline().checkpoint() != "always")
    return InvalidArgument("checkpoint: '" + s.pipeline().checkpoint() +
                           "' is not one of never, except_last, always");
  if (s.share()) return InvalidArgument("share: a pipeline's stages hold different layers");
  if (s.dataset() != "synthetic") {
    return InvalidArgument(
        "dataset: pipeline trains on ImageNet-shaped random images as the seed does (3x224x224, "
        "1000 classes); use dataset synthetic");
  }
  if (s.eval_samples() != 0)
    return InvalidArgument("eval_samples: a pipeline has no test set (random images); give 0");
  if (s.has_epochs()) return InvalidArgument("epochs: a pipeline runs batches (steps)");
  return ValidateSlots(s);
}

StatusOr<ExperimentEstimate> Estimate(const v1::ExperimentSpec& s) {
  ASSIGN_OR_RETURN(PipelineLayout layout, PlanPipeline(s));
  const auto& plan = layout.plan;
  const auto& balance = layout.balance;
  ExperimentEstimate e;
  uint64_t rings = layout.total_bytes;
  if (s.device() == "cuda")  // the slots' data is on the GPU; their pages here are never touched
    for (const auto& r : layout.rings) rings -= uint64_t(r.slots) * r.slot_bytes;
  e.shm_bytes = BoardBytes(s.workers()) + rings;
  e.memory_bytes = e.shm_bytes + kLeaderBytes;
  const uint32_t micro = s.batch_size() / s.pipeline().chunks();
  for (uint32_t st = 0; st < s.pipeline().stages(); ++st) {
    const auto [begin, end] = StageLayers(balance, st);
    uint64_t params = 0, states = 0;
    for (uint32_t l = begin; l < end; ++l) {
      params += plan[l].params;
      states += StatesBytes(AmoebaStatesAfter(plan, l, micro));
    }
    // Micro-batches whose activations stay until backward: all of them without checkpointing,
    // the last (except_last) or none (always) with it; a recomputation holds one more.
    uint32_t kept = 0;
    for (uint32_t c = 0; c < s.pipeline().chunks(); ++c)
      kept += Checkpointed(s.pipeline().checkpoint(), c, s.pipeline().chunks()) ? 0 : 1;
    const uint32_t held = std::max<uint32_t>(kept, 1);
    // On CUDA the model and its activations are the GPU's, which is not admitted here.
    e.memory_bytes += s.device() == "cuda"
                          ? kCudaWorkerBytes
                          : kWorkerBaseBytes + 12 * params + kActivationFactor * states * held;
  }
  return e;
}

}  // namespace

KindRules PipelineRules() {
  KindRules k;
  k.name = "pipeline";
  k.references = {
      {"layers",
       "pipeline: AmoebaNet-D's L, the normal cells (L / 3 per group); a multiple of 3, 3 .. 300"},
      {"filters",
       "pipeline: AmoebaNet-D's D (the seed's 208 scaled by 1 / 3.25 for a CPU); a multiple of "
       "8, 8 .. 4096"},
      {"stages",
       "pipeline: stage processes the L + 6 layers are cut into (the workers: one per stage); 1 "
       ".. L + 6"},
      {"balance",
       "pipeline: layers per stage, comma-separated, summing to L + 6 (`16,8` for L = 18, 2 "
       "stages); not an axis"},
      {"chunks", "pipeline: micro-batches per mini-batch (GPipe's m), dividing `--batch-size`"},
      {"checkpoint",
       "pipeline: never | except_last | always — which micro-batches drop their activations in "
       "forward and recompute them in backward (torchgpipe's modes)"},
  };
  k.read_board = pipeline::ReadBoard;
  k.summary = "AmoebaNet-D cut into stage processes on a GPipe schedule (seed 004)";
  k.models = {"amoebanet_d"};
  k.devices = {"cpu", "cuda"};
  k.spreads_over_devices = true;
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  k.fields = {
      {"layers", "pipeline.layers", "pipeline: AmoebaNet-D's L (normal cells, a multiple of 3)",
       "18"},
      {"filters", "pipeline.filters", "pipeline: AmoebaNet-D's D (a multiple of 8)", "64"},
      {"stages", "pipeline.stages", "pipeline: stage processes the layers are cut into", "1"},
      {"balance", "pipeline.balance",
       "pipeline: layers per stage, comma-separated, summing to layers + 6", "as even as can be",
       false},
      {"chunks", "pipeline.chunks",
       "pipeline: micro-batches per mini-batch (must divide batch_size)", "1"},
      {"checkpoint", "pipeline.checkpoint",
       "pipeline: never | except_last | always (micro-batches recomputed in backward)",
       "except_last"},
  };
  k.ignores = {"model_file", "input", "loss",      "classes", "activations",
               "cuda_sync",  "nodes", "node_rank", "master"};
  k.default_words = {{"workers", "stages"},
                     {"cuda_devices", "stage i on device i mod the node's devices"}};
  k.summarize = pipeline::Summarize;
  k.report_tables = pipeline::ReportTables;
  k.result_lines = pipeline::ResultLines;
  return k;
}

}  // namespace shoal
