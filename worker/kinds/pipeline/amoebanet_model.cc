#include "worker/kinds/pipeline/amoebanet_model.h"

#include "worker/train_device.h"

namespace shoal {
namespace {

namespace nn = torch::nn;

// A 1x1 stride-1 conv gets dilation 2, which changes nothing it computes (one tap has no gaps)
// but keeps it on oneDNN: on one thread with a batch under 16, ATen sends such convs to its
// "slow" im2col path on the BLAS, and Debian's LibTorch has the generic (reference) BLAS, so
// there a (8, 512, 14, 14) -> 128 conv's forward and backward take 115 ms instead of 4.6 ms;
// 80% of a one-thread AmoebaNet step was that path. Dilated, ATen picks oneDNN at any thread
// count, and on two threads it is as fast as undilated or faster (measured per shape).
nn::Conv2d Conv(int64_t in, int64_t out, std::vector<int64_t> k,
                std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> pad = {0, 0}) {
  const bool one_by_one = k == std::vector<int64_t>{1, 1} && stride == std::vector<int64_t>{1, 1};
  return nn::Conv2d(nn::Conv2dOptions(in, out, k)
                        .stride(stride)
                        .padding(pad)
                        .dilation(one_by_one ? 2 : 1)
                        .bias(false));
}

// ReLU, 1x1 conv, BN.
nn::Sequential ReluConvBn(int64_t in, int64_t out) {
  return nn::Sequential(nn::ReLU(), Conv(in, out, {1, 1}), nn::BatchNorm2d(out));
}

// Halves the side: two 1x1 stride-2 convs, the second on the input shifted by one pixel.
struct FactorizedReduceImpl : nn::Module {
  FactorizedReduceImpl(int64_t in, int64_t out)
      : conv1(register_module("conv1", Conv(in, out / 2, {1, 1}, {2, 2}))),
        conv2(register_module("conv2", Conv(in, out / 2, {1, 1}, {2, 2}))),
        bn(register_module("bn", nn::BatchNorm2d(out))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(x);
    const auto shifted =
        torch::constant_pad_nd(x.index({torch::indexing::Slice(), torch::indexing::Slice(),
                                        torch::indexing::Slice(1), torch::indexing::Slice(1)}),
                               {0, 1, 0, 1});
    return bn->forward(torch::cat({conv1->forward(x), conv2->forward(shifted)}, 1));
  }
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn;
};
TORCH_MODULE(FactorizedReduce);

// One genotype operation on `c` channels: a module, or a pool done in forward (no parameters).
struct OperationImpl : nn::Module {
  OperationImpl(AmoebaOp op, int64_t c, int64_t stride) : op_(op), stride_(stride) {
    const int64_t q = c / 4;
    switch (op) {
      case AmoebaOp::kNone:
        if (stride != 1) reduce = register_module("reduce", FactorizedReduce(c, c));
        break;
      case AmoebaOp::kConv1x1:
        body = register_module(
            "body",
            nn::Sequential(nn::ReLU(), Conv(c, c, {1, 1}, {stride, stride}), nn::BatchNorm2d(c)));
        break;
      case AmoebaOp::kConv3x3:
        body = register_module(
            "body", nn::Sequential(nn::ReLU(), Conv(c, q, {1, 1}), nn::BatchNorm2d(q), nn::ReLU(),
                                   Conv(q, q, {3, 3}, {stride, stride}, {1, 1}), nn::BatchNorm2d(q),
                                   nn::ReLU(), Conv(q, c, {1, 1}), nn::BatchNorm2d(c)));
        break;
      case AmoebaOp::kConv1x7_7x1:
        body = register_module(
            "body",
            nn::Sequential(nn::ReLU(), Conv(c, q, {1, 1}), nn::BatchNorm2d(q), nn::ReLU(),
                           Conv(q, q, {1, 7}, {1, stride}, {0, 3}), nn::BatchNorm2d(q), nn::ReLU(),
                           Conv(q, q, {7, 1}, {stride, 1}, {3, 0}), nn::BatchNorm2d(q), nn::ReLU(),
                           Conv(q, c, {1, 1}), nn::BatchNorm2d(c)));
        break;
      default:
        break;  // pools
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    switch (op_) {
      case AmoebaOp::kNone:
        return reduce.is_empty() ? x : reduce->forward(x);
      case AmoebaOp::kAvgPool3x3:
      case AmoebaOp::kMaxPool3x3:  // an average pool in torchgpipe: kept
        return torch::avg_pool2d(x, 3, stride_, 1, /*ceil_mode=*/false,
                                 /*count_include_pad=*/false);
      case AmoebaOp::kMaxPool2x2:
        return torch::max_pool2d(x, 2, stride_);
      default:
        return body->forward(x);
    }
  }
  AmoebaOp op_;
  int64_t stride_;
  FactorizedReduce reduce{nullptr};
  nn::Sequential body{nullptr};
};
TORCH_MODULE(Operation);

struct StemImpl : AmoebaLayerImpl {
  explicit StemImpl(int64_t c)
      : conv(register_module("conv", Conv(3, c, {3, 3}, {2, 2}, {1, 1}))),
        bn(register_module("bn", nn::BatchNorm2d(c))) {}
  AmoebaStates forward(const AmoebaStates& in) override {
    return {bn->forward(conv->forward(torch::relu(in.at(0))))};
  }
  nn::Conv2d conv;
  nn::BatchNorm2d bn;
};

struct CellImpl : AmoebaLayerImpl {
  explicit CellImpl(const AmoebaCell& cell)
      : steps_(cell.reduction ? AmoebaReductionSteps() : AmoebaNormalSteps()),
        concat_(cell.reduction ? AmoebaReductionConcat() : AmoebaNormalConcat()) {
    reduce1 = register_module("reduce1", ReluConvBn(cell.channels_prev, cell.channels));
    if (cell.reduction_prev) {
      reduce2_half =
          register_module("reduce2", FactorizedReduce(cell.channels_prev_prev, cell.channels));
    } else if (cell.channels_prev_prev != cell.channels) {
      reduce2_conv = register_module("reduce2", ReluConvBn(cell.channels_prev_prev, cell.channels));
    }
    for (size_t i = 0; i < steps_.size(); ++i) {
      const int64_t stride = cell.reduction && steps_[i].input < 2 ? 2 : 1;
      ops.push_back(register_module("op" + std::to_string(i),
                                    Operation(steps_[i].op, cell.channels, stride)));
    }
  }
  // (s1, s2) in, or one tensor for both; (the concatenated states, s1 as the next skip) out.
  AmoebaStates forward(const AmoebaStates& in) override {
    const torch::Tensor skip = in.at(0);
    std::vector<torch::Tensor> states = {reduce1->forward(in.at(0)),
                                         Reduce2(in.size() > 1 ? in[1] : in[0])};
    for (size_t i = 0; i < ops.size(); i += 2) {
      states.push_back(ops[i]->forward(states[size_t(steps_[i].input)]) +
                       ops[i + 1]->forward(states[size_t(steps_[i + 1].input)]));
    }
    std::vector<torch::Tensor> out;
    for (int k : concat_) out.push_back(states[size_t(k)]);
    return {torch::cat(out, 1), skip};
  }
  torch::Tensor Reduce2(const torch::Tensor& x) {
    if (!reduce2_half.is_empty()) return reduce2_half->forward(x);
    if (!reduce2_conv.is_empty()) return reduce2_conv->forward(x);
    return x;
  }
  const std::vector<AmoebaStep>& steps_;
  const std::vector<int>& concat_;
  nn::Sequential reduce1{nullptr};
  FactorizedReduce reduce2_half{nullptr};  // after a reduction cell: halve the older state
  nn::Sequential reduce2_conv{nullptr};    // else a 1x1 conv when its channels differ
  std::vector<Operation> ops;
};

struct ClassifyImpl : AmoebaLayerImpl {
  ClassifyImpl(int64_t features, int64_t classes)
      : fc(register_module("fc", nn::Linear(features, classes))) {}
  AmoebaStates forward(const AmoebaStates& in) override {
    return {fc->forward(torch::avg_pool2d(in.at(0), 7).flatten(1))};
  }
  nn::Linear fc;
};

}  // namespace

AmoebaNetD::AmoebaNetD(const std::vector<AmoebaLayer>& plan, uint32_t classes, uint64_t seed,
                       size_t begin, size_t end) {
  layers.resize(plan.size());
  for (size_t i = begin; i < std::min(end, plan.size()); ++i) {
    const AmoebaLayer& l = plan[i];
    SeedCpu(seed + i);
    std::shared_ptr<AmoebaLayerImpl> m;
    if (l.name == "stem1") {
      m = std::make_shared<StemImpl>(l.channels);
    } else if (l.is_cell) {
      m = std::make_shared<CellImpl>(l.cell);
    } else {
      m = std::make_shared<ClassifyImpl>(l.channels, classes);
    }
    layers[i] = register_module(l.name, m);
  }
}

AmoebaStates AmoebaNetD::Run(size_t begin, size_t end, AmoebaStates in) {
  for (size_t i = begin; i < end; ++i) in = layers[i]->forward(in);
  return in;
}

torch::Tensor AmoebaNetD::forward(torch::Tensor x) {
  return torch::log_softmax(Run(0, layers.size(), {x}).at(0), 1);
}

StatusOr<std::shared_ptr<AmoebaNetD>> MakeAmoebaNet(uint32_t layers, uint32_t filters,
                                                    uint64_t seed) {
  ASSIGN_OR_RETURN(std::vector<AmoebaLayer> plan, PlanAmoebaNet(layers, filters, 1000));
  return std::make_shared<AmoebaNetD>(plan, 1000, seed, 0, plan.size());
}

}  // namespace shoal
