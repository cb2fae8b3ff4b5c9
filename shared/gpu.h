// GPUs as NVML sees them. NVML is loaded with dlopen at run time, so the same binary runs on
// machines with and without a driver; without one, GPU figures are absent, never zero.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shoal {

struct GpuDevice {
  uint32_t index = 0;
  std::string name;
  uint64_t memory_total = 0, memory_used = 0;
  uint32_t util_percent = 0;
};

struct GpuProbe {
  bool available = false;
  std::string status;  // why not, when not available
  std::vector<GpuDevice> devices;
};

GpuProbe ProbeGpus();

// Devices the CUDA runtime sees, when built with SHOAL_WITH_CUDA; -1 with a reason otherwise.
int CudaDeviceCount(std::string* why);

}  // namespace shoal
