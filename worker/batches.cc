#include "worker/batches.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "shared/idx.h"
#include "shared/os/process.h"
#include "worker/scoreboard.h"

namespace shoal {
namespace {

// Normalisation constants of the MNIST recipe the published study used.
constexpr float kMean = 0.1307f;
constexpr float kStd = 0.3081f;

}  // namespace

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

namespace {

// One evaluation's span into the slot (the trace draws it), then the count that publishes it.
void RecordEvaluation(WorkerSlot* slot, uint64_t start_ns, uint64_t end_ns) {
  const uint32_t i = slot->evaluations.load(std::memory_order_relaxed);
  if (i < kMaxEvalSpans) {
    slot->eval_spans[i].start_ns.store(start_ns, std::memory_order_relaxed);
    slot->eval_spans[i].end_ns.store(end_ns, std::memory_order_relaxed);
  }
  slot->evaluations.store(i + 1, std::memory_order_release);
}

}  // namespace

double Evaluate(Model& model, const DataView& data, uint64_t limit, int64_t batch,
                const torch::Device& device, WorkerSlot* progress) {
  const uint64_t start_ns = RealtimeNs();
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
  if (progress != nullptr) RecordEvaluation(progress, start_ns, RealtimeNs());
  return n == 0 ? 0.0 : double(correct) / double(n);
}

}  // namespace shoal
