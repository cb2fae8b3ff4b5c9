#include "shared/kinds/data_loading/board.h"

#include <algorithm>

namespace shoal::data_loading {

void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report) {
  const Board& b = *KindArea<Board>(slot);
  const uint32_t n = std::min<uint32_t>(slot.epochs_done.load(std::memory_order_acquire),
                                        uint32_t(kMaxEpochRecords));
  auto* r = report->mutable_data_loading();
  for (uint32_t e = 0; e < n; ++e) r->add_epoch_load_cpu_ns(b.load_cpu_ns[e].load());
}

}  // namespace shoal::data_loading
