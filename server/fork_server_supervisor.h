// Keeps the forkserver running: starts it, restarts it when it dies (at most once a
// second), stops it at shutdown. Called from the scheduler thread only; pid() from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>

#include "server/child_reaper.h"
#include "shared/os/os_seams.h"
#include "shared/status.h"

namespace shoal {

struct ForkServerOptions {
  std::string worker_bin;
  std::string socket;  // empty: no forkserver
  uint32_t pool = 16;
  pid_t parent = 0;  // shoald
};

class ForkServerSupervisor {
 public:
  ForkServerSupervisor(ForkServerOptions opts, ProcessControl* proc, Clock* clock,
                       ChildReaper* reaper)
      : opts_(std::move(opts)), proc_(proc), clock_(clock), reaper_(reaper) {}

  void EnsureRunning();
  // Starts it if needed and waits (reaping) until it accepts requests, i.e. has loaded and warmed
  // LibTorch. Unavailable, saying so (and how it last ended, if it did), after `timeout_ns` or as
  // soon as `give_up()` is true (the run was cancelled, shoald is stopping).
  Status WaitReady(uint64_t timeout_ns, const std::function<bool()>& give_up);
  void Stop();
  pid_t pid() const { return pid_.load(); }  // -1 while it is (re)starting
  int restarts() const { return restarts_.load(); }
  // The last way it ended ("killed by signal 9"), for the running experiment's events.
  std::string TakeLastExit();

 private:
  void OnExit(pid_t pid, int status);

  ForkServerOptions opts_;
  ProcessControl* proc_;
  Clock* clock_;
  ChildReaper* reaper_;
  std::atomic<pid_t> pid_{-1};
  std::atomic<int> restarts_{0};
  uint64_t started_ns_ = 0;
  std::string last_exit_;
};

}  // namespace shoal
