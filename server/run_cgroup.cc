#include "server/run_cgroup.h"

#include <fcntl.h>
#include <signal.h>
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

// The cgroup2 mount point, from /proc/self/mountinfo; "" when none.
std::string Cgroup2Mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line);
    std::string id, parent, dev, root, mount;
    f >> id >> parent >> dev >> root >> mount;
    return mount;
  }
  return "";
}

// This process's cgroup v2 path, from /proc/self/cgroup's "0::/path" line.
std::string OwnCgroup() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

class RealRunCgroups : public RunCgroups {
 public:
  explicit RealRunCgroups(std::string base) : base_(std::move(base)) {}

  StatusOr<std::string> Create(const std::string& run_id) override {
    std::error_code ec;
    const std::string dir = Dir(run_id);
    if (fs::exists(dir, ec)) {
      Signal(run_id, SIGKILL);  // left by a daemon killed mid-run: nothing of it may live on
      fs::remove(dir, ec);
    }
    if (!fs::create_directory(dir, ec) && ec)
      return Internal("cannot make " + dir + ": " + ec.message());
    return dir;
  }

  Status Join(const std::string& run_id, pid_t pid) override {
    return WriteText(Dir(run_id) + "/cgroup.procs", std::to_string(pid));
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
    fs::remove(Dir(run_id), ec);  // rmdir: only once empty
  }

 private:
  std::string Dir(const std::string& run_id) const { return base_ + "/" + run_id; }
  std::string base_;
};

}  // namespace

std::unique_ptr<RunCgroups> MakeRunCgroups(const std::string& key, std::string* why) {
  const std::string mount = Cgroup2Mount();
  if (mount.empty()) {
    *why = "no cgroup v2 is mounted";
    return nullptr;
  }
  const std::string own = OwnCgroup();
  const std::string base = mount + (own == "/" ? "" : own) + "/shoal-runs/" + key;
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec || !fs::exists(base + "/cgroup.procs", ec)) {
    *why = "cannot make a cgroup " + base + (ec ? " (" + ec.message() + ")" : "") +
           "; as a service, shoald needs its cgroup delegated (Delegate=yes)";
    return nullptr;
  }
  auto groups = std::make_unique<RealRunCgroups>(base);
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
