// shoal-worker's roles besides the leader: a worker that attaches to the experiment's segments
// (spawned, or forked by the forkserver), and the forkserver.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "shared/os/os_seams.h"
#include "shoal/v1/shoal.pb.h"
#include "worker/kind.h"

namespace shoal {

struct AttachedWorkerArgs {
  v1::ExperimentSpec spec;
  std::string experiment_id;
  uint32_t index = 0;
  int lifetime_fd = -1;
  WorkerKind* kind = nullptr;  // a warm one (the forkserver's); nullptr: make a fresh one
};
// A worker that attaches to the experiment's segments by name (spawned, or forked by the
// forkserver).
int RunAttachedWorker(const AttachedWorkerArgs& args);

struct ForkServerArgs {
  std::string socket;                            // where leaders ask for workers
  pid_t parent = 0;                              // shoald
  size_t pool = 16;                              // idle children kept forked ahead of demand
  ProcessControl* processes = &RealProcesses();  // its forks
  ChildWaiter* children = &RealChildren();       // its reaping
  // Readable: Run returns 0 (a test's way to end it; shoald's ends with shoald, its parent).
  int stop_fd = -1;
};
// The forkserver: loads and warms LibTorch and every kind once, then forks workers on request.
int RunForkServer(const ForkServerArgs& args);

}  // namespace shoal
