#include "worker/models/lean_ops.h"

namespace shoal {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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

}  // namespace

torch::Tensor LeanMaxPool2d(const torch::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 4, "LeanMaxPool2d: NCHW input expected");
  return MaxPoolKeepingIndices::apply(x.contiguous(), k);
}

}  // namespace shoal
