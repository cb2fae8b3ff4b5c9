// data_loading's pure pieces: the epoch plan, the shuffle every process agrees on, the batch
// bytes a loader writes (the same whichever process makes them), and the kind's spec rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "shared/kinds/data_loading/loader_batch.h"
#include "shared/kinds/data_loading/ring.h"
#include "shared/kinds/kind.h"
#include "shared/spec/spec.h"

namespace shoal {
namespace {

TEST(EpochPlanTest, ShortLastBatchAndNumberingAcrossEpochs) {
  EpochPlan p{2, 10, 4};
  EXPECT_EQ(p.BatchesPerEpoch(), 3u);
  EXPECT_EQ(p.TotalBatches(), 6u);
  const BatchSlice last = p.Slice(2);
  EXPECT_EQ(last.epoch, 1u);
  EXPECT_EQ(last.first, 8u);
  EXPECT_EQ(last.n, 2u);
  const BatchSlice next = p.Slice(3);
  EXPECT_EQ(next.epoch, 2u);
  EXPECT_EQ(next.first, 0u);
  EXPECT_EQ(next.n, 4u);
}

TEST(EpochOrderTest, APermutationTheSameInEveryProcessAndNewEachEpoch) {
  const auto a = EpochOrder(7, 1, 1000), b = EpochOrder(7, 1, 1000), c = EpochOrder(7, 2, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<uint32_t> sorted = a, iota(1000);
  std::sort(sorted.begin(), sorted.end());
  std::iota(iota.begin(), iota.end(), 0u);
  EXPECT_EQ(sorted, iota);
}

// Images of 3 x 3 pixels with value 10 * index, labels = index % 10.
struct TinySet {
  std::vector<uint8_t> images, labels;
  explicit TinySet(uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      images.insert(images.end(), 9, uint8_t(10 * i));
      labels.push_back(uint8_t(i % 10));
    }
  }
};

TEST(LoaderBatchTest, SameBytesFromAnyLoaderAndLabelsAligned) {
  TinySet set(12);
  AugmentOptions o;
  o.rows = o.cols = 3;
  o.pad = 1;
  EpochPlan plan{1, 12, 3};  // 3 x 9 = 27 floats: the labels need the 4-byte step to align
  const auto order = EpochOrder(5, 1, 12);
  const uint64_t bytes = LoaderBatchBytes(plan.batch, 9);
  std::vector<uint8_t> one(bytes + 8, 0xee), two(bytes + 8, 0x11);
  MakeLoaderBatch(set.images.data(), set.labels.data(), order, plan.Slice(2), 2, 5, o, one.data());
  MakeLoaderBatch(set.images.data(), set.labels.data(), order, plan.Slice(2), 2, 5, o, two.data());
  EXPECT_TRUE(std::equal(one.begin(), one.begin() + long(bytes), two.begin()));
  const auto* h = reinterpret_cast<const LoaderBatchHeader*>(one.data());
  EXPECT_EQ(h->n, 3u);
  EXPECT_EQ(h->batch, 2u);
  const int64_t* y = BatchLabels(one.data(), 9);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y) % 8, 0u);
  EXPECT_LE(reinterpret_cast<const uint8_t*>(y + 3), one.data() + bytes);  // fits its slot
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(y[i], int64_t(order[6 + i] % 10));
  // The images are the samples' own, augmented with the batch's generator.
  std::mt19937_64 rng = AugmentRng(5, 2);
  std::vector<float> expect(9);
  for (uint32_t i = 0; i < 3; ++i) {
    AugmentImage(set.images.data() + order[6 + i] * 9, o, rng, expect.data());
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), BatchImages(one.data()) + 9 * i));
  }
}

v1::ExperimentSpec DataLoading(uint32_t loaders) {
  v1::ExperimentSpec s;
  s.set_kind("data_loading");
  s.mutable_data_loading()->set_loaders(loaders);
  return s;
}

TEST(DataLoadingSpecTest, DefaultsGiveTheTrainerEveryCoreAndOneWorkerPerLoader) {
  SpecLimits l;
  l.cores = 2;
  v1::ExperimentSpec s = DataLoading(3);
  ApplyDefaults(&s, l);
  EXPECT_EQ(s.workers(), 4u);
  EXPECT_EQ(s.threads(), 2u);
  EXPECT_EQ(s.data_loading().prefetch(), 2u);
  EXPECT_EQ(s.epochs(), 1u);
  EXPECT_FALSE(s.has_batches());
  EXPECT_FALSE(s.has_share());
  EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
  EXPECT_EQ(DataLoadingRingSlots(s), 6u);
  EXPECT_GT(DataLoadingRingBytes(s), 6 * LoaderBatchBytes(s.batch_size(), 784));
  EXPECT_EQ(DataLoadingRingBytes(DataLoading(0)), 0u);
  // A node with more cores than a worker may take threads: the default is held to the cap, not
  // refused as if the user had typed it.
  l.cores = 384;
  for (v1::ExperimentSpec big : {DataLoading(1), v1::ExperimentSpec()}) {
    ApplyDefaults(&big, l);
    EXPECT_EQ(big.threads(), l.max_threads);
    EXPECT_TRUE(ValidateSpec(big, l).ok()) << ValidateSpec(big, l).message();
  }
}

TEST(DataLoadingSpecTest, WrongFieldsAreRefusedByName) {
  SpecLimits l;
  auto refused = [&](v1::ExperimentSpec s, const std::string& want) {
    ApplyDefaults(&s, l);
    const Status st = ValidateSpec(s, l);
    EXPECT_FALSE(st.ok()) << want;
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  };
  v1::ExperimentSpec s = DataLoading(2);
  s.set_workers(2);
  refused(s, "workers: data_loading runs the trainer and one worker per loader (3");
  s = DataLoading(1);
  s.mutable_data_loading()->set_pin_memory(true);
  refused(s,
          "pin_memory: page-locked batches only speed up copies to a GPU, and data_loading "
          "runs on the CPU only (no CUDA path yet)");
  s = DataLoading(1);
  s.mutable_data_loading()->set_pin_memory(false);  // what the flag's default is, typed: kept
  ApplyDefaults(&s, l);
  EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
  s = DataLoading(1);
  s.mutable_data_loading()->set_prefetch(0);
  refused(s, "prefetch: 0 is outside the allowed range 1..64");
  s = DataLoading(64);
  refused(s, "loaders: 64 is outside the allowed range 0..63");
  s = DataLoading(4294967295u);  // + 1 (the trainer) wraps to 0
  refused(s, "loaders: 4294967295 is outside the allowed range 0..63");
  s = DataLoading(1);
  s.set_batches(5);
  refused(s, "batches: not a field of kind data_loading");
  v1::ExperimentSpec h;
  h.mutable_data_loading()->set_loaders(2);
  refused(h, "loaders: not a field of kind hogwild");
}

}  // namespace
}  // namespace shoal
