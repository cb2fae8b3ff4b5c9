// data_loading (seed 003): one trainer fed by L loader processes through a ring of batch slots in
// shared memory; workers are the trainer (0) and the loaders (1..L).
#include <algorithm>

#include "shared/ipc/batch_ring.h"
#include "shared/kinds/data_loading/board.h"
#include "shared/kinds/data_loading/figures.h"
#include "shared/kinds/data_loading/loader_batch.h"
#include "shared/kinds/data_loading/ring.h"
#include "shared/kinds/kind.h"

namespace shoal {
namespace {

constexpr uint32_t kMaxPrefetch = 64;
constexpr uint32_t kMaxRingSlots = 1024;

void Defaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->data_loading().has_loaders()) s->mutable_data_loading()->set_loaders(0);
  if (!s->data_loading().has_prefetch())
    s->mutable_data_loading()->set_prefetch(2);  // DataLoader's prefetch_factor
  if (!s->data_loading().has_pin_memory()) s->mutable_data_loading()->set_pin_memory(false);
  // Too many loaders leave workers to the common default, so the refusal names loaders (Validate)
  // rather than a worker count the user never typed.
  if (!s->has_workers() && s->data_loading().loaders() < limits.max_workers)
    s->set_workers(s->data_loading().loaders() + 1);
  if (!s->has_epochs()) s->set_epochs(1);
  // The trainer takes every core, as a PyTorch training loop does; loaders run one thread each
  // (DataLoader workers call torch.set_num_threads(1)), so loaders and trainer compete on purpose.
  if (!s->has_threads()) s->set_threads(std::clamp<uint32_t>(limits.cores, 1, limits.max_threads));
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (uint64_t(s.data_loading().loaders()) + 1 >
      limits.max_workers) {  // 2^32-1 + 1 would wrap to 0
    return InvalidArgument("loaders: " + std::to_string(s.data_loading().loaders()) +
                           " is outside the allowed range 0.." +
                           std::to_string(limits.max_workers - 1));
  }
  if (s.workers() != s.data_loading().loaders() + 1) {
    return InvalidArgument("workers: data_loading runs the trainer and one worker per loader (" +
                           std::to_string(s.data_loading().loaders() + 1) + " for loaders " +
                           std::to_string(s.data_loading().loaders()) + "), not " +
                           std::to_string(s.workers()));
  }
  if (s.data_loading().prefetch() < 1 || s.data_loading().prefetch() > kMaxPrefetch) {
    return InvalidArgument("prefetch: " + std::to_string(s.data_loading().prefetch()) +
                           " is outside the allowed range 1.." + std::to_string(kMaxPrefetch));
  }
  if (DataLoadingRingSlots(s) > kMaxRingSlots) {
    return InvalidArgument(
        "prefetch: loaders x prefetch = " + std::to_string(DataLoadingRingSlots(s)) +
        " batches in flight, above " + std::to_string(kMaxRingSlots));
  }
  // Kept as a field so that records and sweeps name it when the CUDA path comes; until then
  // there is no GPU to copy to.
  if (s.data_loading().pin_memory()) {
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
  return std::max<uint32_t>(1, s.data_loading().loaders()) * s.data_loading().prefetch();
}

uint64_t DataLoadingRingBytes(const v1::ExperimentSpec& s) {
  if (s.data_loading().loaders() == 0) return 0;  // the trainer loads its own batches: no ring
  return BatchRing::Bytes(DataLoadingRingSlots(s), LoaderBatchBytes(s.batch_size(), 28 * 28));
}

KindRules DataLoadingRules() {
  KindRules k;
  k.name = "data_loading";
  k.references = {
      {"loaders",
       "data_loading: loader processes feeding the trainer (0: it loads its own batches); 0 .. "
       "`--max-workers` - 1"},
      {"prefetch",
       "data_loading: batches in flight per loader (the ring has max(1, loaders) x prefetch "
       "slots, at most 1024); 1 .. 64"},
      {"pin_memory",
       "data_loading: page-locked batches for copies to a GPU; `yes` is refused until "
       "data_loading has a CUDA path (it runs on the CPU only)"},
  };
  k.read_board = data_loading::ReadBoard;
  k.summary = "one trainer fed augmented batches by L loader processes through shared memory";
  k.models = {"mnist_convnet"};
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  k.fields = {
      {"loaders", "data_loading.loaders",
       "data_loading: loader processes feeding the trainer (0: it loads)", "0"},
      {"prefetch", "data_loading.prefetch", "data_loading: batches in flight per loader", "2"},
      {"pin_memory", "data_loading.pin_memory",
       "data_loading: page-locked batches for a GPU (refused: no CUDA path yet)", "no"},
  };
  k.ignores = {"model_file", "input", "loss",      "classes", "share",
               "batches",    "nodes", "node_rank", "master"};
  k.help_words = {{"threads", "the trainer's"}, {"workers", "loaders + 1"}};
  k.default_words = {{"threads", "cores"}, {"workers", "loaders + 1"}};
  k.summarize = data_loading::Summarize;
  k.epoch_column_header = "  load CPU s";
  k.epoch_cell = data_loading::EpochCell;
  k.report_tables = data_loading::ReportTables;
  k.spec_lines = data_loading::SpecLines;
  k.role_name = data_loading::RoleName;
  return k;
}

}  // namespace shoal
