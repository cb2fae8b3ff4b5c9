// Will an experiment fit? Estimates what it will put in /dev/shm and its memory, and compares
// them with what the node has. The daemon refuses what does not fit unless the spec says force.
#pragma once

#include <cstdint>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct ExperimentEstimate {
  uint64_t shm_bytes = 0;     // data + weights + scoreboard segments
  uint64_t memory_bytes = 0;  // leader + workers (+ zygote), including the segments
};

// Per worker: LibTorch and the model (~200 MB) plus the step's buffers, ~7 MB a sample for the
// mnist_convnet (measured: 640-680 MB VmHWM at batch 64 with the step cache).
constexpr uint64_t kWorkerBaseBytes = 200ull << 20;
constexpr uint64_t kWorkerBytesPerSample = 7ull << 20;
constexpr uint64_t kLeaderBytes = 300ull << 20;

// Reads the dataset's IDX headers (not the data) to size the data segment.
StatusOr<ExperimentEstimate> EstimateExperiment(const v1::ExperimentSpec& spec);

struct NodeCapacity {
  uint64_t shm_free_bytes = 0;
  uint64_t memory_available_bytes = 0;
};
StatusOr<NodeCapacity> ReadNodeCapacity();

// RESOURCE_EXHAUSTED with both figures when the estimate exceeds the capacity.
Status Admit(const ExperimentEstimate& need, const NodeCapacity& have);

}  // namespace shoal
