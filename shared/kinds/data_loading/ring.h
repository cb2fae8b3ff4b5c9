// data_loading's batch ring in shared memory, as the daemon's admission and the trainer size it.
#pragma once

#include <cstdint>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

// max(1, loaders) x prefetch slots, each a whole batch; 0 bytes with no loaders (the trainer
// makes its batches itself).
uint32_t DataLoadingRingSlots(const v1::ExperimentSpec& spec);
uint64_t DataLoadingRingBytes(const v1::ExperimentSpec& spec);

}  // namespace shoal
