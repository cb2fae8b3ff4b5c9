// multi_model's variants (seed 001): which model each worker trains, for the daemon's rules and
// figures and the worker alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shoal {

// The variants for n models, in worker order: linear, conv1d (n = 1); mlinear, mconv1d,
// gconv1d (n > 1).
std::vector<std::string> MultiModelVariants(uint32_t models);

}  // namespace shoal
