// One stage of the leader's handling of a user's model file (loading it, its probe step), bounded
// in time and in memory, so that a hostile or broken file cannot hold a shared node: past its time
// the leader reports the stage and its bound to shoald and exits at once (a TorchScript forward
// cannot be interrupted, and the queue behind it must move); past its memory LibTorch's
// allocations fail (RLIMIT_DATA, the leader's private writable memory), and Explain says so.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace shoal {

// How a stage failed at once: its message to shoald; the caller of the watchdog then _exits.
using FailNow = std::function<void(const std::string& message)>;

class StageBound {
 public:
  // `stage`: "load", "probe" or "warm-up", for messages, of `who` ("the leader", "worker 1").
  // `data_bytes`: the most private writable memory the process may hold during the stage (0: no
  // bound). Starts the watchdog.
  StageBound(std::string stage, std::chrono::milliseconds time, uint64_t data_bytes,
             FailNow fail_now, std::string who = "the leader");
  ~StageBound();  // stops the watchdog and lifts the memory bound
  StageBound(const StageBound&) = delete;
  StageBound& operator=(const StageBound&) = delete;

  // `message` (LibTorch's), or, when an allocation failed at the bound, one naming the stage and
  // the bound.
  std::string Explain(const std::string& message) const;

  // The bounds shoal states (docs/your-model.md): loading a file of `file_bytes` takes at most
  // 30 s + 1 s per 10 MiB and 512 MiB + 4x the file beyond what the leader held; the probe at
  // most the spec's step timeout, up to 5 minutes, and the node's available memory.
  static std::chrono::milliseconds LoadTime(uint64_t file_bytes);
  static uint64_t LoadMemory(uint64_t file_bytes);
  static std::chrono::milliseconds ProbeTime(uint64_t step_timeout_ms);

 private:
  void Watch(std::chrono::milliseconds time);
  void LiftMemoryBound();  // back to the soft limit before the stage (process-wide, any thread)

  std::string stage_;
  std::string who_;
  uint64_t limit_ = 0;  // RLIMIT_DATA while the stage runs (0: unchanged)
  uint64_t old_soft_ = 0;
  FailNow fail_now_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watchdog_;
};

// The leader's private writable memory now (VmData), in bytes.
uint64_t DataBytesNow();

}  // namespace shoal
