#include "server/fork_server_supervisor.h"

#include <signal.h>
#include <unistd.h>

#include "shared/ipc/packet.h"
#include "spdlog/spdlog.h"

namespace shoal {

void ForkServerSupervisor::EnsureRunning() {
  if (pid_ > 0 || opts_.socket.empty()) return;
  const uint64_t now = clock_->MonotonicNs();
  if (started_ns_ != 0 && now - started_ns_ < 1'000'000'000ull) return;  // back off
  started_ns_ = now;
  const std::vector<std::string> environment = CleanEnvironment();
  auto pid =
      proc_->Spawn({opts_.worker_bin, "--role", "forkserver", "--socket", opts_.socket, "--parent",
                    std::to_string(opts_.parent), "--pool", std::to_string(opts_.pool)},
                   {{}, /*new_process_group=*/true, &environment});
  if (!pid.ok()) {
    spdlog::error("cannot start the forkserver: {}", pid.status().message());
    return;
  }
  pid_ = *pid;
  reaper_->Watch(*pid, [this](pid_t p, int st) { OnExit(p, st); });
  spdlog::info("forkserver started, pid {}{}", *pid,
               restarts_ > 0 ? " (restart " + std::to_string(restarts_.load()) + ")" : "");
}

void ForkServerSupervisor::OnExit(pid_t p, int status) {
  spdlog::warn("forkserver pid {} {}; restarting it", p, DescribeWaitStatus(status));
  last_exit_ = DescribeWaitStatus(status);
  pid_ = -1;
  ++restarts_;
}

std::string ForkServerSupervisor::TakeLastExit() { return std::exchange(last_exit_, ""); }

Status ForkServerSupervisor::WaitReady(uint64_t timeout_ns, const std::function<bool()>& give_up) {
  if (opts_.socket.empty()) return Unavailable("shoald runs no forkserver");
  const uint64_t until = clock_->MonotonicNs() + timeout_ns;
  while (clock_->MonotonicNs() < until && !give_up()) {
    EnsureRunning();
    if (pid_ > 0) {
      // It listens only once warm; a stopped one's full backlog must not hold this thread.
      auto fd = ConnectPacket(opts_.socket, /*wait=*/false);
      if (fd.ok()) {
        ::close(*fd);
        return Status::Ok();
      }
    }
    reaper_->Poll();
    ::usleep(20000);
  }
  std::string why = "the forkserver did not come up within " +
                    std::to_string(timeout_ns / 1'000'000) + " ms (stopped or still loading?)";
  if (!last_exit_.empty()) why += " (its last end: " + last_exit_ + ")";
  return Unavailable(why);
}

void ForkServerSupervisor::Stop() {
  const pid_t p = pid_.exchange(-1);
  if (p <= 0) return;
  reaper_->Forget(p);
  proc_->Signal(p, SIGKILL);
  // Reap it here: nothing polls after shutdown.
  for (int i = 0; i < 500 && proc_->GroupExists(p); ++i) {
    reaper_->Poll();
    ::usleep(2000);
  }
  reaper_->Poll();
}

}  // namespace shoal
