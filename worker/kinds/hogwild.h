// hogwild (seed 000): N workers train one network on weights in one shared segment (or each on
// its own copy), reading batches from the data set in shared memory.
#pragma once

#include "shared/shm.h"
#include "worker/kind.h"
#include "worker/models/models.h"

namespace shoal {

class HogwildKind : public WorkerKind {
 public:
  void Warm() override;
  Status Prepare(LeaderEnv& env) override;
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  void Finish(ipc::v1::LeaderResult* result) override;
  std::vector<std::string> SegmentWhats() const override { return {"data", "weights"}; }

 private:
  // Attaches to the leader's segments; binds (shared) or copies (private) the weights.
  Status Attach(WorkerEnv& env);

  ShmSegment data_, weights_;
  WeightsHeader plan_{};
  ModelPtr model_;      // the leader's (fork) or this worker's
  ModelPtr prototype_;  // built once in the fork-server: workers rebind it instead of building
  uint64_t initial_checksum_ = 0;
};

}  // namespace shoal
