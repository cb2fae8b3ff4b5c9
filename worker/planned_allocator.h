// A CPU allocator for LibTorch that serves a training step's buffers from one arena at offsets
// planned once (worker/step_plan.h), so that after the plan nothing in a step maps, unmaps or
// page-faults, and what stays mapped is the step's peak of live bytes plus packing slack: less
// than glibc (which maps and unmaps, or fragments) and less than a cache of freed blocks (which
// holds every size it has seen).
//
// The trainer marks each step (StepScope). The first step's buffers get mappings of their own,
// filled by the kernel at once rather than page fault by page fault (a freed one is reused for
// the next buffer of its size, and its pages become the arena's), and are traced (each buffer's
// size, when it was allocated and freed), then planned; the later ones replay: each allocation
// takes the next slot traced with its size (looking past traced ones that do not come back, such as
// the optimiser's state made once in the first step) when every slot sharing its bytes is free.
// When none fits (a short last batch, another code path, a buffer held longer than traced), that
// allocation and the rest of the step go to malloc and the step counts as a fallback: a deviation
// costs speed, never correctness. Allocations below `min_bytes`, outside a step or from another
// thread go to malloc.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>

#include "worker/torch_compat.h"

namespace shoal {

struct PlannedStats {
  bool planned = false;         // the plan is made: later steps replay it
  uint64_t steps = 0;           // steps marked
  uint64_t replayed_steps = 0;  // steps after the plan (all but the first)
  uint64_t fallback_steps = 0;  // replayed steps that deviated from the plan
  uint64_t fallback_allocs = 0;
  uint64_t arena_bytes = 0;         // the plan's arena (0 before it)
  uint64_t peak_live_bytes = 0;     // the traced step's peak of live planned bytes
  uint64_t replay_minflt = 0;       // page faults (minor) during the replayed steps, all threads
  uint64_t traced_mapped_peak = 0;  // the most bytes the traced step had mapped (page-rounded)
  uint64_t traced_live_peak = 0;    // its most live bytes, those that outlive it too (same)
  uint64_t arena_reused_bytes = 0;  // of the arena, pages the traced step had filled
};

class PlannedAllocator final : public c10::Allocator {
 public:
  // Makes this the CPU allocator of the process (once; later calls return it).
  static PlannedAllocator* Install(size_t min_bytes = size_t(64) << 10);
  // Null unless installed.
  static PlannedAllocator* Installed();
  PlannedStats Stats() const;

  void BeginStep();
  void EndStep();
  // Marks one step if the planned allocator is installed; nothing otherwise.
  class StepScope {
   public:
    StepScope();
    ~StepScope();
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;
  };

  c10::DataPtr allocate(size_t n) SHOAL_ALLOCATE_CONST override;
  SHOAL_ALLOCATOR_COPY_DATA
  c10::DeleterFnPtr raw_deleter() const override;

 private:
  PlannedAllocator() = default;
};

}  // namespace shoal
