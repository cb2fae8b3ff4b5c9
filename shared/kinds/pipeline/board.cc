#include "shared/kinds/pipeline/board.h"

namespace shoal::pipeline {

void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report) {
  report->mutable_pipeline()->set_step_wall_ns(KindArea<Board>(slot)->step_wall_ns.load());
}

}  // namespace shoal::pipeline
