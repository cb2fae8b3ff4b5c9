#include "shared/os/os_seams.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shared/os/shm.h"

namespace shoal {

StatusOr<pid_t> RealProcessControl::Spawn(const std::vector<std::string>& argv,
                                          const SpawnOptions& o) {
  return SpawnProcess(argv, o);
}

StatusOr<pid_t> RealProcessControl::Fork(const std::function<int()>& child) {
  const pid_t pid = ::fork();
  if (pid < 0) return Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) _exit(child());
  return pid;
}

ProcessControl& RealProcesses() {
  static RealProcessControl real;
  return real;
}

ChildWaiter& RealChildren() {
  static RealChildWaiter real;
  return real;
}

void RealProcessControl::Signal(pid_t pid, int sig) {
  if (pid > 0) ::kill(pid, sig);
}

void RealProcessControl::SignalGroup(pid_t pgid, int sig) {
  if (pgid > 1) ::kill(-pgid, sig);  // never -1 (everything) or -0 (our own group)
}

bool RealProcessControl::GroupExists(pid_t pgid) { return pgid > 1 && ::kill(-pgid, 0) == 0; }

bool RealChildWaiter::ReapOne(pid_t* pid, int* status) {
  const pid_t p = ::waitpid(-1, status, WNOHANG);
  if (p <= 0) return false;
  *pid = p;
  return true;
}

int RealSegmentJanitor::Remove(const std::string& prefix) { return RemoveSegments(prefix); }

size_t RealSegmentJanitor::Count(const std::string& prefix) { return ListSegments(prefix).size(); }

}  // namespace shoal
