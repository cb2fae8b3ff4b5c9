// The forkserver: one process per shoald that loads and warms LibTorch and every kind once, then
// forks workers on a leader's request (start method forkserver).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "shared/os/os_seams.h"

namespace shoal {

struct ForkServerArgs {
  std::string socket;                            // where leaders ask for workers
  pid_t parent = 0;                              // shoald
  size_t pool = 16;                              // idle children kept forked ahead of demand
  ProcessControl* processes = &RealProcesses();  // its forks
  ChildWaiter* children = &RealChildren();       // its reaping
  // Readable: Run returns 0 (a test's way to end it; shoald's ends with shoald, its parent).
  int stop_fd = -1;
};
int RunForkServer(const ForkServerArgs& args);

}  // namespace shoal
