#include "worker/cuda_memory.h"

#include <algorithm>

#ifdef SHOAL_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace shoal {

#ifdef SHOAL_TORCH_CUDA
// Index 0 of each StatArray is StatType::AGGREGATE (every pool), in LibTorch 1.13 as in 2.x,
// where the enum moved namespaces.
std::optional<DeviceMemoryPeaks> CudaMemoryPeaks(int device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return DeviceMemoryPeaks{uint64_t(stats.allocated_bytes[0].peak),
                           uint64_t(stats.reserved_bytes[0].peak)};
}
void ResetCudaMemoryPeaks(int device) { c10::cuda::CUDACachingAllocator::resetPeakStats(device); }
#else
std::optional<DeviceMemoryPeaks> CudaMemoryPeaks(int) { return std::nullopt; }
void ResetCudaMemoryPeaks(int) {}
#endif

void RecordCudaMemoryPeaks(int device, WorkerSlot* slot) {
  auto keep_max = [](std::atomic<uint64_t>& a, uint64_t v) { a.store(std::max(a.load(), v)); };
  if (auto p = CudaMemoryPeaks(device)) {
    keep_max(slot->device_alloc_peak_bytes, p->allocated);
    keep_max(slot->device_reserved_peak_bytes, p->reserved);
  }
}

}  // namespace shoal
