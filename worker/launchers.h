// How a leader starts its workers: fork (the child inherits the leader's prepared state), spawn
// (a fresh shoal-worker attaches by segment name) or the forkserver (the forkserver forks a warm
// child that attaches). Each reports its workers' exits as the kernel gave them to the reaper.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/os/os_seams.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

class WorkerLauncher {
 public:
  struct Exit {
    pid_t pid;
    int status;  // waitpid status
  };
  virtual ~WorkerLauncher() = default;
  virtual StatusOr<pid_t> Start(uint32_t index) = 0;
  // Starts workers 0..n-1, calling `requested(i)` just before asking for worker i; pids[i] is
  // worker i's. Stops at the first failure; a forkserver may already have been asked for later
  // workers, whose pids follow (-1 for the failed one, and for any other that failed).
  virtual Status StartAll(uint32_t n, const std::function<void(uint32_t)>& requested,
                          std::vector<pid_t>* pids);
  // Workers that ended since the last call. A non-OK status: we lost track of them.
  virtual Status Poll(std::vector<Exit>* exits) = 0;
};

struct LaunchContext {
  v1::ExperimentSpec spec;
  std::string experiment_id;
  std::string worker_bin;          // spawn
  std::string fork_server_socket;  // forkserver
  int lifetime_read_fd = -1;       // handed to every worker
  int lifetime_write_fd = -1;
  int status_fd = -1;  // the leader's pipe to shoald, which forked workers must not hold
  ProcessControl* processes = &RealProcesses();  // fork and spawn go through it
  ChildWaiter* children = &RealChildren();       // fork and spawn workers are reaped by it
};

// Appends every child `children` reaps now (a launcher's Poll for the children it forked or
// spawned itself).
Status ReapChildren(ChildWaiter& children, std::vector<WorkerLauncher::Exit>* exits);

// `forked_body(index)` runs in a forked child and returns its exit code (fork only).
StatusOr<std::unique_ptr<WorkerLauncher>> MakeLauncher(const LaunchContext& c,
                                                       std::function<int(uint32_t)> forked_body);

}  // namespace shoal
