// One stage of a pipeline (seed 004): its layers of AmoebaNet-D and GPipe's schedule for a step —
// every micro-batch forward, then every micro-batch backward in reverse order, then the update —
// with torchgpipe's checkpoint modes. What crosses to the neighbouring stages goes through a
// StageLink (shared-memory rings in the kind, in-memory queues in tests).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "worker/kinds/pipeline/amoebanet_model.h"
#include "worker/kinds/pipeline/checkpoint.h"
#include "worker/step_recorder.h"

namespace shoal {

class StageLink {
 public:
  virtual ~StageLink() = default;
  // Micro-batch `msg`'s outputs to the next stage; its inputs' gradients to the previous one.
  virtual Status SendForward(uint64_t msg, const AmoebaStates& states) = 0;
  virtual Status SendBackward(uint64_t msg, const AmoebaStates& grads) = 0;
  // Blocks until the previous stage's outputs (the next stage's gradients) for `msg` are there.
  virtual StatusOr<AmoebaStates> ReceiveForward(uint64_t msg) = 0;
  virtual StatusOr<AmoebaStates> ReceiveBackward(uint64_t msg) = 0;
};

// A step's figures, this stage's.
struct StageStep {
  uint64_t forward_ns = 0, backward_ns = 0, optimizer_ns = 0;
  uint64_t wait_ns = 0;  // blocked in a receive: the bubble and the neighbours' pace
  double loss = 0;       // the last stage: the mini-batch's mean cross-entropy
};

struct StageConfig {
  uint32_t begin = 0, end = 0;  // its layers
  uint32_t stages = 1, stage = 0;
  uint32_t chunks = 1;
  std::string checkpoint = "except_last";
  // Waits for the device's queued work before a time is read (CUDA); none: the CPU.
  std::function<void()> sync;
};

class PipelineStage {
 public:
  PipelineStage(AmoebaNetD* model, torch::optim::Optimizer* opt, StageConfig cfg, StageLink* link);
  // Step `step`: `images` (the first stage) and `labels` (the last) are the whole mini-batch.
  StatusOr<StageStep> Step(uint64_t step, const torch::Tensor& images, const torch::Tensor& labels);

 private:
  struct InFlight {
    AmoebaStates in, out;
    torch::Tensor loss;  // the last stage
  };
  StatusOr<InFlight> Forward(uint64_t msg, uint32_t chunk, const torch::Tensor& images,
                             const torch::Tensor& labels, StageStep* times);
  Status Backward(uint64_t msg, InFlight& f, StageStep* times);
  uint64_t Since(SteadyClock::time_point t0) const;  // after the device's work is done
  bool first() const { return cfg_.stage == 0; }
  bool last() const { return cfg_.stage + 1 == cfg_.stages; }

  AmoebaNetD* model_;
  torch::optim::Optimizer* opt_;
  StageConfig cfg_;
  StageLink* link_;
  Segment segment_;
};

// Where a message's tensor data lies: a float32 view of `shape` at byte `offset` of the message.
// On the CPU the message is one buffer, headers and data (HostSlotData); between CUDA stages the
// ring slot carries the headers and each tensor's data lies at the same offset in the slot's
// device buffer (DeviceSlotData), so the data never leaves the GPU.
using SlotData = std::function<torch::Tensor(uint64_t offset, c10::IntArrayRef shape)>;
SlotData HostSlotData(uint8_t* message);
// `base` a device address (a CUDA IPC mapping); on the CPU device, a host address (fakes).
SlotData DeviceSlotData(uint64_t base, torch::Device device);

// States as one ring message (shared/kinds/pipeline/pipeline.h's format; headers at `out`, data
// through `data`) and back (copied out onto device `to`, from wherever the data lies). Both return
// once the copies are queued: on CUDA, synchronise before the slot is handed on.
StatusOr<uint64_t> EncodeStates(const AmoebaStates& states, uint8_t* out, uint64_t capacity,
                                const SlotData& data);
StatusOr<AmoebaStates> DecodeStates(const uint8_t* in, uint64_t bytes, const SlotData& data,
                                    torch::Device to = torch::kCPU);

}  // namespace shoal
