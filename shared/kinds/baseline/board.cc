#include "shared/kinds/baseline/board.h"

namespace shoal::baseline {

void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report) {
  const Board& b = *KindArea<Board>(slot);
  const uint64_t bytes = b.touched_bytes.load(std::memory_order_acquire);
  if (bytes == 0) return;  // not touched yet: nothing to report
  auto* r = report->mutable_baseline();
  r->set_touched_bytes(bytes);
  r->set_touch_ns(b.touch_ns.load());
  r->set_minor_faults(b.minor_faults.load());
}

}  // namespace shoal::baseline
