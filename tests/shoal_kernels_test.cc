// Shoal's CPU kernels (worker/kernels/shoal_kernels.h) against LibTorch's own, called directly
// (at::cpu::), bit for bit: ties, NaNs, infinities, rows and columns the floor mode leaves out,
// windows of 1 to 3; and through the dispatcher, training the study's ConvNet.
#include "worker/kernels/shoal_kernels.h"

#include <ATen/ops/max_pool2d_with_indices_backward_cpu_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_cpu_dispatch.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "tests/convnet_training.h"

namespace shoal {
namespace kernels_test {

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (a.scalar_type() == torch::kLong) return torch::equal(a, b);
  return torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32));
}

// Values with many ties, some NaNs, infinities and signed zeros.
torch::Tensor Awkward(std::vector<int64_t> sizes, int seed) {
  torch::manual_seed(seed);
  auto x = torch::randint(-2, 3, sizes).to(torch::kFloat);
  auto pick = torch::rand(sizes);
  const float inf = std::numeric_limits<float>::infinity();
  x.masked_fill_(pick < 0.02, std::numeric_limits<float>::quiet_NaN());
  x.masked_fill_((pick >= 0.02) & (pick < 0.04), -inf);
  x.masked_fill_((pick >= 0.04) & (pick < 0.05), inf);
  x.masked_fill_((pick >= 0.05) & (pick < 0.08), -0.0);
  return x;
}

struct Case {
  std::vector<int64_t> sizes;
  int64_t k;
};

TEST(ShoalKernelsTest, MaxPoolEqualsLibTorchsBitForBit) {
  const std::vector<Case> cases = {{{2, 3, 6, 6}, 2},  {{1, 4, 7, 9}, 2},  {{3, 2, 13, 5}, 2},
                                   {{2, 2, 9, 10}, 3}, {{1, 3, 4, 4}, 1},  {{4, 5, 24, 24}, 2},
                                   {{1, 1, 2, 2}, 2},  {{2, 1, 33, 17}, 2}};
  int seed = 0;
  for (const Case& c : cases) {
    const auto x = Awkward(c.sizes, ++seed);
    const auto [out, ind] = MaxPool2dWithIndices(x, {c.k, c.k}, {c.k, c.k}, {0, 0}, {1, 1}, false);
    const auto [ref_out, ref_ind] = at::cpu::max_pool2d_with_indices(x, {c.k, c.k}, {c.k, c.k});
    EXPECT_TRUE(SameBits(out, ref_out)) << c.sizes << " k " << c.k;
    EXPECT_TRUE(SameBits(ind, ref_ind)) << c.sizes << " k " << c.k;

    const auto g = Awkward(out.sizes().vec(), ++seed);
    const auto gin =
        MaxPool2dWithIndicesBackward(g, x, {c.k, c.k}, {c.k, c.k}, {0, 0}, {1, 1}, false, ind);
    const auto ref_gin = at::cpu::max_pool2d_with_indices_backward(g, x, {c.k, c.k}, {c.k, c.k},
                                                                   {0, 0}, {1, 1}, false, ref_ind);
    EXPECT_TRUE(SameBits(gin, ref_gin)) << c.sizes << " k " << c.k;
  }
}

TEST(ShoalKernelsTest, WhatTheFastPathDoesNotTakeIsLibTorchs) {
  const auto x = Awkward({2, 3, 9, 9}, 7);
  const uint64_t before = ShoalKernelCalls();
  struct Args {
    std::vector<int64_t> kernel, stride, padding, dilation;
    bool ceil;
  };
  const std::vector<Args> others = {{{3, 3}, {2, 2}, {0, 0}, {1, 1}, false},   // overlapping
                                    {{2, 2}, {2, 2}, {1, 1}, {1, 1}, false},   // padded
                                    {{2, 2}, {2, 2}, {0, 0}, {2, 2}, false},   // dilated
                                    {{2, 2}, {2, 2}, {0, 0}, {1, 1}, true},    // ceil mode
                                    {{2, 3}, {2, 3}, {0, 0}, {1, 1}, false}};  // not square
  for (const Args& a : others) {
    const auto [out, ind] =
        MaxPool2dWithIndices(x, a.kernel, a.stride, a.padding, a.dilation, a.ceil);
    const auto [ref_out, ref_ind] =
        at::cpu::max_pool2d_with_indices(x, a.kernel, a.stride, a.padding, a.dilation, a.ceil);
    EXPECT_TRUE(SameBits(out, ref_out) && SameBits(ind, ref_ind)) << a.kernel << a.padding;
  }
  // Unbatched (3-D), empty, non-contiguous, channels-last, double, and an index outside its
  // window (ATen's backward takes any index).
  for (const auto& y : {x[0], x.narrow(0, 0, 0), x.transpose(2, 3)}) {
    const auto [out, ind] = MaxPool2dWithIndices(y, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false);
    const auto [ref_out, ref_ind] = at::cpu::max_pool2d_with_indices(y, {2, 2}, {2, 2});
    EXPECT_TRUE(SameBits(out, ref_out) && SameBits(ind, ref_ind)) << y.sizes();
  }
  const auto cl = x.contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(SameBits(std::get<1>(MaxPool2dWithIndices(cl, {2}, {}, {0}, {1}, false)),
                       std::get<1>(at::cpu::max_pool2d_with_indices(cl, {2}))));
  const auto xd = x.to(torch::kDouble);
  EXPECT_TRUE(SameBits(std::get<1>(MaxPool2dWithIndices(xd, {2}, {}, {0}, {1}, false)),
                       std::get<1>(at::cpu::max_pool2d_with_indices(xd, {2}))));
  EXPECT_EQ(ShoalKernelCalls(), before);  // none of these took the fast path

  auto ind = std::get<1>(at::cpu::max_pool2d_with_indices(x, {2}));
  ind.index_put_({0, 0, 0, 0}, 80);  // the plane's last element: not in window (0, 0)
  const auto g = torch::randn({2, 3, 4, 4});
  EXPECT_TRUE(
      SameBits(MaxPool2dWithIndicesBackward(g, x, {2}, {2}, {0}, {1}, false, ind),
               at::cpu::max_pool2d_with_indices_backward(g, x, {2}, {2}, {0}, {1}, false, ind)));
  EXPECT_EQ(ShoalKernelCalls(), before);
}

TEST(ShoalKernelsTest, InTheDispatcherTheConvNetTrainsBitForBitAsWithLibTorchs) {
  const auto libtorch = testing::TrainConvNet(false, 2, /*seed=*/5, /*batch=*/8);
  std::vector<torch::Tensor> shoal;
  uint64_t calls = 0;
  {
    ShoalKernels kernels;
    const uint64_t before = ShoalKernelCalls();
    shoal = testing::TrainConvNet(false, 2, /*seed=*/5, /*batch=*/8);
    calls = ShoalKernelCalls() - before;
  }
  EXPECT_EQ(calls, 2u * 4u);  // two pools a step, forward and backward, two steps
  ASSERT_EQ(libtorch.size(), shoal.size());
  for (size_t i = 0; i < shoal.size(); ++i) EXPECT_TRUE(SameBits(libtorch[i], shoal[i])) << i;

  const uint64_t after = ShoalKernelCalls();  // gone with the last ShoalKernels
  torch::max_pool2d(torch::randn({1, 1, 4, 4}, torch::requires_grad()), 2);
  EXPECT_EQ(ShoalKernelCalls(), after);
}

}  // namespace kernels_test
}  // namespace shoal
