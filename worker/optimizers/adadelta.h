// Adadelta for LibTorch, which (as of 1.13) ships no C++ Adadelta. Written in LibTorch's own
// optimizer pattern (options and per-parameter state as cloneable, serialisable objects) so it
// behaves like torch::optim::SGD and friends: param groups, state(), save()/load().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace shoal {

struct AdadeltaOptions : public torch::optim::OptimizerCloneableOptions<AdadeltaOptions> {
  AdadeltaOptions(double lr = 1.0);  // NOLINT: implicit like LibTorch's own *Options(lr)
  TORCH_ARG(double, lr) = 1.0;
  TORCH_ARG(double, rho) = 0.9;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const AdadeltaOptions& lhs, const AdadeltaOptions& rhs);
  double get_lr() const override;
  void set_lr(const double lr) override;
};

struct AdadeltaParamState : public torch::optim::OptimizerCloneableParamState<AdadeltaParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, square_avg);  // v: running mean of g^2
  TORCH_ARG(torch::Tensor, acc_delta);   // u: running mean of the applied update squared

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const AdadeltaParamState& lhs, const AdadeltaParamState& rhs);
};

// Matches torch.optim.Adadelta of PyTorch 1.13 (single-tensor path, maximize=False) op for op.
class Adadelta : public torch::optim::Optimizer {
 public:
  explicit Adadelta(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                    AdadeltaOptions defaults = {});
  explicit Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions defaults = {})
      : Adadelta({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void StepParam(const torch::Tensor& p, const AdadeltaOptions& options);
};

}  // namespace shoal
