// Layers that keep less for backward than PyTorch's autograd does, with bit-identical results
// (--activations lean). PyTorch's max-pool saves its whole input for backward although its
// backward reads only the input's shape and the argmax indices; in mnist_convnet that input is
// conv1's 1000-channel output, the largest tensor of the step.
#pragma once

#include <torch/torch.h>

namespace shoal {

// max_pool2d with kernel = stride = k (k <= 16) that saves the input's shape and where each
// maximum was: on CPU float one byte per output (ATen saves 8, and the whole input), computed by
// a branch-free kernel several times faster than ATen 1.13's; elsewhere ATen's int64 indices.
// Output and gradient equal PyTorch's bit for bit: the same comparison rule (greater or NaN
// wins, the first of equals stays), and the windows do not overlap, so every input element gets
// at most one output's gradient, added to zero as PyTorch's kernel does.
torch::Tensor LeanMaxPool2d(const torch::Tensor& x, int64_t k);

// relu(max_pool2d(x, k)) in one pass, saving the same byte per output (the ReLU's blocked
// gradients marked in it) and not the ReLU's result: on CPU float with k <= 8; elsewhere
// LeanMaxPool2d then an in-place relu_. Bit-identical to PyTorch's pair, NaN and -0 included.
torch::Tensor LeanMaxPool2dRelu(const torch::Tensor& x, int64_t k);

}  // namespace shoal
