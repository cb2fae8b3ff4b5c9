#include "worker/tensor_set.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>

#include "shared/ipc/layout.h"
#include "shared/os/procfs.h"

namespace shoal {

torch::ScalarType DtypeOf(const InputSpec& in) {
  const std::string& d = in.dtype;
  if (d == "float64") return torch::kDouble;
  if (d == "float16") return torch::kHalf;
  if (d == "bfloat16") return torch::kBFloat16;
  if (d == "int64") return torch::kLong;
  if (d == "int32") return torch::kInt;
  if (d == "uint8") return torch::kByte;
  if (d == "bool") return torch::kBool;
  return torch::kFloat;
}

namespace {

// `n` samples of one input, [n, sample dims...].
torch::Tensor DrawInput(const InputSpec& in, int64_t n, at::Generator& gen) {
  std::vector<int64_t> shape = {n};
  for (int64_t d : in.SampleDims()) shape.push_back(d);
  if (in.floating()) return torch::randn(shape, gen, torch::kFloat).to(DtypeOf(in));
  const int64_t high = in.dtype == "bool" ? 2 : in.high;
  return torch::randint(0, high, shape, gen, torch::kLong).to(DtypeOf(in));
}

// mse: targets that follow from the first input, its samples flattened through a fixed random
// projection (tanh of it, shaped like the output).
torch::Tensor ProjectedTarget(const torch::Tensor& first, const TargetSpec& t, at::Generator& gen) {
  const int64_t n = first.size(0);
  torch::Tensor x = first.reshape({n, -1}).to(torch::kFloat);
  if (!first.is_floating_point()) x = x.remainder(97).sub(48).div(28);  // tokens: spread out
  int64_t out = 1;
  for (int64_t d : t.dims) out *= d;
  // Through a rank-64 bottleneck: a features x outputs matrix of an autoencoder's images would
  // hold gigabytes.
  constexpr int64_t kRank = 64;
  torch::Tensor down =
      torch::randn({x.size(1), kRank}, gen, torch::kFloat).div(std::sqrt(double(x.size(1))));
  torch::Tensor up = torch::randn({kRank, out}, gen, torch::kFloat).div(std::sqrt(double(kRank)));
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), t.dims.begin(), t.dims.end());
  return x.matmul(down).matmul(up).tanh().reshape(shape).to(t.dtype);
}

// Classes: every input carries its sample's class, as a fixed random pattern added to the noise
// (floating inputs) or as half its values drawn from the class's own share of [0, N) (integer
// inputs), so any model that can see its inputs can learn them.
void MarkClasses(torch::Tensor* input, const torch::Tensor& labels, const InputSpec& in,
                 int64_t classes, at::Generator& gen) {
  const int64_t n = input->size(0);
  if (in.floating()) {
    // At most 64 MiB of patterns: past that, classes share them (label mod the patterns made).
    const int64_t fit = std::max<int64_t>(1, (int64_t(64) << 20) / (4 * in.SampleElements()));
    std::vector<int64_t> shape = {std::min(classes, fit)};
    for (int64_t d : in.SampleDims()) shape.push_back(d);
    torch::Tensor patterns = torch::randn(shape, gen, torch::kFloat);
    const torch::Tensor picked = patterns.index_select(0, labels.remainder(shape[0]));
    NoteOwnPss();  // the set and its patterns, each whole: a leader's peak as it makes the set
    *input = input->to(torch::kFloat).add_(picked).to(DtypeOf(in));
    return;
  }
  const int64_t share = in.high / classes;
  if (share == 0) return;  // fewer values than classes: nothing to mark with
  torch::Tensor own =
      labels.view({n, 1}) * share + torch::randint(0, share, {n, 1}, gen, torch::kLong);
  torch::Tensor flat = input->reshape({n, -1}).to(torch::kLong);
  torch::Tensor pick = torch::rand(flat.sizes(), gen).lt(0.5);
  *input = torch::where(pick, own.expand_as(flat), flat).reshape(input->sizes()).to(DtypeOf(in));
}

// A class per position. Tokens [n, T] of a vocabulary the classes cover: the next token, as a
// language model is trained (the targets are the sequence moved one place on, its last a new
// token marked like the rest). Otherwise every position takes its sample's class.
torch::Tensor PositionTargets(const torch::Tensor& first, const torch::Tensor& labels,
                              const InputSpec& in, const TargetSpec& t, at::Generator& gen) {
  const int64_t n = labels.size(0);
  if (!in.floating() && in.high > 0 && in.high <= t.classes && in.SampleDims() == t.dims &&
      t.dims.size() == 1) {
    torch::Tensor last = torch::randint(0, in.high, {n, 1}, gen, torch::kLong);
    InputSpec one = in;
    one.dims = {kBatchDim, 1};
    one.batch_pos = 0;
    MarkClasses(&last, labels, one, t.classes, gen);
    return torch::cat({first.to(torch::kLong).narrow(1, 1, t.dims[0] - 1), last.to(torch::kLong)},
                      1);
  }
  std::vector<int64_t> shape = {n};
  std::vector<int64_t> view = {n};
  for (int64_t d : t.dims) {
    shape.push_back(d);
    view.push_back(1);
  }
  return labels.view(view).expand(shape).contiguous();
}

TensorSetEntry EntryFor(torch::ScalarType dtype, const std::vector<int64_t>& dims,
                        int64_t batch_pos) {
  TensorSetEntry e{};
  e.dtype = int32_t(dtype);
  e.ndim = uint32_t(dims.size());
  int64_t elements = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    e.dims[i] = dims[i];
    elements *= dims[i];
  }
  e.batch_pos = batch_pos;
  e.sample_bytes = uint64_t(elements) * c10::elementSize(dtype);
  return e;
}

torch::Tensor Whole(const TensorSetHeader& h, const void* base, uint32_t i) {
  const TensorSetEntry& e = h.entries[i];
  std::vector<int64_t> shape = {int64_t(h.n)};
  shape.insert(shape.end(), e.dims, e.dims + e.ndim);
  return torch::from_blob(const_cast<char*>(static_cast<const char*>(base)) + e.offset, shape,
                          torch::ScalarType(e.dtype));
}

}  // namespace

StatusOr<TensorSetHeader> PlanTensorSet(const std::vector<InputSpec>& inputs,
                                        const TargetSpec& target, int64_t n) {
  if (inputs.empty() || inputs.size() > kMaxInputs) return InvalidArgument("input: 1 to 8 inputs");
  if (target.dims.size() > kMaxInputRank)
    return InvalidArgument("the model's output has rank " + std::to_string(target.dims.size() + 1) +
                           "; mse targets of at most " + std::to_string(kMaxInputRank + 1));
  TensorSetHeader h{};
  h.magic = kTensorSetMagic;
  h.n = uint64_t(n);
  h.count = uint32_t(inputs.size() + 1);
  for (size_t i = 0; i < inputs.size(); ++i)
    h.entries[i] = EntryFor(DtypeOf(inputs[i]), inputs[i].SampleDims(), inputs[i].batch_pos);
  h.entries[inputs.size()] = EntryFor(target.dtype, target.dims, 0);
  uint64_t off = AlignUp(sizeof(TensorSetHeader));
  for (uint32_t i = 0; i < h.count; ++i) {
    h.entries[i].offset = off;
    off = AlignUp(off + h.entries[i].sample_bytes * h.n);
  }
  h.total_bytes = off;
  return h;
}

void FillSyntheticTensors(const TensorSetHeader& h, const std::vector<InputSpec>& inputs,
                          const TargetSpec& target, uint64_t seed, void* base) {
  auto gen = at::detail::createCPUGenerator(seed * 2654435761ull + 17);
  const int64_t n = int64_t(h.n);
  torch::Tensor labels;
  if (target.classes > 0) labels = torch::randint(0, target.classes, {n}, gen, torch::kLong);
  torch::Tensor first;
  for (size_t i = 0; i < inputs.size(); ++i) {
    torch::Tensor t = DrawInput(inputs[i], n, gen);
    if (target.classes > 0) MarkClasses(&t, labels, inputs[i], target.classes, gen);
    if (i == 0) first = t;
    Whole(h, base, uint32_t(i)).copy_(t);
    NoteOwnPss();  // drawn and in the segment: the other peak
  }
  torch::Tensor targets;
  if (target.classes == 0) {
    targets = ProjectedTarget(first, target, gen);
  } else if (target.dims.empty()) {
    targets = labels;
  } else {
    targets = PositionTargets(first, labels, inputs.front(), target, gen);
  }
  Whole(h, base, uint32_t(inputs.size())).copy_(targets);
}

std::vector<torch::Tensor> WholeTensors(const TensorSetHeader& h, const void* base,
                                        const torch::Device& device) {
  std::vector<torch::Tensor> out;
  for (uint32_t i = 0; i < h.count; ++i) out.push_back(Whole(h, base, i).to(device));
  return out;
}

void GatherBatch(const TensorSetHeader& h, const std::vector<torch::Tensor>& whole,
                 const int64_t* idx, int64_t n, std::vector<torch::Tensor>* inputs,
                 torch::Tensor* target) {
  torch::Tensor rows =
      torch::from_blob(const_cast<int64_t*>(idx), {n}, torch::kLong).to(whole.front().device());
  inputs->clear();
  for (uint32_t i = 0; i + 1 < h.count; ++i) {
    torch::Tensor b = whole[i].index_select(0, rows);
    const int64_t pos = h.entries[i].batch_pos;
    inputs->push_back(pos == 0 ? b : b.movedim(0, pos).contiguous());
  }
  *target = whole[h.count - 1].index_select(0, rows);
}

void GatherBatch(const TensorSetHeader& h, const void* base, const int64_t* idx, int64_t n,
                 std::vector<torch::Tensor>* inputs, torch::Tensor* target) {
  GatherBatch(h, WholeTensors(h, base, torch::kCPU), idx, n, inputs, target);
}

std::vector<torch::Tensor> RandomInputs(const std::vector<InputSpec>& inputs, int64_t n,
                                        uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<torch::Tensor> out;
  for (const auto& in : inputs) {
    torch::Tensor t = DrawInput(in, n, gen);
    out.push_back(in.batch_pos == 0 ? t : t.movedim(0, in.batch_pos).contiguous());
  }
  return out;
}

void CopyTensors(const TensorSetHeader& h, const std::vector<torch::Tensor>& inputs,
                 const torch::Tensor& target, void* base,
                 const std::function<void(const torch::Tensor&)>& copied) {
  constexpr int64_t kSliceBytes = 16 << 20;
  auto copy = [&](uint32_t i, const torch::Tensor& src) {
    torch::Tensor dst = Whole(h, base, i);
    const int64_t n = src.size(0),
                  row = std::max<int64_t>(1, src.nbytes() / std::max<int64_t>(1, n));
    const int64_t step = std::max<int64_t>(1, kSliceBytes / row);
    for (int64_t r = 0; r < n; r += step) {
      const torch::Tensor from = src.narrow(0, r, std::min(step, n - r));
      dst.narrow(0, r, from.size(0)).copy_(from);
      if (copied) copied(from);
    }
  };
  for (size_t i = 0; i < inputs.size(); ++i) copy(uint32_t(i), inputs[i]);
  copy(uint32_t(inputs.size()), target);
}

Status ValidateTensorSet(const TensorSetHeader& h, uint64_t size) {
  if (size < sizeof h || h.magic != kTensorSetMagic || h.total_bytes > size || h.count < 2 ||
      h.count > kMaxInputs + 1)
    return DataLoss("the model file's data segment is not a tensor set");
  for (uint32_t i = 0; i < h.count; ++i)
    if (h.entries[i].offset + h.entries[i].sample_bytes * h.n > size)
      return DataLoss("the model file's data segment is shorter than its header says");
  return Status::Ok();
}

}  // namespace shoal
