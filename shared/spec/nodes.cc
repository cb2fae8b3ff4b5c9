#include "shared/spec/nodes.h"

namespace shoal {
namespace {

// On Slurm the allocation says where each node's part runs: its rank is its place in the job,
// and node 0 is the master.
Status ValidateOnSlurm(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  const bool slurm_master = s.master() == kSlurmMaster;
  if (slurm_master && !limits.placed_on_slurm)
    return InvalidArgument(std::string("master: ") + kSlurmMaster +
                           " is the first node of a Slurm allocation: only on Slurm (--slurm)");
  if (!limits.placed_on_slurm || s.nodes() < 2) return Status::Ok();
  if (!slurm_master)
    return InvalidArgument(
        "master: on Slurm the first node of the allocation hosts the c10d store; leave master "
        "out");
  if (s.has_node_rank() && s.node_rank() != 0)
    return InvalidArgument(
        "node_rank: on Slurm each node's rank is its place in the allocation; leave node_rank "
        "out");
  return Status::Ok();
}

}  // namespace

void NodeDefaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->has_nodes()) s->set_nodes(1);
  if (!s->has_node_rank()) s->set_node_rank(0);
  if (limits.placed_on_slurm && s->nodes() > 1 && !s->has_master()) s->set_master(kSlurmMaster);
}

Status ValidateNodes(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (s.nodes() < 1 || s.nodes() > 64)
    return InvalidArgument("nodes: " + std::to_string(s.nodes()) + " is outside 1..64");
  RETURN_IF_ERROR(ValidateOnSlurm(s, limits));
  if (s.node_rank() >= s.nodes())
    return InvalidArgument("node_rank: " + std::to_string(s.node_rank()) + " is not below nodes (" +
                           std::to_string(s.nodes()) + ")");
  if (s.nodes() == 1 && s.has_master())
    return InvalidArgument("master: only with nodes > 1 (one node meets on a port it picks)");
  if (s.nodes() > 1 && !s.has_master())
    return InvalidArgument("master: nodes " + std::to_string(s.nodes()) +
                           " need HOST:PORT where node 0's worker 0 hosts the c10d store");
  if (s.has_master() && s.master() != kSlurmMaster)
    RETURN_IF_ERROR(ParseMaster(s.master()).status());
  return Status::Ok();
}

}  // namespace shoal
