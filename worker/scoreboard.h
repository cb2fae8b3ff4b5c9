// The experiment's scoreboard segment (shared/ipc/layout.h): created by the leader, attached by
// each worker, read into typed reports for shoald.
#pragma once

#include <atomic>
#include <thread>

#include "shared/ipc/layout.h"
#include "shared/os/shm.h"
#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal {

class Scoreboard {
 public:
  // A new board for `workers` slots, every float figure NaN ("not measured").
  static StatusOr<Scoreboard> Create(const std::string& name, uint32_t workers);
  static StatusOr<Scoreboard> Open(const std::string& name, uint32_t index);

  BoardHeader* header() const { return static_cast<BoardHeader*>(seg_.data()); }
  WorkerSlot* slot(uint32_t i) const { return BoardSlot(seg_.data(), i); }
  size_t size() const { return seg_.size(); }

 private:
  ShmSegment seg_;
};

// Beats the slot's heartbeat every 100 ms while it exists: the leader judges stalls by it. A
// thread, so a step of any length is no stall, while a stopped or dead process stops beating.
class HeartbeatThread {
 public:
  explicit HeartbeatThread(WorkerSlot* slot);
  ~HeartbeatThread();
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

 private:
  WorkerSlot* slot_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The worker moved on (a step, a loader's batch, an evaluation batch): the supervisor's step
// timeout fails a run in which no training worker does so for step_timeout_ms.
void MarkProgress(WorkerSlot* slot);
// The end of a step (a loader's batch): its time (last_step_ns, which the throughput's window
// ends at) and progress.
void MarkStepEnded(WorkerSlot* slot);

// True once the leader holding the other end of the lifetime pipe has exited.
bool LeaderGone(int lifetime_fd);

// A futex wait on a board word while it still reads `seen`, at most 50 ms (so the waiter can
// look at the leader's lifetime pipe), and a wake of every waiter on it.
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen);
void WakeAll(std::atomic<uint32_t>* word);
// Adds one to a board counter and wakes whoever waits on it.
void Arrive(std::atomic<uint32_t>* counter);
// Waits (a futex, beating the slot's heartbeat) until the counter reaches `target`; false when the
// leader is gone meanwhile.
bool WaitForCount(std::atomic<uint32_t>* counter, uint32_t target, WorkerSlot* slot,
                  int lifetime_fd);

// The start gate: arrives, then waits until every worker of the experiment has; false when the
// leader is gone meanwhile. Nobody trains until everyone is set up, so workers still starting are
// not starved by ones already training, and the training window is the same for all.
bool PassStartGate(BoardHeader* board, WorkerSlot* slot, int lifetime_fd);

// A worker that fails says why on stderr and in its slot (the experiment's error quotes it);
// returns the exit code 1.
int WorkerFails(WorkerSlot* slot, uint32_t index, const std::string& message);
// What a failed worker wrote in its slot; "" when nothing.
std::string SlotError(const WorkerSlot& slot);

// A slot as a report. `final` adds the per-epoch records and the loss curve.
// The kind's reader of a slot's kind area (KindRules::read_board); nullptr: it keeps none.
using KindBoardReader = void (*)(const WorkerSlot&, ipc::v1::WorkerReading*);
ipc::v1::WorkerReading ReadSlot(const WorkerSlot& w, uint32_t index, bool final,
                                KindBoardReader read_kind_area = nullptr);

}  // namespace shoal
