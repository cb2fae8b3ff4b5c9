// Layers that keep less for backward than PyTorch's autograd does, with bit-identical results
// (--activations lean). PyTorch's max-pool saves its whole input for backward although its
// backward reads only the input's shape and the argmax indices; in mnist_convnet that input is
// conv1's 1000-channel output, the largest tensor of the step.
#pragma once

#include <torch/torch.h>

namespace shoal {

// max_pool2d with kernel = stride = k that saves the indices and the input's shape only. Its
// gradient equals PyTorch's bit for bit: the windows do not overlap, so every input element gets
// at most one output's gradient, added to zero as PyTorch's kernel does.
torch::Tensor LeanMaxPool2d(const torch::Tensor& x, int64_t k);

}  // namespace shoal
