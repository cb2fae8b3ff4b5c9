// data_parallel (seed 002): k replicas of one network, each on its own batches, their gradients
// averaged every step by an all-reduce through LibTorch's c10d (ProcessGroupGloo on the CPU).
#include "shared/ipc/layout.h"
#include "shared/kinds/data_parallel/board.h"
#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/kinds/data_parallel/figures.h"
#include "shared/kinds/kind.h"
#include "shared/spec/nodes.h"

namespace shoal {
namespace {

constexpr uint64_t kResNetParams = 11173962;
constexpr uint64_t kResNetBytesPerSample = 12ull << 20;  // activations kept for backward, measured

void Defaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->data_parallel().has_scaling()) s->mutable_data_parallel()->set_scaling("weak");
  if (!s->has_batch_size()) s->set_batch_size(32);  // the seed's "32 per GPU"
  if (!s->has_share()) s->set_share(false);         // replicas: never shared
  NodeDefaults(s, limits);
  // A ResNet-18 evaluation on the CPU costs as much as the run it follows: ask for it.
  if (s->model() == "resnet18_cifar" && !s->has_eval_samples()) s->set_eval_samples(0);
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (s.share()) {
    return InvalidArgument(
        "share: data_parallel keeps one replica per worker and averages gradients; "
        "shared weights are kind hogwild");
  }
  if (s.data_parallel().scaling() != "weak" && s.data_parallel().scaling() != "strong")
    return InvalidArgument("scaling: '" + s.data_parallel().scaling() +
                           "' is not one of weak, strong");
  RETURN_IF_ERROR(ValidateNodes(s, limits));
  if (s.data_parallel().scaling() == "strong" && s.batch_size() % WorldSize(s) != 0) {
    return InvalidArgument("batch_size: strong scaling splits the step's " +
                           std::to_string(s.batch_size()) + " samples evenly over the workers; " +
                           std::to_string(WorldSize(s)) + " does not divide it");
  }
  if (s.model() == "resnet18_cifar" && s.dataset() != "synthetic") {
    return InvalidArgument(
        "dataset: resnet18_cifar trains on CIFAR-shaped images and Debian packages no CIFAR; "
        "use dataset synthetic (a learnable 3x32x32 set made in memory)");
  }
  return Status::Ok();
}

StatusOr<ExperimentEstimate> Estimate(const v1::ExperimentSpec& s) {
  if (s.model() != "resnet18_cifar") return EstimateExperiment(s);
  ExperimentEstimate e;
  const DataHeader d = PlanData(6000, 1000, 32, 32, 3);
  const uint64_t weights = kResNetParams * 4;
  // The table of its ~120 tensors, their alignment, and BatchNorm's statistics: under 128 KiB.
  constexpr uint64_t kTableAndBuffers = 128 << 10;
  e.shm_bytes = d.total_bytes + AlignUp(sizeof(WeightsHeader)) + weights + kTableAndBuffers +
                BoardBytes(s.workers()) + sizeof(data_parallel::RendezvousHeader);
  // Each replica: weights, gradients, momentum, the bucket buffers, activations.
  const uint64_t per_worker =
      kWorkerBaseBytes + 4 * weights + kResNetBytesPerSample * WorkerBatch(s);
  e.memory_bytes = e.shm_bytes + kLeaderBytes + s.workers() * per_worker;
  return e;
}

}  // namespace

KindRules DataParallelRules() {
  KindRules k;
  k.name = "data_parallel";
  k.references = {
      {"scaling",
       "data_parallel: weak (`--batch-size` per worker: the step grows with the workers) | "
       "strong (`--batch-size` per step, split over the workers, which must divide it)"},
  };
  k.marks_steps = true;  // its replicas train with the hogwild trainer
  k.leader_without_libtorch = true;
  k.read_board = data_parallel::ReadBoard;
  k.summary = "k replicas, gradients averaged every step with c10d all-reduce (Gloo)";
  k.models = {"mnist_convnet", "resnet18_cifar", "torchscript"};
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  k.fields = {
      {"scaling", "data_parallel.scaling",
       "data_parallel: weak (batch_size per worker) | strong (batch_size per step, split)", "weak",
       true, "checkpoint"},  // where it has always been listed
  };
  k.help_words = {{"batch_size", "per worker with scaling weak, per step with strong"}};
  k.default_words = {{"eval_samples", "0 with resnet18_cifar, else 1000"}};
  k.world_size = WorldSize;
  k.global_rank = GlobalRank;
  k.worker_batch = WorkerBatch;
  k.summarize = data_parallel::Summarize;
  k.report_tables = data_parallel::ReportTables;
  k.result_lines = data_parallel::ResultLines;
  return k;
}

}  // namespace shoal
