// Activation checkpointing for LibTorch 1.13, which has none in C++ (seed 004, torchgpipe's
// checkpoint modes): a segment runs without keeping its activations, and backward runs it again,
// with the CPU RNG state it first ran with, and differentiates that run.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace shoal {

using Segment =
    std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)>;

// fn(inputs), checkpointed. The parameters fn uses get their gradients in backward even when no
// input requires grad (a stage's first layers, on images): a "phony" input that does is added,
// as torchgpipe does. `fn` must outlive the backward pass. BatchNorm's running statistics are
// updated again by the recomputation (as in torch.utils.checkpoint).
torch::autograd::variable_list Checkpoint(const Segment& fn,
                                          const torch::autograd::variable_list& inputs);

}  // namespace shoal
