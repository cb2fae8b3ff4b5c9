// The two roles of shoal-worker: the leader of an experiment (the "main process" of
// torch.multiprocessing) and a spawned worker.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "shoal/v1/shoal.pb.h"
#include "worker/model.h"

namespace shoal {

struct LeaderArgs {
  v1::ExperimentSpec spec;
  std::string experiment_id;
  int status_fd = 3;          // JSON lines to shoald
  pid_t parent = 0;           // shoald; we die with it
  std::string worker_bin;     // for --start spawn
  std::string zygote_socket;  // for --start forkserver
};

// Loads the data, creates the segments, starts and watches the workers, reports a result.
// Returns the exit code of the leader process.
int RunLeader(const LeaderArgs& args);

struct SpawnedWorkerArgs {
  v1::ExperimentSpec spec;
  std::string experiment_id;
  uint32_t index = 0;
  pid_t parent = 0;  // the leader
  int lifetime_fd = -1;
};
int RunSpawnedWorker(const SpawnedWorkerArgs& args);

// A worker that attaches to the experiment's segments by name (spawned or forked by the zygote).
// `prototype`, when given, is a model already built (the zygote's): its parameters are rebound
// or overwritten, which saves building and initialising a new one.
int RunAttachedWorker(const v1::ExperimentSpec& spec, const std::string& experiment_id,
                      uint32_t index, int lifetime_fd, ConvNet prototype = nullptr);

struct ZygoteArgs {
  std::string socket;  // where leaders ask for workers
  pid_t parent = 0;    // shoald
  size_t pool = 16;    // idle children kept forked ahead of demand
};
// The fork-server: loads and warms LibTorch once, then forks workers on request.
int RunZygote(const ZygoteArgs& args);

}  // namespace shoal
