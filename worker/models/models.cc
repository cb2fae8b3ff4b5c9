#include "worker/models/models.h"

#include "worker/models/lean_ops.h"

namespace shoal {

MnistConvNet::MnistConvNet(bool lean)
    : lean_(lean),
      conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 1000, 5)))),
      conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(1000, 20, 5)))),
      conv2_drop(register_module("conv2_drop", torch::nn::Dropout2d())),
      fc1(register_module("fc1", torch::nn::Linear(320, 50))),
      fc2(register_module("fc2", torch::nn::Linear(50, 10))) {}

// relu(max_pool2d(x, 2)); lean: pool and ReLU in one pass that keeps one byte per output (not
// x, conv1's 147 MB output at batch 64, nor int64 indices, nor the ReLU's result). The same
// numbers.
torch::Tensor MnistConvNet::PoolRelu(const torch::Tensor& x) const {
  if (!lean_) return torch::relu(torch::max_pool2d(x, 2));
  return LeanMaxPool2dRelu(x, 2);
}

torch::Tensor MnistConvNet::forward(torch::Tensor x) {
  x = PoolRelu(conv1->forward(x));
  x = PoolRelu(conv2_drop->forward(conv2->forward(x)));
  x = x.view({-1, 320});
  x = torch::relu(fc1->forward(x));
  x = torch::dropout(x, /*p=*/0.5, is_training());
  x = fc2->forward(x);
  return torch::log_softmax(x, /*dim=*/1);
}

namespace {

torch::nn::Conv2dOptions Conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false);
}

// conv3x3-bn-relu-conv3x3-bn, plus the input (through a 1x1 conv and bn where the shape changes).
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", torch::nn::Conv2d(Conv(in, out, 3, stride)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module("conv2", torch::nn::Conv2d(Conv(out, out, 3, 1)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut = register_module("shortcut",
                                 torch::nn::Sequential(torch::nn::Conv2d(Conv(in, out, 1, stride)),
                                                       torch::nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    return torch::relu(out + (shortcut.is_empty() ? x : shortcut->forward(x)));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

}  // namespace

ResNet18Cifar::ResNet18Cifar()
    : conv1(register_module("conv1", torch::nn::Conv2d(Conv(3, 64, 3, 1)))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(64))) {
  torch::nn::Sequential stages;
  int64_t in = 64;
  for (int64_t out : {64, 128, 256, 512}) {
    stages->push_back(BasicBlock(in, out, out == 64 ? 1 : 2));
    stages->push_back(BasicBlock(out, out, 1));
    in = out;
  }
  layers = register_module("layers", stages);
  fc = register_module("fc", torch::nn::Linear(512, 10));
}

torch::Tensor ResNet18Cifar::forward(torch::Tensor x) {
  x = torch::relu(bn1->forward(conv1->forward(x)));
  x = torch::avg_pool2d(layers->forward(x), 4).flatten(1);
  return torch::log_softmax(fc->forward(x), /*dim=*/1);
}

StatusOr<ModelPtr> MakeModel(const std::string& name, const std::string& activations) {
  const bool lean = activations == "lean";
  if (name == "mnist_convnet") return ModelPtr(std::make_shared<MnistConvNet>(lean));
  if (lean) return InvalidArgument("activations: lean is written for mnist_convnet only");
  if (name == "resnet18_cifar") return ModelPtr(std::make_shared<ResNet18Cifar>());
  return InvalidArgument("model: '" + name + "' is not a model of this shoal-worker");
}

const std::vector<std::string>& ModelNames() {
  static const std::vector<std::string> names = {"mnist_convnet", "resnet18_cifar"};
  return names;
}

}  // namespace shoal
