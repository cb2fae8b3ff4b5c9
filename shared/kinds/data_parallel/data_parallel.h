// data_parallel's arithmetic, kept free of LibTorch so shoald, the report and unit tests share it:
// how a step's batch splits over the replicas, how gradients are grouped into all-reduce buckets,
// and the bus bandwidth a ring all-reduce reached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/endpoint.h"
#include "shared/spec/nodes.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// Replicas over every node: workers x nodes.
uint32_t WorldSize(const v1::ExperimentSpec& spec);
// The global rank of this node's worker `index`: node_rank x workers + index.
uint32_t GlobalRank(const v1::ExperimentSpec& spec, uint32_t index);
// Each worker's batch: batch_size under weak scaling, batch_size / world size under strong
// scaling (the spec is refused when that does not divide). Every other kind: batch_size.
uint32_t WorkerBatch(const v1::ExperimentSpec& spec);
// One step of every replica on every node: batch_size x world size (weak), batch_size (strong).
uint32_t TotalBatch(const v1::ExperimentSpec& spec);

// PyTorch DistributedDataParallel's defaults: a small first bucket so the first all-reduce starts
// early in backward, then 25 MiB buckets.
constexpr uint64_t kFirstBucketBytes = 1ull << 20;
constexpr uint64_t kBucketBytes = 25ull << 20;

struct GradBucket {
  std::vector<size_t> params;  // indices into the parameter list, in the order backward makes them
  uint64_t bytes = 0;
};

// Groups parameters (their gradient sizes in bytes, in registration order) into buckets in
// reverse order — the order backward produces gradients — closing a bucket when the next
// parameter would take it past its cap (the first bucket's `first_cap`, the others' `cap`). A
// parameter larger than the cap gets a bucket of its own; no bucket is empty.
std::vector<GradBucket> AssignBuckets(const std::vector<uint64_t>& param_bytes, uint64_t first_cap,
                                      uint64_t cap);

// The bytes each of `world` ranks sends (and receives) in a ring all-reduce of `bytes`:
// 2(world-1)/world x bytes.
double RingBusBytes(uint64_t bytes, uint32_t world);
// Bus bandwidth in GB/s (1e9 bytes) of all-reducing `bytes` in `seconds`; nullopt when it is
// undefined (one rank: nothing moves; no time measured).
std::optional<double> BusBandwidthGbps(uint64_t bytes, uint32_t world, double seconds);

}  // namespace shoal
