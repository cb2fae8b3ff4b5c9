// Turns at the steps (worker/step_gate.h) and the step arenas shared between turns
// (worker/shared_arenas.h, the planned allocator's ShareArenas/Adopt), on real LibTorch training.
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "shared/ipc/layout.h"
#include "shared/os/shm.h"
#include "worker/models/models.h"
#include "worker/planned_allocator.h"
#include "worker/segment_weights.h"
#include "worker/shared_arenas.h"
#include "worker/step_gate.h"

namespace shoal {
namespace {

std::unique_ptr<BoardHeader> Board(uint32_t workers, uint32_t slots) {
  auto b = std::make_unique<BoardHeader>();
  b->workers = workers;
  b->step_slots = slots;
  return b;
}

TEST(StepGateTest, NoMoreThanTheSlotsInsideAtOnceAndEveryoneGetsTurns) {
  auto board = Board(4, 2);
  std::atomic<int> inside{0}, most{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      StepGate gate(board.get(), nullptr, -1);
      ASSERT_TRUE(gate.active());
      for (int step = 0; step < 200; ++step) {
        ASSERT_TRUE(gate.Enter());
        const int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        --inside;
        gate.Leave();
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(most.load(), 2);  // two at once, never three
  EXPECT_EQ(board->step_tickets.load(), 800u);
  EXPECT_EQ(board->step_leaves.load(), 800u);
}

TEST(StepGateTest, InactiveWhenEveryWorkerHasASlot) {
  auto board = Board(2, 2);
  StepGate gate(board.get(), nullptr, -1);
  EXPECT_FALSE(gate.active());
  EXPECT_TRUE(gate.Enter());
  EXPECT_TRUE(gate.Enter());  // no turn taken: a third at once is fine
  gate.Leave();
  EXPECT_EQ(board->step_tickets.load(), 0u);
}

TEST(StepGateTest, AWaitEndsWhenTheLeaderIsGone) {
  auto board = Board(2, 1);
  int lifetime[2];
  ASSERT_EQ(::pipe(lifetime), 0);
  StepGate holder(board.get(), nullptr, lifetime[0]);
  ASSERT_TRUE(holder.Enter());  // never leaves
  std::atomic<int> entered{-1};
  std::thread waiter([&] {
    StepGate gate(board.get(), nullptr, lifetime[0]);
    entered = gate.Enter() ? 1 : 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_EQ(entered.load(), -1);  // still waiting its turn
  ::close(lifetime[1]);           // the leader exits
  waiter.join();
  EXPECT_EQ(entered.load(), 0);
  ::close(lifetime[0]);
}

// The study's ConvNet on seeded batches of 16, one step each; `arena(step)` is the arena that
// step runs in (for the planned allocator's shared mode).
template <typename ArenaFn>
uint64_t Train(int steps, ArenaFn arena) {
  at::set_num_threads(1);
  SeedCpu(5);
  ModelPtr model = MakeModel("mnist_convnet").value();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  for (int s = 0; s < steps; ++s) {
    PlannedAllocator::StepScope scope(arena(s));
    auto x = torch::randn({16, 1, 28, 28});
    auto y = torch::randint(0, 10, {16}, torch::kLong);
    float loss = 0;
    TrainStep(*model, opt, x, y, &loss, nullptr, nullptr);
  }
  return ParamsChecksum(*model);
}

// What a child saw: its weights' fingerprint and the allocator's figures, then the trace.
struct ChildOutcome {
  uint64_t checksum = 0;
  PlannedStats stats;
  bool in_use_after = true;
  uint32_t trace_len = 0;
  TracedBuffer trace[256];
};

template <typename Fn>
ChildOutcome InChild(Fn fn) {
  auto* out = static_cast<ChildOutcome*>(::mmap(
      nullptr, sizeof(ChildOutcome), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  const pid_t pid = ::fork();
  if (pid == 0) {
    PlannedAllocator* a = PlannedAllocator::Install();
    // Above whatever an earlier test of this process installed (lean_activations_test's counting
    // allocator takes priority 20), so that every CPU allocation of the child is the planner's.
    c10::SetCPUAllocator(a, /*priority=*/100);
    fn(a, out);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ChildOutcome o = *out;
  ::munmap(out, sizeof(ChildOutcome));
  return o;
}

// Two arenas in one shared mapping, as the segment holds them; `bytes` each.
char* SharedRegion(size_t bytes) {
  void* p = ::mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

// A worker that traces, then steps in two shared arenas by turns, trains bit for bit as on
// LibTorch's allocator; one that adopts its trace never traces and does too.
TEST(SharedArenasTest, StepsInSharedArenasAndAnAdoptedPlanTrainBitIdentically) {
  const uint64_t reference = Train(6, [](int) { return nullptr; });
  const ChildOutcome tracer = InChild([](PlannedAllocator* a, ChildOutcome* out) {
    a->ShareArenas();
    char* region = nullptr;
    size_t stride = 0;
    out->checksum = Train(6, [&](int step) -> char* {
      if (step == 0) return nullptr;  // traced
      if (region == nullptr) {
        stride = (a->Stats().arena_bytes + 4095) / 4096 * 4096;
        region = SharedRegion(stride);
        a->SetSharedRegion(region, 2 * stride);
      }
      return region + (step % 2) * stride;  // turns in arena 0, 1, 0, ...
    });
    out->stats = a->Stats();
    out->in_use_after = a->ArenaInUse();
    const auto trace = a->Trace();
    out->trace_len = uint32_t(std::min<size_t>(trace.size(), 256));
    std::copy(trace.begin(), trace.begin() + out->trace_len, out->trace);
  });
  EXPECT_EQ(tracer.checksum, reference);
  EXPECT_EQ(tracer.stats.replayed_steps, 5u);
  EXPECT_EQ(tracer.stats.fallback_steps, 0u);
  EXPECT_FALSE(tracer.in_use_after);
  ASSERT_GT(tracer.trace_len, 0u);
  ASSERT_LT(tracer.trace_len, 256u);

  const std::vector<TracedBuffer> trace(tracer.trace, tracer.trace + tracer.trace_len);
  const ChildOutcome adopter = InChild([&](PlannedAllocator* a, ChildOutcome* out) {
    a->ShareArenas();
    const bool adopted = a->Adopt(trace);
    const size_t stride = (a->Stats().arena_bytes + 4095) / 4096 * 4096;
    char* region = SharedRegion(stride);
    a->SetSharedRegion(region, 2 * stride);
    // Step 3 finds no free arena: malloc serves it, counted, and the numbers stay the same.
    out->checksum = Train(
        6, [&](int step) -> char* { return step == 3 ? nullptr : region + (step % 2) * stride; });
    out->stats = a->Stats();
    out->in_use_after = !adopted || a->ArenaInUse() || !a->Trace().empty();
  });
  EXPECT_EQ(adopter.checksum, reference);
  EXPECT_EQ(adopter.stats.arena_bytes, tracer.stats.arena_bytes);  // the same plan
  EXPECT_EQ(adopter.stats.replayed_steps, 6u);                     // no step traced
  EXPECT_EQ(adopter.stats.fallback_steps, 1u);                     // the one with no arena
  EXPECT_FALSE(adopter.in_use_after);
}

// Two workers taking turns through the board and a real segment: one traces and makes it, the
// other adopts, each step in whichever arena is free; the segment holds two arenas of the plan's
// size, and the weights are those of LibTorch's allocator.
TEST(SharedArenasTest, TheTracerMakesTheSegmentAndTheOtherAdoptsIt) {
  const uint64_t reference = Train(4, [](int) { return nullptr; });
  auto* board = static_cast<BoardHeader*>(::mmap(
      nullptr, sizeof(BoardHeader), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (board) BoardHeader();
  board->workers = 3;
  board->step_slots = 2;
  const std::string name = "shoal.steptest" + std::to_string(::getpid()) + ".arenas";
  auto worker = [&](uint32_t index) {
    return InChild([&, index](PlannedAllocator* a, ChildOutcome* out) {
      a->ShareArenas();
      StepGate gate(board, nullptr, -1);
      SharedArenas arenas(board, name, index, a, -1);
      at::set_num_threads(1);
      SeedCpu(5);
      ModelPtr model = MakeModel("mnist_convnet").value();
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
      for (int s = 0; s < 4; ++s) {
        if (!gate.Enter()) ::_exit(2);
        char* arena = arenas.BeforeStep();
        {
          PlannedAllocator::StepScope scope(arena);
          auto x = torch::randn({16, 1, 28, 28});
          auto y = torch::randint(0, 10, {16}, torch::kLong);
          float loss = 0;
          TrainStep(*model, opt, x, y, &loss, nullptr, nullptr);
        }
        arenas.AfterStep();
        gate.Leave();
      }
      out->checksum = ParamsChecksum(*model);
      out->stats = a->Stats();
      out->trace_len = arenas.count();
    });
  };
  const ChildOutcome first = worker(0);
  const ChildOutcome second = worker(1);
  EXPECT_EQ(first.checksum, reference);
  EXPECT_EQ(second.checksum, reference);
  EXPECT_EQ(first.trace_len, 2u);  // its steps ran in the two shared arenas
  EXPECT_EQ(second.trace_len, 2u);
  EXPECT_EQ(first.stats.replayed_steps, 3u);   // it traced
  EXPECT_EQ(second.stats.replayed_steps, 4u);  // it adopted
  EXPECT_EQ(first.stats.fallback_steps + second.stats.fallback_steps, 0u);
  EXPECT_EQ(ArenasState(board->arenas_state.load()), ArenasState::kReady);
  EXPECT_EQ(board->arenas_free.load(), 3u);  // both given back
  auto seg = ShmSegment::Open(name, false);
  ASSERT_TRUE(seg.ok());
  EXPECT_GE(seg->size(), 2 * first.stats.arena_bytes);
  // Every page of the arenas is in /dev/shm (reserved as the segment was made) until a worker,
  // all steps done, releases them: then only the header and the trace are.
  const std::string path = "/dev/shm/" + name;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const uint64_t before = uint64_t(st.st_blocks) * 512;
  EXPECT_GE(before, 2 * first.stats.arena_bytes);
  InChild([&](PlannedAllocator* a, ChildOutcome*) {
    a->ShareArenas();
    SharedArenas arenas(board, name, 2, a, -1);
    arenas.MapIfReady();
    arenas.Release();
  });
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_LE(uint64_t(st.st_blocks) * 512, before - 2 * first.stats.arena_bytes);
  EXPECT_EQ(board->arenas_free.load(), 0u);  // nobody takes one again
  EXPECT_EQ(ArenasState(board->arenas_state.load()), ArenasState::kReleased);

  EXPECT_TRUE(ShmSegment::Remove(name));
  ::munmap(board, sizeof(BoardHeader));
}

}  // namespace
}  // namespace shoal
