// The optimiser stepped inside the backward pass (`--optimizer-in-backward yes`): each parameter
// is stepped, and its gradient freed, as soon as the autograd engine has accumulated that
// gradient, so a worker never holds a whole model's gradients at once (vit_b_16: 327 MiB a
// worker). The update is the one the optimiser would make after the pass: the optimisers are
// per-parameter (one instance of MakeOptimizer's per parameter, the same state), and a
// parameter's gradient is accumulated only after every node that reads the parameter has run
// (the engine sums a leaf's incoming gradients before its accumulator runs), so no later node of
// the pass sees the stepped value. What differs is when another Hogwild worker sees it: sooner.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "shared/status.h"
#include "worker/optimizers/optimizers.h"

namespace shoal {

// Calls `on_grad(i)` each time the backward pass has accumulated parameter i's gradient, for as
// long as it lives.
class GradientHooks {
 public:
  GradientHooks(const std::vector<torch::Tensor>& params, std::function<void(size_t)> on_grad);
  ~GradientHooks();
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;

 private:
  std::function<void(size_t)> on_grad_;
  // Kept alive: a parameter holds its accumulator weakly, and one made afresh has no hook.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> keys_;
};

class InBackwardOptimizer final : public torch::optim::Optimizer {
 public:
  static StatusOr<std::unique_ptr<InBackwardOptimizer>> Make(const OptimizerConfig& c,
                                                             std::vector<torch::Tensor> params);
  // Nothing left to do after the pass: every parameter was stepped within it.
  torch::Tensor step(LossClosure closure = nullptr) override;
  // The time spent stepping parameters since the last call (part of the backward pass's wall
  // time, which the step's phases report as the optimiser's).
  uint64_t TakeStepNs();

 private:
  explicit InBackwardOptimizer(std::vector<torch::Tensor> params);
  void StepOne(size_t i);

  std::vector<torch::Tensor> params_;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> each_;
  std::unique_ptr<GradientHooks> hooks_;
  uint64_t step_ns_ = 0;
};

}  // namespace shoal
