#include "server/child_reaper.h"

#include <utility>
#include <vector>

namespace shoal {

void ChildReaper::Watch(pid_t pid, OnExit fn) {
  std::lock_guard<std::mutex> l(mu_);
  watched_[pid] = std::move(fn);
}

void ChildReaper::Forget(pid_t pid) {
  std::lock_guard<std::mutex> l(mu_);
  watched_.erase(pid);
}

void ChildReaper::Poll() {
  std::vector<std::pair<OnExit, std::pair<pid_t, int>>> calls;
  {
    std::lock_guard<std::mutex> l(mu_);
    pid_t pid;
    int status = 0;
    while (waiter_->ReapOne(&pid, &status)) {
      auto it = watched_.find(pid);
      if (it == watched_.end()) continue;  // an orphaned worker: reaped, nothing to tell
      calls.push_back({std::move(it->second), {pid, status}});
      watched_.erase(it);
    }
  }
  for (auto& [fn, exit] : calls) fn(exit.first, exit.second);
}

}  // namespace shoal
