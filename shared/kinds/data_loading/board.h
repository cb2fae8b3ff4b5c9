// data_loading's area of a worker's scoreboard slot (shared/ipc/layout.h KindArea).
#pragma once

#include <atomic>
#include <cstdint>

#include "shared/ipc/layout.h"
#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal::data_loading {

struct Board {
  // The CPU time the worker (a loader, or the trainer loading its own) spent making each
  // epoch's batches; index epoch - 1, as the slot's epoch records.
  std::atomic<uint64_t> load_cpu_ns[kMaxEpochRecords];
};

inline Board* BoardOf(WorkerSlot* slot) { return KindArea<Board>(slot); }
// The area into the report's DataLoadingReading, one entry per epoch the slot records
// (KindRules::read_board).
void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report);

}  // namespace shoal::data_loading
