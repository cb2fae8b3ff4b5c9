#include "shared/kinds/multi_model/board.h"

namespace shoal::multi_model {

void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report) {
  const Board& b = *KindArea<Board>(slot);
  auto* r = report->mutable_multi_model();
  r->set_zero_grad_ns(b.zero_grad_ns.load());
  r->set_define_ns(b.define_ns.load());
}

}  // namespace shoal::multi_model
