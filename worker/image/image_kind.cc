#include "worker/image/image_kind.h"

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "shared/kinds/kind.h"
#include "shared/os/procfs.h"
#include "shared/spec/spec.h"
#include "worker/image/image_leader.h"
#include "worker/image/image_trainer.h"
#include "worker/model_file.h"
#include "worker/process_setup.h"
#include "worker/scoreboard.h"
#include "worker/segment_weights.h"
#include "worker/train_device.h"

namespace shoal {

void ImageKind::Warm() {
  at::set_num_threads(1);
  SeedCpu(0);
  prototype_ = MakeModel("mnist_convnet").value();
  WarmConvNetOnce();  // one tiny step on a throwaway copy
}

// The built-in models' image set, or a model file's tensors (after the file is checked).
Status ImageKind::PrepareModelAndData(LeaderEnv& env) {
  const auto& spec = env.spec;
  const std::string name = SegmentName(env.experiment_id, "data");
  if (spec.model() != "torchscript") {
    RETURN_IF_ERROR(PrepareImageData(env, &data_));
    SeedCpu(spec.seed());
    ASSIGN_OR_RETURN(model_, MakeModel(spec.model(), spec.activations()));
    return Status::Ok();
  }
  SeedCpu(spec.seed());
  ASSIGN_OR_RETURN(std::shared_ptr<ScriptedModel> scripted, LoadModelFile(spec, env.fail_now));
  ASSIGN_OR_RETURN(ModelFileProbe probe, ProbeModelFile(*scripted, spec, env.fail_now));
  model_step_bytes_ = probe.step_bytes;
  bounds_ = ModelFileStepBounds(spec, probe.step_ns,
                                static_cast<uint32_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
  RETURN_IF_ERROR(AdmitModelFileWorkers(spec, probe, ModelFileCopies()));
  ASSIGN_OR_RETURN(data_, MakeModelFileData(spec, probe.target, name));
  env.segment_created("data", data_.size());
  RETURN_IF_ERROR(CheckTrainingSet(spec, static_cast<const TensorSetHeader*>(data_.data())->n));
  SeedCpu(spec.seed());  // the probe drew from the generator: dropout starts where PyTorch's would
  model_ = std::move(scripted);
  return Status::Ok();
}

Status ImageKind::Prepare(LeaderEnv& env) {
  const auto& spec = env.spec;
  // The leader alone, preparing: a model file's probe step and its synthetic set's making peak
  // for tens of milliseconds (a mobilenet's 30-40 MiB above the leader's other reads), which the
  // daemon's ticks and the leader's reads at chosen moments missed. Read every 5 ms meanwhile
  // (the watch's thread ends with this function, before any worker is forked).
  OwnPssWatch watch(std::chrono::milliseconds(5));
  RETURN_IF_ERROR(PrepareModelAndData(env));
  RETURN_IF_ERROR(CreateWeightsSegment(env.experiment_id));
  env.segment_created("weights", weights_.size());
  if (spec.device() == "cuda") {
    if (spec.share()) RETURN_IF_ERROR(ExportToDevice(spec));
  } else if (spec.share()) {
    // With sharing off the segment is only where attached workers copy their initial weights
    // from; forked workers inherit the leader's private copy.
    RETURN_IF_ERROR(BindWeightsToSegment(*model_, plan_, weights_.data()));
  }
  // Under spawn and the forkserver no worker inherits the leader's model file: once it is
  // checked, probed and in the segments (or the device buffer), the leader lets it go (and, with
  // --share no, its private copy of the weights) rather than hold it for the run.
  if (spec.model() == "torchscript" && spec.start() != "fork") {
    model_.reset();
    malloc_trim(0);
  }
  return Status::Ok();
}

// Only here does the leader touch CUDA: shared weights need a buffer that outlives every worker.
// Without sharing it never does, so `fork` can start cuda workers (their parent has no context).
Status ImageKind::ExportToDevice(const v1::ExperimentSpec& spec) {
  leader_cuda_ = LoadCudaDriver();
  const int device = int(CudaOrdinal(spec, 0));  // every worker's, as validation made sure
  RETURN_IF_ERROR(leader_cuda_->Init(device));
  auto* header = static_cast<WeightsHeader*>(weights_.data());
  ASSIGN_OR_RETURN(owner_, DeviceBufferOwner::Create(leader_cuda_.get(), device, weights_.data(),
                                                     plan_.total_bytes, getpid(), &header->cuda));
  return Status::Ok();
}

Status ImageKind::PlaceOnDevice(const v1::ExperimentSpec& spec, uint32_t index) {
  ASSIGN_OR_RETURN(device_, TrainDevice::ForSpec(spec, index));
  if (!device_->is_cuda()) return Status::Ok();
  if (!spec.share()) {  // its own copy, already in the model's (CPU) parameters
    model_->to(device_->device());
    return Status::Ok();
  }
  const auto& header = *static_cast<const WeightsHeader*>(weights_.data());
  ASSIGN_OR_RETURN(view_, DeviceBufferView::Open(device_->driver(), header.cuda, plan_.total_bytes,
                                                 getpid(), "shared CUDA weights"));
  return BindWeightsToDevice(*model_, plan_, view_->base(), device_->device());
}

Status ImageKind::CreateWeightsSegment(const std::string& experiment_id) {
  ASSIGN_OR_RETURN(std::vector<TensorShape> tensors, ModelTensors(*model_));
  ASSIGN_OR_RETURN(plan_, PlanWeights(tensors));
  ASSIGN_OR_RETURN(weights_,
                   ShmSegment::Create(SegmentName(experiment_id, "weights"), plan_.total_bytes));
  CopyWeightsToSegment(*model_, plan_, weights_.data());
  plan_.initial_checksum = SegmentChecksum(plan_, weights_.data());
  WriteWeightsTable(plan_, weights_.data());
  return Status::Ok();
}

// Worker 0 under shoal-leader: the initial weights built as the leader would have built them (the
// spec's seed, then the model), in a segment it creates; then it tells the others.
Status ImageKind::WriteInitialWeights(WorkerEnv& env) {
  SeedCpu(env.spec.seed());
  ASSIGN_OR_RETURN(model_, MakeModel(env.spec.model(), env.spec.activations()));
  RETURN_IF_ERROR(CreateWeightsSegment(env.experiment_id));
  Arrive(&env.board->weights_published);
  return Status::Ok();
}

// This worker's model, built while worker 0 may still be writing the initial weights.
Status ImageKind::BuildWorkerModel(const v1::ExperimentSpec& spec) {
  if (spec.model() == "torchscript") {
    ASSIGN_OR_RETURN(model_, LoadModelFile(spec));  // after the fork: nothing to inherit
    return Status::Ok();
  }
  if (prototype_ != nullptr && spec.model() == "mnist_convnet") {
    model_ = prototype_;
    static_cast<MnistConvNet&>(*model_).lean_ = spec.activations() == "lean";
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(model_, MakeModel(spec.model(), spec.activations()));
  return Status::Ok();
}

Status ImageKind::OpenWeights(WorkerEnv& env, bool writable) {
  if (env.board->weights_by_worker0 != 0 &&
      !WaitForCount(&env.board->weights_published, 1, env.slot, env.lifetime_fd))
    return Unavailable("the leader is gone");
  ASSIGN_OR_RETURN(weights_, ShmSegment::Open(SegmentName(env.experiment_id, "weights"), writable));
  ASSIGN_OR_RETURN(plan_, ReadWeights(weights_.data(), weights_.size()));
  return Status::Ok();
}

Status ImageKind::Attach(WorkerEnv& env) {
  const auto& spec = env.spec;
  ASSIGN_OR_RETURN(data_, ShmSegment::Open(SegmentName(env.experiment_id, "data"), false));
  // Workers write the segment only when it holds the shared weights (on the CPU).
  const bool shared_on_cpu = spec.share() && spec.device() != "cuda";
  RETURN_IF_ERROR(
      spec.model() == "torchscript"
          ? ValidateTensorSet(*static_cast<const TensorSetHeader*>(data_.data()), data_.size())
          : ValidateData(*static_cast<const DataHeader*>(data_.data()), data_.size()));
  if (env.board->weights_by_worker0 != 0 && env.index == 0) {
    RETURN_IF_ERROR(WriteInitialWeights(env));
  } else {
    RETURN_IF_ERROR(BuildWorkerModel(spec));
    RETURN_IF_ERROR(OpenWeights(env, shared_on_cpu));
  }
  // A model file's worker gives back the pages of its loaded copy of the weights, freed here,
  // with its warm-up's (WarmUpModelFile trims once both are freed).
  if (shared_on_cpu) return BindWeightsToSegment(*model_, plan_, weights_.data());
  if (spec.device() == "cuda" && spec.share()) return PlaceOnDevice(spec, env.index);
  // A private copy: take the initial weights and let go of the segment, so this worker cannot
  // quietly train the shared copy (torch.multiprocessing's spawn pitfall).
  RETURN_IF_ERROR(CheckWeightsMatch(*model_, plan_));
  CopyWeightsFromSegment(*model_, plan_, weights_.data());
  weights_.Unmap();
  return PlaceOnDevice(spec, env.index);
}

int ImageKind::RunWorker(WorkerEnv& env, bool forked_from_leader) {
  ApplyRuntimePolicies(env.spec);
  at::set_num_threads(1);  // until the trainer sets the spec's count
  // Forked from the leader (start fork), a cuda worker shares nothing: the leader kept off CUDA.
  Status st = forked_from_leader ? PlaceOnDevice(env.spec, env.index) : Attach(env);
  // A model file's training set (the data segment holds images otherwise).
  const auto* tensors = env.spec.model() == "torchscript"
                            ? static_cast<const TensorSetHeader*>(data_.data())
                            : nullptr;
  if (st.ok() && tensors != nullptr) {
    // The spec's threads first: the warm-up then also starts the intra-op pool, which would
    // otherwise cost the first timed step (10 ms a step over 10 steps of a small MLP here).
    at::set_num_threads(static_cast<int>(env.spec.threads()));
    model_->train();
    // Bounded as the steps are (the leader's bound from its probe): a forward that never
    // returns here would otherwise hold the run at the start gate, heartbeats and all.
    std::optional<StageBound> bound;
    if (const uint32_t ms = env.board->warm_up_bound_ms; ms > 0)
      bound.emplace(
          "warm-up", std::chrono::milliseconds(ms), 0,
          [&env](const std::string& m) { WorkerFails(env.slot, env.index, m); },
          "worker " + std::to_string(env.index));
    WarmUpModelFile(*model_, *tensors, std::min<int64_t>(BatchOf(env.spec), int64_t(tensors->n)),
                    env.slot, device_->device());
  }
  StepSync sync;
  if (st.ok()) st = BeforeTraining(env, *model_, &sync);
  if (!st.ok()) return WorkerFails(env.slot, env.index, st.message());
  const StepSync* step_sync = sync.after_backward ? &sync : nullptr;
  if (tensors != nullptr) {
    ImageTrainer trainer(env, *model_, tensors, *device_, step_sync);
    return trainer.Run();
  }
  const auto* dh = static_cast<const DataHeader*>(data_.data());
  ImageTrainer trainer(env, *model_, DataView{dh, static_cast<const uint8_t*>(data_.data())},
                       *device_, step_sync);
  return trainer.Run();
}

void ImageKind::Finish(ipc::v1::LeaderResult* result) {
  result->set_initial_checksum(plan_.initial_checksum);
  result->set_model_step_bytes(model_step_bytes_);
  if (owner_ != nullptr) {  // the workers trained the device buffer: fingerprint what it holds
    Status st = owner_->Download(weights_.data());
    if (!st.ok() && result->ok()) {
      result->set_ok(false);
      result->set_error("shared CUDA weights: " + st.message());
    }
    owner_.reset();  // every worker has ended: free the buffer, no export outlives the run
  }
  result->set_final_checksum(SegmentChecksum(plan_, weights_.data()));
}

}  // namespace shoal
