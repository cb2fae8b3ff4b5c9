#include "server/gpu_monitor.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "server/nvml_abi.h"

namespace shoal {
namespace {

using namespace nvml;  // NOLINT: the ABI's names read best unqualified here

struct Api {
  Ret (*init)();
  Ret (*shutdown)();
  Ret (*count)(unsigned*);
  Ret (*handle)(unsigned, Dev*);
  Ret (*name)(Dev, char*, unsigned);
  Ret (*memory)(Dev, Memory*);
  Ret (*utilization)(Dev, Utilization*);
  Ret (*processes)(Dev, unsigned*, ProcessInfo*);
  // Optional: older drivers or odd builds may lack them; their figures are then absent.
  Ret (*uuid)(Dev, char*, unsigned);
  Ret (*capability)(Dev, int*, int*);
  Ret (*process_util)(Dev, ProcessUtil*, unsigned*, unsigned long long);
  Ret (*driver_version)(char*, unsigned);
  Ret (*cuda_version)(int*);
};

template <typename F>
void Bind(void* lib, const char* symbol, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, symbol));
}

// The library's entry points, or why they cannot be had.
std::string BindApi(void* lib, Api* a) {
  Bind(lib, "nvmlInit_v2", &a->init);
  Bind(lib, "nvmlShutdown", &a->shutdown);
  Bind(lib, "nvmlDeviceGetCount_v2", &a->count);
  Bind(lib, "nvmlDeviceGetHandleByIndex_v2", &a->handle);
  Bind(lib, "nvmlDeviceGetName", &a->name);
  Bind(lib, "nvmlDeviceGetMemoryInfo", &a->memory);
  Bind(lib, "nvmlDeviceGetUtilizationRates", &a->utilization);
  Bind(lib, "nvmlDeviceGetComputeRunningProcesses_v3", &a->processes);
  if (a->processes == nullptr) Bind(lib, "nvmlDeviceGetComputeRunningProcesses_v2", &a->processes);
  Bind(lib, "nvmlDeviceGetUUID", &a->uuid);
  Bind(lib, "nvmlDeviceGetCudaComputeCapability", &a->capability);
  Bind(lib, "nvmlDeviceGetProcessUtilization", &a->process_util);
  Bind(lib, "nvmlSystemGetDriverVersion", &a->driver_version);
  Bind(lib, "nvmlSystemGetCudaDriverVersion_v2", &a->cuda_version);
  if (!a->init || !a->shutdown || !a->count || !a->handle || !a->name || !a->memory ||
      !a->utilization || !a->processes)
    return "NVML lacks the entry points Shoal needs (a driver older than CUDA 11?)";
  return "";
}

class NvmlMonitor final : public GpuMonitor {
 public:
  explicit NvmlMonitor(const std::string& path) : path_(path) { Open(); }
  ~NvmlMonitor() override {
    if (initialised_) api_.shutdown();
    if (lib_ != nullptr) dlclose(lib_);
  }

  GpuProbe Probe() override {
    std::lock_guard<std::mutex> lock(mu_);
    GpuProbe p;
    p.status = why_;
    if (!why_.empty()) return p;
    p.devices = ReadDevices();
    p.available = !p.devices.empty();
    if (!p.available) p.status = "no GPU: NVML reports 0 devices";
    char buf[96] = {0};
    if (api_.driver_version && api_.driver_version(buf, sizeof buf) == kSuccess)
      p.driver_version = buf;
    int cuda = 0;
    if (api_.cuda_version && api_.cuda_version(&cuda) == kSuccess && cuda > 0)
      p.cuda_driver_version = std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10);
    return p;
  }

  StatusOr<GpuReading> Read() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!why_.empty()) return FailedPrecondition(why_);
    GpuReading r;
    r.devices = ReadDevices();
    if (r.devices.empty()) return FailedPrecondition("no GPU: NVML reports 0 devices");
    for (const auto& d : r.devices) ReadProcesses(d.index, &r.processes);
    return r;
  }

 private:
  void Open() {
    lib_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      why_ = "no GPU: " + path_ + " (NVML) not found";
      return;
    }
    why_ = BindApi(lib_, &api_);
    if (!why_.empty()) return;
    if (const Ret e = api_.init(); e != kSuccess) {
      why_ = "no GPU: nvmlInit failed with NVML error " + std::to_string(e) +
             " (is the NVIDIA driver loaded?)";
      return;
    }
    initialised_ = true;
    Enumerate();
  }

  // The devices and what does not change while the driver is loaded (name, UUID, compute
  // capability), once: each tick then asks only for memory and utilisation.
  void Enumerate() {
    unsigned n = 0;
    if (api_.count(&n) != kSuccess) return;
    handles_.resize(n);
    for (unsigned i = 0; i < n; ++i) {
      if (api_.handle(i, &handles_[i]) != kSuccess) continue;
      GpuDevice d;
      d.index = i;
      char buf[96] = {0};
      if (api_.name(handles_[i], buf, sizeof buf) == kSuccess) d.name = buf;
      char id[96] = {0};
      if (api_.uuid && api_.uuid(handles_[i], id, sizeof id) == kSuccess) d.uuid = id;
      int major = 0, minor = 0;
      if (api_.capability && api_.capability(handles_[i], &major, &minor) == kSuccess)
        d.compute_capability = std::to_string(major) + "." + std::to_string(minor);
      devices_.push_back(d);
    }
  }

  std::vector<GpuDevice> ReadDevices() {
    std::vector<GpuDevice> out = devices_;
    for (GpuDevice& d : out) {
      Memory m{};
      if (api_.memory(handles_[d.index], &m) == kSuccess) {
        d.memory_total = m.total;
        d.memory_used = m.used;
      }
      Utilization u{};
      if (api_.utilization(handles_[d.index], &u) == kSuccess) d.util_percent = u.gpu;
    }
    return out;
  }

  void ReadProcesses(unsigned device, std::vector<GpuProcess>* out) {
    std::vector<ProcessInfo> infos;
    for (int attempt = 0; attempt < 4; ++attempt) {  // processes may come between the calls
      unsigned n = unsigned(infos.size());
      const Ret e = api_.processes(handles_[device], &n, infos.empty() ? nullptr : infos.data());
      if (e == kSuccess) {
        infos.resize(n);
        break;
      }
      if (e != kInsufficientSize) return;
      infos.resize(n + 8);
    }
    const auto sm = ReadProcessUtil(device);
    for (const auto& i : infos) {
      GpuProcess p;
      p.pid = pid_t(i.pid);
      p.device = device;
      if (i.used_gpu_memory != kValueNotAvailable) p.used_bytes = i.used_gpu_memory;
      if (auto it = sm.find(p.pid); it != sm.end()) p.sm_percent = it->second;
      out->push_back(p);
    }
  }

  // Each process's latest SM share since the last read of this device.
  std::map<pid_t, uint32_t> ReadProcessUtil(unsigned device) {
    std::map<pid_t, uint32_t> out;
    if (api_.process_util == nullptr) return out;
    unsigned long long& seen = last_seen_[device];
    unsigned n = 0;
    if (api_.process_util(handles_[device], nullptr, &n, seen) != kInsufficientSize || n == 0)
      return out;
    std::vector<ProcessUtil> samples(n);
    if (api_.process_util(handles_[device], samples.data(), &n, seen) != kSuccess) return out;
    std::map<pid_t, unsigned long long> when;
    for (unsigned k = 0; k < n && k < samples.size(); ++k) {
      const auto& s = samples[k];
      if (s.time_stamp < when[pid_t(s.pid)]) continue;
      when[pid_t(s.pid)] = s.time_stamp;
      out[pid_t(s.pid)] = s.sm_util;
      seen = std::max(seen, s.time_stamp);
    }
    return out;
  }

  std::string path_;
  std::mutex mu_;
  void* lib_ = nullptr;
  Api api_{};
  bool initialised_ = false;
  std::string why_;                                   // empty when NVML is usable
  std::vector<Dev> handles_;                          // by device index
  std::vector<GpuDevice> devices_;                    // their fixed facts, from Enumerate
  std::map<unsigned, unsigned long long> last_seen_;  // per device, NVML's µs timestamps
};

}  // namespace

std::unique_ptr<GpuMonitor> OpenNvml() {
  const char* env = std::getenv("SHOAL_NVML_LIBRARY");
  return std::make_unique<NvmlMonitor>(env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1");
}

}  // namespace shoal
