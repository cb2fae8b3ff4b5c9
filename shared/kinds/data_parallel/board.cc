#include "shared/kinds/data_parallel/board.h"

namespace shoal::data_parallel {

void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report) {
  const Board& b = *KindArea<Board>(slot);
  auto* r = report->mutable_data_parallel();
  r->set_allreduce_busy_ns(b.allreduce_busy_ns.load());
  r->set_allreduce_bytes(b.allreduce_bytes.load());
  r->set_buckets(b.buckets.load());
}

}  // namespace shoal::data_parallel
