// data_loading (seed 003: DataLoader workers, prefetch): worker 0 trains the network; workers
// 1..L are loader processes, started like any worker (fork, spawn or the forkserver), which read
// training samples from the data segment, augment them (random crop with padding, flip,
// normalise) and write finished batches straight into a ring of slots in shared memory that the
// trainer reads in place. With no loaders the trainer makes its batches itself.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "shared/ipc/batch_ring.h"
#include "shared/kinds/data_loading/loader_batch.h"
#include "shared/os/shm.h"
#include "worker/batches.h"
#include "worker/kind.h"
#include "worker/models/models.h"
#include "worker/step_recorder.h"

namespace shoal {

// The epochs the spec asks for over a training set of n_train samples.
EpochPlan DataLoadingPlan(const v1::ExperimentSpec& spec, uint64_t n_train);

// Makes batch b's bytes in place: its epoch's order drawn once per epoch, its samples augmented.
// What a loader does for the ring, and the trainer does itself with no loaders.
class BatchMaker {
 public:
  BatchMaker(const v1::ExperimentSpec& spec, const DataView& data);
  const EpochPlan& plan() const { return plan_; }
  const AugmentOptions& augment() const { return augment_; }
  uint32_t pixels() const { return augment_.rows * augment_.cols; }
  // Writes batch b into `out` (LoaderBatchBytes(plan().batch, pixels()) long); its slice.
  BatchSlice Make(uint64_t b, uint8_t* out);

 private:
  const DataView data_;
  const uint64_t seed_;
  const EpochPlan plan_;
  AugmentOptions augment_;
  std::vector<uint32_t> order_;
  uint32_t order_epoch_ = 0;  // whose order order_ holds (0: none yet)
};

// A loader process: claims batch numbers from the ring until the run has them all, makes each
// into its slot, and records the CPU time it took per epoch. Returns the exit code.
int RunLoader(WorkerEnv& env, const DataView& data, BatchRing ring);

// The trainer: every batch of every epoch in order, from the ring (or made here with no ring),
// each timed as the wait for its data and the step; per-epoch records, then the evaluation.
class DataLoadingTrainer {
 public:
  DataLoadingTrainer(WorkerEnv& env, Model& model, DataView data, BatchRing* ring);
  int Run();  // the exit code

 private:
  bool RunEpoch(uint32_t epoch, EpochTotals* totals);
  // Batch b's bytes: waited for in the ring, or made here. nullptr when the leader is gone.
  const uint8_t* Fetch(uint64_t b);
  bool Step(uint64_t b, EpochTotals* totals);
  void Evaluate();

  WorkerEnv& env_;
  const v1::ExperimentSpec& spec_;
  Model& model_;
  DataView data_;
  BatchRing* ring_;
  WorkerSlot* slot_;
  BatchMaker maker_;  // no loaders: this process makes its batches, into own_
  StepRecorder recorder_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  std::vector<uint8_t> own_;
  uint64_t load_cpu_ns_ = 0;  // this epoch's batch making, with no loaders (its CPU time)
};

class DataLoadingKind : public WorkerKind {
 public:
  void Warm() override;
  Status Prepare(LeaderEnv& env) override;
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  std::vector<std::string> SegmentWhats() const override { return {"data", "ring"}; }

 private:
  Status Attach(const WorkerEnv& env);  // a spawned or forkserver worker: open by name

  ShmSegment data_, ring_;
};

}  // namespace shoal
