// One image-training worker's training (hogwild's and data_parallel's, worker/image/image_kind.h):
// a start gate shared with its peers, then `batches` steps or `epochs` passes over its shard of the
// training set, each step timed by phase and published on its scoreboard slot (progress, per-epoch
// records, a loss curve), then a barrier, a fingerprint of the weights and (worker 0) the test-set
// evaluation.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "worker/batches.h"
#include "worker/kind.h"
#include "worker/models/models.h"
#include "worker/shared_arenas.h"
#include "worker/step_gate.h"
#include "worker/step_recorder.h"
#include "worker/tensor_set.h"
#include "worker/train_device.h"

namespace shoal {

// What a kind whose workers train together adds around each step (data_parallel's gradient
// averager); none by default. Each returns the ns it was blocked communicating.
struct StepSync {
  std::function<uint64_t()> before_forward;  // rank 0's buffers to every replica
  std::function<uint64_t()> after_backward;  // the averaged gradients
};

class ImageTrainer {
 public:
  ImageTrainer(WorkerEnv& env, Model& model, DataView data, const TrainDevice& device,
               const StepSync* sync = nullptr);
  // A model file's: batches gathered from its tensor set (worker/tensor_set.h), no test set.
  ImageTrainer(WorkerEnv& env, Model& model, const TensorSetHeader* tensors,
               const TrainDevice& device, const StepSync* sync = nullptr);
  // Returns the worker's exit code.
  int Run();

 private:
  // The spec's optimiser, or the same stepped inside the backward pass (optimizer_in_backward).
  StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeTrainerOptimizer();
  bool RunBatches();
  bool RunEpochs();
  bool RunShard(const std::vector<int64_t>& order, EpochTotals* totals);
  bool Step(const int64_t* idx, int64_t n, EpochTotals* totals);
  void TakeTurns();
  bool WaitForPeers();
  void EvaluateInto(std::atomic<uint32_t>* bits);
  std::vector<int64_t> EpochShard(uint32_t epoch) const;

  WorkerEnv& env_;
  const v1::ExperimentSpec& spec_;
  Model& model_;
  DataView data_;
  const TensorSetHeader* tensors_ = nullptr;  // a model file's training set
  const TrainDevice& device_;
  DeviceData on_device_;                          // cuda: the training set, uploaded once
  std::vector<torch::Tensor> tensors_on_device_;  // cuda: a model file's, likewise
  std::function<void()> sync_;  // cuda_sync phases: waits for the device before a time is read
  std::unique_ptr<PhaseEvents> events_;  // cuda_sync events: the phases marked on the device
  const StepSync* step_sync_;
  WorkerSlot* slot_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  int64_t n_train_ = 0, pixels_ = 0, batch_ = 0;
  StepRecorder recorder_;
  std::unique_ptr<StepGate> gate_;        // turns at the steps (concurrent_steps < workers)
  std::unique_ptr<SharedArenas> arenas_;  // with turns and the planned allocator on the CPU
};

}  // namespace shoal
