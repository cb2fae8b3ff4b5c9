// How a training worker publishes its steps on its scoreboard slot: phase times, samples, the
// first/last/tail losses, a loss curve of at most kCurvePoints points, per-epoch records. Shared
// by every kind that trains one model per worker (hogwild, data_loading's trainer, data_parallel);
// multi_model and pipeline publish their own times but their losses through LossWindows.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>

#include "shared/ipc/layout.h"
#include "worker/models/models.h"
#include "worker/train_device.h"

namespace shoal {

using SteadyClock = std::chrono::steady_clock;

inline uint64_t ElapsedNs(SteadyClock::time_point a, SteadyClock::time_point b) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// What one step cost, by phase (ns).
struct StepTimes {
  uint64_t data_ns = 0, forward_ns = 0, backward_ns = 0, optimizer_ns = 0;
  uint64_t comm_ns = 0;  // data_parallel: blocked waiting for averaged gradients
  // cuda_sync step: the whole step, batch included, timed once at its end (the phases stay 0,
  // and the daemon reports them absent).
  uint64_t unsplit_ns = 0;
  uint64_t total() const {
    return data_ns + forward_ns + backward_ns + comm_ns + optimizer_ns + unsplit_ns;
  }
};

// One worker's running totals over one epoch.
struct EpochTotals {
  uint64_t wall_ns = 0, data_ns = 0, steps = 0, samples = 0;
  double loss_sum = 0;
};

// first_loss and tail_loss as every kind reports them, from one worker's losses in order: the
// mean of the first k and of the last k of its total_steps, k = total_steps / 4 within 1..10.
// last_loss follows every loss; the tail is published with the last step.
class LossWindows {
 public:
  LossWindows(WorkerSlot* slot, uint64_t total_steps);
  void Add(float loss);

 private:
  WorkerSlot* slot_;
  uint64_t total_, k_, n_ = 0;
  double first_sum_ = 0, tail_sum_ = 0;
};

class StepRecorder {
 public:
  // `total_steps`: the steps this worker will take (places the tail loss and the curve points).
  StepRecorder(WorkerSlot* slot, uint64_t total_steps);

  // One step of `samples` samples is done: adds it to the slot and to `totals`.
  void Step(const StepTimes& t, float loss, uint64_t samples, EpochTotals* totals);
  // Epoch `epoch` (1-based) is done.
  void Epoch(uint32_t epoch, const EpochTotals& t);

 private:
  void RecordLoss(float loss);
  void RecordSpan(const StepTimes& t);

  WorkerSlot* slot_;
  LossWindows losses_;
  uint64_t total_steps_, curve_every_;
  uint64_t step_ = 0, curve_n_ = 0;
  double curve_sum_ = 0;
  uint64_t train_ns_ = 0;  // training time so far, evaluation excluded
};

// forward, the model's loss (nll for the built-in models), zero_grad and backward, optimiser step;
// each timed (data_ns left 0). `sync`, when given, runs before each time is read (a GPU's queued
// work finishing). `events`, when given instead, marks the phases on the device (kForward to
// kEnd) and they are timed from it once the loss is read. `after_backward`, when given, runs
// between backward and the update and returns the time it was blocked (data_parallel: waiting for
// the averaged gradients), which is the step's comm_ns.
StepTimes TrainStep(Model& model, torch::optim::Optimizer& opt, const torch::Tensor& x,
                    const torch::Tensor& y, float* loss, const std::function<void()>& sync = {},
                    const std::function<uint64_t()>& after_backward = {},
                    PhaseEvents* events = nullptr);
// The same for a model of several inputs (a model file's).
StepTimes TrainStep(Model& model, torch::optim::Optimizer& opt,
                    const std::vector<torch::Tensor>& inputs, const torch::Tensor& y, float* loss,
                    const std::function<void()>& sync = {},
                    const std::function<uint64_t()>& after_backward = {},
                    PhaseEvents* events = nullptr);

}  // namespace shoal
