// data_parallel (seed 002): k replicas of one network, each on its own batches, their gradients
// averaged every step by an all-reduce through LibTorch's c10d (ProcessGroupGloo on the CPU).
#include "shared/ipc/layout.h"
#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/kinds/data_parallel/figures.h"
#include "shared/kinds/kind.h"

namespace shoal {
namespace {

constexpr uint64_t kResNetParams = 11173962;
constexpr uint64_t kResNetBytesPerSample = 12ull << 20;  // activations kept for backward, measured

Status ValidateNodes(const v1::ExperimentSpec& s) {
  if (s.nodes() < 1 || s.nodes() > 64)
    return InvalidArgument("nodes: " + std::to_string(s.nodes()) + " is outside 1..64");
  if (s.node_rank() >= s.nodes()) {
    return InvalidArgument("node_rank: " + std::to_string(s.node_rank()) + " is not below nodes (" +
                           std::to_string(s.nodes()) + ")");
  }
  if (s.nodes() == 1 && s.has_master())
    return InvalidArgument("master: only with nodes > 1 (one node meets on a port it picks)");
  if (s.nodes() > 1 && !s.has_master())
    return InvalidArgument("master: nodes " + std::to_string(s.nodes()) +
                           " need HOST:PORT where node 0's worker 0 hosts the c10d store");
  if (s.has_master()) RETURN_IF_ERROR(ParseMaster(s.master()).status());
  return Status::Ok();
}

// With node_daemons this daemon federates: nodes and master follow from the list, and each part
// gets its own node_rank (one given here would be overwritten, so it is refused).
Status ValidateFederated(const v1::ExperimentSpec& s) {
  if (!s.has_node_daemons()) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<std::string> daemons, ParseNodeDaemons(s.node_daemons()));
  if (s.nodes() != daemons.size()) {
    return InvalidArgument("nodes: " + std::to_string(s.nodes()) + " but node_daemons names " +
                           std::to_string(daemons.size()) + " daemons");
  }
  if (s.has_node_rank()) {
    return InvalidArgument(
        "node_rank: the federating daemon gives each node its rank (its place in node_daemons); "
        "leave node_rank out with node_daemons");
  }
  return Status::Ok();
}

void FederatedDefaults(v1::ExperimentSpec* s) {
  auto daemons = ParseNodeDaemons(s->node_daemons());
  if (!daemons.ok()) return;  // Validate says why
  if (!s->has_nodes()) s->set_nodes(uint32_t(daemons->size()));
  if (!s->has_master()) s->set_master(DefaultMaster(daemons->front()));
}

void Defaults(v1::ExperimentSpec* s, const SpecLimits&) {
  if (!s->has_scaling()) s->set_scaling("weak");
  if (!s->has_batch_size()) s->set_batch_size(32);  // the seed's "32 per GPU"
  if (!s->has_share()) s->set_share(false);         // replicas: never shared
  if (s->has_node_daemons()) {
    FederatedDefaults(s);
  } else {
    if (!s->has_nodes()) s->set_nodes(1);
    if (!s->has_node_rank()) s->set_node_rank(0);
  }
  // A ResNet-18 evaluation on the CPU costs as much as the run it follows: ask for it.
  if (s->model() == "resnet18_cifar" && !s->has_eval_samples()) s->set_eval_samples(0);
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits&) {
  if (s.share()) {
    return InvalidArgument(
        "share: data_parallel keeps one replica per worker and averages gradients; "
        "shared weights are kind hogwild");
  }
  if (s.scaling() != "weak" && s.scaling() != "strong")
    return InvalidArgument("scaling: '" + s.scaling() + "' is not one of weak, strong");
  RETURN_IF_ERROR(ValidateFederated(s));
  RETURN_IF_ERROR(ValidateNodes(s));
  if (s.scaling() == "strong" && s.batch_size() % WorldSize(s) != 0) {
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
                BoardBytes(s.workers()) + sizeof(RendezvousHeader);
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
  k.marks_steps = true;  // its replicas train with the hogwild trainer
  k.leader_without_libtorch = true;
  k.summary = "k replicas, gradients averaged every step with c10d all-reduce (Gloo)";
  k.models = {"mnist_convnet", "resnet18_cifar", "torchscript"};
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  k.foreign_fields = {"concurrent_steps", "models",     "iterations", "loaders",
                      "prefetch",         "pin_memory", "layers",     "filters",
                      "stages",           "balance",    "chunks",     "checkpoint"};
  k.summarize = data_parallel::Summarize;
  k.report_tables = data_parallel::ReportTables;
  k.result_lines = data_parallel::ResultLines;
  return k;
}

}  // namespace shoal
