// A training step allocates the same buffers, of the same sizes, in the same order, every step.
// Given one step's trace (each buffer's size and when it was allocated and freed), PlanStep
// places every buffer at an offset of one arena so that no two buffers live at the same time
// share a byte: interval packing, each buffer in turn at the lowest (or the narrowest) gap that
// fits beside the buffers whose lifetimes overlap its own. Greedy by size, as inference
// compilers place activations, is one of the orders tried; others (by lifetime, by size x
// lifetime, as allocated, by size jittered) pack steps with equal sizes of different lifetimes
// tighter, and the smallest arena wins: mnist_convnet's step packs to its live peak, 387 MiB,
// where greedy by size alone took 423. worker/planned_allocator.h replays the plan; this part
// is pure, so it is tested on traces alone.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace shoal {

// Event numbers count the step's allocations and frees in the order they happened.
constexpr uint32_t kOutlivesStep = std::numeric_limits<uint32_t>::max();

struct TracedBuffer {
  uint64_t size = 0;
  uint32_t alloc_at = 0;
  uint32_t free_at = kOutlivesStep;  // kOutlivesStep: still live when the step ended
};

struct PlannedSlot {
  uint64_t size = 0;    // as traced: a replayed allocation must ask for exactly this
  uint64_t offset = 0;  // in the arena; meaningless when !planned
  bool planned =
      false;  // false: outlives the step (gradients, optimiser state), never in the arena
  // Every other slot that shares bytes with this one: in the traced step none of them was live
  // while this one was, and a replay hands this one out only when all of them are free (one
  // held longer than traced, even from an earlier step, makes it fall back instead).
  std::vector<uint32_t> conflicts;
};

struct StepPlan {
  std::vector<PlannedSlot> slots;  // in allocation order
  uint64_t arena_bytes = 0;        // the end of the highest slot
  uint64_t peak_live_bytes = 0;    // the most bytes of planned buffers live at once (aligned)
};

// `alignment` must be a power of two; every offset and size is rounded up to it.
StepPlan PlanStep(const std::vector<TracedBuffer>& trace, uint64_t alignment = 64);

}  // namespace shoal
