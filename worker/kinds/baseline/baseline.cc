#include "worker/kinds/baseline/baseline.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "shared/kinds/baseline/board.h"
#include "shared/os/process.h"
#include "worker/scoreboard.h"
#include "worker/step_recorder.h"

namespace shoal {
namespace {

constexpr size_t kPage = 4096;

uint64_t MinorFaults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_minflt);
}

// Holds for `ms`, marking progress; false when the leader went away meanwhile.
bool Hold(WorkerEnv& env, uint32_t ms) {
  const auto until = SteadyClock::now() + std::chrono::milliseconds(ms);
  while (SteadyClock::now() < until) {
    if (LeaderGone(env.lifetime_fd)) return false;
    MarkProgress(env.slot);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

int BaselineKind::RunWorker(WorkerEnv& env, bool) {
  WorkerSlot* slot = env.slot;
  slot->pid.store(getpid());
  if (!PassStartGate(env.board, slot, env.lifetime_fd)) return kLeaderGoneExit;
  slot->first_step_ns.store(RealtimeNs());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  const size_t bytes = size_t(env.spec.baseline().touch_mib()) << 20;
  void* p = nullptr;
  if (bytes > 0) {
    // Its own mapping: fresh pages, none from the heap's free lists.
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return WorkerFails(
          slot, env.index,
          "baseline: mapping " + std::to_string(bytes >> 20) + " MiB: " + std::strerror(errno));
    const uint64_t faults = MinorFaults();
    const auto t0 = SteadyClock::now();
    for (size_t at = 0; at < bytes; at += kPage) static_cast<volatile char*>(p)[at] = 1;
    auto* b = baseline::BoardOf(slot);
    b->touch_ns.store(ElapsedNs(t0, SteadyClock::now()));
    b->minor_faults.store(MinorFaults() - faults);
    b->touched_bytes.store(bytes, std::memory_order_release);
  }
  slot->steps.store(1, std::memory_order_release);
  MarkStepEnded(slot);
  const bool held = Hold(env, env.spec.baseline().hold_ms());
  slot->vmhwm_bytes.store(SelfVmHwm());
  if (p != nullptr) ::munmap(p, bytes);
  if (!held) return kLeaderGoneExit;
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  Arrive(&env.board->finished);
  return 0;
}

}  // namespace shoal
