// data_parallel (seed 002): each worker a replica of the network on its own batches, gradients
// averaged every step through c10d's ProcessGroupGloo. A replica is an image-training worker
// (worker/image/image_kind.h) with private weights, plus GradAverager around each step.
// Worker 0 hosts the c10d TCPStore (as torchrun's rank 0 does) on a port it publishes in the
// experiment's "rendezvous" segment; every key lives under shoal/<experiment id>/.
#pragma once

#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "worker/image/image_kind.h"
#include "worker/kinds/data_parallel/grad_averager.h"

namespace shoal {

class DataParallelKind : public ImageKind {
 public:
  Status Prepare(LeaderEnv& env) override;
  void Finish(ipc::v1::LeaderResult* result) override;
  std::vector<std::string> SegmentWhats() const override {
    return {"data", "weights", "rendezvous"};
  }
  // Each replica's flat gradient buckets: a copy of its gradients.
  KindCopies ModelFileCopies() const override { return {1, " (with their gradient buckets)"}; }

 protected:
  Status BeforeTraining(WorkerEnv& env, Model& model, StepSync* sync) override;

 private:
  // Worker 0 starts the store and publishes its port; the others wait for it and connect.
  Status JoinStore(WorkerEnv& env, std::chrono::milliseconds timeout);

  ShmSegment rendezvous_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::unique_ptr<GradAverager> averager_;
};

}  // namespace shoal
