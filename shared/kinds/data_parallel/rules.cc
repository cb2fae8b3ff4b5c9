// data_parallel (seed 002): k replicas of one network, each on its own batches, their gradients
// averaged every step by an all-reduce through LibTorch's c10d (ProcessGroupGloo on the CPU).
#include "shared/ipc/layout.h"
#include "shared/kinds/data_parallel/board.h"
#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/kinds/data_parallel/figures.h"
#include "shared/kinds/kind.h"

namespace shoal {
namespace {

constexpr uint64_t kResNetParams = 11173962;
constexpr uint64_t kResNetBytesPerSample = 12ull << 20;  // activations kept for backward, measured

// On Slurm the allocation says where each node's part runs: its rank is its place in the job,
// and node 0 is the master.
Status ValidateOnSlurm(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  const bool slurm_master = s.data_parallel().master() == kSlurmMaster;
  if (slurm_master && !limits.placed_on_slurm)
    return InvalidArgument(std::string("master: ") + kSlurmMaster +
                           " is the first node of a Slurm allocation: only on Slurm (--slurm)");
  if (!limits.placed_on_slurm || s.data_parallel().nodes() < 2) return Status::Ok();
  if (!slurm_master)
    return InvalidArgument(
        "master: on Slurm the first node of the allocation hosts the c10d "
        "store; leave master out");
  if (s.data_parallel().has_node_rank() && s.data_parallel().node_rank() != 0)
    return InvalidArgument(
        "node_rank: on Slurm each node's rank is its place in the allocation; "
        "leave node_rank out");
  return Status::Ok();
}

Status ValidateNodes(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (s.data_parallel().nodes() < 1 || s.data_parallel().nodes() > 64)
    return InvalidArgument("nodes: " + std::to_string(s.data_parallel().nodes()) +
                           " is outside 1..64");
  RETURN_IF_ERROR(ValidateOnSlurm(s, limits));
  if (s.data_parallel().node_rank() >= s.data_parallel().nodes()) {
    return InvalidArgument("node_rank: " + std::to_string(s.data_parallel().node_rank()) +
                           " is not below nodes (" + std::to_string(s.data_parallel().nodes()) +
                           ")");
  }
  if (s.data_parallel().nodes() == 1 && s.data_parallel().has_master())
    return InvalidArgument("master: only with nodes > 1 (one node meets on a port it picks)");
  if (s.data_parallel().nodes() > 1 && !s.data_parallel().has_master())
    return InvalidArgument("master: nodes " + std::to_string(s.data_parallel().nodes()) +
                           " need HOST:PORT where node 0's worker 0 hosts the c10d store");
  if (s.data_parallel().has_master() && s.data_parallel().master() != kSlurmMaster)
    RETURN_IF_ERROR(ParseMaster(s.data_parallel().master()).status());
  return Status::Ok();
}

void Defaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->data_parallel().has_scaling()) s->mutable_data_parallel()->set_scaling("weak");
  if (!s->has_batch_size()) s->set_batch_size(32);  // the seed's "32 per GPU"
  if (!s->has_share()) s->set_share(false);         // replicas: never shared
  if (!s->data_parallel().has_nodes()) s->mutable_data_parallel()->set_nodes(1);
  if (!s->data_parallel().has_node_rank()) s->mutable_data_parallel()->set_node_rank(0);
  if (limits.placed_on_slurm && s->data_parallel().nodes() > 1 && !s->data_parallel().has_master())
    s->mutable_data_parallel()->set_master(kSlurmMaster);
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
      {"nodes",
       "data_parallel: nodes the experiment spans, one shoald each (see \"Several nodes\"); 1 "
       ".. 64"},
      {"node_rank", "data_parallel: this daemon's node, 0 .. nodes - 1"},
      {"master",
       "data_parallel with `--nodes` > 1 (required then, refused otherwise): HOST:PORT where "
       "node 0's worker 0 hosts the c10d store"},
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
      {"nodes", "data_parallel.nodes", "data_parallel: nodes the experiment spans, one shoald each",
       "1"},
      {"node_rank", "data_parallel.node_rank", "data_parallel: this daemon's node (0 .. nodes - 1)",
       "0"},
      {"master", "data_parallel.master",
       "data_parallel with nodes > 1: HOST:PORT where node 0's worker 0 hosts the c10d store",
       "none (on Slurm: the allocation's first node)"},
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
