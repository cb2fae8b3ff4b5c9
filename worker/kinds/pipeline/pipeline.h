// pipeline (seed 004): each worker process is one stage of AmoebaNet-D; stage b's outputs and the
// gradients coming back cross to stage b + 1 through a pair of shared-memory rings (one slot per
// micro-batch), so activations are copied once and never pass through a pipe.
#pragma once

#include "shared/os/shm.h"
#include "worker/kind.h"

namespace shoal {

class PipelineKind : public WorkerKind {
 public:
  Status Prepare(LeaderEnv& env) override;
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  std::vector<std::string> SegmentWhats() const override { return {"rings"}; }

 private:
  ShmSegment rings_;
};

}  // namespace shoal
