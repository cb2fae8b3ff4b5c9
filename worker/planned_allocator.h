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
//
// Shared arenas (worker/shared_arenas.h): workers that take turns at their steps can run them in
// arenas they share rather than one each. Then the plan builds no arena of its own (ShareArenas),
// each step is given the arena it runs in (StepScope), a worker can take a plan another made from
// its own identical step (Adopt, no tracing), and one that finds no shared arena builds its own
// after all (OwnArena).
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/step_plan.h"
#include "worker/torch_compat.h"

namespace shoal {

struct PlannedStats {
  bool planned = false;         // the plan is made: later steps replay it
  uint64_t steps = 0;           // steps marked
  uint64_t replayed_steps = 0;  // steps after the plan (all but the first)
  uint64_t fallback_steps = 0;  // replayed steps that deviated from the plan
  uint64_t fallback_allocs = 0;
  uint64_t arena_bytes = 0;          // the plan's arena (0 before it)
  uint64_t peak_live_bytes = 0;      // the traced step's peak of live planned bytes
  uint64_t replay_minflt = 0;        // page faults (minor) during the replayed steps, all threads
  uint64_t traced_mapped_peak = 0;   // the most bytes the traced step had mapped (page-rounded)
  uint64_t traced_live_peak = 0;     // its most live bytes, those that outlive it too (same)
  uint64_t arena_reused_bytes = 0;   // of the arena, pages the traced step had filled
  uint64_t traced_filled_bytes = 0;  // pages the kernel filled for the traced step's buffers
};

class PlannedAllocator final : public c10::Allocator {
 public:
  // Makes this the CPU allocator of the process (once; later calls return it).
  static PlannedAllocator* Install(size_t min_bytes = size_t(64) << 10);
  // Null unless installed.
  static PlannedAllocator* Installed();
  PlannedStats Stats() const;

  // `arena`: with ShareArenas, where this step's planned buffers go (null: none, the step is
  // served by malloc and counts as a fallback); ignored otherwise.
  void BeginStep(char* arena = nullptr);
  void EndStep();

  // Before the first step: the plan will build no arena; steps run in the arenas given them,
  // which lie in [region, region + bytes) once SetSharedRegion says so. False (nothing changes)
  // once a step has been marked.
  bool ShareArenas();
  void SetSharedRegion(char* region, size_t bytes);
  // With ShareArenas, after the plan: builds the worker's own arena after all, used from then on.
  void OwnArena();
  // Before the first step: plans from another worker's traced step instead of tracing one.
  // False (nothing changes) once a step has been marked.
  bool Adopt(const std::vector<TracedBuffer>& trace);
  // The traced step the plan was made from (empty before the plan or when adopted).
  std::vector<TracedBuffer> Trace() const;
  // A planned buffer is live (its arena must not be handed to another step yet).
  bool ArenaInUse() const;

  // Marks one step if the planned allocator is installed; nothing otherwise.
  class StepScope {
   public:
    explicit StepScope(char* arena = nullptr);
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
