// baseline's area of a worker's scoreboard slot (shared/ipc/layout.h KindArea).
#pragma once

#include <atomic>
#include <cstdint>

#include "shared/ipc/layout.h"
#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal::baseline {

struct Board {
  std::atomic<uint64_t> touched_bytes;  // written once its pages are touched
  std::atomic<uint64_t> touch_ns;       // the first write to each of its pages, all of them
  std::atomic<uint64_t> minor_faults;   // the kernel's count of its minor faults meanwhile
};

inline Board* BoardOf(WorkerSlot* slot) { return KindArea<Board>(slot); }
// The area into the report's BaselineReading (KindRules::read_board).
void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report);

}  // namespace shoal::baseline
