#include "worker/step_recorder.h"

#include <algorithm>
#include <chrono>

#include "shared/os/process.h"
#include "worker/optimizers/in_backward.h"
#include "worker/scoreboard.h"

namespace shoal {

LossWindows::LossWindows(WorkerSlot* slot, uint64_t total_steps)
    : slot_(slot), total_(total_steps), k_(std::clamp<uint64_t>(total_steps / 4, 1, 10)) {}

void LossWindows::Add(float l) {
  slot_->last_loss_bits.store(FloatToBits(l), std::memory_order_relaxed);
  if (n_ < k_) first_sum_ += l;
  if (n_ + 1 == k_) slot_->first_loss_bits.store(FloatToBits(float(first_sum_ / double(k_))));
  if (n_ + k_ >= total_) tail_sum_ += l;
  if (++n_ == total_) slot_->tail_loss_bits.store(FloatToBits(float(tail_sum_ / double(k_))));
}

StepRecorder::StepRecorder(WorkerSlot* slot, uint64_t total_steps)
    : slot_(slot),
      losses_(slot, total_steps),
      total_steps_(total_steps),
      curve_every_(std::max<uint64_t>(1, (total_steps + kCurvePoints - 1) / kCurvePoints)) {}

void StepRecorder::Step(const StepTimes& t, float loss, uint64_t samples, EpochTotals* totals) {
  train_ns_ += t.total();
  totals->data_ns += t.data_ns;
  totals->steps += 1;
  totals->samples += samples;
  totals->loss_sum += loss;
  slot_->data_ns.fetch_add(t.data_ns, std::memory_order_relaxed);
  slot_->forward_ns.fetch_add(t.forward_ns, std::memory_order_relaxed);
  slot_->backward_ns.fetch_add(t.backward_ns, std::memory_order_relaxed);
  slot_->optimizer_ns.fetch_add(t.optimizer_ns, std::memory_order_relaxed);
  if (t.comm_ns != 0) slot_->comm_ns.fetch_add(t.comm_ns, std::memory_order_relaxed);
  RecordLoss(loss);
  RecordSpan(t);
  slot_->samples.fetch_add(samples, std::memory_order_relaxed);
  MarkStepEnded(slot_);
  slot_->steps.fetch_add(1, std::memory_order_release);
  slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
}

// The step's phases and end into its place: the first steps in order, then a ring of the latest
// (plain stores: read once the worker has finished).
void StepRecorder::RecordSpan(const StepTimes& t) {
  const uint64_t k = step_;  // RecordLoss counted it: 1-based
  const uint64_t at = k <= kFirstStepSpans ? k - 1 : kFirstStepSpans + k % kLastStepSpans;
  slot_->step_spans[at] = {k,         RealtimeNs(),   t.data_ns,   t.forward_ns, t.backward_ns,
                           t.comm_ns, t.optimizer_ns, t.unsplit_ns};
}

// Last, first-k and tail-k losses, and one curve point per curve_every_ steps.
void StepRecorder::RecordLoss(float l) {
  losses_.Add(l);
  ++step_;
  curve_sum_ += l;
  ++curve_n_;
  if (curve_n_ == curve_every_ || step_ == total_steps_) {
    const uint32_t k = slot_->curve_points.load();
    if (k < kCurvePoints) {
      slot_->curve[k].step.store(step_);
      slot_->curve[k].t_ns.store(train_ns_);
      slot_->curve[k].loss_bits.store(FloatToBits(float(curve_sum_ / double(curve_n_))));
      slot_->curve_points.store(k + 1, std::memory_order_release);
    }
    curve_sum_ = 0;
    curve_n_ = 0;
  }
}

void StepRecorder::Epoch(uint32_t epoch, const EpochTotals& t) {
  if (epoch <= kMaxEpochRecords) {
    EpochRecord& r = slot_->epochs[epoch - 1];
    r.wall_ns.store(t.wall_ns);
    r.data_ns.store(t.data_ns);
    r.steps.store(t.steps);
    r.samples.store(t.samples);
    r.loss_sum_bits.store(DoubleToBits(t.loss_sum));
  }
  slot_->epochs_done.store(epoch, std::memory_order_release);
}

StepTimes TrainStep(Model& model, torch::optim::Optimizer& opt, const torch::Tensor& x,
                    const torch::Tensor& y, float* loss, const std::function<void()>& sync,
                    const std::function<uint64_t()>& after_backward, PhaseEvents* events) {
  return TrainStep(model, opt, std::vector<torch::Tensor>{x}, y, loss, sync, after_backward,
                   events);
}

StepTimes TrainStep(Model& model, torch::optim::Optimizer& opt,
                    const std::vector<torch::Tensor>& inputs, const torch::Tensor& y, float* loss,
                    const std::function<void()>& sync,
                    const std::function<uint64_t()>& after_backward, PhaseEvents* events) {
  // On a GPU each phase's time is its work done, not queued: sync before every reading, or
  // mark it on the device and read the marks once the step is done.
  auto now = [&](PhaseEvents::Mark m) {
    if (events != nullptr)
      events->Record(m);
    else if (sync)
      sync();
    return SteadyClock::now();
  };
  const auto t0 = now(PhaseEvents::kForward);
  auto l = model.Loss(inputs, y);
  const auto t1 = now(PhaseEvents::kBackward);
  opt.zero_grad();
  l.backward();
  StepTimes t;
  if (after_backward) t.comm_ns = after_backward();
  const auto t2 = now(PhaseEvents::kUpdate);
  opt.step();
  const auto t3 = now(PhaseEvents::kEnd);
  *loss = l.item<float>();
  // Stepped within the pass: that time is the optimiser's, not the backward pass's.
  auto* in_backward = dynamic_cast<InBackwardOptimizer*>(&opt);
  const uint64_t stepped = in_backward != nullptr ? in_backward->TakeStepNs() : 0;
  const uint64_t forward =
      events ? events->Ns(PhaseEvents::kForward, PhaseEvents::kBackward) : ElapsedNs(t0, t1);
  const uint64_t backward =
      events ? events->Ns(PhaseEvents::kBackward, PhaseEvents::kUpdate) : ElapsedNs(t1, t2);
  const uint64_t update =
      events ? events->Ns(PhaseEvents::kUpdate, PhaseEvents::kEnd) : ElapsedNs(t2, t3);
  t.forward_ns = forward;
  t.backward_ns = backward - std::min(t.comm_ns + stepped, backward);
  t.optimizer_ns = update + stepped;
  return t;
}

}  // namespace shoal
