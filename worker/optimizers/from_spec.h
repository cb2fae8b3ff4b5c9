// The spec's optimiser (every field resolved by ApplyDefaults) as an OptimizerConfig.
#pragma once

#include "shoal/v1/shoal.pb.h"
#include "worker/optimizers/optimizers.h"

namespace shoal {

OptimizerConfig ConfigFromSpec(const v1::OptimizerSpec& o);

}  // namespace shoal
