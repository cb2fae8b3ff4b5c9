// Networks a kind can train, by name. A model is a torch::nn::Module with one forward; adding one
// is a class here and a line in MakeModel.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

struct Model : torch::nn::Module {
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // The step's loss on a batch: the nll of forward's log-probabilities for every built-in model;
  // a model file's own rule (worker/models/scripted_model.h).
  virtual torch::Tensor Loss(const std::vector<torch::Tensor>& inputs,
                             const torch::Tensor& target) {
    return torch::nll_loss(forward(inputs[0]), target);
  }
};
using ModelPtr = std::shared_ptr<Model>;

// The network of the published Hogwild study (DESIGN.md), layer for layer.
struct MnistConvNet : Model {
  explicit MnistConvNet(bool lean = false);  // lean: --activations lean (worker/models/lean_ops.h)
  torch::Tensor forward(torch::Tensor x) override;
  torch::Tensor PoolRelu(const torch::Tensor& x) const;

  bool lean_;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Dropout2d conv2_drop{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// The CIFAR ResNet-18 of seed 002 (kuangliu/pytorch-cifar): a 3x3 stem without max-pooling, four
// stages of two basic blocks (64, 128, 256, 512 channels), 4x4 average pooling, Linear(512, 10);
// 11,173,962 parameters. Log-probabilities out, like every model here (trained with nll_loss).
struct ResNet18Cifar : Model {
  ResNet18Cifar();
  torch::Tensor forward(torch::Tensor x) override;

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layers{nullptr};
  torch::nn::Linear fc{nullptr};
};

// A new model with freshly initialised weights (torch's RNG decides them). activations: "pytorch"
// (what PyTorch's autograd saves) or "lean" (mnist_convnet only: less saved, the same numbers).
StatusOr<ModelPtr> MakeModel(const std::string& name, const std::string& activations = "pytorch");
const std::vector<std::string>& ModelNames();

}  // namespace shoal
