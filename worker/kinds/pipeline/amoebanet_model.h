// AmoebaNet-D (L, D) in LibTorch, layer for layer as torchgpipe's benchmark builds it (seed 004),
// from the plan in shared/kinds/pipeline/amoebanet.h. Its L + 6 layers are a sequence a pipeline
// can cut anywhere: between layers flow one tensor (after the stem) or two (a cell's output and the
// skip it passes on), so a stage takes and returns AmoebaStates.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "shared/kinds/pipeline/amoebanet.h"
#include "worker/models/models.h"

namespace shoal {

using AmoebaStates = std::vector<torch::Tensor>;  // one or two tensors

struct AmoebaLayerImpl : torch::nn::Module {
  virtual AmoebaStates forward(const AmoebaStates& in) = 0;
};

// The whole network as a Model (log-probabilities out, like every model here), and its layers one
// by one for a pipeline's stages.
struct AmoebaNetD : Model {
  // Layers [begin, end) of the plan (a pipeline stage's; the rest stay null), layer i initialised
  // from seed + i so a stage's weights are the whole model's whatever the cut.
  AmoebaNetD(const std::vector<AmoebaLayer>& plan, uint32_t classes, uint64_t seed, size_t begin,
             size_t end);
  torch::Tensor forward(torch::Tensor x) override;
  // Layers [begin, end) on `in`; the last layer's output is the logits (one tensor).
  AmoebaStates Run(size_t begin, size_t end, AmoebaStates in);
  size_t size() const { return layers.size(); }

  std::vector<std::shared_ptr<AmoebaLayerImpl>> layers;
};

// AmoebaNet-D (layers, filters) with 1000 classes, every layer built.
StatusOr<std::shared_ptr<AmoebaNetD>> MakeAmoebaNet(uint32_t layers, uint32_t filters,
                                                    uint64_t seed = 1);

}  // namespace shoal
