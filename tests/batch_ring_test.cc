// The ring of batch slots between loaders and the trainer: order under many loaders, a slow
// loader, a loader that dies (in a real forked process), and close.
#include "shared/ipc/batch_ring.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace shoal {
namespace {

// Shared anonymous memory: a forked child writes where the parent reads.
struct SharedMem {
  explicit SharedMem(uint64_t n) : size(n) {
    mem = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  ~SharedMem() { ::munmap(mem, size); }
  void* mem;
  uint64_t size;
};

// A loader: claims batches and writes the batch number into each, until `count` are claimed.
void Loader(BatchRing ring, uint64_t count, int max_delay_us, unsigned seed) {
  std::mt19937 rng(seed);
  for (uint64_t b; (b = ring.Claim()) < count;) {
    if (max_delay_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % max_delay_us));
    auto buf = ring.BeginWrite(b, nullptr);
    if (!buf.ok()) return;
    std::memcpy(*buf, &b, sizeof b);
    ring.EndWrite(b, sizeof b);
  }
}

TEST(BatchRingTest, ManyLoadersDeliverEveryBatchInOrder) {
  SharedMem m(BatchRing::Bytes(4, 64));
  BatchRing ring = BatchRing::Create(m.mem, 4, 64);
  constexpr uint64_t kBatches = 2000;
  std::vector<std::thread> loaders;
  for (unsigned i = 0; i < 3; ++i) loaders.emplace_back(Loader, ring, kBatches, 200, i);
  for (uint64_t b = 0; b < kBatches; ++b) {
    auto got = ring.BeginRead(b, [] { return true; });
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->second, sizeof(uint64_t));
    uint64_t v;
    std::memcpy(&v, got->first, sizeof v);
    ASSERT_EQ(v, b);
    ring.EndRead(b);
  }
  ring.Close();
  for (auto& t : loaders) t.join();
}

TEST(BatchRingTest, ASlowLoaderMakesTheTrainerWaitNotFail) {
  SharedMem m(BatchRing::Bytes(2, 64));
  BatchRing ring = BatchRing::Create(m.mem, 2, 64);
  std::thread slow([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    Loader(ring, 3, 0, 1);
  });
  int slices = 0;
  for (uint64_t b = 0; b < 3; ++b) {
    auto got = ring.BeginRead(b, [&] { return ++slices < 1000; });
    ASSERT_TRUE(got.ok()) << got.status().message();
    ring.EndRead(b);
  }
  EXPECT_GE(slices, 5);  // it waited (about 10 ms a slice), asking each time whether to go on
  slow.join();
}

// A loader process that dies holding a claimed batch: the trainer's wait asks whether its loaders
// are alive, learns that one is not, and ends with UNAVAILABLE instead of waiting forever.
TEST(BatchRingTest, ALoaderThatDiesEndsTheTrainersWait) {
  SharedMem m(BatchRing::Bytes(4, 64));
  BatchRing ring = BatchRing::Create(m.mem, 4, 64);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto attached = BatchRing::Attach(m.mem, m.size);
    if (!attached.ok()) _exit(2);
    Loader(*attached, 2, 0, 1);  // batches 0 and 1
    (void)attached->Claim();     // takes batch 2 on and dies before writing it
    _exit(9);
  }
  bool dead = false;
  auto alive = [&] {
    int st;
    if (!dead && ::waitpid(child, &st, WNOHANG) == child) dead = true;
    return !dead;
  };
  for (uint64_t b = 0; b < 2; ++b) {
    auto got = ring.BeginRead(b, alive);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ring.EndRead(b);
  }
  auto third = ring.BeginRead(2, alive);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), Code::kUnavailable);
  EXPECT_NE(third.status().message().find("batch 2"), std::string::npos);
  EXPECT_TRUE(dead);
}

TEST(BatchRingTest, CloseReleasesWaitingLoadersAndAttachChecksTheHeader) {
  SharedMem m(BatchRing::Bytes(1, 64));
  BatchRing ring = BatchRing::Create(m.mem, 1, 64);
  ASSERT_TRUE(ring.BeginWrite(0, nullptr).ok());
  ring.EndWrite(0, 8);
  std::atomic<bool> returned{false};
  std::thread blocked([&] {
    auto r = ring.BeginWrite(1, nullptr);  // slot 0 is full until batch 0 is read
    EXPECT_FALSE(r.ok());
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());
  ring.Close();
  blocked.join();
  EXPECT_TRUE(returned.load());
  EXPECT_FALSE(BatchRing::Attach(m.mem, 16).ok());
  std::vector<uint8_t> junk(4096, 0xab);
  EXPECT_FALSE(BatchRing::Attach(junk.data(), junk.size()).ok());
}

}  // namespace
}  // namespace shoal
