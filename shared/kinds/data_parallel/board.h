// data_parallel's shared memory: its area of a worker's scoreboard slot (shared/ipc/layout.h
// KindArea), and the rendezvous segment its workers meet through.
#pragma once

#include <atomic>
#include <cstdint>

#include "shared/ipc/layout.h"
#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal::data_parallel {

struct Board {
  std::atomic<uint64_t> allreduce_busy_ns;  // an all-reduce in flight, summed over steps
  std::atomic<uint64_t> allreduce_bytes;    // gradient bytes all-reduced, summed
  std::atomic<uint32_t> buckets;
};

inline Board* BoardOf(WorkerSlot* slot) { return KindArea<Board>(slot); }
// The area into the report's DataParallelReading (KindRules::read_board).
void ReadBoard(const WorkerSlot& slot, ipc::v1::WorkerReading* report);

// Worker 0 hosts the c10d TCPStore on a port the kernel picks and publishes it here; the other
// workers wait for it, then meet in the store.
constexpr uint64_t kRendezvousMagic = 0x53484f414c525631ull;  // "SHOALRV1"
struct RendezvousHeader {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> port;  // 0 until worker 0's store listens
};

}  // namespace shoal::data_parallel
