#include "worker/optimizers/from_spec.h"

namespace shoal {

OptimizerConfig ConfigFromSpec(const v1::OptimizerSpec& o) {
  OptimizerConfig c;
  c.name = o.name();
  c.lr = o.lr();
  c.momentum = o.momentum();
  c.dampening = o.dampening();
  c.weight_decay = o.weight_decay();
  c.eps = o.eps();
  c.lr_decay = o.lr_decay();
  c.initial_accumulator_value = o.initial_accumulator_value();
  c.rho = o.rho();
  c.beta1 = o.beta1();
  c.beta2 = o.beta2();
  c.alpha = o.alpha();
  c.amsgrad = o.amsgrad();
  c.centered = o.centered();
  return c;
}

}  // namespace shoal
