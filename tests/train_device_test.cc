// The fork-safety helpers of worker/train_device.h: SeedCpu draws the same CPU stream as
// torch::manual_seed (which a forkserver must not call: it counts CUDA devices), and the rule
// that decides whether the forkserver may run a backward pass follows LibTorch's device
// registry.
#include "worker/train_device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace shoal {
namespace {

TEST(SeedCpuTest, SameStreamAsManualSeed) {
  torch::manual_seed(1234);
  const auto expected = torch::randn({64});
  torch::randn({7});  // move the generator on
  SeedCpu(1234);
  EXPECT_TRUE(torch::equal(torch::randn({64}), expected));
  SeedCpu(1235);
  EXPECT_FALSE(torch::equal(torch::randn({64}), expected));
}

TEST(SeedCpuTest, DeviceSeedOnCpuIsSeedCpu) {
  TrainDevice::Cpu()->Seed(99);
  const auto a = torch::rand({16});
  SeedCpu(99);
  EXPECT_TRUE(torch::equal(torch::rand({16}), a));
}

TEST(BackwardTouchesCudaTest, FalseWithoutCuda) {
  // Debian's LibTorch has no CUDA: a backward pass cannot touch it, so the forkserver keeps its
  // full warm-up step. (On a GPU node, LibTorch registers the CUDA guard and the answer flips;
  // the forkserver's CUDA workers ran there: docs/gpu-node.md.)
  ASSERT_FALSE(at::hasCUDA()) << "written for a LibTorch without CUDA";
  EXPECT_FALSE(BackwardTouchesCuda());
}

}  // namespace
}  // namespace shoal
