// The only waitpid(-1) in shoald. shoald is a child subreaper, so besides the leaders and the
// forkserver it starts, orphaned workers of a dead leader come to it too: every ended child is
// reaped here and its exit routed to whoever registered its pid; the rest are just reaped.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <mutex>

#include "shared/os/os_seams.h"

namespace shoal {

class ChildReaper {
 public:
  using OnExit = std::function<void(pid_t pid, int wait_status)>;
  explicit ChildReaper(ChildWaiter* waiter) : waiter_(waiter) {}

  // Routes pid's exit to `fn` (once). Children are started and watched on the thread that polls,
  // so no exit can be reaped between the two.
  void Watch(pid_t pid, OnExit fn);
  void Forget(pid_t pid);
  // Reaps every child that has ended; calls the callbacks (not under the lock).
  void Poll();

 private:
  ChildWaiter* waiter_;
  std::mutex mu_;
  std::map<pid_t, OnExit> watched_;
};

}  // namespace shoal
