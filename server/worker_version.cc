#include "server/worker_version.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "shared/os/process.h"

namespace shoal {

WorkerInfo ParseWorkerVersion(const std::string& text) {
  WorkerInfo w;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("libtorch ", 0) == 0) w.torch_version = line.substr(9);
    if (line.rfind("cuda none: ", 0) == 0) w.cuda_why = line.substr(11);
    if (line.rfind("cuda ", 0) == 0 && std::isdigit(static_cast<unsigned char>(line[5])))
      w.cuda_devices = std::atoi(line.c_str() + 5);
  }
  if (w.cuda_devices < 0 && w.cuda_why.empty())
    w.cuda_why = "shoal-worker did not say whether its LibTorch has CUDA";
  return w;
}

namespace {

// Reads fd until EOF or the deadline (monotonic ns); false when the deadline came first.
bool ReadUntil(int fd, uint64_t deadline_ns, std::string* out) {
  for (;;) {
    const uint64_t now = MonotonicNs();
    if (now >= deadline_ns) return false;
    pollfd p{fd, POLLIN, 0};
    const int left_ms = int(std::min<uint64_t>((deadline_ns - now) / 1'000'000 + 1, 60'000));
    const int r = ::poll(&p, 1, left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;  // the deadline is checked at the top
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    out->append(buf, size_t(n));
  }
}

WorkerInfo Unanswered(const std::string& why) {
  WorkerInfo w;
  w.torch_version = "unknown (" + why + ")";
  w.cuda_why = why;
  return w;
}

}  // namespace

WorkerInfo QueryWorker(const std::string& worker_bin, uint64_t timeout_ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Unanswered("no pipe to ask " + worker_bin);
  // Its own group: a binary that hangs (a CUDA initialisation that never returns) is killed
  // with whatever it started, and shoald starts without it rather than not at all.
  auto pid = SpawnProcess({worker_bin, "--version"}, {{{fds[1], 1}}, true});
  ::close(fds[1]);
  if (!pid.ok()) {
    ::close(fds[0]);
    return Unanswered("cannot run " + worker_bin + ": " + pid.status().message());
  }
  std::string out;
  const bool answered = ReadUntil(fds[0], MonotonicNs() + timeout_ms * 1'000'000, &out);
  ::close(fds[0]);
  if (!answered) ::kill(-*pid, SIGKILL);
  int st = 0;
  while (::waitpid(*pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!answered)
    return Unanswered(worker_bin + " --version did not answer within " +
                      std::to_string(timeout_ms) + " ms; killed");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || out.empty())
    return Unanswered("cannot run " + worker_bin + " --version: " + DescribeWaitStatus(st));
  return ParseWorkerVersion(out);
}

}  // namespace shoal
