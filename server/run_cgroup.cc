#include "server/run_cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace shoal {
namespace {

namespace fs = std::filesystem;

Status WriteText(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Internal(path + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != ssize_t(text.size())) return Internal(path + ": " + std::strerror(err));
  return Status::Ok();
}

std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

// "key N" from a flat-keyed file (memory.events, memory.oom_control).
std::optional<uint64_t> ReadKey(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return std::nullopt;
}

// A cgroup mount point from /proc/self/mountinfo: the cgroup2 one (`option` empty), or the v1
// one whose super options name `option` ("memory"); "" when none.
std::string CgroupMount(const std::string& option) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, super;
    tail >> fstype >> source >> super;
    const bool match = option.empty()
                           ? fstype == "cgroup2"
                           : fstype == "cgroup" &&
                                 ("," + super + ",").find("," + option + ",") != std::string::npos;
    if (!match) continue;
    std::istringstream f(line);
    std::string id, parent, dev, root, mount;
    f >> id >> parent >> dev >> root >> mount;
    return mount;
  }
  return "";
}

// This process's cgroup path in the v2 hierarchy (`controller` empty: the "0::" line) or in the
// v1 hierarchy of `controller`, from /proc/self/cgroup.
std::string OwnCgroup(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    const bool match = controller.empty()
                           ? line.rfind("0::", 0) == 0
                           : ("," + list + ",").find("," + controller + ",") != std::string::npos;
    if (match) return line.substr(b + 1);
  }
  return "";
}

std::string Under(const std::string& mount, const std::string& own, const std::string& key) {
  return mount + (own == "/" ? "" : own) + "/shoal-runs/" + key;
}

class RealRunCgroups : public RunCgroups {
 public:
  RealRunCgroups(std::string base, std::string v1_memory, bool v2_memory)
      : base_(std::move(base)), v1_memory_(std::move(v1_memory)), v2_memory_(v2_memory) {}

  StatusOr<std::string> Create(const std::string& run_id) override {
    std::error_code ec;
    if (fs::exists(Dir(run_id), ec)) {
      Signal(run_id, SIGKILL);  // left by a daemon killed mid-run: nothing of it may live on
      Remove(run_id);
    }
    for (const std::string& dir : Dirs(run_id))
      if (!fs::create_directory(dir, ec) && ec)
        return Internal("cannot make " + dir + ": " + ec.message());
    return Dir(run_id);
  }

  Status Join(const std::string& run_id, pid_t pid) override {
    for (const std::string& dir : Dirs(run_id))
      RETURN_IF_ERROR(WriteText(dir + "/cgroup.procs", std::to_string(pid)));
    return Status::Ok();
  }

  std::vector<pid_t> Procs(const std::string& run_id) override {
    std::vector<pid_t> out;
    std::ifstream in(Dir(run_id) + "/cgroup.procs");
    for (pid_t pid; in >> pid;) out.push_back(pid);
    return out;
  }

  void Signal(const std::string& run_id, int sig) override {
    if (sig == SIGKILL && WriteText(Dir(run_id) + "/cgroup.kill", "1").ok()) return;
    for (pid_t pid : Procs(run_id)) ::kill(pid, sig);
  }

  void Remove(const std::string& run_id) override {
    std::error_code ec;
    for (const std::string& dir : Dirs(run_id)) fs::remove(dir, ec);  // rmdir: once empty
  }

  std::vector<std::string> Environment(const std::string& run_id) override {
    std::vector<std::string> env = {"SHOAL_CGROUP=" + Dir(run_id)};
    if (!v1_memory_.empty()) env.push_back("SHOAL_MEMORY_CGROUP=" + v1_memory_ + "/" + run_id);
    return env;
  }

  RunMemory Memory(const std::string& run_id) override {
    RunMemory m;
    if (v2_memory_) {
      m.peak_bytes = ReadNumber(Dir(run_id) + "/memory.peak");
      m.oom_kills = ReadKey(Dir(run_id) + "/memory.events", "oom_kill");
    } else if (!v1_memory_.empty()) {
      const std::string dir = v1_memory_ + "/" + run_id;
      m.peak_bytes = ReadNumber(dir + "/memory.max_usage_in_bytes");
      m.oom_kills = ReadKey(dir + "/memory.oom_control", "oom_kill");
    }
    return m;
  }

  Status SetMemoryLimit(const std::string& run_id, uint64_t bytes) override {
    if (v2_memory_) return WriteText(Dir(run_id) + "/memory.max", std::to_string(bytes));
    if (!v1_memory_.empty())
      return WriteText(v1_memory_ + "/" + run_id + "/memory.limit_in_bytes", std::to_string(bytes));
    return FailedPrecondition("no cgroup memory controller for a run's group");
  }

  std::string memory() const override {
    if (v2_memory_) return "cgroup v2";
    return v1_memory_.empty() ? "" : "cgroup v1 memory controller (" + v1_memory_ + ")";
  }

 private:
  std::string Dir(const std::string& run_id) const { return base_ + "/" + run_id; }
  std::vector<std::string> Dirs(const std::string& run_id) const {
    std::vector<std::string> dirs = {Dir(run_id)};
    if (!v1_memory_.empty()) dirs.push_back(v1_memory_ + "/" + run_id);
    return dirs;
  }
  std::string base_, v1_memory_;
  bool v2_memory_;
};

// Whether the space-separated words of `path` include `word`.
bool Listed(const std::string& path, const std::string& word) {
  std::ifstream in(path);
  for (std::string w; in >> w;)
    if (w == word) return true;
  return false;
}

// The memory controller for the runs' groups under `base` (v2): enabled down from this process's
// own group where the hierarchy lets it. A group with processes cannot hand controllers on: under
// a delegated service's own group this process first moves into a leaf of its own
// (LeaveGroupIfAlone); where it shares the group, this fails and v1's is tried.
bool EnableV2Memory(const std::string& mount, const std::string& own, const std::string& base) {
  std::string dir = mount + (own == "/" ? "" : own);
  if (own != "/" && Listed(dir + "/cgroup.controllers", "memory") &&
      !WriteText(dir + "/cgroup.subtree_control", "+memory").ok() && LeaveGroupIfAlone(dir))
    spdlog::info(
        "shoald moved into {}/daemon so that its cgroup can hand the memory controller "
        "to the runs' groups",
        dir);
  for (const std::string& part : {std::string("shoal-runs"), base.substr(base.rfind('/') + 1)}) {
    (void)WriteText(dir + "/cgroup.subtree_control", "+memory");
    dir += "/" + part;
  }
  (void)WriteText(base + "/cgroup.subtree_control", "+memory");  // for the runs' own groups
  // What a run's group gets, seen on a probe group of the same place.
  const std::string probe = base + "/probe-" + std::to_string(::getpid());
  std::error_code ec;
  fs::create_directory(probe, ec);
  const bool memory = !ec && fs::exists(probe + "/memory.max", ec);
  fs::remove(probe, ec);
  return memory;
}

// A v1 memory hierarchy's folder for the runs, made; "" when there is none or it cannot be made.
std::string V1Memory(const std::string& key) {
  const std::string mount = CgroupMount("memory");
  if (mount.empty()) return "";
  const std::string dir = Under(mount, OwnCgroup("memory"), key);
  std::error_code ec;
  fs::create_directories(dir, ec);
  return !ec && fs::exists(dir + "/memory.limit_in_bytes", ec) ? dir : "";
}

}  // namespace

bool LeaveGroupIfAlone(const std::string& group_dir) {
  std::ifstream in(group_dir + "/cgroup.procs");
  std::vector<pid_t> procs;
  for (pid_t p = 0; in >> p;) procs.push_back(p);
  if (procs != std::vector<pid_t>{::getpid()}) return false;
  std::error_code ec;
  fs::create_directory(group_dir + "/daemon", ec);
  return !ec && WriteText(group_dir + "/daemon/cgroup.procs", std::to_string(::getpid())).ok();
}

std::unique_ptr<RunCgroups> MakeRunCgroups(const std::string& key, std::string* why) {
  const std::string mount = CgroupMount("");
  if (mount.empty()) {
    *why = "no cgroup v2 is mounted";
    return nullptr;
  }
  const std::string own = OwnCgroup("");
  const std::string base = Under(mount, own, key);
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec || !fs::exists(base + "/cgroup.procs", ec)) {
    *why = "cannot make a cgroup " + base + (ec ? " (" + ec.message() + ")" : "") +
           "; as a service, shoald needs its cgroup delegated (Delegate=yes)";
    return nullptr;
  }
  const bool v2_memory = EnableV2Memory(mount, own, base);
  auto groups = std::make_unique<RealRunCgroups>(base, v2_memory ? "" : V1Memory(key), v2_memory);
  for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) continue;
    const std::string left = it->path().filename().string();
    groups->Signal(left, SIGKILL);
    for (int i = 0; i < 50 && !groups->Procs(left).empty(); ++i) ::usleep(10000);
    groups->Remove(left);
  }
  return groups;
}

}  // namespace shoal
