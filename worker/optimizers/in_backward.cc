#include "worker/optimizers/in_backward.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

namespace shoal {

namespace {
// The whole's options: none of its own (each parameter's optimiser has the real ones).
struct NoOptions : torch::optim::OptimizerCloneableOptions<NoOptions> {};
}  // namespace

InBackwardOptimizer::InBackwardOptimizer(std::vector<torch::Tensor> params)
    : torch::optim::Optimizer(params, std::make_unique<NoOptions>()), params_(std::move(params)) {}

GradientHooks::GradientHooks(const std::vector<torch::Tensor>& params,
                             std::function<void(size_t)> on_grad)
    : on_grad_(std::move(on_grad)) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    auto acc = torch::autograd::impl::grad_accumulator(params[i]);
    keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list&) {
          on_grad_(i);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

GradientHooks::~GradientHooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
}

StatusOr<std::unique_ptr<InBackwardOptimizer>> InBackwardOptimizer::Make(
    const OptimizerConfig& c, std::vector<torch::Tensor> params) {
  std::unique_ptr<InBackwardOptimizer> o(new InBackwardOptimizer(params));
  for (const auto& p : params) {
    ASSIGN_OR_RETURN(auto one, MakeOptimizer(c, {p}));
    o->each_.push_back(std::move(one));
  }
  InBackwardOptimizer* self = o.get();
  o->hooks_ = std::make_unique<GradientHooks>(params, [self](size_t i) { self->StepOne(i); });
  return o;
}

void InBackwardOptimizer::StepOne(size_t i) {
  const auto t0 = std::chrono::steady_clock::now();
  each_[i]->step();
  params_[i].mutable_grad().reset();  // its memory goes back once the engine lets go of it
  step_ns_ += uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

torch::Tensor InBackwardOptimizer::step(LossClosure) { return {}; }

uint64_t InBackwardOptimizer::TakeStepNs() {
  const uint64_t ns = step_ns_;
  step_ns_ = 0;
  return ns;
}

}  // namespace shoal
