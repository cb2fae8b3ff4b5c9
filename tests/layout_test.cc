#include "shared/ipc/layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <functional>

#include "shared/os/shm.h"

namespace shoal {
namespace {

// The table and its tensors round-trip through a segment's bytes, each tensor aligned after the
// table and packed in order.
TEST(LayoutTest, WeightsAreAlignedAndPackedAndReadBack) {
  auto plan =
      PlanWeights({{"conv1.weight", {1000, 1, 5, 5}},
                   {"conv1.bias", {1000}, WeightDtype::kBFloat16},
                   {"bn.num_batches_tracked", {}, WeightDtype::kInt64, WeightRole::kBuffer}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->tensors.size(), 3u);
  EXPECT_EQ(plan->parameters(), 2u);
  uint64_t prev_end = plan->table_bytes;
  for (const auto& w : plan->tensors) {
    EXPECT_EQ(w.offset % kAlign, 0u);
    EXPECT_GE(w.offset, prev_end);
    prev_end = w.offset + w.bytes();
  }
  EXPECT_EQ(plan->tensors[0].numel, 25000u);
  EXPECT_EQ(plan->tensors[1].bytes(), 2000u);  // bfloat16: two bytes
  EXPECT_EQ(plan->tensors[2].numel, 1u);       // a 0-dim tensor holds one value
  EXPECT_EQ(plan->total_bytes, AlignUp(prev_end));
  std::vector<char> seg(plan->total_bytes);
  WriteWeightsTable(*plan, seg.data());
  auto back = ReadWeights(seg.data(), seg.size());
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->tensors[i].t.name, plan->tensors[i].t.name);
    EXPECT_EQ(back->tensors[i].t.shape, plan->tensors[i].t.shape);
    EXPECT_EQ(back->tensors[i].t.dtype, plan->tensors[i].t.dtype);
    EXPECT_EQ(back->tensors[i].t.role, plan->tensors[i].t.role);
    EXPECT_EQ(back->tensors[i].offset, plan->tensors[i].offset);
  }
  EXPECT_FALSE(ReadWeights(seg.data(), seg.size() - 1).ok());
}

// What caps were (128 tensors, rank 4, 63-byte names) hold no more: a densenet-sized table of
// 400 tensors with long names and rank-6 shapes lays out and reads back.
TEST(LayoutTest, AnyNumberOfTensorsOfAnyRankAndName) {
  std::vector<TensorShape> many;
  for (int i = 0; i < 400; ++i)
    many.push_back(
        {"features.denseblock4.denselayer16.conv2.some.very.long.name.weight." + std::to_string(i),
         {2, 1, 3, 1, 2, 1 + i % 3}});
  auto plan = PlanWeights(many);
  ASSERT_TRUE(plan.ok());
  std::vector<char> seg(plan->total_bytes);
  WriteWeightsTable(*plan, seg.data());
  auto back = ReadWeights(seg.data(), seg.size());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->tensors.size(), 400u);
  EXPECT_EQ(back->tensors[399].t.name, many[399].name);
  EXPECT_EQ(back->tensors[399].t.shape, many[399].shape);
}

TEST(LayoutTest, RejectsImpossibleModels) {
  EXPECT_FALSE(PlanWeights({{"t", {2, -1}}}).ok());
  EXPECT_FALSE(PlanWeights({{"t", {int64_t(1) << 40, int64_t(1) << 40}}}).ok());
  EXPECT_TRUE(PlanWeights({{"empty", {2, 0}}}).ok());  // an empty buffer takes no bytes
  // 2^61 int64 elements: numel fits, numel * 8 wraps to 0 bytes.
  EXPECT_FALSE(PlanWeights({{"wraps", {int64_t(1) << 61}, WeightDtype::kInt64}}).ok());
  // NHWC order is a rank-4 tensor's: it is read back as written.
  EXPECT_FALSE(
      PlanWeights({{"flat", {3, 4}, WeightDtype::kFloat32, WeightRole::kParameter, true}}).ok());
  auto nhwc =
      PlanWeights({{"conv", {2, 3, 4, 5}, WeightDtype::kFloat32, WeightRole::kParameter, true}});
  ASSERT_TRUE(nhwc.ok());
  std::vector<char> seg(nhwc->total_bytes);
  WriteWeightsTable(*nhwc, seg.data());
  EXPECT_TRUE(ReadWeights(seg.data(), seg.size())->tensors[0].t.channels_last);
}

// A table another process wrote is not trusted: every offset, count and length is checked
// against the segment before anything is read through it.
TEST(LayoutTest, CorruptTablesAreRefusedNotFollowed) {
  auto plan = PlanWeights({{"a", {4, 4}}, {"b", {4}}});
  ASSERT_TRUE(plan.ok());
  std::vector<char> good(plan->total_bytes);
  WriteWeightsTable(*plan, good.data());
  auto entries = [](std::vector<char>& s) {
    return reinterpret_cast<TensorEntry*>(s.data() + AlignUp(sizeof(WeightsHeader)));
  };
  auto header = [](std::vector<char>& s) { return reinterpret_cast<WeightsHeader*>(s.data()); };
  const std::vector<std::function<void(std::vector<char>&)>> corrupt = {
      [&](auto& s) { header(s)->magic ^= 1; },
      [&](auto& s) { header(s)->count = 1u << 31; },
      [&](auto& s) { header(s)->dims_count += 1000000; },
      [&](auto& s) { header(s)->names_bytes = ~0ull; },
      [&](auto& s) {  // areas larger than the entries use, table_bytes made to agree
        header(s)->dims_count += 8;
        header(s)->table_bytes += 64;
        header(s)->total_bytes += 64;
      },
      [&](auto& s) { header(s)->total_bytes += 64; },
      [&](auto& s) { entries(s)[1].offset += 8; },
      [&](auto& s) { entries(s)[1].offset = 0; },
      [&](auto& s) { entries(s)[0].numel += 1; },
      [&](auto& s) { entries(s)[0].ndim = 1000; },
      [&](auto& s) { entries(s)[0].name_len = 1000; },
      [&](auto& s) { entries(s)[0].name_at = ~0ull; },
      [&](auto& s) { entries(s)[0].dtype = 77; },
      [&](auto& s) { entries(s)[0].role = 2; },
      [&](auto& s) { entries(s)[0].channels_last = 2; },
      [&](auto& s) { entries(s)[0].channels_last = 1; },  // "a" is [4, 4]: rank 2, not 4
      [&](auto& s) {  // a shape whose bytes wrap past 2^64 to 0, which would pass a bytes check
        auto* dims = reinterpret_cast<int64_t*>(s.data() + AlignUp(sizeof(WeightsHeader)) +
                                                2 * sizeof(TensorEntry));
        dims[0] = int64_t(1) << 61;
        dims[1] = 1;
        entries(s)[0].numel = uint64_t(1) << 61;
        entries(s)[0].dtype = uint32_t(WeightDtype::kInt64);
      },
  };
  for (size_t i = 0; i < corrupt.size(); ++i) {
    std::vector<char> seg = good;
    corrupt[i](seg);
    auto r = ReadWeights(seg.data(), seg.size());
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << "corruption " << i;
  }
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
