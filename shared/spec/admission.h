// Will an experiment fit? Estimates what it will put in /dev/shm and its memory, and compares
// them with what the node has. The daemon refuses what does not fit unless the spec says force.
#pragma once

#include <cstdint>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct ExperimentEstimate {
  uint64_t shm_bytes = 0;     // data + weights + scoreboard segments
  uint64_t memory_bytes = 0;  // leader + workers (+ forkserver), including the segments
};

// Per worker: LibTorch and the model (~200 MB) plus the step's buffers, ~7 MB a sample for the
// mnist_convnet (measured: 640-680 MB VmHWM at batch 64 with the step cache).
constexpr uint64_t kWorkerBaseBytes = 200ull << 20;
constexpr uint64_t kWorkerBytesPerSample = 7ull << 20;
constexpr uint64_t kLeaderBytes = 300ull << 20;
// A worker on CUDA: the step's buffers are on the device, but LibTorch with CUDA and the driver
// cost more host memory than LibTorch alone (measured on an H100 node: 0.44 GiB PSS a forked
// worker, 0.60 GiB a spawned one, whatever the batch). GPU memory is not admitted here.
constexpr uint64_t kCudaWorkerBytes = 640ull << 20;

// Reads the dataset's IDX headers (not the data) to size the data segment.
StatusOr<ExperimentEstimate> EstimateExperiment(const v1::ExperimentSpec& spec);

struct NodeCapacity {
  uint64_t shm_free_bytes = 0;
  uint64_t memory_available_bytes = 0;
  // What the running experiment holds (its latest PSS sum, its segments): a run queued behind it
  // starts only once it has ended and given them back.
  uint64_t running_memory_bytes = 0;
  uint64_t running_shm_bytes = 0;
};
StatusOr<NodeCapacity> ReadNodeCapacity();

// RESOURCE_EXHAUSTED with both figures when the estimate exceeds the capacity.
Status Admit(const ExperimentEstimate& need, const NodeCapacity& have);

}  // namespace shoal
