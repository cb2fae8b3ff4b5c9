#include "worker/optimizers/optimizers.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "worker/optimizers/adadelta.h"

namespace shoal {
namespace {

using OptimizerPtr = std::unique_ptr<torch::optim::Optimizer>;
namespace optim = torch::optim;

// LibTorch 1.13's SGD, Adagrad, Adam, AdamW and RMSprop run the same tensor ops in the same
// order as the single-tensor path of their torch.optim 1.13 counterparts (the path Python takes
// on CPU by default: foreach=None means False in 1.13), so they are used as they are; the golden
// test shows them bit-identical. Adadelta has no LibTorch version and is ours.
OptimizerPtr Build(const OptimizerConfig& c, std::vector<torch::Tensor> params) {
  if (c.name == "sgd" || c.name == "nesterov") {
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(c.lr)
                                                               .momentum(c.momentum)
                                                               .dampening(c.dampening)
                                                               .weight_decay(c.weight_decay)
                                                               .nesterov(c.name == "nesterov"));
  }
  if (c.name == "adagrad") {
    return std::make_unique<optim::Adagrad>(
        std::move(params), optim::AdagradOptions(c.lr)
                               .lr_decay(c.lr_decay)
                               .weight_decay(c.weight_decay)
                               .initial_accumulator_value(c.initial_accumulator_value)
                               .eps(c.eps));
  }
  if (c.name == "adadelta") {
    return std::make_unique<Adadelta>(
        std::move(params),
        AdadeltaOptions(c.lr).rho(c.rho).eps(c.eps).weight_decay(c.weight_decay));
  }
  if (c.name == "adam") {
    return std::make_unique<optim::Adam>(std::move(params),
                                         optim::AdamOptions(c.lr)
                                             .betas(std::make_tuple(c.beta1, c.beta2))
                                             .eps(c.eps)
                                             .weight_decay(c.weight_decay)
                                             .amsgrad(c.amsgrad));
  }
  if (c.name == "adamw") {
    return std::make_unique<optim::AdamW>(std::move(params),
                                          optim::AdamWOptions(c.lr)
                                              .betas(std::make_tuple(c.beta1, c.beta2))
                                              .eps(c.eps)
                                              .weight_decay(c.weight_decay)
                                              .amsgrad(c.amsgrad));
  }
  return std::make_unique<optim::RMSprop>(std::move(params), optim::RMSpropOptions(c.lr)
                                                                 .alpha(c.alpha)
                                                                 .eps(c.eps)
                                                                 .weight_decay(c.weight_decay)
                                                                 .momentum(c.momentum)
                                                                 .centered(c.centered));
}

std::string JoinedNames() {
  std::string out;
  for (const auto& n : OptimizerNames()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

const std::vector<std::string>& OptimizerNames() {
  static const std::vector<std::string> kNames = {"sgd",  "nesterov", "adagrad", "adadelta",
                                                  "adam", "adamw",    "rmsprop"};
  return kNames;
}

StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerConfig& c, std::vector<torch::Tensor> params) {
  const auto& names = OptimizerNames();
  if (std::find(names.begin(), names.end(), c.name) == names.end()) {
    return InvalidArgument("unknown optimizer \"" + c.name + "\" (known: " + JoinedNames() + ")");
  }
  // The constructors check their arguments with TORCH_CHECK, as torch.optim's raise ValueError.
  try {
    return Build(c, std::move(params));
  } catch (const c10::Error& e) {
    return InvalidArgument("optimizer " + c.name + ": " + e.what_without_backtrace());
  }
}

}  // namespace shoal
