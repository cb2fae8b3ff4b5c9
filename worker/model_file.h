// The leader's half of a user's model (spec model_file): load the uploaded TorchScript archive,
// refuse what cannot train, run one forward and backward on one batch (the inputs the spec
// describes) to learn the target's shape and what a step costs, and lay out the training set.
// Nothing here runs in shoald: a file that crashes LibTorch takes only its experiment's leader.
#pragma once

#include <memory>
#include <string>

#include "shared/ipc/layout.h"
#include "shared/os/shm.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"
#include "worker/kind.h"
#include "worker/models/scripted_model.h"
#include "worker/stage_bound.h"
#include "worker/tensor_set.h"

namespace shoal {

struct ModelFileProbe {
  TargetSpec target;
  uint64_t step_bytes = 0;   // resident memory one forward and backward of a batch added
  uint64_t param_bytes = 0;  // the trainable parameters, in their dtypes
  // Its two passes' time, the leader alone on the node: a forward TorchScript profiles, then the
  // measured forward and backward, in which it optimises the graph.
  uint64_t step_ns = 0;
};

// The forward and backward passes of a worker's warm-up (WarmUpModelFile).
constexpr int kWarmUpRuns = 3;

// How long the run's steps may go without progress (the spec's step_timeout_ms as the supervisor
// reads it) and a worker's warm-up may take: a given --step-timeout-ms as given (0: off), the
// warm-up kWarmUpRuns times it; the default replaced, for both, by kStepBoundFactor times the
// probe's passes, times the oversubscription of the cores (workers x threads / cores, at least
// 1), at least kStepBoundFloorMs and at most the default. `why` says which.
constexpr uint64_t kStepBoundFactor = 100;
constexpr uint32_t kStepBoundFloorMs = 5000;
StepBounds ModelFileStepBounds(const v1::ExperimentSpec& spec, uint64_t probe_step_ns,
                               uint32_t cores);

// The spec's model file, loaded and checked trainable (FAILED_PRECONDITION saying why not). With
// `fail_now` (the leader), the load is bounded in time and memory (StageBound::LoadTime,
// LoadMemory); a worker loads the file the leader has already loaded within them.
StatusOr<std::shared_ptr<ScriptedModel>> LoadModelFile(const v1::ExperimentSpec& spec,
                                                       const FailNow& fail_now = nullptr);

// One forward and backward of a batch of batch_size random inputs; INVALID_ARGUMENT with
// TorchScript's message when forward refuses them, the loss cannot be taken or is not finite.
// The model's gradients and buffers are as they were before (the step trains nothing). Bounded
// (StageBound::ProbeTime, the node's available memory); past its time `fail_now` is called.
StatusOr<ModelFileProbe> ProbeModelFile(ScriptedModel& model, const v1::ExperimentSpec& spec,
                                        const FailNow& fail_now);

// The training set in a new segment called `name`: synthetic, or the spec's dataset, a tensor
// file the user uploaded (torch.save of {"inputs": ..., "targets": ...}), checked against the
// inputs and the target (FAILED_PRECONDITION / INVALID_ARGUMENT naming what does not fit).
StatusOr<ShmSegment> MakeModelFileData(const v1::ExperimentSpec& spec, const TargetSpec& target,
                                       const std::string& name);

// In a worker, before its start gate and before data_parallel hooks its gradients: TorchScript's
// profiling executor specialises the graph over its first runs, so forward and backward run here
// on the set's first batch, leaving gradients and buffers as they were; the steps timed are the
// optimised graph's.
// On `device`: the first batch moved there (the model is already).
void WarmUpModelFile(Model& model, const TensorSetHeader& set, int64_t batch, WorkerSlot* slot,
                     const torch::Device& device = torch::kCPU);

// A --dataset file is mapped, not read (worker/tensor_file.h): its segment is the one copy that
// takes memory; the file's pages are the page cache's, which the kernel may drop again.
// RESOURCE_EXHAUSTED, naming the figures, when the segment of a file of `file_bytes` does not
// fit in the node's available memory: refused before a byte is read.
Status DatasetFits(uint64_t file_bytes, uint64_t available_bytes);

// What a kind's worker holds beyond what every model file's worker does: more copies of the
// gradients (data_parallel's flat buckets: one), and how to say so in a refusal.
struct KindCopies {
  uint32_t gradient_copies = 0;
  std::string what;  // " (with their gradient buckets)"
};

// What the workers need in all, from the probe: each worker's LibTorch, its step, its gradients
// and optimiser state, its own weights when not shared and the kind's copies; and the weights
// segment. (vit_h_14's data_parallel replicas, admitted without their buckets, were killed by
// the kernel's OOM killer on a 24 GiB node.)
uint64_t ModelFileWorkersNeed(const v1::ExperimentSpec& spec, const ModelFileProbe& probe,
                              const KindCopies& kind = {});

// RESOURCE_EXHAUSTED, with the figures, when the workers' measured need is more than the node's
// available memory (unless the spec says force).
Status AdmitModelFileWorkers(const v1::ExperimentSpec& spec, const ModelFileProbe& probe,
                             const KindCopies& kind = {});

}  // namespace shoal
