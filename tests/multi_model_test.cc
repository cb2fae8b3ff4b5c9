// multi_model's variants compute what they claim, and the counting allocator counts.
#include "worker/kinds/multi_model/multi_model.h"

#include <gtest/gtest.h>

#include "worker/counting_allocator.h"

namespace shoal {
namespace {

// A grouped Conv1d holding n Linears' weights gives the same outputs and the same gradients.
TEST(MultiModelTest, GroupedConv1dIsNLinearsAtOnce) {
  const int64_t n = 3, b = 5;
  torch::manual_seed(3);
  auto lin = MakeMultiModelVariant("mlinear", n, b);
  auto grp = MakeMultiModelVariant("gconv1d", n, b);
  auto lp = lin.module->named_parameters();
  auto gp = grp.module->named_parameters();
  {
    torch::NoGradGuard no_grad;
    for (int64_t i = 0; i < n; ++i) {
      const auto w = lp[std::to_string(i) + ".weight"];  // [512, 256]
      const auto bias = lp[std::to_string(i) + ".bias"];
      gp["weight"].slice(0, i * 512, (i + 1) * 512).copy_(w.unsqueeze(-1));
      gp["bias"].slice(0, i * 512, (i + 1) * 512).copy_(bias);
    }
  }
  const auto x = torch::rand({n, b, 256});
  const auto y = torch::rand({n, b, 512});
  const auto xg = x.permute({1, 0, 2}).reshape({b, n * 256}).unsqueeze(-1);  // [B, n*256, 1]
  const auto out_l = lin.forward(x);
  const auto out_g = grp.forward(xg).squeeze(-1).reshape({b, n, 512}).permute({1, 0, 2});
  EXPECT_TRUE(torch::allclose(out_l, out_g, 1e-5, 1e-5));
  torch::mse_loss(out_l, y).backward();
  torch::mse_loss(out_g, y).backward();
  for (int64_t i = 0; i < n; ++i) {
    const auto gw = gp["weight"].grad().slice(0, i * 512, (i + 1) * 512).squeeze(-1);
    EXPECT_TRUE(torch::allclose(lp[std::to_string(i) + ".weight"].grad(), gw, 1e-5, 1e-6)) << i;
    const auto gb = gp["bias"].grad().slice(0, i * 512, (i + 1) * 512);
    EXPECT_TRUE(torch::allclose(lp[std::to_string(i) + ".bias"].grad(), gb, 1e-5, 1e-6)) << i;
  }
}

TEST(MultiModelTest, EveryVariantHasTheOriginalsParameterCount) {
  for (const auto& [name, n] : std::vector<std::pair<std::string, int64_t>>{
           {"linear", 1}, {"conv1d", 1}, {"mlinear", 8}, {"mconv1d", 8}, {"gconv1d", 8}}) {
    auto v = MakeMultiModelVariant(name, n, 4);
    int64_t params = 0;
    for (const auto& p : v.module->parameters()) params += p.numel();
    EXPECT_EQ(params, 131584 * n) << name;  // the original's param_cnt
    auto out = v.forward(torch::rand(v.x_shape));
    EXPECT_EQ(out.sizes().vec(), v.y_shape) << name;
  }
}

// Peak and current bytes for a known sequence of allocations.
TEST(MultiModelTest, TheCountingAllocatorsPeakIsWhatWasLiveAtOnce) {
  CountingAllocator* a = CountingAllocator::Install();
  const uint64_t base = a->current();
  a->ResetPeak();
  {
    auto t1 = torch::empty({1000}, torch::kFloat);  // 4000 bytes
    auto t2 = torch::empty({2000}, torch::kFloat);  // 8000
    EXPECT_EQ(a->current() - base, 12000u);
    t1 = torch::Tensor();
    auto t3 = torch::empty({500}, torch::kFloat);  // 2000
    EXPECT_EQ(a->current() - base, 10000u);
  }
  EXPECT_EQ(a->current(), base);
  EXPECT_EQ(a->peak() - base, 12000u);
  a->ResetPeak();
  EXPECT_EQ(a->peak(), base);
}

}  // namespace
}  // namespace shoal
