// The optimisers a training run can ask for by name, built to behave exactly like torch.optim of
// PyTorch 1.13 (checked against golden values from Python in tests/optimizer_test.cc).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

// Every field resolved (no defaults applied here: the caller passes complete values).
struct OptimizerConfig {
  std::string name;  // sgd | nesterov | adagrad | adadelta | adam | adamw | rmsprop
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0, eps = 0, lr_decay = 0,
         initial_accumulator_value = 0, rho = 0, beta1 = 0, beta2 = 0, alpha = 0;
  bool amsgrad = false, centered = false;
};

// The optimiser `c.name` over `params`, configured exactly like torch.optim of PyTorch 1.13.
// "nesterov" is SGD with nesterov=True. Unknown name -> InvalidArgument naming it; values the
// optimiser itself refuses (negative lr, nesterov with dampening, ...) -> InvalidArgument too.
StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const OptimizerConfig& c,
                                                                 std::vector<torch::Tensor> params);

// Names MakeOptimizer accepts, in a fixed order.
const std::vector<std::string>& OptimizerNames();

}  // namespace shoal
