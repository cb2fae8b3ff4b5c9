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
#include "worker/planned_allocator.h"
#include "worker/scoreboard.h"
#include "worker/step_cache_allocator.h"
#include "worker/train_device.h"

namespace shoal {
namespace {

// Normalisation constants of the MNIST recipe the published study used.
constexpr float kMean = 0.1307f;
constexpr float kStd = 0.3081f;
constexpr uint64_t kSyntheticTrain = 6000;
constexpr uint64_t kSyntheticTest = 1000;

}  // namespace

std::vector<TensorShape> ModelTensors(torch::nn::Module& model) {
  std::vector<TensorShape> out;
  for (const auto& p : model.named_parameters()) {
    out.push_back({p.key(), p.value().sizes().vec()});
  }
  return out;
}

void CopyParamsToSegment(torch::nn::Module& model, const WeightsHeader& h, void* base) {
  torch::NoGradGuard ng;
  auto params = model.parameters();
  for (uint32_t i = 0; i < h.count; ++i) {
    auto src = params[i].detach().contiguous();
    std::memcpy(static_cast<char*>(base) + h.entries[i].offset, src.data_ptr<float>(),
                h.entries[i].numel * sizeof(float));
  }
}

void CopyParamsFromSegment(torch::nn::Module& model, const WeightsHeader& h, const void* base) {
  torch::NoGradGuard ng;
  auto params = model.parameters();
  for (uint32_t i = 0; i < h.count; ++i) {
    const TensorEntry& e = h.entries[i];
    auto view = torch::from_blob(const_cast<char*>(static_cast<const char*>(base)) + e.offset,
                                 std::vector<int64_t>(e.shape, e.shape + e.ndim), torch::kFloat);
    params[i].copy_(view);  // into the parameter's own private storage
  }
}

namespace {

// Points every parameter at its slice of the buffer at `base`, in memory `options` names.
Status BindParams(torch::nn::Module& model, const WeightsHeader& h, char* base,
                  const torch::TensorOptions& options) {
  auto named = model.named_parameters();
  if (named.size() != h.count) {
    return DataLoss("weight segment holds " + std::to_string(h.count) + " tensors, the model has " +
                    std::to_string(named.size()));
  }
  torch::NoGradGuard ng;
  for (uint32_t i = 0; i < h.count; ++i) {
    const TensorEntry& e = h.entries[i];
    auto& p = named[i];
    std::vector<int64_t> shape(e.shape, e.shape + e.ndim);
    if (p.key() != e.name || p.value().sizes().vec() != shape) {
      return DataLoss("weight segment tensor " + std::string(e.name) +
                      " does not match parameter " + p.key());
    }
    p.value().set_data(torch::from_blob(base + e.offset, shape, options));
  }
  return Status::Ok();
}

}  // namespace

Status BindParamsToSegment(torch::nn::Module& model, const WeightsHeader& h, void* base) {
  return BindParams(model, h, static_cast<char*>(base), torch::TensorOptions(torch::kFloat));
}

Status BindParamsToDevice(torch::nn::Module& model, const WeightsHeader& h, DevicePtr base,
                          const torch::Device& device) {
  return BindParams(model, h, reinterpret_cast<char*>(base),
                    torch::TensorOptions(torch::kFloat).device(device));
}

uint64_t ParamsChecksum(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.parameters()) {
    auto c = p.detach().to(torch::kCPU).contiguous();  // a device's weights, copied back
    h = Fnv1a(c.data_ptr<float>(), c.numel() * sizeof(float), h);
  }
  return h;
}

uint64_t SegmentChecksum(const WeightsHeader& h, const void* base) {
  uint64_t sum = 1469598103934665603ull;
  for (uint32_t i = 0; i < h.count; ++i) {
    sum = Fnv1a(static_cast<const char*>(base) + h.entries[i].offset,
                h.entries[i].numel * sizeof(float), sum);
  }
  return sum;
}

StatusOr<ShmSegment> LoadDataSegment(const v1::ExperimentSpec& spec, const std::string& name) {
  if (spec.dataset() == "synthetic") {
    // CIFAR-shaped for the CIFAR network (Debian packages no CIFAR), MNIST-shaped otherwise.
    const bool cifar = spec.model() == "resnet18_cifar";
    DataHeader h = cifar ? PlanData(kSyntheticTrain, kSyntheticTest, 32, 32, 3)
                         : PlanData(kSyntheticTrain, kSyntheticTest, 28, 28);
    ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, h.total_bytes));
    std::memcpy(seg.data(), &h, sizeof h);
    FillSynthetic(kSyntheticTrain, kSyntheticTest, spec.seed(), h,
                  static_cast<uint8_t*>(seg.data()));
    return seg;  // nothing to free: the leader's reading before its workers start covers it
  }
  ASSIGN_OR_RETURN(MnistSet set, LoadMnistDir(spec.dataset()));
  DataHeader h = PlanData(set.train_images.count(), set.test_images.count(), set.rows, set.cols);
  ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, h.total_bytes));
  auto* base = static_cast<uint8_t*>(seg.data());
  std::memcpy(base, &h, sizeof h);
  std::memcpy(base + h.train_images, set.train_images.data.data(), set.train_images.data.size());
  std::memcpy(base + h.train_labels, set.train_labels.data.data(), set.train_labels.data.size());
  if (h.n_test > 0) {
    std::memcpy(base + h.test_images, set.test_images.data.data(), set.test_images.data.size());
    std::memcpy(base + h.test_labels, set.test_labels.data.data(), set.test_labels.data.size());
  }
  NoteOwnPss();  // the decoded set and the segment both resident: the leader's peak, until freed
  return seg;
}

void FillSynthetic(uint64_t n_train, uint64_t n_test, uint64_t seed, const DataHeader& h,
                   uint8_t* base) {
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  const uint32_t rows = h.rows, cols = h.cols, plane = rows * cols;
  const uint64_t image_bytes = ImageBytes(h);
  auto fill = [&](uint64_t n, uint8_t* images, uint8_t* labels) {
    for (uint64_t k = 0; k < n; ++k) {
      const uint32_t label = next() % 10;
      labels[k] = static_cast<uint8_t>(label);
      uint8_t* img = images + k * image_bytes;
      for (uint64_t p = 0; p < image_bytes; ++p) img[p] = static_cast<uint8_t>(next() % 64);
      // A bright 7x7 blob whose place encodes the class, jittered by a pixel or two; in every
      // channel.
      const uint32_t r0 = 2 + (label / 4) * 8 + next() % 3, c0 = 2 + (label % 4) * 6 + next() % 3;
      for (uint32_t ch = 0; ch < h.channels; ++ch)
        for (uint32_t r = r0; r < std::min(rows, r0 + 7); ++r)
          for (uint32_t c = c0; c < std::min(cols, c0 + 7); ++c)
            img[ch * plane + r * cols + c] = 220;
    }
  };
  fill(n_train, base + h.train_images, base + h.train_labels);
  fill(n_test, base + h.test_images, base + h.test_labels);
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

bool LeaderGone(int lifetime_fd) {
  if (lifetime_fd < 0) return false;
  pollfd p{lifetime_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
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
