// LibTorch's CUDA caching allocator's own figures, the ones torch.cuda.max_memory_allocated and
// max_memory_reserved (the seed's max_memory_cached) read. Only a worker built against a LibTorch
// with CUDA (a GPU node's) has them; elsewhere they are unknown.
#pragma once

#include <cstdint>
#include <optional>

#include "shared/ipc/layout.h"

namespace shoal {

struct DeviceMemoryPeaks {
  uint64_t allocated = 0;  // bytes in live tensors, at their peak
  uint64_t reserved = 0;   // bytes the allocator held from the driver, at their peak
};

// The peaks on CUDA device `device` since the last reset; nullopt without CUDA in this LibTorch.
std::optional<DeviceMemoryPeaks> CudaMemoryPeaks(int device);
// Starts a new peak from what is held now; nothing without CUDA.
void ResetCudaMemoryPeaks(int device);
// Raises the slot's device_alloc/reserved peaks to device `device`'s; nothing without CUDA.
void RecordCudaMemoryPeaks(int device, WorkerSlot* slot);

}  // namespace shoal
