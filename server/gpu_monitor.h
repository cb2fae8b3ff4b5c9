// GPUs as NVML sees them. NVML is loaded with dlopen at run time, so the same binary runs on
// machines with and without a driver; without one, GPU figures are absent and say why, never 0.
//
// GpuMonitor is the seam in front of NVML: shoald reads devices and processes through it, and
// the tests put either a fake behind it (unit tests) or a fake libnvidia-ml.so.1 under the real
// one (tests/fake_nvml.cc, end to end).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

struct GpuDevice {
  uint32_t index = 0;
  std::string name, uuid;
  std::string compute_capability;                     // "9.0"; empty when NVML does not say
  std::optional<uint64_t> memory_total, memory_used;  // absent when NVML's query failed
  std::optional<uint32_t> util_percent;               // busy time over NVML's last sample period
  std::optional<uint32_t> power_mw;   // its power draw now (nvmlDeviceGetPowerUsage)
  std::optional<uint64_t> energy_mj;  // consumed since the driver loaded (Volta and newer)
  // GPM (Hopper and newer), over the interval since this device's previous reading, percent:
  // SMs busy, warps resident of the most an SM holds, tensor pipes busy, DRAM bandwidth used.
  // Absent on the first reading and where GPM is unsupported (gpm_status says why).
  std::optional<double> sm_active, sm_occupancy, tensor_active, dram_bw;
  std::string gpm_status;
};

// A process holding memory on a device (NVML's running compute processes). Host pids: in a
// container with its own pid namespace they are not the container's pids.
struct GpuProcess {
  pid_t pid = 0;
  uint32_t device = 0;
  std::optional<uint64_t> used_bytes;  // NVML may not know (some containers, MIG)
  std::optional<uint32_t> sm_percent;  // its share of the SMs, where NVML samples it
};

struct GpuReading {
  std::vector<GpuDevice> devices;
  std::vector<GpuProcess> processes;
};

struct GpuProbe {
  bool available = false;
  std::string status;  // why not, when not available
  std::vector<GpuDevice> devices;
  std::string driver_version, cuda_driver_version;  // empty when unknown
};

class GpuMonitor {
 public:
  virtual ~GpuMonitor() = default;
  // Devices and versions, or why there are none.
  virtual GpuProbe Probe() = 0;
  // Every device's memory and utilisation now, and the processes on them. FailedPrecondition
  // (saying why) without NVML or devices.
  virtual StatusOr<GpuReading> Read() = 0;
};

// NVML from $SHOAL_NVML_LIBRARY, else libnvidia-ml.so.1. Never fails: without NVML its Probe
// says why and Read refuses. Thread-safe.
std::unique_ptr<GpuMonitor> OpenNvml();

}  // namespace shoal
