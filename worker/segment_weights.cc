#include "worker/segment_weights.h"

#include <cstring>

namespace shoal {

std::vector<torch::Tensor> SegmentTensors(torch::nn::Module& model) {
  std::vector<torch::Tensor> out = model.parameters();
  for (auto& b : model.buffers()) out.push_back(b);
  return out;
}

StatusOr<WeightDtype> WeightDtypeOf(c10::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return WeightDtype::kFloat32;
    case torch::kHalf:
      return WeightDtype::kFloat16;
    case torch::kBFloat16:
      return WeightDtype::kBFloat16;
    case torch::kDouble:
      return WeightDtype::kFloat64;
    case torch::kLong:
      return WeightDtype::kInt64;
    case torch::kInt:
      return WeightDtype::kInt32;
    case torch::kShort:
      return WeightDtype::kInt16;
    case torch::kChar:
      return WeightDtype::kInt8;
    case torch::kByte:
      return WeightDtype::kUInt8;
    case torch::kBool:
      return WeightDtype::kBool;
    default:
      return InvalidArgument(std::string(c10::toString(t)));
  }
}

c10::ScalarType ScalarTypeOf(WeightDtype d) {
  static constexpr c10::ScalarType kTypes[kWeightDtypes] = {
      torch::kFloat, torch::kHalf,  torch::kBFloat16, torch::kDouble, torch::kLong,
      torch::kInt,   torch::kShort, torch::kChar,     torch::kByte,   torch::kBool};
  return kTypes[static_cast<uint32_t>(d)];
}

bool IsChannelsLast(const torch::Tensor& t) {
  // A tensor dense in both orders (a 1x1 kernel, one channel) is recorded as NCHW: the same bytes.
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(torch::MemoryFormat::ChannelsLast);
}

StatusOr<std::vector<TensorShape>> ModelTensors(torch::nn::Module& model) {
  std::vector<TensorShape> out;
  auto add = [&](const std::string& name, const torch::Tensor& t, WeightRole role) -> Status {
    auto dtype = WeightDtypeOf(t.scalar_type());
    if (!dtype.ok())
      return InvalidArgument("tensor " + name + " is " + dtype.status().message() +
                             ", which the weight segment does not hold");
    out.push_back({name, t.sizes().vec(), *dtype, role, IsChannelsLast(t)});
    return Status::Ok();
  };
  for (const auto& p : model.named_parameters())
    RETURN_IF_ERROR(add(p.key(), p.value(), WeightRole::kParameter));
  for (const auto& b : model.named_buffers())
    RETURN_IF_ERROR(add(b.key(), b.value(), WeightRole::kBuffer));
  return out;
}

void CopyWeightsToSegment(torch::nn::Module& model, const WeightsPlan& plan, void* base) {
  torch::NoGradGuard ng;
  auto tensors = SegmentTensors(model);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto order = plan.tensors[i].t.channels_last ? torch::MemoryFormat::ChannelsLast
                                                       : torch::MemoryFormat::Contiguous;
    auto src = tensors[i].detach().to(torch::kCPU).contiguous(order);
    std::memcpy(static_cast<char*>(base) + plan.tensors[i].offset, src.data_ptr(),
                plan.tensors[i].bytes());
  }
}

namespace {

// The segment's view of tensor i at `base`, in memory `options` names.
torch::Tensor SegmentView(const WeightTensor& w, char* base, const torch::TensorOptions& options) {
  const auto o = options.dtype(ScalarTypeOf(w.t.dtype));
  if (!w.t.channels_last) return torch::from_blob(base + w.offset, w.t.shape, o);
  const int64_t c = w.t.shape[1], h = w.t.shape[2], wd = w.t.shape[3];  // NHWC strides
  return torch::from_blob(base + w.offset, w.t.shape, {h * wd * c, 1, wd * c, c}, o);
}

}  // namespace

Status CheckWeightsMatch(torch::nn::Module& model, const WeightsPlan& plan) {
  auto want = ModelTensors(model);
  if (!want.ok()) return DataLoss(want.status().message());
  if (want->size() != plan.tensors.size())
    return DataLoss("weight segment holds " + std::to_string(plan.tensors.size()) +
                    " tensors, the model has " + std::to_string(want->size()));
  for (size_t i = 0; i < want->size(); ++i) {
    const TensorShape& have = plan.tensors[i].t;
    const TensorShape& m = (*want)[i];
    if (m.name != have.name || m.shape != have.shape || m.dtype != have.dtype ||
        m.role != have.role || m.channels_last != have.channels_last)
      return DataLoss("weight segment tensor " + have.name + " does not match the model's " +
                      m.name);
  }
  return Status::Ok();
}

namespace {

// Points every tensor at its slice of the buffer at `base`, in memory `options` names.
Status BindWeights(torch::nn::Module& model, const WeightsPlan& plan, char* base,
                   const torch::TensorOptions& options) {
  RETURN_IF_ERROR(CheckWeightsMatch(model, plan));
  torch::NoGradGuard ng;
  auto tensors = SegmentTensors(model);
  for (size_t i = 0; i < plan.tensors.size(); ++i)
    tensors[i].set_data(SegmentView(plan.tensors[i], base, options));
  return Status::Ok();
}

}  // namespace

void CopyWeightsFromSegment(torch::nn::Module& model, const WeightsPlan& plan, const void* base) {
  torch::NoGradGuard ng;
  auto tensors = SegmentTensors(model);
  char* b = const_cast<char*>(static_cast<const char*>(base));
  for (size_t i = 0; i < plan.tensors.size(); ++i)
    tensors[i].copy_(SegmentView(plan.tensors[i], b, torch::TensorOptions()));  // private storage
}

Status BindWeightsToSegment(torch::nn::Module& model, const WeightsPlan& plan, void* base) {
  return BindWeights(model, plan, static_cast<char*>(base), torch::TensorOptions());
}

Status BindWeightsToDevice(torch::nn::Module& model, const WeightsPlan& plan, DevicePtr base,
                           const torch::Device& device) {
  return BindWeights(model, plan, reinterpret_cast<char*>(base),
                     torch::TensorOptions().device(device));
}

uint64_t ParamsChecksum(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.parameters()) {
    // A device's weights copied back; NHWC ones in that order, as the segment holds them.
    auto c = p.detach()
                 .to(torch::kCPU)
                 .contiguous(IsChannelsLast(p) ? torch::MemoryFormat::ChannelsLast
                                               : torch::MemoryFormat::Contiguous);
    h = Fnv1a(c.data_ptr(), c.nbytes(), h);
  }
  return h;
}

}  // namespace shoal
