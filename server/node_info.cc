#include "server/node_info.h"

#include <fcntl.h>
#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "server/gpu_monitor.h"
#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "shared/os/shm.h"

namespace shoal {

std::string CudaMissing(const GpuProbe& gpus, const WorkerInfo& worker) {
  if (worker.cuda_devices > 0) return "";  // without NVML it runs; its GPU figures say why not
  return (gpus.available ? "no CUDA: " : gpus.status + "; ") + worker.cuda_why;
}

namespace {

// The first "model name" of /proc/cpuinfo (x86; some ARM kernels have none).
std::string CpuModel() {
  auto text = ReadSmallFile("/proc/cpuinfo");
  if (!text.ok()) return "";
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    return colon == std::string::npos ? "" : line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  return "";
}

}  // namespace

std::string Bf16Missing(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;  // "flags\t\t: fpu vme ... avx512_bf16 ..."
    std::istringstream words(
        line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1));
    for (std::string w; words >> w;)
      if (w == "avx512_bf16" || w == "amx_bf16") return "";
    return "its flags name neither avx512_bf16 nor amx_bf16";
  }
  return "/proc/cpuinfo names no CPU flags";
}

std::string Bf16MissingHere() {
  auto text = ReadSmallFile("/proc/cpuinfo");
  return text.ok() ? Bf16Missing(*text) : "/proc/cpuinfo: " + text.status().message();
}

v1::NodeInfoResponse CollectNodeInfo(const std::string& state_dir, uint32_t max_workers,
                                     const WorkerInfo& worker, GpuMonitor* gpu) {
  v1::NodeInfoResponse r;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  r.set_hostname(host);
  r.set_cores(static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  r.set_cpu_model(CpuModel());
  struct utsname u;
  if (::uname(&u) == 0) r.set_kernel(u.release);
  if (auto mi = ReadSmallFile("/proc/meminfo"); mi.ok()) {
    if (auto v = ParseStatusKb(*mi, "MemTotal"); v.ok()) r.set_memory_total_bytes(*v);
    if (auto v = ParseStatusKb(*mi, "MemAvailable"); v.ok()) r.set_memory_available_bytes(*v);
  }
  if (const auto shm = ReadShmSpace()) {
    r.set_shm_free_bytes(shm->free_bytes);
    r.set_shm_total_bytes(shm->total_bytes);
  }
  const GpuProbe gpus =
      gpu != nullptr ? gpu->Probe() : GpuProbe{false, "no GPU telemetry", {}, "", ""};
  for (const auto& d : gpus.devices) {
    auto* g = r.add_gpus();
    g->set_index(d.index);
    g->set_name(d.name);
    g->set_uuid(d.uuid);
    g->set_compute_capability(d.compute_capability);
    if (d.memory_total) g->set_memory_total_bytes(*d.memory_total);
    if (d.memory_used) g->set_memory_used_bytes(*d.memory_used);
    if (d.util_percent) g->set_util_percent(*d.util_percent);
  }
  if (!gpus.available) r.set_gpu_status(gpus.status);
  const std::string missing = CudaMissing(gpus, worker);
  r.set_cuda_status(missing.empty() ? "ready: " + std::to_string(worker.cuda_devices) +
                                          " device(s) for LibTorch " + worker.torch_version
                                    : missing);
  auto& v = *r.mutable_versions();
  v["shoal"] = SHOAL_VERSION;
  v["libtorch"] = worker.torch_version;
  v["grpc"] = grpc::Version();
  v["protobuf"] = google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION);
  v["sqlite"] = sqlite3_libversion();
  if (!gpus.driver_version.empty()) v["nvidia_driver"] = gpus.driver_version;
  if (!gpus.cuda_driver_version.empty()) v["cuda_driver"] = gpus.cuda_driver_version;
  r.set_state_dir(state_dir);
  r.set_max_workers(max_workers);
  return r;
}

v1::Host HostOf(const v1::NodeInfoResponse& n) {
  v1::Host h;
  h.set_hostname(n.hostname());
  h.set_cpu_model(n.cpu_model());
  h.set_cores(n.cores());
  h.set_memory_bytes(n.memory_total_bytes());
  h.set_kernel(n.kernel());
  for (const auto& g : n.gpus()) h.add_gpus(g.name());
  auto version = [&](const char* name) {
    const auto it = n.versions().find(name);
    return it == n.versions().end() ? std::string() : it->second;
  };
  h.set_nvidia_driver(version("nvidia_driver"));
  h.set_cuda_driver(version("cuda_driver"));
  h.set_libtorch(version("libtorch"));
  h.set_shoal(version("shoal"));
  return h;
}

}  // namespace shoal
