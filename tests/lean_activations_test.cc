// --activations lean on the study's ConvNet: the same training, bit for bit, as PyTorch's autograd
// graph, without holding conv1's output from forward to backward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/convnet_training.h"
#include "worker/counting_allocator.h"
#include "worker/models/lean_ops.h"
#include "worker/models/models.h"
#include "worker/step_recorder.h"
#include "worker/train_device.h"

namespace shoal {
namespace {

std::vector<torch::Tensor> Train(bool lean, int steps) {
  return testing::TrainConvNet(lean, steps);
}

TEST(LeanActivationsTest, TrainsBitForBitAsPyTorchsGraph) {
  const auto pytorch = Train(false, 3), lean = Train(true, 3);
  ASSERT_EQ(pytorch.size(), lean.size());
  for (size_t i = 0; i < pytorch.size(); ++i) EXPECT_TRUE(torch::equal(pytorch[i], lean[i])) << i;
  const auto moved = Train(false, 0);  // and the steps did train: the weights moved
  EXPECT_FALSE(torch::equal(moved[0], pytorch[0]));
}

TEST(LeanActivationsTest, MaxPoolGradientEqualsPyTorchsIncludingTies) {
  auto x = torch::randint(0, 3, {2, 3, 6, 6}).to(torch::kFloat);  // many equal maxima
  auto a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
  auto g = torch::randn({2, 3, 3, 3});
  torch::max_pool2d(a, 2).backward(g);
  LeanMaxPool2d(b, 2).backward(g);
  EXPECT_TRUE(torch::equal(a.grad(), b.grad()));
  EXPECT_TRUE(torch::equal(torch::max_pool2d(x, 2), LeanMaxPool2d(x, 2)));
}

// Bit for bit (torch::equal calls NaN unequal to itself, and -0 equal to +0).
bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() &&
         torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32));
}

// Odd sizes (a row and column the floor mode leaves out), NaN, -inf, ties, -0 gradients, k = 3.
TEST(LeanActivationsTest, CpuKernelMatchesATenBitForBitOnHardInputs) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t k : {2, 3}) {
    torch::manual_seed(k);
    auto x = torch::randint(0, 4, {2, 3, 7, 9}).to(torch::kFloat);
    auto a = x.accessor<float, 4>();
    a[0][0][0][0] = nan;
    a[0][0][1][1] = nan;
    a[0][1][0][0] = -inf;
    a[1][2][2][3] = inf;
    a[1][1][0][0] = -inf;  // a whole window of -inf
    a[1][1][0][1] = -inf;
    a[1][1][1][0] = -inf;
    a[1][1][1][1] = -inf;
    auto ref = x.clone().requires_grad_(), ours = x.clone().requires_grad_();
    const auto pooled_ref = torch::max_pool2d(ref, k), pooled = LeanMaxPool2d(ours, k);
    EXPECT_TRUE(SameBits(pooled_ref, pooled)) << "k=" << k;
    auto g = torch::randn(pooled.sizes());
    g.view(-1)[0] = -0.0f;
    pooled_ref.backward(g);
    pooled.backward(g);
    EXPECT_TRUE(SameBits(ref.grad(), ours.grad())) << "k=" << k;
  }
  EXPECT_THROW(LeanMaxPool2d(torch::zeros({1, 1, 1, 5}), 2), c10::Error);
}

// The fused max-pool and ReLU against PyTorch's pair: maxima below, at and above zero, -0,
// NaN, -inf windows, gradients through blocked and passed outputs; k = 2, 3 and 9 (unfused).
TEST(LeanActivationsTest, FusedPoolReluMatchesPyTorchsPairBitForBit) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t k : {2, 3, 9}) {
    torch::manual_seed(k);
    auto x = torch::randint(-3, 3, {2, 3, 19, 21}).to(torch::kFloat);
    auto a = x.accessor<float, 4>();
    a[0][0][0][0] = nan;
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) a[0][1][i][j] = -0.0f, a[1][0][i][j] = -inf;
    auto ref = x.clone().requires_grad_(), ours = x.clone().requires_grad_();
    const auto out_ref = torch::relu(torch::max_pool2d(ref, k));
    const auto out = LeanMaxPool2dRelu(ours, k);
    EXPECT_TRUE(SameBits(out_ref, out)) << "k=" << k;
    EXPECT_GT((out_ref == 0).sum().item<int64_t>(), 0) << "k=" << k;  // some were blocked
    auto g = torch::randn(out.sizes());
    g.view(-1)[1] = -0.0f;
    out_ref.backward(g);
    out.backward(g);
    EXPECT_TRUE(SameBits(ref.grad(), ours.grad())) << "k=" << k;
  }
}

// Bytes LibTorch holds between forward and backward, counted.
uint64_t HeldAfterForward(bool lean, int64_t batch) {
  CountingAllocator* counter = CountingAllocator::Install();
  SeedCpu(3);
  MnistConvNet model(lean);
  auto x = torch::randn({batch, 1, 28, 28});
  const uint64_t before = counter->current();
  auto out = model.forward(x);
  const uint64_t held = counter->current() - before;
  out.sum().backward();
  return held;
}

TEST(LeanActivationsTest, Conv1sOutputIsNotHeldForBackward) {
  at::set_num_threads(1);
  const int64_t batch = 8;
  const uint64_t conv1_out = uint64_t(batch) * 1000 * 24 * 24 * sizeof(float);  // 18.4 MB
  const uint64_t pytorch = HeldAfterForward(false, batch), lean = HeldAfterForward(true, batch);
  EXPECT_GT(pytorch, conv1_out);
  // conv1's output (saved by PyTorch's max-pool for its shape) is no longer held, and each
  // pooled output's int64 index becomes a one-byte code; the rest is (the ReLU's result, conv2's
  // and the linear layers' inputs). The in-place ReLU saves a transient quarter of conv1's
  // output, which this does not see.
  const uint64_t indices_saved = conv1_out / 4 / sizeof(float) * (sizeof(int64_t) - 1);
  EXPECT_GE(pytorch - lean, conv1_out + indices_saved) << pytorch << " " << lean;
  EXPECT_LT(pytorch - lean, (conv1_out + indices_saved) * 11 / 10) << pytorch << " " << lean;
}

}  // namespace
}  // namespace shoal
