#include "worker/data_segment.h"

#include <algorithm>
#include <cstring>

#include "shared/idx.h"
#include "shared/os/procfs.h"

namespace shoal {
namespace {

constexpr uint64_t kSyntheticTrain = 6000;
constexpr uint64_t kSyntheticTest = 1000;

}  // namespace

uint64_t SegmentChecksum(const WeightsPlan& plan, const void* base) {
  uint64_t sum = 1469598103934665603ull;
  for (size_t i = 0; i < plan.parameters(); ++i)
    sum = Fnv1a(static_cast<const char*>(base) + plan.tensors[i].offset, plan.tensors[i].bytes(),
                sum);
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
  // Headers and labels first, then the images decoded straight into the segment: the set is in
  // memory once, never a decoded copy beside it.
  ASSIGN_OR_RETURN(MnistSet set, ReadMnistHeaders(spec.dataset()));
  DataHeader h = PlanData(set.train_images.count(), set.test_images.count(), set.rows, set.cols);
  ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, h.total_bytes));
  auto* base = static_cast<uint8_t*>(seg.data());
  std::memcpy(base, &h, sizeof h);
  std::memcpy(base + h.train_labels, set.train_labels.data.data(), set.train_labels.data.size());
  if (h.n_test > 0)
    std::memcpy(base + h.test_labels, set.test_labels.data.data(), set.test_labels.data.size());
  RETURN_IF_ERROR(ReadMnistImagesInto(set, base + h.train_images, base + h.test_images));
  NoteOwnPss();  // the whole set in its segment: the leader's peak
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

}  // namespace shoal
