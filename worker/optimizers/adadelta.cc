#include "worker/optimizers/adadelta.h"

#include <torch/optim/serialize.h>

#include <memory>
#include <string>

#include "worker/torch_compat.h"

namespace shoal {

AdadeltaOptions::AdadeltaOptions(double lr) : lr_(lr) {}

bool operator==(const AdadeltaOptions& lhs, const AdadeltaOptions& rhs) {
  return lhs.lr() == rhs.lr() && lhs.rho() == rhs.rho() && lhs.eps() == rhs.eps() &&
         lhs.weight_decay() == rhs.weight_decay();
}

void AdadeltaOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(rho);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
}

void AdadeltaOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, rho);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
}

double AdadeltaOptions::get_lr() const { return lr(); }

void AdadeltaOptions::set_lr(const double lr) { this->lr(lr); }

bool operator==(const AdadeltaParamState& lhs, const AdadeltaParamState& rhs) {
  return lhs.step() == rhs.step() && torch::equal(lhs.square_avg(), rhs.square_avg()) &&
         torch::equal(lhs.acc_delta(), rhs.acc_delta());
}

void AdadeltaParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(square_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(acc_delta);
}

void AdadeltaParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, square_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, acc_delta);
}

// The same argument checks, with the same bounds, as torch.optim.Adadelta.__init__.
Adadelta::Adadelta(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                   AdadeltaOptions defaults)
    : Optimizer(std::move(param_groups), std::make_unique<AdadeltaOptions>(defaults)) {
  TORCH_CHECK(defaults.lr() >= 0, "Invalid learning rate: ", defaults.lr());
  TORCH_CHECK(defaults.rho() >= 0 && defaults.rho() <= 1, "Invalid rho value: ", defaults.rho());
  TORCH_CHECK(defaults.eps() >= 0, "Invalid epsilon value: ", defaults.eps());
  TORCH_CHECK(defaults.weight_decay() >= 0,
              "Invalid weight_decay value: ", defaults.weight_decay());
}

torch::Tensor Adadelta::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const AdadeltaOptions&>(group.options());
    for (auto& p : group.params()) {
      if (p.grad().defined()) StepParam(p, options);
    }
  }
  return loss;
}

// One parameter's update, in exactly the op order of _single_tensor_adadelta in PyTorch 1.13's
// torch/optim/adadelta.py: the float32 rounding of each intermediate then matches, and so do
// the results, bit for bit.
void Adadelta::StepParam(const torch::Tensor& p, const AdadeltaOptions& o) {
  TORCH_CHECK(!p.grad().is_sparse(), "Adadelta does not support sparse gradients");
  auto& slot = state_[OptimizerStateKey<decltype(state_)>(p)];
  if (!slot) {  // lazy, like Python: state appears on a parameter's first step with a gradient
    auto fresh = std::make_unique<AdadeltaParamState>();
    fresh->square_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
    fresh->acc_delta(torch::zeros_like(p, at::MemoryFormat::Preserve));
    slot = std::move(fresh);
  }
  auto& state = static_cast<AdadeltaParamState&>(*slot);
  state.step(state.step() + 1);

  torch::Tensor grad = p.grad();
  if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
  torch::Tensor square_avg = state.square_avg();
  torch::Tensor acc_delta = state.acc_delta();
  torch::Tensor param = p;
  if (p.is_complex()) {  // Python updates complex parameters as pairs of reals
    square_avg = torch::view_as_real(square_avg);
    acc_delta = torch::view_as_real(acc_delta);
    grad = torch::view_as_real(grad);
    param = torch::view_as_real(p);
  }
  square_avg.mul_(o.rho()).addcmul_(grad, grad, 1 - o.rho());
  const torch::Tensor std = square_avg.add(o.eps()).sqrt_();
  const torch::Tensor delta = acc_delta.add(o.eps()).sqrt_().div_(std).mul_(grad);
  acc_delta.mul_(o.rho()).addcmul_(delta, delta, 1 - o.rho());
  param.add_(delta, -o.lr());
}

void Adadelta::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

void Adadelta::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

}  // namespace shoal
