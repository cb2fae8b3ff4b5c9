// A worker that attaches to its experiment's segments by name: spawned by the leader, or forked by
// the forkserver (which hands it a kind already warm).
#pragma once

#include <cstdint>
#include <string>

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
int RunAttachedWorker(const AttachedWorkerArgs& args);

}  // namespace shoal
