#include "worker/kinds/pipeline/pipeline_stage.h"

#include <chrono>
#include <cstring>

#include "shared/kinds/pipeline/pipeline.h"
#include "worker/step_recorder.h"

namespace shoal {
namespace {

// Inputs from the previous stage become leaves whose gradients go back to it.
AmoebaStates AsLeaves(const AmoebaStates& in) {
  AmoebaStates out;
  for (const auto& t : in) out.push_back(t.detach().requires_grad_(true));
  return out;
}

}  // namespace

PipelineStage::PipelineStage(AmoebaNetD* model, torch::optim::Optimizer* opt, StageConfig cfg,
                             StageLink* link)
    : model_(model), opt_(opt), cfg_(std::move(cfg)), link_(link) {
  segment_ = [this](const torch::autograd::variable_list& in) {
    return model_->Run(cfg_.begin, cfg_.end, in);
  };
}

uint64_t PipelineStage::Since(SteadyClock::time_point t0) const {
  if (cfg_.sync) cfg_.sync();
  return ElapsedNs(t0, SteadyClock::now());
}

StatusOr<PipelineStage::InFlight> PipelineStage::Forward(uint64_t msg, uint32_t chunk,
                                                         const torch::Tensor& images,
                                                         const torch::Tensor& labels,
                                                         StageStep* times) {
  InFlight f;
  if (first()) {
    f.in = {images.chunk(cfg_.chunks)[chunk]};
  } else {
    const auto t0 = SteadyClock::now();
    ASSIGN_OR_RETURN(AmoebaStates in, link_->ReceiveForward(msg));
    times->wait_ns += Since(t0);
    f.in = AsLeaves(in);
  }
  const auto t0 = SteadyClock::now();
  f.out = Checkpointed(cfg_.checkpoint, chunk, cfg_.chunks) ? Checkpoint(segment_, f.in)
                                                            : segment_(f.in);
  if (last()) {
    // The mini-batch's mean, as torchgpipe's loss on the concatenated outputs: each micro-batch's
    // sum over the whole batch's size.
    f.loss = torch::nn::functional::cross_entropy(
                 f.out.at(0), labels.chunk(cfg_.chunks)[chunk],
                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
             double(labels.size(0));
  }
  times->forward_ns += Since(t0);
  if (!last()) {
    AmoebaStates detached;
    for (const auto& t : f.out) detached.push_back(t.detach());
    RETURN_IF_ERROR(link_->SendForward(msg, detached));
  }
  return f;
}

Status PipelineStage::Backward(uint64_t msg, InFlight& f, StageStep* times) {
  if (last()) {
    const auto t0 = SteadyClock::now();
    f.loss.backward();
    times->backward_ns += Since(t0);
  } else {
    const auto w0 = SteadyClock::now();
    ASSIGN_OR_RETURN(AmoebaStates grads, link_->ReceiveBackward(msg));
    times->wait_ns += Since(w0);
    const auto t0 = SteadyClock::now();
    torch::autograd::variable_list outs, gs;
    for (size_t i = 0; i < f.out.size() && i < grads.size(); ++i) {
      if (!f.out[i].requires_grad()) continue;
      outs.push_back(f.out[i]);
      gs.push_back(grads[i]);
    }
    if (!outs.empty()) torch::autograd::backward(outs, gs);
    times->backward_ns += Since(t0);
  }
  if (first()) return Status::Ok();
  AmoebaStates back;
  for (const auto& t : f.in) back.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));
  return link_->SendBackward(msg, back);
}

StatusOr<StageStep> PipelineStage::Step(uint64_t step, const torch::Tensor& images,
                                        const torch::Tensor& labels) {
  StageStep times;
  opt_->zero_grad();
  std::vector<InFlight> flight;
  for (uint32_t c = 0; c < cfg_.chunks; ++c) {
    ASSIGN_OR_RETURN(InFlight f, Forward(step * cfg_.chunks + c, c, images, labels, &times));
    flight.push_back(std::move(f));
  }
  for (uint32_t c = cfg_.chunks; c-- > 0;) {
    RETURN_IF_ERROR(Backward(step * cfg_.chunks + c, flight[c], &times));
    if (last()) times.loss += flight[c].loss.item<double>();
    flight[c] = InFlight{};  // its activations go now, as GPipe frees them
  }
  const auto t0 = SteadyClock::now();
  opt_->step();
  times.optimizer_ns = Since(t0);
  return times;
}

SlotData DeviceSlotData(uint64_t base, torch::Device device) {
  return [base, device](uint64_t offset, c10::IntArrayRef shape) {
    return torch::from_blob(reinterpret_cast<void*>(base + offset), shape,
                            torch::TensorOptions().dtype(torch::kFloat32).device(device));
  };
}

SlotData HostSlotData(uint8_t* message) {
  return DeviceSlotData(reinterpret_cast<uintptr_t>(message), torch::kCPU);
}

StatusOr<uint64_t> EncodeStates(const AmoebaStates& states, uint8_t* out, uint64_t capacity,
                                const SlotData& data) {
  uint64_t need = 8;
  for (const auto& t : states) need += kTensorHeaderBytes + uint64_t(t.numel()) * 4;
  if (need > capacity || states.size() > 2) {
    return Internal("pipeline: a message of " + std::to_string(need) + " bytes, slots hold " +
                    std::to_string(capacity));
  }
  const uint32_t count = uint32_t(states.size());
  std::memcpy(out, &count, 4);
  uint64_t at = 8;
  for (const auto& t : states) {
    const uint32_t ndim = uint32_t(t.dim());
    if (ndim > 4) return Internal("pipeline: a state of " + std::to_string(ndim) + " dimensions");
    int64_t dims[4] = {0, 0, 0, 0};
    for (uint32_t d = 0; d < ndim; ++d) dims[d] = t.size(d);
    std::memcpy(out + at, &ndim, 4);
    std::memcpy(out + at + 8, dims, sizeof dims);
    data(at + kTensorHeaderBytes, t.sizes()).copy_(t);
    at += kTensorHeaderBytes + uint64_t(t.numel()) * 4;
  }
  return need;
}

StatusOr<AmoebaStates> DecodeStates(const uint8_t* in, uint64_t bytes, const SlotData& data,
                                    torch::Device to) {
  uint32_t count = 0;
  if (bytes < 8) return DataLoss("pipeline: a message shorter than its header");
  std::memcpy(&count, in, 4);
  if (count > 2) return DataLoss("pipeline: a message of " + std::to_string(count) + " states");
  AmoebaStates out;
  uint64_t at = 8;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t ndim = 0;
    int64_t dims[4];
    if (at + kTensorHeaderBytes > bytes) return DataLoss("pipeline: a truncated message");
    std::memcpy(&ndim, in + at, 4);
    std::memcpy(dims, in + at + 8, sizeof dims);
    if (ndim > 4) return DataLoss("pipeline: a state of " + std::to_string(ndim) + " dimensions");
    uint64_t n = 4;
    for (uint32_t d = 0; d < ndim; ++d) {
      if (dims[d] < 0 || __builtin_mul_overflow(n, uint64_t(dims[d]), &n) || n > bytes)
        return DataLoss("pipeline: a state larger than its message");
    }
    if (at + kTensorHeaderBytes + n > bytes) return DataLoss("pipeline: a truncated message");
    out.push_back(data(at + kTensorHeaderBytes, c10::IntArrayRef(dims, ndim))
                      .to(to, /*non_blocking=*/false, /*copy=*/true));
    at += kTensorHeaderBytes + n;
  }
  return out;
}

}  // namespace shoal
