// What hogwild and data_parallel share (each derives from it): N workers train an image model
// (built in, or a model file) on weights in one shared segment (or each on its own copy), reading
// batches from the data set in shared memory. On device cuda with shared weights the leader owns
// one device buffer that every worker maps through CUDA IPC. The kind adds what is its own
// through the hooks below (data_parallel's rendezvous and gradient averaging, hogwild's turns).
#pragma once

#include <memory>

#include "shared/gpu/cuda_ipc.h"
#include "shared/os/shm.h"
#include "worker/image/image_trainer.h"
#include "worker/kind.h"
#include "worker/model_file.h"
#include "worker/models/models.h"
#include "worker/train_device.h"

namespace shoal {

class ImageKind : public WorkerKind {
 public:
  void Warm() override;
  Status Prepare(LeaderEnv& env) override;
  std::optional<StepBounds> Bounds() const override { return bounds_; }
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  void Finish(ipc::v1::LeaderResult* result) override;
  void HandOff(ipc::v1::LeaderHandOff* h) const override {
    h->set_model_step_bytes(model_step_bytes_);
  }
  // "arenas": the shared step arenas a worker makes when workers take turns (shared_arenas.h).
  std::vector<std::string> SegmentWhats() const override { return {"data", "weights", "arenas"}; }
  // What its workers hold beyond a model file's every worker, for admission (data_parallel's
  // gradient buckets).
  virtual KindCopies ModelFileCopies() const { return {}; }

 protected:
  // In the worker, the model in place and about to train: a kind whose workers train together
  // joins them here and fills `sync` (data_parallel); by default each trains alone.
  virtual Status BeforeTraining(WorkerEnv& /*env*/, Model& /*model*/, StepSync* /*sync*/) {
    return Status::Ok();
  }

 private:
  // The leader: the data segment and the model (built in, or the spec's model file, checked).
  Status PrepareModelAndData(LeaderEnv& env);
  // Attaches to the leader's segments; binds (shared) or copies (private) the weights.
  Status Attach(WorkerEnv& env);
  // The weights segment from model_'s parameters and buffers (plan_ its table, the initial
  // checksum in it).
  Status CreateWeightsSegment(const std::string& experiment_id);
  // Attach's steps: worker 0 under shoal-leader writes the initial weights; the others build
  // their model, then open the weights (once published).
  Status WriteInitialWeights(WorkerEnv& env);
  Status BuildWorkerModel(const v1::ExperimentSpec& spec);
  Status OpenWeights(WorkerEnv& env, bool writable);
  // The leader, cuda and shared: the device buffer, exported in the segment's header.
  Status ExportToDevice(const v1::ExperimentSpec& spec);
  // A worker on cuda: the model onto the device, its weights the leader's buffer (shared) or
  // its own copy. Shared, the export is read from the mapped segment's header.
  Status PlaceOnDevice(const v1::ExperimentSpec& spec, uint32_t index);

  ShmSegment data_, weights_;
  WeightsPlan plan_;    // the weights segment's table, in this process's memory
  ModelPtr model_;      // the leader's (fork) or this worker's
  ModelPtr prototype_;  // built once in the forkserver: workers rebind it instead of building
  uint64_t model_step_bytes_ = 0;                             // a model file's probe step
  std::optional<StepBounds> bounds_;                          // and the bounds derived from it
  std::shared_ptr<TrainDevice> device_ = TrainDevice::Cpu();  // a worker's
  std::unique_ptr<CudaDriver> leader_cuda_;                   // the leader's, cuda and shared
  std::unique_ptr<DeviceBufferOwner> owner_;                  // the leader's device buffer
  std::unique_ptr<DeviceBufferView> view_;                    // a worker's mapping of it
};

}  // namespace shoal
