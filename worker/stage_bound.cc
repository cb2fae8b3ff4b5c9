#include "worker/stage_bound.h"

#include <sys/resource.h>
#include <unistd.h>

#include "shared/os/process.h"

namespace shoal {

uint64_t DataBytesNow() { return SelfStatusBytes("VmData"); }

StageBound::StageBound(std::string stage, std::chrono::milliseconds time, uint64_t data_bytes,
                       FailNow fail_now, std::string who)
    : stage_(std::move(stage)), who_(std::move(who)), fail_now_(std::move(fail_now)) {
  // The watchdog first: were its start to throw, no lowered limit would outlive this.
  watchdog_ = std::thread([this, time] { Watch(time); });
  std::lock_guard<std::mutex> lock(mu_);  // the watchdog reads limit_ and old_soft_
  rlimit r{};
  if (data_bytes > 0 && getrlimit(RLIMIT_DATA, &r) == 0 && data_bytes < r.rlim_cur) {
    old_soft_ = r.rlim_cur;
    r.rlim_cur = data_bytes;
    if (setrlimit(RLIMIT_DATA, &r) == 0) limit_ = data_bytes;
  }
}

StageBound::~StageBound() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  LiftMemoryBound();
}

void StageBound::LiftMemoryBound() {
  if (limit_ == 0) return;
  rlimit r{};
  if (getrlimit(RLIMIT_DATA, &r) != 0) return;
  r.rlim_cur = old_soft_;
  (void)setrlimit(RLIMIT_DATA, &r);
}

void StageBound::Watch(std::chrono::milliseconds time) {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, time, [this] { return done_; })) return;
  // The stage may hold all the memory its bound allows: the report must still allocate.
  LiftMemoryBound();
  try {
    if (fail_now_)
      fail_now_("model_file: " + who_ + "'s " + stage_ + " of the model ran past its bound of " +
                std::to_string(time.count() / 1000.0).substr(0, 5) +
                " s (docs/your-model.md, \"Bounds\"); a step that takes longer needs a larger "
                "--step-timeout-ms, a file that loads longer a smaller file");
  } catch (...) {  // nothing more can be said: the exit code and the log say it failed
  }
  _exit(1);
}

std::string StageBound::Explain(const std::string& message) const {
  if (limit_ == 0) return message;
  // LibTorch's CPU allocator: "DefaultCPUAllocator: can't allocate memory" / "not enough memory".
  const bool at_bound = message.find("allocate memory") != std::string::npos ||
                        message.find("not enough memory") != std::string::npos ||
                        message.find("bad_alloc") != std::string::npos ||
                        DataBytesNow() + (64u << 20) >= limit_;
  if (!at_bound) return message;
  const std::string prefix = "model_file: ";
  const std::string cause = message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
  return prefix + who_ + "'s " + stage_ + " of the model passed its memory bound of " +
         std::to_string(limit_ >> 20) +
         " MiB of private memory (docs/your-model.md, \"Bounds\"): " + cause;
}

std::chrono::milliseconds StageBound::LoadTime(uint64_t file_bytes) {
  return std::chrono::milliseconds(30000 + file_bytes / (10u << 20) * 1000);
}

uint64_t StageBound::LoadMemory(uint64_t file_bytes) { return (512ull << 20) + 4 * file_bytes; }

std::chrono::milliseconds StageBound::ProbeTime(uint64_t step_timeout_ms) {
  constexpr uint64_t kMostMs = 5 * 60 * 1000;
  return std::chrono::milliseconds(step_timeout_ms == 0 ? kMostMs
                                                        : std::min(step_timeout_ms, kMostMs));
}

}  // namespace shoal
