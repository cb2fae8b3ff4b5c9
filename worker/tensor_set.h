// A model file's training set in shared memory: each input, then the target, as one [n, ...]
// array of its dtype (the batch dimension first), made once by the leader and gathered into
// batches by every worker. Synthetic by default: inputs drawn from the --input specs (normal for
// floating inputs, uniform in [0, N) for integer ones) marked with each sample's class (or, for
// mse, targets that follow from the first input by a fixed random projection), so the loss can
// fall; seeded by the spec's seed.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/spec/input_spec.h"
#include "shared/status.h"

namespace shoal {

constexpr uint64_t kTensorSetMagic = 0x53484f414c545331ull;  // "SHOALTS1"

struct TensorSetEntry {
  int32_t dtype;  // c10::ScalarType
  uint32_t ndim;  // the sample's, batch left out
  int64_t dims[kMaxInputRank];
  int64_t batch_pos;  // where a batch's B goes back
  uint64_t offset;    // from the start of the segment
  uint64_t sample_bytes;
};

struct TensorSetHeader {
  uint64_t magic;
  uint64_t total_bytes;
  uint64_t n;      // samples
  uint32_t count;  // inputs, then the target
  uint32_t reserved;
  TensorSetEntry entries[kMaxInputs + 1];
};

// What the target of one sample is: int64 class indices (cross_entropy, output) or the output's
// shape and dtype (mse).
struct TargetSpec {
  torch::ScalarType dtype = torch::kLong;
  std::vector<int64_t> dims;  // one sample's (none for a class index)
  int64_t classes = 0;
};

// The header of a set of `n` samples of these inputs and target.
StatusOr<TensorSetHeader> PlanTensorSet(const std::vector<InputSpec>& inputs,
                                        const TargetSpec& target, int64_t n);
// Fills the segment at `base` (laid out by `h`, which the caller copied to its start).
void FillSyntheticTensors(const TensorSetHeader& h, const std::vector<InputSpec>& inputs,
                          const TargetSpec& target, uint64_t seed, void* base);
// The samples `idx[0..n)` as a batch: each input with B where its spec puts it, and the target.
void GatherBatch(const TensorSetHeader& h, const void* base, const int64_t* idx, int64_t n,
                 std::vector<torch::Tensor>* inputs, torch::Tensor* target);
// The set's tensors, inputs then the target, each [n, sample...]: views of `base`, or on a
// device copied there once (a GPU worker gathers its batches where it trains, as the built-in
// models' images are uploaded once: no host copy and transfer a step).
std::vector<torch::Tensor> WholeTensors(const TensorSetHeader& h, const void* base,
                                        const torch::Device& device);
// GatherBatch from WholeTensors' tensors, on their device.
void GatherBatch(const TensorSetHeader& h, const std::vector<torch::Tensor>& whole,
                 const int64_t* idx, int64_t n, std::vector<torch::Tensor>* inputs,
                 torch::Tensor* target);
// A batch of `n` samples of these inputs, drawn afresh (the leader's probe of the model).
std::vector<torch::Tensor> RandomInputs(const std::vector<InputSpec>& inputs, int64_t n,
                                        uint64_t seed);
// The LibTorch dtype an input spec names.
torch::ScalarType DtypeOf(const InputSpec& in);
// Copies a data set the user gave ([n, sample...] each, batch first) into the segment at `base`,
// a slice of samples (at most 16 MiB) at a time, calling `copied` with each source slice once it
// is in the segment (a mapped file's pages can then go: worker/tensor_file.h).
void CopyTensors(const TensorSetHeader& h, const std::vector<torch::Tensor>& inputs,
                 const torch::Tensor& target, void* base,
                 const std::function<void(const torch::Tensor&)>& copied = nullptr);
// OK when the header at the start of a segment of `size` bytes is a whole tensor set.
Status ValidateTensorSet(const TensorSetHeader& h, uint64_t size);

}  // namespace shoal
