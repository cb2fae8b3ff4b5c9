// Training-side building blocks every kind can use: the model's weights in a shared segment, the
// data set in a shared segment and batches from it, evaluation. Shared by shoal-worker and tests.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "shared/gpu/cuda_driver.h"
#include "shared/ipc/layout.h"
#include "shared/os/shm.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"
#include "worker/data_segment.h"
#include "worker/models/models.h"

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

// Builds a normalised float batch [B,channels,side,side] and int64 labels from the given rows;
// `pixels`: bytes per image, every channel.
void MakeBatch(const uint8_t* images, const uint8_t* labels, const int64_t* idx, int64_t n,
               int64_t pixels, torch::Tensor* x, torch::Tensor* y, int64_t channels = 1);

// The training set on a device: uint8 images [n, pixels] and int64 labels, uploaded once per
// worker (each worker's own copy: one copy shared through IPC would save device memory, but each
// PyTorch process of the study holds its own, and that is what is measured).
struct DeviceData {
  torch::Tensor images, labels;
  int64_t channels = 1;
};
DeviceData UploadTrainSet(const DataView& data, const torch::Device& device);
// MakeBatch's batch, made on the device the data lives on.
void MakeDeviceBatch(const DeviceData& d, const int64_t* idx, int64_t n, torch::Tensor* x,
                     torch::Tensor* y);

// Test-set accuracy of the model on the first `limit` test images (batches moved to `device`);
// each batch marks `progress` (MarkProgress) when given.
double Evaluate(Model& model, const DataView& data, uint64_t limit, int64_t batch,
                const torch::Device& device = torch::kCPU, WorkerSlot* progress = nullptr);

// Builds an mnist_convnet and takes one tiny step on it, once per process (later calls return at
// once): pages in the kernels and allocator paths its training uses. The forkserver calls it
// from every kind that trains this network.
void WarmConvNetOnce();

// Applies the allocator policy named in the spec ("retain" keeps freed step buffers mapped).
void ApplyAllocatorPolicy(const std::string& policy);

// What a training process applies before it builds anything: the spec's allocator, and its
// kernels ("shoal": Shoal's CPU kernels in the dispatcher for the rest of the process,
// worker/kernels/shoal_kernels.h; "libtorch" or unset: LibTorch's own).
void ApplyRuntimePolicies(const v1::ExperimentSpec& spec);

}  // namespace shoal
