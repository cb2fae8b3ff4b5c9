#include "worker/models/models.h"

namespace shoal {

MnistConvNet::MnistConvNet()
    : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 1000, 5)))),
      conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(1000, 20, 5)))),
      conv2_drop(register_module("conv2_drop", torch::nn::Dropout2d())),
      fc1(register_module("fc1", torch::nn::Linear(320, 50))),
      fc2(register_module("fc2", torch::nn::Linear(50, 10))) {}

torch::Tensor MnistConvNet::forward(torch::Tensor x) {
  x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
  x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
  x = x.view({-1, 320});
  x = torch::relu(fc1->forward(x));
  x = torch::dropout(x, /*p=*/0.5, is_training());
  x = fc2->forward(x);
  return torch::log_softmax(x, /*dim=*/1);
}

StatusOr<ModelPtr> MakeModel(const std::string& name) {
  if (name == "mnist_convnet") return ModelPtr(std::make_shared<MnistConvNet>());
  return InvalidArgument("model: '" + name + "' is not a model of this shoal-worker");
}

const std::vector<std::string>& ModelNames() {
  static const std::vector<std::string> names = {"mnist_convnet"};
  return names;
}

}  // namespace shoal
