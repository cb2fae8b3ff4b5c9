#include "worker/kinds/pipeline/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

namespace shoal {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Swaps the default CPU generator's state in for the recomputation and back out after it.
class RngState {
 public:
  explicit RngState(const at::Tensor& state) : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> l(gen_.mutex());
    saved_ = gen_.get_state();
    gen_.set_state(state);
  }
  ~RngState() {
    std::lock_guard<std::mutex> l(gen_.mutex());
    gen_.set_state(saved_);
  }

 private:
  at::Generator gen_;
  at::Tensor saved_;
};

at::Tensor CurrentRngState() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> l(gen.mutex());
  return gen.get_state();
}

// Fixed arity: LibTorch 1.13's apply() sees tensors passed one by one, not a variable_list. A
// segment takes one or two tensors (`b` is the phony for one); the phony makes the node executable.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, const Segment* fn, torch::Tensor a,
                               torch::Tensor b, torch::Tensor phony) {
    ctx->saved_data["fn"] = reinterpret_cast<int64_t>(fn);
    ctx->saved_data["rng"] = CurrentRngState();
    const bool two = !b.is_same(phony);
    ctx->save_for_backward(two ? variable_list{a, b} : variable_list{a});
    torch::NoGradGuard no_grad;
    return (*fn)(two ? variable_list{a, b} : variable_list{a});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list in;
    for (const auto& t : ctx->get_saved_variables())
      in.push_back(t.detach().requires_grad_(t.requires_grad()));
    const auto* fn = reinterpret_cast<const Segment*>(ctx->saved_data["fn"].toInt());
    variable_list out;
    {
      RngState rng(ctx->saved_data["rng"].toTensor());
      torch::AutoGradMode grad(true);
      out = (*fn)(in);
    }
    variable_list outputs, output_grads;
    for (size_t i = 0; i < out.size() && i < grads.size(); ++i) {
      if (!grads[i].defined() || !out[i].requires_grad()) continue;
      outputs.push_back(out[i]);
      output_grads.push_back(grads[i]);
    }
    if (!outputs.empty()) torch::autograd::backward(outputs, output_grads);
    auto grad_of = [&](size_t i) {
      return i < in.size() && in[i].requires_grad() ? in[i].grad() : torch::Tensor();
    };
    return {torch::Tensor(), grad_of(0), grad_of(1), torch::Tensor()};  // fn, a, b, phony
  }
};

}  // namespace

variable_list Checkpoint(const Segment& fn, const variable_list& inputs) {
  TORCH_CHECK(inputs.size() == 1 || inputs.size() == 2, "Checkpoint: a segment of ", inputs.size(),
              " inputs (1 or 2)");
  const torch::Tensor phony = torch::zeros({}, torch::requires_grad());
  // One input: the phony stands in for the second (apply() cannot take an undefined tensor).
  return CheckpointFunction::apply(&fn, inputs[0], inputs.size() > 1 ? inputs[1] : phony, phony);
}

}  // namespace shoal
