#include "worker/step_gate.h"

#include "shared/os/process.h"
#include "worker/scoreboard.h"

namespace shoal {

StepGate::StepGate(BoardHeader* board, WorkerSlot* slot, int lifetime_fd)
    : board_(board),
      slot_(slot),
      lifetime_fd_(lifetime_fd),
      active_(board->step_slots > 0 && board->step_slots < board->workers) {}

// Ticket t may go in once fewer than step_slots of the tickets before it are still inside: when
// t - leaves < step_slots. Signed, since counters wrap and leaves may pass t before t notices.
bool StepGate::Enter(const std::function<void()>& while_waiting) {
  if (!active_) return true;
  const uint64_t t0 = MonotonicNs();
  const uint32_t ticket = board_->step_tickets.fetch_add(1);
  for (;;) {
    const uint32_t left = board_->step_leaves.load();
    if (int32_t(ticket - left) < int32_t(board_->step_slots)) break;
    if (LeaderGone(lifetime_fd_)) return false;
    if (while_waiting) while_waiting();
    if (slot_ != nullptr) slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    FutexWait(&board_->step_leaves, left);
  }
  waited_ns_ += MonotonicNs() - t0;
  return true;
}

void StepGate::Leave() {
  if (active_) Arrive(&board_->step_leaves);
}

}  // namespace shoal
