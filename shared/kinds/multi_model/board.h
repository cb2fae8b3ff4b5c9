// multi_model's area of a worker's scoreboard slot (shared/ipc/layout.h KindArea).
#pragma once

#include <atomic>
#include <cstdint>

#include "shared/ipc/layout.h"
#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal::multi_model {

struct Board {
  std::atomic<uint64_t> zero_grad_ns;  // summed over the iterations
  std::atomic<uint64_t> define_ns;     // building the modules and the optimiser
};

inline Board* BoardOf(WorkerSlot* slot) { return KindArea<Board>(slot); }
// The area into the report's MultiModelReading (KindRules::read_board).
void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report);

}  // namespace shoal::multi_model
