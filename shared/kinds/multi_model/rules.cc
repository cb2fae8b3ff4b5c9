// multi_model (seed 001): n independent Linear(256, 512) models trained three ways, each way in
// its own worker process, one after the other.
#include <cstdio>

#include "shared/ipc/layout.h"
#include "shared/kinds/kind.h"
#include "shared/kinds/multi_model/board.h"
#include "shared/kinds/multi_model/figures.h"
#include "shared/kinds/multi_model/variants.h"

namespace shoal {
namespace {

constexpr uint64_t kParamsPerModel = 256 * 512 + 512;  // 131,584

void Defaults(v1::ExperimentSpec* s, const SpecLimits&) {
  if (!s->has_model()) s->set_model("linear_256_512");
  if (!s->multi_model().has_models()) s->mutable_multi_model()->set_models(1);
  if (!s->multi_model().has_iterations()) s->mutable_multi_model()->set_iterations(1000);
  if (!s->has_batch_size()) s->set_batch_size(32);  // the original's
  if (!s->has_seed()) s->set_seed(114514);          // the original's
  if (!s->has_workers())
    s->set_workers(uint32_t(MultiModelVariants(s->multi_model().models()).size()));
  auto* o = s->mutable_optimizer();
  if (!o->has_name()) o->set_name("sgd");
  if (o->name() == "sgd" && !o->has_momentum()) o->set_momentum(0.9);  // the original's
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits&) {
  if (s.multi_model().models() < 1 || s.multi_model().models() > 256) {
    return InvalidArgument("models: " + std::to_string(s.multi_model().models()) +
                           " is outside the allowed range 1..256");
  }
  if (s.multi_model().iterations() < 1 || s.multi_model().iterations() > 1000000) {
    return InvalidArgument("iterations: " + std::to_string(s.multi_model().iterations()) +
                           " is outside the allowed range 1..1000000");
  }
  const size_t variants = MultiModelVariants(s.multi_model().models()).size();
  if (s.workers() != variants) {
    return InvalidArgument("workers: multi_model runs one worker per variant (" +
                           std::to_string(variants) + " for models " +
                           std::to_string(s.multi_model().models()) + "), not " +
                           std::to_string(s.workers()));
  }
  return Status::Ok();
}

StatusOr<ExperimentEstimate> Estimate(const v1::ExperimentSpec& s) {
  ExperimentEstimate e;
  e.shm_bytes = BoardBytes(s.workers());
  // Weights, gradients and momentum of n models, the batch's activations, and LibTorch itself.
  const uint64_t params = kParamsPerModel * s.multi_model().models() * 4 * 3;
  const uint64_t activations =
      uint64_t(s.batch_size()) * s.multi_model().models() * (256 + 512) * 4 * 4;
  e.memory_bytes = s.workers() * (params + activations + (300ull << 20));
  return e;
}

}  // namespace

std::vector<std::string> MultiModelVariants(uint32_t models) {
  if (models <= 1) return {"linear", "conv1d"};
  return {"mlinear", "mconv1d", "gconv1d"};
}

KindRules MultiModelRules() {
  KindRules k;
  k.name = "multi_model";
  k.references = {
      {"models", "multi_model: n independent Linear(256, 512) models; 1 .. 256"},
      {"iterations", "multi_model: training iterations of each variant; 1 .. 1000000"},
  };
  k.read_board = multi_model::ReadBoard;
  k.summary = "n Linear(256, 512) models as n Linears, n Conv1d(k=1) and one grouped Conv1d";
  k.models = {"linear_256_512"};
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  k.fields = {
      {"models", "multi_model.models", "multi_model: independent models trained at once (n)", "1"},
      {"iterations", "multi_model.iterations", "multi_model: training iterations of each variant",
       "1000"},
  };
  k.ignores = {"model_file",   "input", "loss",      "classes", "activations",
               "dataset",      "share", "batches",   "epochs",  "epoch_samples",
               "eval_samples", "nodes", "node_rank", "master"};
  k.help_words = {{"workers", "one per variant"}};
  k.default_words = {{"workers", "one per variant: 2 for models 1, else 3"}};
  k.summarize = multi_model::Summarize;
  k.report_tables = multi_model::ReportTables;
  k.spec_lines = multi_model::SpecLines;
  k.detail_lines = multi_model::DetailLines;
  return k;
}

}  // namespace shoal
