// A model's weights in the experiment's weight segment: which tensors it holds and in what order,
// copying a model in and out, and binding a model's parameters and buffers to the segment (CPU) or
// to the leader's device buffer (GPU) so that every worker trains the one copy (Hogwild).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "shared/gpu/cuda_driver.h"
#include "shared/ipc/layout.h"
#include "shared/status.h"

namespace shoal {

// What the weight segment holds of a model, in its order: the parameters, then the buffers
// (BatchNorm's statistics, integer counters; a scripted model's frozen parameters), as PyTorch's
// share_memory() shares both.
std::vector<torch::Tensor> SegmentTensors(torch::nn::Module& model);
// Their names, shapes, dtypes and roles; INVALID_ARGUMENT naming a tensor of a dtype the segment
// does not hold (complex, quantised).
StatusOr<std::vector<TensorShape>> ModelTensors(torch::nn::Module& model);
// A rank-4 tensor laid out NHWC and not also NCHW-contiguous (memory_format channels_last).
bool IsChannelsLast(const torch::Tensor& t);
// The segment's dtype of a LibTorch one, and back.
StatusOr<WeightDtype> WeightDtypeOf(c10::ScalarType t);
c10::ScalarType ScalarTypeOf(WeightDtype d);
// DATA_LOSS unless the segment holds exactly this model's tensors (names, shapes, dtypes, roles),
// in its order.
Status CheckWeightsMatch(torch::nn::Module& model, const WeightsPlan& plan);
// Copies the model's parameters and buffers into the segment at `base` (laid out by `plan`).
void CopyWeightsToSegment(torch::nn::Module& model, const WeightsPlan& plan, void* base);
// Copies the segment into the model's own (private) parameter and buffer storage.
void CopyWeightsFromSegment(torch::nn::Module& model, const WeightsPlan& plan, const void* base);
// Points every parameter and buffer at its slice of the segment: from then on the model trains
// in place on shared memory (Hogwild), its running statistics too. The segment must outlive the
// model's use of it. DATA_LOSS when the segment does not hold this model's tensors.
Status BindWeightsToSegment(torch::nn::Module& model, const WeightsPlan& plan, void* base);
// The same on a GPU: every tensor a CUDA tensor over its slice of the device buffer at `base`,
// laid out like the segment (the leader's buffer, opened through CUDA IPC).
Status BindWeightsToDevice(torch::nn::Module& model, const WeightsPlan& plan, DevicePtr base,
                           const torch::Device& device);
// FNV-1a over the parameters' bytes in order (SegmentChecksum's order); buffers left out.
uint64_t ParamsChecksum(torch::nn::Module& model);

}  // namespace shoal
