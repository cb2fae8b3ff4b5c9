#include "shared/os/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "shared/os/procfs.h"

extern char** environ;

namespace shoal {

StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv, const SpawnOptions& opts) {
  if (argv.empty()) return InvalidArgument("spawn: empty argv");
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  int last_kept = 2;  // stdin, stdout, stderr, and the fds given by number
  for (auto [from, to] : opts.dup_fds) {
    posix_spawn_file_actions_adddup2(&fa, from, to);
    last_kept = std::max(last_kept, to);
  }
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  // Nothing else of ours crosses: an fd a library opened without O_CLOEXEC (Asio's metrics
  // sockets, zlib's data-set file, another thread's in its open-to-fcntl window) would otherwise
  // live on in a long-lived child, holding a port or a file.
  for (int fd = 3; fd < last_kept; ++fd) {  // the gaps below the highest given fd
    const bool given = std::any_of(opts.dup_fds.begin(), opts.dup_fds.end(),
                                   [fd](const auto& d) { return d.second == fd; });
    if (!given) posix_spawn_file_actions_addclose(&fa, fd);  // one not open is no error
  }
  posix_spawn_file_actions_addclosefrom_np(&fa, last_kept + 1);
#endif
  if (opts.cwd != nullptr) posix_spawn_file_actions_addchdir_np(&fa, opts.cwd->c_str());
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (opts.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, s);
  posix_spawnattr_setsigdefault(&attr, &defaults);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  std::vector<char*> envp;
  if (opts.env != nullptr) {
    for (const auto& e : *opts.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  int rc = (opts.search_path ? posix_spawnp : posix_spawn)(
      &pid, argv[0].c_str(), &fa, &attr, args.data(), opts.env != nullptr ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    const std::string where = opts.cwd != nullptr ? " in " + *opts.cwd : "";
    return Internal("cannot start " + argv[0] + where + ": " + std::strerror(rc));
  }
  return pid;
}

const std::vector<std::string>& PassedEnvironmentNames() {
  static const std::vector<std::string> names = {
      "PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
      "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
      // 0: cuBLAS and cuDNN without TF32 (exactness)
      "NVIDIA_TF32_OVERRIDE", "SHOAL_NVML_LIBRARY", "SHOAL_CUDA_LIBRARY", "SHOAL_ALLOC_STATS",
      "GLOO_SOCKET_IFNAME",
      // Where shoald stores uploaded models (a worker opens the spec's model_file there).
      "SHOAL_BLOB_DIR",
      // Kind command: where its ranks write torch.profiler traces (set by shoald per run).
      "SHOAL_PROFILE_DIR"};
  return names;
}

std::vector<std::string> CleanEnvironment() {
  std::vector<std::string> out;
  for (const auto& name : PassedEnvironmentNames())
    if (const char* v = std::getenv(name.c_str())) out.push_back(name + "=" + v);
  return out;
}

Status JoinRunCgroup() {
  // The run's v2 group, and its v1 memory group where memory is a v1 hierarchy's.
  for (const char* name : {"SHOAL_CGROUP", "SHOAL_MEMORY_CGROUP"}) {
    const char* dir = std::getenv(name);
    if (dir == nullptr || *dir == '\0') continue;
    const std::string path = std::string(dir) + "/cgroup.procs";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Internal(path + ": " + std::strerror(errno));
    const bool ok = ::write(fd, "0", 1) == 1;
    const int err = errno;
    ::close(fd);
    if (!ok) return Internal(path + ": " + std::strerror(err));
  }
  return Status::Ok();
}

bool AdoptOrphansWithoutCgroup() {
  const char* dir = std::getenv("SHOAL_CGROUP");
  if (dir != nullptr && *dir != '\0') return false;
  return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
}

int EndAdoptedStrays() {
  int ended = 0;
  for (pid_t tid : ThreadsOf(::getpid())) {
    auto text = ReadSmallFile("/proc/self/task/" + std::to_string(tid) + "/children");
    if (!text.ok()) continue;
    std::istringstream in(*text);
    for (pid_t pid; in >> pid;) ended += ::kill(pid, SIGKILL) == 0 ? 1 : 0;
  }
  return ended;
}

std::string SelfExeDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

void DieWithParent(pid_t expected_parent, int sig) {
  ::prctl(PR_SET_PDEATHSIG, sig);
  // The parent may have died between our start and the prctl: then we were reparented.
  if (expected_parent > 0 && ::getppid() != expected_parent) _exit(70);
}

static uint64_t ClockNs(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}
uint64_t RealtimeNs() { return ClockNs(CLOCK_REALTIME); }
uint64_t MonotonicNs() { return ClockNs(CLOCK_MONOTONIC); }
int64_t RealtimeMs() { return static_cast<int64_t>(RealtimeNs() / 1000000); }

uint64_t ThreadCpuNs() { return ClockNs(CLOCK_THREAD_CPUTIME_ID); }

void EndProcessNow(int code) {
  std::fflush(nullptr);
  ::_exit(code);
}

uint64_t DropCleanFilePages() {
  struct Mapping {
    unsigned long lo = 0, hi = 0;
    bool clean_file = false;  // a file's, private, never writable
    bool has_anon = false;    // a page copied on write: relocated data, never dropped
  };
  std::vector<Mapping> mappings;
  std::ifstream smaps("/proc/self/smaps");
  for (std::string line; std::getline(smaps, line);) {
    Mapping m;
    unsigned long inode = 0;
    char perms[8] = {};
    int path_at = 0;
    // "start-end perms offset dev inode path" opens a mapping; "Key: value kB" lines follow.
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %*s %*s %lu %n", &m.lo, &m.hi, perms, &inode,
                    &path_at) == 4) {
      // A file on a file system: never a device's mapping (/dev/nvidia*: the driver's pages).
      const std::string_view path = std::string_view(line).substr(size_t(path_at));
      const bool regular = path.rfind("/", 0) == 0 && path.rfind("/dev/", 0) != 0;
      m.clean_file = regular && inode != 0 && perms[0] == 'r' && perms[1] == '-' && perms[3] == 'p';
      mappings.push_back(m);
    } else if (!mappings.empty() && line.rfind("Anonymous:", 0) == 0) {
      mappings.back().has_anon = std::strtoull(line.c_str() + 10, nullptr, 10) > 0;
    }
  }
  uint64_t advised = 0;
  for (const Mapping& m : mappings) {
    if (!m.clean_file || m.has_anon) continue;
    if (::madvise(reinterpret_cast<void*>(m.lo), m.hi - m.lo, MADV_DONTNEED) == 0)
      advised += m.hi - m.lo;
  }
  return advised;
}

void VolunteerForOomKiller() {
  const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // no /proc: nothing to ask for
  (void)!::write(fd, "1000", 4);
  ::close(fd);
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(size_t(n));
  }
  return true;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped (status " + std::to_string(status) + ")";
}

uint64_t SelfStatusBytes(std::string_view key) {
  auto text = ReadSmallFile("/proc/self/status");
  if (!text.ok()) return 0;
  auto v = ParseStatusKb(*text, key);
  return v.ok() ? *v : 0;
}

uint64_t SelfVmHwm() { return SelfStatusBytes("VmHWM"); }

}  // namespace shoal
