#include "server/node_info.h"

#include <fcntl.h>
#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/gpu.h"
#include "shared/process.h"
#include "shared/procfs.h"

namespace shoal {

std::string QueryWorkerVersion(const std::string& worker_bin) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "unknown";
  auto pid = SpawnProcess({worker_bin, "--version"}, {{{fds[1], 1}}, false});
  ::close(fds[1]);
  std::string out;
  if (pid.ok()) {
    char buf[256];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    int st;
    ::waitpid(*pid, &st, 0);
  }
  ::close(fds[0]);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (out.rfind("libtorch ", 0) == 0) out = out.substr(9);
  return out.empty() ? "unknown (cannot run " + worker_bin + ")" : out;
}

v1::NodeInfoResponse CollectNodeInfo(const std::string& state_dir, uint32_t max_workers,
                                     const std::string& torch_version) {
  v1::NodeInfoResponse r;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  r.set_hostname(host);
  r.set_cores(static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (auto mi = ReadSmallFile("/proc/meminfo"); mi.ok()) {
    if (auto v = ParseStatusKb(*mi, "MemTotal"); v.ok()) r.set_memory_total_bytes(*v);
    if (auto v = ParseStatusKb(*mi, "MemAvailable"); v.ok()) r.set_memory_available_bytes(*v);
  }
  struct statvfs vfs;
  if (::statvfs("/dev/shm", &vfs) == 0) {
    r.set_shm_free_bytes(uint64_t(vfs.f_bavail) * vfs.f_frsize);
    r.set_shm_total_bytes(uint64_t(vfs.f_blocks) * vfs.f_frsize);
  }
  GpuProbe gpus = ProbeGpus();
  for (const auto& d : gpus.devices) {
    auto* g = r.add_gpus();
    g->set_index(d.index);
    g->set_name(d.name);
    g->set_memory_total_bytes(d.memory_total);
    g->set_memory_used_bytes(d.memory_used);
  }
  std::string cuda_why;
  const int cuda = CudaDeviceCount(&cuda_why);
  if (!gpus.available) r.set_gpu_status(gpus.status + (cuda < 0 ? "; " + cuda_why : ""));
  auto& v = *r.mutable_versions();
  v["shoal"] = SHOAL_VERSION;
  v["libtorch"] = torch_version;
  v["grpc"] = grpc::Version();
  v["protobuf"] = google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION);
  v["sqlite"] = sqlite3_libversion();
  v["cuda_runtime_devices"] = cuda < 0 ? "none" : std::to_string(cuda);
  r.set_state_dir(state_dir);
  r.set_max_workers(max_workers);
  return r;
}

}  // namespace shoal
