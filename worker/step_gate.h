// Turns at a training step. Hogwild workers on a CPU with fewer cores than workers gain nothing
// by all being inside a step at once: the cores are shared either way. With turns, at most
// `step_slots` workers (the board's) are inside one, the others wait between steps, first come
// first served; then their step buffers can live in that many shared arenas instead of one a
// worker (worker/shared_arenas.h). The board's ticket counters live in shared memory, so the
// gate works across processes however they were started; waits are futex waits.
#pragma once

#include <cstdint>
#include <functional>

#include "shared/ipc/layout.h"

namespace shoal {

class StepGate {
 public:
  // `slot`: beaten while waiting (may be null); `lifetime_fd`: the leader's lifetime pipe (-1:
  // none). Inactive when board->step_slots >= board->workers: Enter returns at once.
  StepGate(BoardHeader* board, WorkerSlot* slot, int lifetime_fd);

  bool active() const { return active_; }
  // Waits for this worker's turn, calling `while_waiting` (if any) before each wait; false when
  // the leader is gone meanwhile.
  bool Enter(const std::function<void()>& while_waiting = nullptr);
  // Ends the turn Enter began and lets the next waiting worker in.
  void Leave();
  uint64_t waited_ns() const { return waited_ns_; }

 private:
  BoardHeader* board_;
  WorkerSlot* slot_;
  int lifetime_fd_;
  bool active_;
  uint64_t waited_ns_ = 0;
};

}  // namespace shoal
