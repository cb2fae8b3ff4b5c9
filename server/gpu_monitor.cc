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
  Ret (*power)(Dev, unsigned*);
  Ret (*energy)(Dev, unsigned long long*);
  Ret (*gpm_support)(Dev, GpmSupport*);
  Ret (*gpm_alloc)(GpmSample*);
  Ret (*gpm_free)(GpmSample);
  Ret (*gpm_get)(Dev, GpmSample);
  Ret (*gpm_metrics)(GpmMetricsGet*);
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
  Bind(lib, "nvmlDeviceGetPowerUsage", &a->power);
  Bind(lib, "nvmlDeviceGetTotalEnergyConsumption", &a->energy);
  Bind(lib, "nvmlGpmQueryDeviceSupport", &a->gpm_support);
  Bind(lib, "nvmlGpmSampleAlloc", &a->gpm_alloc);
  Bind(lib, "nvmlGpmSampleFree", &a->gpm_free);
  Bind(lib, "nvmlGpmSampleGet", &a->gpm_get);
  Bind(lib, "nvmlGpmMetricsGet", &a->gpm_metrics);
  if (!a->init || !a->shutdown || !a->count || !a->handle || !a->name || !a->memory ||
      !a->utilization || !a->processes)
    return "NVML lacks the entry points Shoal needs (a driver older than CUDA 11?)";
  return "";
}

class NvmlMonitor final : public GpuMonitor {
 public:
  explicit NvmlMonitor(const std::string& path) : path_(path) { Open(); }
  ~NvmlMonitor() override {
    for (auto& g : gpm_)
      for (GpmSample s : {g.previous, g.current})
        if (s != nullptr) api_.gpm_free(s);
    if (initialised_) api_.shutdown();
    if (lib_ != nullptr) dlclose(lib_);
  }

  GpuProbe Probe() override {
    std::lock_guard<std::mutex> lock(mu_);
    GpuProbe p;
    p.status = why_;
    if (!why_.empty()) return p;
    p.devices = ReadDevices(/*gpm=*/false);
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
    r.devices = ReadDevices(/*gpm=*/true);
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
      gpm_.push_back(OpenGpm(handles_[i], d.compute_capability));
    }
  }

  // A device's GPM state: its two sample buffers, or why it has none.
  struct Gpm {
    GpmSample previous = nullptr, current = nullptr;
    bool primed = false;  // `previous` holds a reading
    std::string why;
  };

  Gpm OpenGpm(Dev dev, const std::string& capability) {
    Gpm g;
    if (!api_.gpm_support || !api_.gpm_alloc || !api_.gpm_free || !api_.gpm_get ||
        !api_.gpm_metrics) {
      g.why = "GPM: this NVML has no GPM entry points (a driver older than R520)";
      return g;
    }
    GpmSupport s{kGpmSupportVersion, 0};
    if (api_.gpm_support(dev, &s) != kSuccess || s.is_supported_device == 0) {
      g.why = "GPM: not supported on this GPU (compute capability " +
              (capability.empty() ? std::string("unknown") : capability) +
              "; GPM needs Hopper, 9.0, or newer)";
      return g;
    }
    if (api_.gpm_alloc(&g.previous) != kSuccess || api_.gpm_alloc(&g.current) != kSuccess)
      g.why = "GPM: NVML could not allocate its sample buffers";
    return g;
  }

  // The GPM metrics since this device's previous reading (none at the first).
  void ReadGpm(unsigned index, GpuDevice* d) {
    Gpm& g = gpm_[index];
    d->gpm_status = g.why;
    if (!g.why.empty() || api_.gpm_get(handles_[index], g.current) != kSuccess) return;
    if (g.primed) {
      GpmMetricsGet m{};
      m.version = kGpmMetricsGetVersion;
      m.num_metrics = kGpmMetricsAsked;
      m.sample1 = g.previous;
      m.sample2 = g.current;
      const unsigned ids[kGpmMetricsAsked] = {kGpmSmUtil, kGpmSmOccupancy, kGpmAnyTensorUtil,
                                              kGpmDramBwUtil};
      for (int k = 0; k < kGpmMetricsAsked; ++k) m.metrics[k].metric_id = ids[k];
      if (api_.gpm_metrics(&m) == kSuccess) {
        std::optional<double>* out[] = {&d->sm_active, &d->sm_occupancy, &d->tensor_active,
                                        &d->dram_bw};
        for (int k = 0; k < kGpmMetricsAsked; ++k)
          if (m.metrics[k].nvml_return == kSuccess) *out[k] = m.metrics[k].value;
      }
    }
    std::swap(g.previous, g.current);
    g.primed = true;
  }

  std::vector<GpuDevice> ReadDevices(bool gpm) {
    std::vector<GpuDevice> out = devices_;
    for (GpuDevice& d : out) {
      unsigned mw = 0;
      if (api_.power && api_.power(handles_[d.index], &mw) == kSuccess) d.power_mw = mw;
      unsigned long long mj = 0;
      if (api_.energy && api_.energy(handles_[d.index], &mj) == kSuccess) d.energy_mj = mj;
      if (gpm) ReadGpm(d.index, &d);
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
  std::vector<Gpm> gpm_;                              // by device index
  std::map<unsigned, unsigned long long> last_seen_;  // per device, NVML's µs timestamps
};

}  // namespace

std::unique_ptr<GpuMonitor> OpenNvml() {
  const char* env = std::getenv("SHOAL_NVML_LIBRARY");
  return std::make_unique<NvmlMonitor>(env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1");
}

}  // namespace shoal
