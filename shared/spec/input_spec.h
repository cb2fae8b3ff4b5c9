// A user's model is described, not coded: `--input 'float32[B,3,32,32]'` says what its forward
// takes (several inputs separated by ';'; `B` is the batch; an integer input names the end of its
// range, 'int64[B,16]:1000' for token ids in [0, 1000)), `--loss` how its output becomes the loss.
// Parsed here, with no LibTorch, by shoald (refusing at submit) and by the worker (making batches).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

struct InputSpec {
  std::string dtype;  // float32 | float64 | float16 | bfloat16 | int64 | int32 | uint8 | bool
  std::vector<int64_t> dims;  // kBatchDim where the batch goes
  int64_t batch_pos = 0;      // the index of the batch dimension in dims
  int64_t high = 0;           // integer inputs: values drawn from [0, high)
  bool floating() const;
  // One sample's shape: dims with the batch dimension left out.
  std::vector<int64_t> SampleDims() const;
  // Elements and bytes of one sample (the batch dimension left out).
  int64_t SampleElements() const;
  int64_t SampleBytes() const;
};

constexpr int64_t kBatchDim = -1;
constexpr size_t kMaxInputs = 8;
constexpr size_t kMaxInputRank = 6;
constexpr int64_t kMaxSampleBytes = int64_t(64) << 20;  // one sample of one input

// Bytes of one element of `dtype` (0 for a name that is not one).
int64_t DtypeBytes(const std::string& dtype);

// "float32[B,3,32,32];int64[B,16]:1000" into its inputs; INVALID_ARGUMENT naming the part and
// what is wrong with it.
StatusOr<std::vector<InputSpec>> ParseInputs(const std::string& text);

// The spec text of `in` ("int64[B,16]:1000"), as ParseInputs reads it back.
std::string InputText(const InputSpec& in);

// Samples in a model file's synthetic set, each `sample_bytes` (inputs and target): 1024, fewer
// when that passes 256 MiB, never fewer than a batch (a batch is never cut to fit the set).
int64_t SyntheticSamples(int64_t sample_bytes, int64_t batch_size);

// The losses a model file may be trained with: cross_entropy (targets int64 class indices in
// [0, classes)), mse (targets shaped like the output), output (forward(inputs..., targets)
// returns the loss itself; targets as for cross_entropy).
const std::vector<std::string>& LossNames();

}  // namespace shoal
