// pipeline's area of a stage's scoreboard slot (shared/ipc/layout.h KindArea).
#pragma once

#include <atomic>
#include <cstdint>

#include "shared/ipc/layout.h"
#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal::pipeline {

struct Board {
  // Each step's wall time, from making its input to the end of its update, summed.
  std::atomic<uint64_t> step_wall_ns;
};

inline Board* BoardOf(WorkerSlot* slot) { return KindArea<Board>(slot); }
// The area into the report's PipelineReading (KindRules::read_board).
void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report);

}  // namespace shoal::pipeline
