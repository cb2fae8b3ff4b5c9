// A run across nodes, as torchrun's --nnodes/--node-rank/--master-addr: the spec's nodes,
// node_rank and master, read by the kinds whose ranks meet (data_parallel, command) and refused
// by the others. Each node's part runs the same spec with its own node_rank; on Slurm the job's
// script gives each node its rank and the allocation's first node (docs/cluster.md).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "shared/endpoint.h"
#include "shared/spec/spec.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

inline StatusOr<std::pair<std::string, uint16_t>> ParseMaster(const std::string& master) {
  return ParseHostPort("master", master);
}
// torchrun's default store port: where node 0 hosts the c10d store unless `master` says otherwise.
constexpr uint16_t kDefaultMasterPort = 29500;
// The master of a run over several nodes placed on Slurm: the first node of its allocation, with
// a port from its job id, filled in on each node as the job starts (the array's script).
constexpr const char* kSlurmMaster = "slurm";

// nodes 1 and node_rank 0 unless given; on Slurm, over nodes > 1, master kSlurmMaster.
void NodeDefaults(v1::ExperimentSpec* s, const SpecLimits& limits);
// nodes 1..64, node_rank below it, master given exactly when nodes > 1 (a HOST:PORT, or
// kSlurmMaster on Slurm, where a master or node_rank of one's own is refused).
Status ValidateNodes(const v1::ExperimentSpec& s, const SpecLimits& limits);

}  // namespace shoal
