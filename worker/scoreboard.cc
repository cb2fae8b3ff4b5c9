#include "worker/scoreboard.h"

#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "shared/os/process.h"

namespace shoal {
namespace {

void ReadStepMemory(const WorkerSlot& w, v1::StepMemory* m) {
  m->set_arena_bytes(w.plan_arena_bytes.load());
  m->set_peak_live_bytes(w.plan_peak_live_bytes.load());
  const uint64_t replayed = w.plan_replayed_steps.load();
  m->set_replayed_steps(replayed);
  m->set_fallback_steps(w.plan_fallback_steps.load());
  if (replayed > 0) m->set_faults_per_step(double(w.plan_replay_minflt.load()) / double(replayed));
  m->set_shared_arenas(w.plan_shared_arenas.load());
}

void SetIfFinite(uint32_t bits, const std::function<void(float)>& set) {
  const float v = BitsToFloat(bits);
  if (std::isfinite(v)) set(v);
}

void ReadEpochs(const WorkerSlot& w, ipc::v1::WorkerReading* r) {
  const uint32_t n =
      std::min<uint32_t>(w.epochs_done.load(std::memory_order_acquire), kMaxEpochRecords);
  for (uint32_t e = 0; e < n; ++e) {
    const EpochRecord& x = w.epochs[e];
    auto* out = r->add_epochs();
    out->set_epoch(e + 1);
    out->set_wall_ns(x.wall_ns.load());
    out->set_data_ns(x.data_ns.load());
    out->set_steps(x.steps.load());
    out->set_samples(x.samples.load());
    out->set_loss_sum(BitsToDouble(x.loss_sum_bits.load()));
    SetIfFinite(x.accuracy_bits.load(), [&](float v) { out->set_test_accuracy(v); });
  }
}

void ReadCurve(const WorkerSlot& w, ipc::v1::WorkerReading* r) {
  const uint32_t n =
      std::min<uint32_t>(w.curve_points.load(std::memory_order_acquire), kCurvePoints);
  for (uint32_t k = 0; k < n; ++k) {
    auto* p = r->add_curve();
    p->set_step(w.curve[k].step.load());
    p->set_t_ms(double(w.curve[k].t_ns.load()) / 1e6);
    p->set_loss(BitsToFloat(w.curve[k].loss_bits.load()));
  }
}

}  // namespace

StatusOr<Scoreboard> Scoreboard::Create(const std::string& name, uint32_t workers) {
  Scoreboard b;
  ASSIGN_OR_RETURN(b.seg_, ShmSegment::Create(name, BoardBytes(workers)));
  auto* h = new (b.seg_.data()) BoardHeader();
  h->magic = kBoardMagic;
  h->version = kLayoutVersion;
  h->workers = workers;
  const uint32_t nan = FloatToBits(std::nanf(""));
  for (uint32_t i = 0; i < workers; ++i) {
    auto* slot = new (b.slot(i)) WorkerSlot();
    for (auto* f : {&slot->accuracy_bits, &slot->last_loss_bits, &slot->first_loss_bits,
                    &slot->tail_loss_bits})
      f->store(nan);
    for (auto& e : slot->epochs) e.accuracy_bits.store(nan);
  }
  return b;
}

StatusOr<Scoreboard> Scoreboard::Open(const std::string& name, uint32_t index) {
  Scoreboard b;
  ASSIGN_OR_RETURN(b.seg_, ShmSegment::Open(name, true));
  const auto* h = b.header();
  if (b.seg_.size() < sizeof(BoardHeader) || h->magic != kBoardMagic ||
      h->version != kLayoutVersion || BoardBytes(h->workers) > b.seg_.size() ||
      index >= h->workers) {
    return DataLoss("scoreboard " + name + ": layout does not match (or no slot " +
                    std::to_string(index) + ")");
  }
  return b;
}

HeartbeatThread::HeartbeatThread(WorkerSlot* slot)
    : slot_(slot), thread_([this] {
        while (!stop_.load()) {
          slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }) {}

HeartbeatThread::~HeartbeatThread() {
  stop_ = true;
  thread_.join();
}

void MarkProgress(WorkerSlot* slot) {
  slot->progress_ns.store(MonotonicNs(), std::memory_order_relaxed);
}

void MarkStepEnded(WorkerSlot* slot) {
  slot->last_step_ns.store(RealtimeNs(), std::memory_order_relaxed);
  MarkProgress(slot);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen) {
  static_assert(sizeof(*word) == sizeof(uint32_t));
  timespec wait{0, 50'000'000};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &wait, nullptr, 0);
}

void WakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void Arrive(std::atomic<uint32_t>* counter) {
  counter->fetch_add(1);
  WakeAll(counter);
}

bool LeaderGone(int lifetime_fd) {
  if (lifetime_fd < 0) return false;
  pollfd p{lifetime_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

bool WaitForCount(std::atomic<uint32_t>* counter, uint32_t target, WorkerSlot* slot,
                  int lifetime_fd) {
  slot->heartbeat_ns.store(MonotonicNs());
  for (uint32_t seen; (seen = counter->load()) < target;) {
    if (LeaderGone(lifetime_fd)) return false;
    slot->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    FutexWait(counter, seen);
  }
  return true;
}

int WorkerFails(WorkerSlot* slot, uint32_t index, const std::string& message) {
  std::fprintf(stderr, "worker %u: %s\n", index, message.c_str());
  if (slot == nullptr) return 1;
  const size_t n = std::min(message.size(), sizeof slot->error);
  std::memcpy(slot->error, message.data(), n);
  slot->error_len.store(uint32_t(n), std::memory_order_release);
  return 1;
}

std::string SlotError(const WorkerSlot& slot) {
  const uint32_t n = slot.error_len.load(std::memory_order_acquire);
  return std::string(slot.error, std::min<size_t>(n, sizeof slot.error));
}

bool PassStartGate(BoardHeader* board, WorkerSlot* slot, int lifetime_fd) {
  Arrive(&board->at_gate);
  return WaitForCount(&board->at_gate, board->workers, slot, lifetime_fd);
}

namespace {

// The steps it kept, in step order: its first ones, then the ring of its latest.
void ReadStepSpans(const WorkerSlot& w, ipc::v1::WorkerReading* r) {
  const uint64_t n = w.steps.load(std::memory_order_acquire);
  // Only the step that belongs there: a worker that died between writing a span and counting
  // its step leaves that span in the place of an older one.
  auto add = [&](const StepSpan& s, uint64_t k) {
    if (s.step != k) return;
    auto* o = r->add_step_spans();
    o->set_step(s.step);
    o->set_end_ns(s.end_ns);
    o->set_data_ns(s.data_ns);
    o->set_forward_ns(s.forward_ns);
    o->set_backward_ns(s.backward_ns);
    o->set_comm_ns(s.comm_ns);
    o->set_optimizer_ns(s.optimizer_ns);
    o->set_unsplit_ns(s.unsplit_ns);
  };
  for (uint64_t k = 1; k <= std::min<uint64_t>(n, kFirstStepSpans); ++k)
    add(w.step_spans[k - 1], k);
  for (uint64_t k =
           std::max<uint64_t>(kFirstStepSpans + 1, n + 1 - std::min<uint64_t>(n, kLastStepSpans));
       k <= n; ++k)
    add(w.step_spans[kFirstStepSpans + k % kLastStepSpans], k);
}

}  // namespace

ipc::v1::WorkerReading ReadSlot(const WorkerSlot& w, uint32_t index, bool final,
                                KindBoardReader read_kind_area) {
  ipc::v1::WorkerReading r;
  r.set_index(index);
  r.set_pid(w.pid.load());
  r.set_phase(static_cast<ipc::v1::WorkerPhase>(w.phase.load()));
  r.set_steps(w.steps.load(std::memory_order_acquire));
  r.set_samples(w.samples.load());
  if (r.steps() > 0) SetIfFinite(w.last_loss_bits.load(), [&](float v) { r.set_last_loss(v); });
  if (r.steps() > 0) SetIfFinite(w.first_loss_bits.load(), [&](float v) { r.set_first_loss(v); });
  if (r.phase() == ipc::v1::FINISHED)
    SetIfFinite(w.tail_loss_bits.load(), [&](float v) { r.set_tail_loss(v); });
  r.set_requested_ns(w.requested_ns.load());
  r.set_first_step_ns(w.first_step_ns.load());
  if (const uint64_t ready = w.ready_ns.load(); ready != 0) r.set_ready_ns(ready);
  r.set_last_step_ns(w.last_step_ns.load());
  r.set_data_ns(w.data_ns.load());
  r.set_forward_ns(w.forward_ns.load());
  r.set_backward_ns(w.backward_ns.load());
  r.set_optimizer_ns(w.optimizer_ns.load());
  r.set_eval_ns(w.eval_ns.load());
  if (const uint32_t n = w.evaluations.load(std::memory_order_acquire); n > 0) {
    r.set_evaluations(n);
    for (uint32_t i = 0; i < std::min(n, kMaxEvalSpans); ++i) {
      auto* span = r.add_eval_spans();
      span->set_start_ns(w.eval_spans[i].start_ns.load(std::memory_order_relaxed));
      span->set_end_ns(w.eval_spans[i].end_ns.load(std::memory_order_relaxed));
    }
  }
  r.set_parameters(w.parameters.load());
  r.set_alloc_peak_bytes(w.alloc_peak_bytes.load());
  if (const uint64_t b = w.device_alloc_peak_bytes.load()) r.set_device_alloc_peak_bytes(b);
  if (const uint64_t b = w.device_reserved_peak_bytes.load()) r.set_device_reserved_peak_bytes(b);
  r.set_comm_ns(w.comm_ns.load());
  r.set_vmhwm_bytes(w.vmhwm_bytes.load());
  if (w.plan_made.load() != 0) ReadStepMemory(w, r.mutable_step_memory());
  if (w.step_gated.load() != 0) r.set_step_wait_ns(w.step_wait_ns.load());
  if (r.phase() == ipc::v1::FINISHED) r.set_weights_checksum(w.weights_checksum.load());
  if (final) ReadStepSpans(w, &r);  // the worker no longer writes them
  SetIfFinite(w.accuracy_bits.load(), [&](float v) { r.set_test_accuracy(v); });
  if (const uint32_t n = w.eval_images.load(); n > 0) r.set_eval_images(n);
  if (final) {
    ReadEpochs(w, &r);
    ReadCurve(w, &r);
  }
  if (read_kind_area != nullptr) read_kind_area(w, &r);
  return r;
}

}  // namespace shoal
