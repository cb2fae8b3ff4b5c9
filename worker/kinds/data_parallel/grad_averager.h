// What data_parallel adds to a training step: the replicas' gradients averaged with c10d before
// the update, as PyTorch's DistributedDataParallel does it (LibTorch 1.13 has no C++ DDP). A hook
// on every parameter copies its gradient into its bucket as backward makes it; a full bucket is
// all-reduced asynchronously at once, in bucket order on every rank (Gloo matches collectives by
// order); after backward the step waits for them all, divides by the world size and writes the
// averages back as the gradients.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "shared/ipc/layout.h"
#include "shared/kinds/data_parallel/data_parallel.h"
#include "worker/step_recorder.h"

namespace shoal {

class GradAverager {
 public:
  // Registers the hooks; `slot` (may be null) receives buckets, bytes and the all-reduce busy time.
  GradAverager(c10::intrusive_ptr<c10d::ProcessGroup> pg, torch::nn::Module& model,
               WorkerSlot* slot, uint64_t first_bucket_bytes = kFirstBucketBytes,
               uint64_t bucket_bytes = kBucketBytes);
  GradAverager(const GradAverager&) = delete;
  GradAverager& operator=(const GradAverager&) = delete;

  // Rank 0's parameters and floating-point buffers to every rank (DDP does it at construction).
  void BroadcastParameters();
  // Rank 0's floating-point buffers (BatchNorm's running statistics) to every rank before each
  // forward, as DDP's broadcast_buffers does; returns the ns it took (none without buffers).
  uint64_t BroadcastBuffers();
  // After backward: launches what is left, waits for every bucket, averages into the gradients;
  // returns the ns it was blocked. Throws what c10d throws (a peer gone, a timeout).
  uint64_t AfterBackward();

  size_t buckets() const { return buckets_.size(); }
  uint64_t bytes_per_step() const { return bytes_per_step_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // of each parameter in `flat`, in elements
    torch::Tensor flat;
    std::vector<char> arrived;  // of each parameter, this step
    size_t pending = 0;
    bool ready = false;
    c10::intrusive_ptr<c10d::Work> work;
    SteadyClock::time_point launched;
    // When its all-reduce completed (set on a Gloo thread, read after wait()), steady ns.
    std::shared_ptr<std::atomic<int64_t>> done_ns = std::make_shared<std::atomic<int64_t>>(0);
  };
  // The time at least one all-reduce was in flight this step (the union of every bucket's
  // launch-to-completion interval): what the bus bandwidth is measured over.
  uint64_t BusyNs() const;
  void OnGrad(size_t param, const torch::Tensor& grad);
  void LaunchReady();
  void Broadcast(const std::vector<torch::Tensor>& tensors);

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::vector<torch::Tensor> params_, buffers_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // parameter -> (bucket, position in it)
  size_t next_launch_ = 0;
  uint64_t bytes_per_step_ = 0;
  WorkerSlot* slot_;
};

}  // namespace shoal
