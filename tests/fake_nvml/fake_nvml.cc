// A stand-in for libnvidia-ml.so.1: the part of NVML's C API Shoal calls, with scripted devices,
// processes and utilisation, so the whole GPU-telemetry path (dlopen, sampling, pid matching,
// storing, streaming, the report's GPU tables) runs end to end on a machine without a GPU.
//
// Scripted through the environment of the process that loads it (shoald):
//   SHOAL_FAKE_NVML_INIT_ERROR=N   nvmlInit_v2 returns N (e.g. 9: driver not loaded)
//   SHOAL_FAKE_NVML_DEVICES=N      devices (default 1)
//   SHOAL_FAKE_NVML_UTIL=P         every device's utilisation, percent (default 37)
//   SHOAL_FAKE_NVML_COMM=NAME      every process whose /proc/PID/comm is NAME runs on the GPU:
//                                  (PID % 61 + 1) MiB on device PID % N, SM share PID % 50 %
//   SHOAL_FAKE_NVML_FOREIGN_PID=P  also list process P with 3 GiB (someone else's)
//   SHOAL_FAKE_NVML_POWER_W=W      every device draws W watts (default 150); its energy counter
//                                  grows by W joules a second from 10^6 J when the library loads
//   SHOAL_FAKE_NVML_GPM=0          GPM unsupported (default: supported, SM active 61.5%,
//                                  occupancy 33.25%, tensor pipes 12.5%, DRAM bandwidth 44%)
// Device memory used = 512 MiB + its processes' memory; total 80 GiB.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "server/nvml_abi.h"

namespace {

using namespace shoal::nvml;  // NOLINT

constexpr unsigned long long kMiB = 1ull << 20;
int handles[16];
const auto kLoaded = std::chrono::steady_clock::now();

unsigned EnvNumber(const char* name, unsigned fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? unsigned(std::strtoul(v, nullptr, 10)) : fallback;
}

unsigned Devices() { return std::min(EnvNumber("SHOAL_FAKE_NVML_DEVICES", 1), 16u); }

int IndexOf(void* dev) { return int(static_cast<int*>(dev) - handles); }

std::string CommOf(const char* pid) {
  std::ifstream in(std::string("/proc/") + pid + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

// Whether `pid` descends from this process (the daemon that loaded the fake): another test's
// daemon's workers, running beside it under ctest -j2, are not this daemon's GPU processes.
bool OursDescendant(unsigned pid) {
  const unsigned self = unsigned(getpid());
  for (int depth = 0; depth < 8 && pid > 1; ++depth) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return false;
    unsigned ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %u", &state, &ppid) != 2) return false;
    if (ppid == self) return true;
    pid = ppid;
  }
  return false;
}

// The scripted processes on one device: the named ones among this daemon's descendants.
std::vector<ProcessInfo> ProcessesOn(unsigned device) {
  std::vector<ProcessInfo> out;
  const char* comm = std::getenv("SHOAL_FAKE_NVML_COMM");
  if (DIR* d = comm != nullptr ? opendir("/proc") : nullptr) {
    while (dirent* e = readdir(d)) {
      const unsigned pid = unsigned(std::strtoul(e->d_name, nullptr, 10));
      if (pid == 0 || pid % Devices() != device || CommOf(e->d_name) != comm) continue;
      if (!OursDescendant(pid)) continue;
      out.push_back({pid, (pid % 61 + 1) * kMiB, 0, 0});
    }
    closedir(d);
  }
  const unsigned foreign = EnvNumber("SHOAL_FAKE_NVML_FOREIGN_PID", 0);
  if (foreign != 0 && device == 0) out.push_back({foreign, 3072 * kMiB, 0, 0});
  return out;
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return int(EnvNumber("SHOAL_FAKE_NVML_INIT_ERROR", 0)); }
int nvmlShutdown() { return kSuccess; }

int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = Devices();
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev) {
  if (i >= Devices()) return kInvalidArgument;
  *dev = &handles[i];
  return kSuccess;
}

int nvmlDeviceGetName(void* dev, char* name, unsigned len) {
  std::snprintf(name, len, "Shoal Fake GPU %d", IndexOf(dev));
  return kSuccess;
}

int nvmlDeviceGetUUID(void* dev, char* uuid, unsigned len) {
  std::snprintf(uuid, len, "GPU-fake-%04d", IndexOf(dev));
  return kSuccess;
}

int nvmlDeviceGetCudaComputeCapability(void*, int* major, int* minor) {
  *major = 9;
  *minor = 0;
  return kSuccess;
}

int nvmlDeviceGetMemoryInfo(void* dev, Memory* m) {
  m->total = 80ull << 30;
  m->used = 512 * kMiB;
  for (const auto& p : ProcessesOn(unsigned(IndexOf(dev)))) m->used += p.used_gpu_memory;
  m->free = m->total - m->used;
  return kSuccess;
}

int nvmlDeviceGetUtilizationRates(void*, Utilization* u) {
  u->gpu = EnvNumber("SHOAL_FAKE_NVML_UTIL", 37);
  u->memory = u->gpu / 2;
  return kSuccess;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* dev, unsigned* count, ProcessInfo* infos) {
  const auto procs = ProcessesOn(unsigned(IndexOf(dev)));
  const bool fits = infos != nullptr && *count >= procs.size();
  const unsigned have = *count;
  *count = unsigned(procs.size());
  if (procs.empty()) return kSuccess;
  if (!fits) return kInsufficientSize;
  for (unsigned k = 0; k < procs.size() && k < have; ++k) infos[k] = procs[k];
  return kSuccess;
}

int nvmlDeviceGetProcessUtilization(void* dev, ProcessUtil* samples, unsigned* count,
                                    unsigned long long) {
  const auto procs = ProcessesOn(unsigned(IndexOf(dev)));
  if (samples == nullptr || *count < procs.size()) {
    *count = unsigned(procs.size());
    return kInsufficientSize;
  }
  const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  for (unsigned k = 0; k < procs.size(); ++k)
    samples[k] = {procs[k].pid, static_cast<unsigned long long>(now), procs[k].pid % 50, 0, 0, 0};
  *count = unsigned(procs.size());
  return kSuccess;
}

int nvmlDeviceGetPowerUsage(void*, unsigned* mw) {
  *mw = EnvNumber("SHOAL_FAKE_NVML_POWER_W", 150) * 1000;
  return kSuccess;
}

int nvmlDeviceGetTotalEnergyConsumption(void*, unsigned long long* mj) {
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - kLoaded).count();
  *mj = 1'000'000'000ull +
        static_cast<unsigned long long>(s * EnvNumber("SHOAL_FAKE_NVML_POWER_W", 150) * 1000);
  return kSuccess;
}

int nvmlGpmQueryDeviceSupport(void*, GpmSupport* s) {
  if (s->version != kGpmSupportVersion) return kInvalidArgument;
  s->is_supported_device = EnvNumber("SHOAL_FAKE_NVML_GPM", 1);
  return kSuccess;
}

int nvmlGpmSampleAlloc(GpmSample* s) {
  *s = new int(0);
  return kSuccess;
}

int nvmlGpmSampleFree(GpmSample s) {
  delete static_cast<int*>(s);
  return kSuccess;
}

int nvmlGpmSampleGet(void*, GpmSample s) {
  ++*static_cast<int*>(s);
  return kSuccess;
}

int nvmlGpmMetricsGet(GpmMetricsGet* m) {
  if (m->version != kGpmMetricsGetVersion || m->sample1 == nullptr || m->sample2 == nullptr)
    return kInvalidArgument;
  for (unsigned k = 0; k < m->num_metrics; ++k) {
    GpmMetric& x = m->metrics[k];
    x.nvml_return = kSuccess;
    switch (x.metric_id) {
      case kGpmSmUtil:
        x.value = 61.5;
        break;
      case kGpmSmOccupancy:
        x.value = 33.25;
        break;
      case kGpmAnyTensorUtil:
        x.value = 12.5;
        break;
      case kGpmDramBwUtil:
        x.value = 44.0;
        break;
      default:
        x.nvml_return = kInvalidArgument;
    }
  }
  return kSuccess;
}

int nvmlSystemGetDriverVersion(char* version, unsigned len) {
  std::snprintf(version, len, "999.99-fake");
  return kSuccess;
}

int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  *version = 13000;
  return kSuccess;
}

}  // extern "C"
