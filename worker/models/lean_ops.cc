#include "worker/models/lean_ops.h"

#include <cstdint>

#include "worker/kernels/max_pool_codes.h"

namespace shoal {
namespace {

using kernels::PoolShape;
using kernels::Unpool;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

PoolShape ShapeOf(const torch::IntArrayRef sizes, int64_t k) {
  return kernels::ShapeOf(sizes[0] * sizes[1], sizes[2], sizes[3], k);
}

// CPU float: saves one byte per output (which element of its window was the maximum). With
// `relu` (k <= 8) the ReLU after the pool runs in the same pass and its blocked gradients are
// marked in that byte: the pair saved the ReLU's result and ran a pass over the pooled tensor
// each way; conv2 keeps that tensor anyway (its input), so the memory is the same and two passes
// over 37 MB a step are gone. The backward is the same either way.
struct MaxPoolKeepingCodes : torch::autograd::Function<MaxPoolKeepingCodes> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t k, bool relu) {
    const PoolShape s = ShapeOf(x.sizes(), k);
    torch::Tensor out = torch::empty({x.size(0), x.size(1), s.oh, s.ow}, x.options());
    torch::Tensor code = torch::empty(out.sizes(), x.options().dtype(torch::kUInt8));
    kernels::Pool(s, x.data_ptr<float>(), out.data_ptr<float>(), code.data_ptr<uint8_t>(), relu);
    ctx->save_for_backward({code});
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["k"] = k;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor code = ctx->get_saved_variables()[0];
    const torch::Tensor grad = grads[0].contiguous();
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const PoolShape s = ShapeOf(sizes, ctx->saved_data["k"].toInt());
    torch::Tensor gin = torch::empty(sizes, grad.options());
    Unpool(s, grad.data_ptr<float>(), code.data_ptr<uint8_t>(), gin.data_ptr<float>());
    return {gin, torch::Tensor(), torch::Tensor()};
  }
};

// Any other device or type: ATen's kernel, saving its int64 indices (not the input).
struct MaxPoolKeepingIndices : torch::autograd::Function<MaxPoolKeepingIndices> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t k) {
    auto [out, indices] = at::max_pool2d_with_indices(x, {k, k}, {k, k});
    ctx->save_for_backward({indices});
    ctx->saved_data["sizes"] = x.sizes().vec();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor indices = ctx->get_saved_variables()[0];
    const torch::Tensor grad = grads[0].contiguous();
    torch::Tensor grad_in = torch::zeros(ctx->saved_data["sizes"].toIntVector(), grad.options());
    // Indices count within each (sample, channel) plane: scatter over the flattened planes.
    grad_in.flatten(2).scatter_add_(2, indices.flatten(2), grad.flatten(2));
    return {grad_in, torch::Tensor()};
  }
};

void CheckPoolable(const torch::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 4, "LeanMaxPool2d: NCHW input expected");
  TORCH_CHECK(k >= 1 && k * k <= 256, "LeanMaxPool2d: kernel ", k, " out of 1..16");
  TORCH_CHECK(x.size(2) >= k && x.size(3) >= k, "LeanMaxPool2d: input ", x.sizes(),
              " smaller than the ", k, "x", k, " window");
}

}  // namespace

torch::Tensor LeanMaxPool2dRelu(const torch::Tensor& x, int64_t k) {
  CheckPoolable(x, k);
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat && k <= 8)
    return MaxPoolKeepingCodes::apply(x.contiguous(), k, /*relu=*/true);
  torch::Tensor pooled = LeanMaxPool2d(x, k);
  return torch::relu_(pooled);
}

torch::Tensor LeanMaxPool2d(const torch::Tensor& x, int64_t k) {
  CheckPoolable(x, k);
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat)
    return MaxPoolKeepingCodes::apply(x.contiguous(), k, /*relu=*/false);
  return MaxPoolKeepingIndices::apply(x.contiguous(), k);
}

}  // namespace shoal
