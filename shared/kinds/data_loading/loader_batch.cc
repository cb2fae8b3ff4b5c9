#include "shared/kinds/data_loading/loader_batch.h"

#include <algorithm>
#include <random>

namespace shoal {
namespace {

uint64_t ImagesOffset() { return sizeof(LoaderBatchHeader); }
uint64_t LabelsOffset(uint32_t n, uint32_t pixels) {
  return ImagesOffset() + uint64_t(n) * pixels * sizeof(float);
}

}  // namespace

BatchSlice EpochPlan::Slice(uint64_t b) const {
  const uint64_t per = BatchesPerEpoch();
  BatchSlice s;
  s.epoch = uint32_t(b / per) + 1;
  s.first = (b % per) * batch;
  s.n = uint32_t(std::min<uint64_t>(batch, samples - s.first));
  return s;
}

std::vector<uint32_t> EpochOrder(uint64_t seed, uint32_t epoch, uint64_t n_train) {
  std::vector<uint32_t> order(n_train);
  for (uint64_t i = 0; i < n_train; ++i) order[i] = uint32_t(i);
  std::mt19937_64 rng(seed * 1000003ull + epoch);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

uint64_t LoaderBatchBytes(uint32_t batch, uint32_t pixels) {
  // + 4: the int64 labels start on an 8-byte boundary (BatchLabels), 4 bytes on when n * pixels
  // is odd.
  return LabelsOffset(batch, pixels) + 4 + uint64_t(batch) * sizeof(int64_t);
}

const float* BatchImages(const uint8_t* slot) {
  return reinterpret_cast<const float*>(slot + ImagesOffset());
}

const int64_t* BatchLabels(const uint8_t* slot, uint32_t pixels) {
  const auto* h = reinterpret_cast<const LoaderBatchHeader*>(slot);
  uint64_t off = LabelsOffset(h->n, pixels);
  off += off % 8;  // 4 when n * pixels is odd
  return reinterpret_cast<const int64_t*>(slot + off);
}

void MakeLoaderBatch(const uint8_t* images, const uint8_t* labels,
                     const std::vector<uint32_t>& order, const BatchSlice& slice, uint64_t b,
                     uint64_t seed, const AugmentOptions& o, uint8_t* out) {
  auto* h = reinterpret_cast<LoaderBatchHeader*>(out);
  h->n = slice.n;
  h->epoch = slice.epoch;
  h->batch = b;
  const uint32_t pixels = o.rows * o.cols;
  auto* x = reinterpret_cast<float*>(out + ImagesOffset());
  std::mt19937_64 rng = AugmentRng(seed, b);
  for (uint32_t i = 0; i < slice.n; ++i) {
    const uint32_t s = order[slice.first + i];
    AugmentImage(images + uint64_t(s) * pixels, o, rng, x + uint64_t(i) * pixels);
  }
  auto* y = const_cast<int64_t*>(BatchLabels(out, pixels));
  auto* images_end = reinterpret_cast<uint8_t*>(x + uint64_t(slice.n) * pixels);
  std::fill(images_end, reinterpret_cast<uint8_t*>(y), uint8_t(0));  // the alignment gap, if any
  for (uint32_t i = 0; i < slice.n; ++i) y[i] = labels[order[slice.first + i]];
}

}  // namespace shoal
