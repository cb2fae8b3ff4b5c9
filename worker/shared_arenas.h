// Step arenas shared by the workers of an experiment that take turns at their steps
// (worker/step_gate.h). With turns, at most `step_slots` workers are inside a step at once, so
// that many arenas serve them all, where each would otherwise keep its own arena resident
// (mnist_convnet's: 387 MiB a worker). The first worker in its turn traces its step (the others
// wait for it), then publishes the trace and makes the segment, every page reserved; the others
// take its plan (PlannedAllocator::Adopt) without tracing, and each
// step runs in whichever arena is
// free, the worker's own index first. An arena a buffer still lives in after a step stays the
// worker's until none does. When the segment cannot be made (no room in /dev/shm) or a worker's
// plan needs more than its arenas hold, that worker builds an arena of its own: never a wrong
// result, at worst today's memory.
#pragma once

#include <cstdint>
#include <string>

#include "shared/ipc/layout.h"
#include "shared/os/shm.h"
#include "worker/planned_allocator.h"

namespace shoal {

class SharedArenas {
 public:
  // `allocator` must be installed and told ShareArenas before its first step.
  SharedArenas(BoardHeader* board, std::string segment_name, uint32_t index,
               PlannedAllocator* allocator, int lifetime_fd);
  // Leaves the segment mapped: the allocator may free a buffer into it until the process exits.
  ~SharedArenas();
  SharedArenas(const SharedArenas&) = delete;
  SharedArenas& operator=(const SharedArenas&) = delete;

  // In the worker's turn, before a step: the arena to run it in (null while it traces, or when
  // none is free or it has its own). Its first step adopts a published plan instead of tracing.
  char* BeforeStep();
  // While it waits for a turn: maps the arenas and adopts the plan as soon as they are published,
  // so that every worker maps them within moments of each other, not one at each first turn.
  void MapIfReady();
  // Still in its turn, after the step: publishes the plan (the first to trace) and gives the
  // arena back unless a planned buffer still lives in it.
  void AfterStep();
  // Once every worker has finished stepping: the first worker here frees the pages of every free
  // arena, in every process at once (a hole punched in the segment); an arena a buffer still
  // lives in is kept; the others wait until it is done. Without it, the workers exiting one by
  // one left the last of them holding the arenas alone, for 50-70 ms counted in its USS (774 MiB
  // a moment).
  void Release();
  // The arenas this worker's steps ran in: the segment's count, or 0 for an arena of its own.
  uint32_t count() const { return own_arena_ ? 0 : count_; }

 private:
  void Publish();
  bool Make();
  bool Map();
  void WaitWhileMaking();
  char* TakeFree();
  void Populate(char* arena);
  void UseOwnArena();

  BoardHeader* board_;
  std::string name_;
  uint32_t index_;
  PlannedAllocator* allocator_;
  int lifetime_fd_;
  ShmSegment segment_;
  char* arenas_ = nullptr;  // arena j at arenas_ + j * stride_
  uint64_t stride_ = 0, arena_bytes_ = 0;
  uint32_t count_ = 0;
  bool own_arena_ = false;
  bool stepped_ = false;
  bool tracer_ = false;     // this worker traces the step every worker's plan is made from
  uint32_t populated_ = 0;  // bit j: arena j's pages are mapped in this process
  char* held_ = nullptr;    // the arena of the current step, or kept after it
};

}  // namespace shoal
