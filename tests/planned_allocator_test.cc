// The planned allocator on real LibTorch training. It becomes the CPU allocator of its process
// for good, so each case trains in a forked child and sends back what it saw; the reference runs
// in this process on LibTorch's own allocator.
#include "worker/planned_allocator.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "worker/models/models.h"
#include "worker/segment_weights.h"
#include "worker/step_recorder.h"
#include "worker/train_device.h"

namespace shoal {
namespace {

struct Outcome {
  uint64_t checksum = 0;
  PlannedStats stats;
};

// Trains the study's ConvNet on seeded random batches of the given sizes, one step each, and
// returns its weights' fingerprint; with `planned`, each step is marked for the allocator.
uint64_t Train(const std::vector<int64_t>& batches, bool planned) {
  at::set_num_threads(1);
  SeedCpu(3);
  ModelPtr model = MakeModel("mnist_convnet").value();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  for (int64_t b : batches) {
    std::optional<PlannedAllocator::StepScope> scope;
    if (planned) scope.emplace();
    auto x = torch::randn({b, 1, 28, 28});
    auto y = torch::randint(0, 10, {b}, torch::kLong);
    float loss = 0;
    TrainStep(*model, opt, x, y, &loss, nullptr, nullptr);
  }
  return ParamsChecksum(*model);
}

// Runs `batches` under the planned allocator in a child process.
Outcome TrainPlannedInChild(const std::vector<int64_t>& batches) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    PlannedAllocator* a = PlannedAllocator::Install();
    Outcome o;
    o.checksum = Train(batches, true);
    o.stats = a->Stats();
    const bool sent = ::write(fds[1], &o, sizeof o) == ssize_t(sizeof o);
    ::_exit(sent ? 0 : 1);
  }
  ::close(fds[1]);
  Outcome o;
  EXPECT_EQ(::read(fds[0], &o, sizeof o), ssize_t(sizeof o));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return o;
}

TEST(PlannedAllocatorTest, SameWeightsAsLibTorchsAllocatorAndNoFaultsAfterThePlan) {
  const std::vector<int64_t> batches(5, 16);
  const Outcome o = TrainPlannedInChild(batches);
  std::printf("planned: arena %.1f MiB, live peak %.1f MiB, %lu faults in %lu replayed steps\n",
              double(o.stats.arena_bytes) / (1 << 20), double(o.stats.peak_live_bytes) / (1 << 20),
              (unsigned long)o.stats.replay_minflt, (unsigned long)o.stats.replayed_steps);
  EXPECT_EQ(o.checksum, Train(batches, false));  // bit for bit
  EXPECT_TRUE(o.stats.planned);
  EXPECT_EQ(o.stats.steps, 5u);
  EXPECT_EQ(o.stats.replayed_steps, 4u);  // all but the traced first
  EXPECT_EQ(o.stats.fallback_steps, 0u);
  EXPECT_EQ(o.stats.fallback_allocs, 0u);
  // conv1's output alone is 36.9 MB at batch 16; the arena holds the step's live peak and little
  // more.
  EXPECT_GT(o.stats.peak_live_bytes, 36u << 20);
  EXPECT_LE(double(o.stats.arena_bytes), 1.25 * double(o.stats.peak_live_bytes));
  // glibc would fault in the 36.9 MB buffers every step (~9 000 pages each); the arena was
  // faulted in once, when it was planned.
  EXPECT_LT(o.stats.replay_minflt / o.stats.replayed_steps, 2000u);
  // Tracing mapped and filled no more than its live peak (the buffers that outlive the step
  // included), and the arena's pages are mostly the ones it had filled.
  EXPECT_LE(o.stats.traced_mapped_peak, o.stats.traced_live_peak);
  EXPECT_LE(o.stats.traced_filled_bytes, o.stats.traced_live_peak);  // each page filled once
  EXPECT_GE(o.stats.traced_live_peak, o.stats.peak_live_bytes);
  EXPECT_GE(double(o.stats.arena_reused_bytes), 0.5 * double(o.stats.arena_bytes));
}

TEST(PlannedAllocatorTest, AStepThatLeavesThePlanFallsBackAndStaysCorrect) {
  const std::vector<int64_t> batches = {16, 16, 16, 8, 16};  // a short batch, then back
  const Outcome o = TrainPlannedInChild(batches);
  EXPECT_EQ(o.checksum, Train(batches, false));
  EXPECT_EQ(o.stats.replayed_steps, 4u);
  EXPECT_EQ(o.stats.fallback_steps, 1u);  // only the short one
  EXPECT_GT(o.stats.fallback_allocs, 0u);
}

// Runs fn in a forked child with the planned allocator installed; true when it returned true.
bool InPlannedChild(const std::function<bool()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    PlannedAllocator::Install();
    ::_exit(fn() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Pages of [p, p + n) resident now; SIZE_MAX when some are not mapped.
size_t ResidentPages(const void* p, size_t n) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = uintptr_t(p) / page * page;
  n += uintptr_t(p) - first;
  std::vector<unsigned char> in((n + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(first), n, in.data()) != 0) return SIZE_MAX;
  size_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  return resident;
}

// The traced step's big buffers arrive resident (the kernel filled them when mapped: no fault a
// page as they are first written, which on glibc's defaults made that step 13x a planned one); a
// freed one serves the next buffer of its size, and when the step ends its pages move into the
// arena; small ones and those outside a step are malloc's.
TEST(PlannedAllocatorTest, TracedBuffersArriveResidentAreReusedAndMoveIntoTheArena) {
  EXPECT_TRUE(InPlannedChild([] {
    const size_t bytes = 8u << 20, page = size_t(::sysconf(_SC_PAGESIZE));
    const int64_t floats = int64_t(bytes / sizeof(float));
    const void* first = nullptr;
    {
      PlannedAllocator::StepScope step;
      {
        torch::Tensor t = torch::empty({floats});
        first = t.data_ptr();
        if (ResidentPages(first, bytes) != bytes / page) return false;
      }
      torch::Tensor again = torch::empty({floats});  // the freed mapping, still filled
      if (again.data_ptr() != first || ResidentPages(first, bytes) != bytes / page) return false;
    }
    const PlannedStats st = PlannedAllocator::Installed()->Stats();
    // One 8 MiB mapping served both; the arena (8 MiB) took its pages, and nothing is left
    // where it was (mincore: ENOMEM).
    return st.traced_mapped_peak == bytes && st.arena_reused_bytes == bytes &&
           ResidentPages(first, bytes) == SIZE_MAX;
  }));
  EXPECT_TRUE(InPlannedChild([] {  // outside a step: glibc's mapping (above its 32 MiB
    torch::Tensor t = torch::empty({int64_t((64u << 20) / sizeof(float))});  // ceiling), lazy
    return ResidentPages(t.data_ptr(), 64u << 20) < 16;
  }));
}

// A freed buffer's pages serve the step's later buffers of other sizes too, moved into place:
// the kernel fills only what the live buffers need beyond them, so the traced step fills its
// live peak once (a new mapping for each new size filled 2.4x it in the study's ConvNet).
TEST(PlannedAllocatorTest, TracedBuffersOfOtherSizesReuseFreedPagesAndFillOnlyTheLivePeak) {
  EXPECT_TRUE(InPlannedChild([] {
    const size_t mib = size_t(1) << 20, page = size_t(::sysconf(_SC_PAGESIZE));
    const auto floats = [](size_t bytes) { return int64_t(bytes / sizeof(float)); };
    {
      PlannedAllocator::StepScope step;
      torch::Tensor a = torch::empty({floats(8 * mib)});
      a.fill_(1);
      a.reset();                                          // 8 MiB pooled
      torch::Tensor b = torch::empty({floats(3 * mib)});  // from the pool: 5 MiB left in it
      torch::Tensor c = torch::empty({floats(7 * mib)});  // 5 MiB pooled + 2 MiB filled
      if (ResidentPages(b.data_ptr(), 3 * mib) != 3 * mib / page ||
          ResidentPages(c.data_ptr(), 7 * mib) != 7 * mib / page)
        return false;
      b.fill_(2);  // the moved pages are the process's own, writable
      c.fill_(3);
      if (b.sum().item<float>() != 2.0f * floats(3 * mib)) return false;
    }
    const PlannedStats st = PlannedAllocator::Installed()->Stats();
    // Filled: a's 8 MiB, then the 2 MiB c needed beyond them. The arena holds b and c's 10 MiB
    // live peak, all of it pages the traced step had filled.
    return st.traced_filled_bytes == 10 * mib && st.traced_mapped_peak == 10 * mib &&
           st.traced_live_peak == 10 * mib && st.arena_bytes == 10 * mib &&
           st.arena_reused_bytes == 10 * mib;
  }));
}

}  // namespace
}  // namespace shoal
