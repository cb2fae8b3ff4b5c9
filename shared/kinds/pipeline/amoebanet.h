// AmoebaNet-D as torchgpipe's benchmark builds it (seed 004): its genotype, the channel plan of its
// L + 6 sequential layers, and each layer's parameter count — computed from the definitions, so
// shoald can size a configuration (1.84 billion parameters for (72, 512)) without building it. The
// worker's LibTorch model (worker/kinds/pipeline/amoebanet_model.cc) is built from the same plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

enum class AmoebaOp {
  kNone,        // identity; stride 2: a factorized reduce
  kAvgPool3x3,  // count_include_pad=false
  kMaxPool3x3,  // torchgpipe builds it as an average pool: kept so, to be faithful
  kMaxPool2x2,
  kConv1x1,
  kConv3x3,     // 1x1 to c/4, 3x3, 1x1 back to c
  kConv1x7_7x1  // 1x1 to c/4, 1x7, 7x1, 1x1 back to c
};

struct AmoebaStep {
  int input;  // index into the cell's states: 0, 1 the reduced inputs, 2.. earlier sums
  AmoebaOp op;
};

// The genotype: ten (input, op) pairs, summed two by two into five new states; then the states
// concatenated. torchgpipe's normal concat is TensorFlow's [0, 3, 4, 6] (not the paper's).
const std::vector<AmoebaStep>& AmoebaNormalSteps();
const std::vector<AmoebaStep>& AmoebaReductionSteps();
const std::vector<int>& AmoebaNormalConcat();     // {0, 3, 4, 6}
const std::vector<int>& AmoebaReductionConcat();  // {4, 5, 6}

struct AmoebaCell {
  uint32_t channels_prev_prev, channels_prev, channels;
  bool reduction, reduction_prev;
  uint32_t out_channels() const;  // channels x the concat's length
};

// One sequential layer: "stem1" (ReLU, conv 3x3/2, BN), "stem2", "stem3", "cell1_normal1", ...,
// "cell2_reduction", ..., "classify" (avg pool 7, Linear).
struct AmoebaLayer {
  std::string name;
  bool is_cell = false;
  AmoebaCell cell{};      // when is_cell
  uint32_t channels = 0;  // stem: its output channels; classify: its input features
  uint64_t params = 0;    // weights, BN scales and shifts, the Linear's bias (no BN buffers)
};

// AmoebaNet-D (L, D): `layers` = L (a multiple of 3, L / 3 normal cells per group), `filters` = D
// (a multiple of 4 whose quarter is even, so every factorized reduce halves evenly), 1000 classes
// in the seed. INVALID_ARGUMENT naming the field otherwise.
StatusOr<std::vector<AmoebaLayer>> PlanAmoebaNet(uint32_t layers, uint32_t filters,
                                                 uint32_t classes);
uint64_t AmoebaNetParams(const std::vector<AmoebaLayer>& plan);

}  // namespace shoal
