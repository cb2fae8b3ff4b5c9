#include "shared/gpu.h"

#include <dlfcn.h>

#ifdef SHOAL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace shoal {
namespace {

// The few NVML entry points we use, declared here so no NVML header is needed to build.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlUtilization {
  unsigned int gpu, memory;
};

}  // namespace

GpuProbe ProbeGpus() {
  GpuProbe p;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    p.status = "no GPU: libnvidia-ml.so.1 (NVML) not found";
    return p;
  }
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(
      dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(
      dlsym(lib, "nvmlDeviceGetName"));
  auto mem = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*)>(
      dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  auto util = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, NvmlUtilization*)>(
      dlsym(lib, "nvmlDeviceGetUtilizationRates"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlShutdown"));
  if (!init || !count || !handle || !name || !mem || !util || !shutdown) {
    p.status = "no GPU: NVML lacks expected symbols";
    dlclose(lib);
    return p;
  }
  if (init() != 0) {
    p.status = "no GPU: nvmlInit failed (no driver loaded?)";
    dlclose(lib);
    return p;
  }
  unsigned n = 0;
  if (count(&n) == 0) {
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t h;
      if (handle(i, &h) != 0) continue;
      GpuDevice d;
      d.index = i;
      char buf[96] = {0};
      if (name(h, buf, sizeof buf) == 0) d.name = buf;
      NvmlMemory m{};
      if (mem(h, &m) == 0) {
        d.memory_total = m.total;
        d.memory_used = m.used;
      }
      NvmlUtilization u{};
      if (util(h, &u) == 0) d.util_percent = u.gpu;
      p.devices.push_back(d);
    }
  }
  shutdown();
  dlclose(lib);
  p.available = !p.devices.empty();
  if (!p.available) p.status = "no GPU: NVML reports 0 devices";
  return p;
}

int CudaDeviceCount(std::string* why) {
#ifdef SHOAL_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no GPU: CUDA runtime says ") + cudaGetErrorString(e);
    return -1;
  }
  return n;
#else
  *why = "no GPU: built without CUDA (SHOAL_WITH_CUDA=OFF)";
  return -1;
#endif
}

}  // namespace shoal
