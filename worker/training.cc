#include "worker/training.h"

#include <linux/futex.h>
#include <malloc.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "shared/idx.h"
#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "worker/kernels/shoal_kernels.h"
#include "worker/planned_allocator.h"
#include "worker/scoreboard.h"
#include "worker/step_cache_allocator.h"
#include "worker/train_device.h"

namespace shoal {
namespace {

// Normalisation constants of the MNIST recipe the published study used.
constexpr float kMean = 0.1307f;
constexpr float kStd = 0.3081f;

}  // namespace

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

void MakeBatch(const uint8_t* images, const uint8_t* labels, const int64_t* idx, int64_t n,
               int64_t pixels, torch::Tensor* x, torch::Tensor* y, int64_t channels) {
  auto xb = torch::empty({n, pixels}, torch::kUInt8);
  auto yb = torch::empty({n}, torch::kLong);
  uint8_t* xp = xb.data_ptr<uint8_t>();
  int64_t* yp = yb.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(xp + i * pixels, images + idx[i] * pixels, pixels);
    yp[i] = labels[idx[i]];
  }
  const int64_t side = static_cast<int64_t>(std::lround(std::sqrt(double(pixels / channels))));
  *x = xb.to(torch::kFloat).div_(255.0).sub_(kMean).div_(kStd).view({n, channels, side, side});
  *y = yb;
}

void MakeDeviceBatch(const DeviceData& d, const int64_t* idx, int64_t n, torch::Tensor* x,
                     torch::Tensor* y) {
  const torch::Device dev = d.images.device();
  auto rows = torch::from_blob(const_cast<int64_t*>(idx), {n}, torch::kLong).to(dev);
  const int64_t pixels = d.images.size(1) / d.channels;
  const int64_t side = static_cast<int64_t>(std::lround(std::sqrt(double(pixels))));
  *x = d.images.index_select(0, rows)
           .to(torch::kFloat)
           .div_(255.0)
           .sub_(kMean)
           .div_(kStd)
           .view({n, d.channels, side, side});
  *y = d.labels.index_select(0, rows);
}

DeviceData UploadTrainSet(const DataView& data, const torch::Device& device) {
  const auto n = int64_t(data.header->n_train);
  const auto pixels = int64_t(ImageBytes(*data.header));
  auto* images = const_cast<uint8_t*>(data.train_images());
  auto* labels = const_cast<uint8_t*>(data.train_labels());
  return {torch::from_blob(images, {n, pixels}, torch::kUInt8).to(device),
          torch::from_blob(labels, {n}, torch::kUInt8).to(device).to(torch::kLong),
          int64_t(data.header->channels)};
}

double Evaluate(Model& model, const DataView& data, uint64_t limit, int64_t batch,
                const torch::Device& device, WorkerSlot* progress) {
  torch::NoGradGuard ng;
  model.eval();
  const int64_t n = static_cast<int64_t>(std::min<uint64_t>(limit, data.header->n_test));
  if (progress != nullptr) progress->eval_images.store(static_cast<uint32_t>(n));
  const auto pixels = int64_t(ImageBytes(*data.header));
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  int64_t correct = 0;
  for (int64_t s = 0; s < n; s += batch) {
    const int64_t b = std::min(batch, n - s);
    torch::Tensor x, y;
    MakeBatch(data.test_images(), data.test_labels(), idx.data() + s, b, pixels, &x, &y,
              data.header->channels);
    auto pred = model.forward(x.to(device)).argmax(1).to(torch::kCPU);
    correct += pred.eq(y).sum().item<int64_t>();
    if (progress != nullptr) MarkProgress(progress);
  }
  model.train();
  return n == 0 ? 0.0 : double(correct) / double(n);
}

void ApplyAllocatorPolicy(const std::string& policy) {
  if (policy == "cache") {
    StepCacheAllocator::Install();
    return;
  }
  if (policy == "planned") {
    PlannedAllocator::Install();
    return;
  }
  if (policy != "retain") return;
  // The step's activation buffers (~150 MB each at batch 64) are above glibc's mmap threshold,
  // so by default every step maps and unmaps them: ~235k page faults a batch, half the CPU in
  // the kernel. Serving them from the heap and never trimming it keeps the pages mapped, and
  // the same sizes come back every step, so the heap does not keep growing.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_ARENA_MAX, 1);
}

void ApplyRuntimePolicies(const v1::ExperimentSpec& spec) {
  ApplyAllocatorPolicy(spec.allocator());
  if (spec.kernels() != "shoal") return;
  static const ShoalKernels* const kept = new ShoalKernels();  // for the process's life
  (void)kept;
}

void WarmConvNetOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    SeedCpu(0);
    ModelPtr scratch = MakeModel("mnist_convnet").value();
    torch::optim::SGD opt(scratch->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
    auto x = torch::randn({2, 1, 28, 28});
    auto y = torch::tensor({1, 2}, torch::kLong);
    opt.zero_grad();
    auto loss = torch::nll_loss(scratch->forward(x), y);
    if (BackwardTouchesCuda()) {  // the forkserver must stay off CUDA: the step without backward
      for (auto& p : scratch->parameters()) p.mutable_grad() = torch::zeros_like(p);
    } else {
      loss.backward();
    }
    opt.step();
  });
}

}  // namespace shoal
