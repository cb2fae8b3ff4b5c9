// data_loading (seed 003): one trainer fed by L loader processes through a ring of batch slots in
// shared memory; workers are the trainer (0) and the loaders (1..L).
#include <algorithm>

#include "shared/ipc/batch_ring.h"
#include "shared/kinds/data_loading/figures.h"
#include "shared/kinds/data_loading/loader_batch.h"
#include "shared/kinds/data_loading/ring.h"
#include "shared/kinds/kind.h"

namespace shoal {
namespace {

constexpr uint32_t kMaxPrefetch = 64;
constexpr uint32_t kMaxRingSlots = 1024;

void Defaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->has_loaders()) s->set_loaders(0);
  if (!s->has_prefetch()) s->set_prefetch(2);  // DataLoader's prefetch_factor
  if (!s->has_pin_memory()) s->set_pin_memory(false);
  // Too many loaders leave workers to the common default, so the refusal names loaders (Validate)
  // rather than a worker count the user never typed.
  if (!s->has_workers() && s->loaders() < limits.max_workers) s->set_workers(s->loaders() + 1);
  if (!s->has_epochs()) s->set_epochs(1);
  // The trainer takes every core, as a PyTorch training loop does; loaders run one thread each
  // (DataLoader workers call torch.set_num_threads(1)), so loaders and trainer compete on purpose.
  if (!s->has_threads()) s->set_threads(std::clamp<uint32_t>(limits.cores, 1, limits.max_threads));
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (uint64_t(s.loaders()) + 1 > limits.max_workers) {  // 2^32-1 + 1 would wrap to 0
    return InvalidArgument("loaders: " + std::to_string(s.loaders()) +
                           " is outside the allowed range 0.." +
                           std::to_string(limits.max_workers - 1));
  }
  if (s.workers() != s.loaders() + 1) {
    return InvalidArgument("workers: data_loading runs the trainer and one worker per loader (" +
                           std::to_string(s.loaders() + 1) + " for loaders " +
                           std::to_string(s.loaders()) + "), not " + std::to_string(s.workers()));
  }
  if (s.prefetch() < 1 || s.prefetch() > kMaxPrefetch) {
    return InvalidArgument("prefetch: " + std::to_string(s.prefetch()) +
                           " is outside the allowed range 1.." + std::to_string(kMaxPrefetch));
  }
  if (DataLoadingRingSlots(s) > kMaxRingSlots) {
    return InvalidArgument(
        "prefetch: loaders x prefetch = " + std::to_string(DataLoadingRingSlots(s)) +
        " batches in flight, above " + std::to_string(kMaxRingSlots));
  }
  // Kept as a field so that records and sweeps name it when the CUDA path comes; until then
  // there is no GPU to copy to.
  if (s.pin_memory()) {
    return InvalidArgument(
        "pin_memory: page-locked batches only speed up copies to a GPU, and data_loading runs on "
        "the CPU only (no CUDA path yet)");
  }
  if (!s.has_epochs())
    return InvalidArgument("epochs: data_loading trains whole epochs; give epochs");
  return Status::Ok();
}

StatusOr<ExperimentEstimate> Estimate(const v1::ExperimentSpec& s) {
  ASSIGN_OR_RETURN(ExperimentEstimate e, EstimateExperiment(s));
  const uint64_t ring = DataLoadingRingBytes(s);
  e.shm_bytes += ring;
  e.memory_bytes += ring;
  return e;
}

}  // namespace

uint32_t DataLoadingRingSlots(const v1::ExperimentSpec& s) {
  return std::max<uint32_t>(1, s.loaders()) * s.prefetch();
}

uint64_t DataLoadingRingBytes(const v1::ExperimentSpec& s) {
  if (s.loaders() == 0) return 0;  // the trainer loads its own batches: no ring
  return BatchRing::Bytes(DataLoadingRingSlots(s), LoaderBatchBytes(s.batch_size(), 28 * 28));
}

KindRules DataLoadingRules() {
  KindRules k;
  k.name = "data_loading";
  k.summary = "one trainer fed augmented batches by L loader processes through shared memory";
  k.models = {"mnist_convnet"};
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  k.foreign_fields = {"concurrent_steps", "model_file",   "input",   "loss",
                      "classes",          "share",        "batches", "models",
                      "iterations",       "scaling",      "nodes",   "node_rank",
                      "master",           "node_daemons", "layers",  "filters",
                      "stages",           "balance",      "chunks",  "checkpoint"};
  k.report_tables = data_loading::ReportTables;
  k.spec_lines = data_loading::SpecLines;
  k.role_name = data_loading::RoleName;
  return k;
}

}  // namespace shoal
