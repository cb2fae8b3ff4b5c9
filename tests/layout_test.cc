#include "shared/ipc/layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "shared/os/shm.h"

namespace shoal {
namespace {

TEST(LayoutTest, WeightsAreAlignedAndPacked) {
  auto h =
      PlanWeights({{"conv1.weight", {1000, 1, 5, 5}}, {"conv1.bias", {1000}}, {"fc2.bias", {10}}});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->count, 3u);
  uint64_t prev_end = sizeof(WeightsHeader);
  for (uint32_t i = 0; i < h->count; ++i) {
    EXPECT_EQ(h->entries[i].offset % kAlign, 0u);
    EXPECT_GE(h->entries[i].offset, prev_end);
    prev_end = h->entries[i].offset + h->entries[i].numel * sizeof(float);
  }
  EXPECT_EQ(h->entries[0].numel, 25000u);
  EXPECT_EQ(h->total_bytes, AlignUp(prev_end));
  EXPECT_TRUE(ValidateWeights(*h, h->total_bytes).ok());
  EXPECT_FALSE(ValidateWeights(*h, h->total_bytes - 1).ok());
  WeightsHeader bad = *h;
  bad.magic ^= 1;
  EXPECT_FALSE(ValidateWeights(bad, bad.total_bytes).ok());
  bad = *h;
  bad.entries[2].offset += 8;
  EXPECT_FALSE(ValidateWeights(bad, bad.total_bytes).ok());
}

TEST(LayoutTest, RejectsImpossibleModels) {
  std::vector<TensorShape> many(kMaxTensors + 1, TensorShape{"t", {1}});
  EXPECT_FALSE(PlanWeights(many).ok());
  EXPECT_FALSE(PlanWeights({{"t", {2, 0}}}).ok());
  EXPECT_FALSE(PlanWeights({{std::string(80, 'n'), {1}}}).ok());
}

TEST(LayoutTest, DataHeaderValidates) {
  DataHeader h = PlanData(60000, 10000, 28, 28);
  EXPECT_EQ(h.train_labels - h.train_images, AlignUp(60000ull * 784));
  EXPECT_TRUE(ValidateData(h, h.total_bytes).ok());
  EXPECT_FALSE(ValidateData(h, h.total_bytes - 1).ok());
  h.test_labels += 64;
  EXPECT_FALSE(ValidateData(h, h.total_bytes).ok());
}

TEST(LayoutTest, ScoreboardSlotsDoNotShareCacheLines) {
  EXPECT_EQ(sizeof(WorkerSlot) % 128, 0u);
  char buf[4096];
  EXPECT_EQ(reinterpret_cast<char*>(BoardSlot(buf, 1)) - reinterpret_cast<char*>(BoardSlot(buf, 0)),
            static_cast<long>(sizeof(WorkerSlot)));
}

TEST(ShmTest, CreateRefusesAStaleNameAndRemoveCleansUp) {
  const std::string id = "t" + std::to_string(getpid());
  auto a = ShmSegment::Create(SegmentName(id, "x"), 4096);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_FALSE(ShmSegment::Create(SegmentName(id, "x"), 4096).ok());
  static_cast<char*>(a->data())[10] = 42;
  auto b = ShmSegment::Open(SegmentName(id, "x"), false);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(static_cast<char*>(b->data())[10], 42);
  EXPECT_EQ(ListSegments(SegmentPrefix(id)).size(), 1u);
  EXPECT_EQ(RemoveSegments(SegmentPrefix(id)), 1);
  EXPECT_TRUE(ListSegments(SegmentPrefix(id)).empty());
  EXPECT_FALSE(ShmSegment::Open(SegmentName(id, "x"), false).ok());
}

// More than /dev/shm holds is refused when the segment is made (it is reserved then), not met
// as a SIGBUS when a page past the room is first touched; nothing is left behind.
TEST(ShmTest, ASegmentLargerThanDevShmIsRefusedWhenMade) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const uint64_t total = uint64_t(fs.f_blocks) * fs.f_frsize;  // past it: refused before any page
  const std::string id = "t" + std::to_string(getpid());
  auto big = ShmSegment::Create(SegmentName(id, "big"), total + (1ull << 30));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kResourceExhausted);
  EXPECT_NE(big.status().message().find("no room in /dev/shm"), std::string::npos)
      << big.status().message();
  EXPECT_TRUE(ListSegments(SegmentPrefix(id)).empty());
}

// A reserved segment takes its room in /dev/shm at once; a sparse one only the pages touched.
TEST(ShmTest, ASparseSegmentTakesRoomOnlyForThePagesTouched) {
  const std::string id = "t" + std::to_string(getpid());
  const auto used = [&](const std::string& what) {
    struct stat st {};
    EXPECT_EQ(::stat(("/dev/shm/" + SegmentName(id, what)).c_str(), &st), 0);
    return uint64_t(st.st_blocks) * 512;
  };
  {
    auto all = ShmSegment::Create(SegmentName(id, "all"), 64 << 20);
    auto sparse = ShmSegment::Create(SegmentName(id, "sparse"), 64 << 20, ShmReserve::kSparse);
    ASSERT_TRUE(all.ok() && sparse.ok());
    static_cast<char*>(sparse->data())[0] = 1;  // one page, as a slot's headers
    EXPECT_GE(used("all"), uint64_t(64) << 20);
    EXPECT_LE(used("sparse"), uint64_t(64) << 10);
  }
  for (const std::string what : {"all", "sparse"}) ShmSegment::Remove(SegmentName(id, what));
  EXPECT_TRUE(ListSegments(SegmentPrefix(id)).empty());
}

}  // namespace
}  // namespace shoal
