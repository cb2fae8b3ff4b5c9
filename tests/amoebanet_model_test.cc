// AmoebaNet-D in LibTorch against its plan (seed 004), and activation checkpointing: the same
// gradients as without, and less memory held between forward and backward.
#include "worker/kinds/pipeline/amoebanet_model.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <sstream>

#include "worker/counting_allocator.h"
#include "worker/kinds/pipeline/checkpoint.h"

namespace shoal {
namespace {

uint64_t Numel(torch::nn::Module& m) {
  uint64_t n = 0;
  for (const auto& p : m.parameters()) n += uint64_t(p.numel());
  return n;
}

TEST(AmoebaNetModelTest, ItsParametersAreThePlans) {
  for (auto [layers, filters] : {std::pair{6u, 32u}, std::pair{9u, 40u}}) {
    auto plan = PlanAmoebaNet(layers, filters, 1000);
    ASSERT_TRUE(plan.ok());
    auto model = MakeAmoebaNet(layers, filters);
    ASSERT_TRUE(model.ok());
    EXPECT_EQ(Numel(**model), AmoebaNetParams(*plan)) << layers << ", " << filters;
    ASSERT_EQ((*model)->size(), plan->size());
    for (size_t i = 0; i < plan->size(); ++i)
      EXPECT_EQ(Numel(*(*model)->layers[i]), (*plan)[i].params) << (*plan)[i].name;
  }
}

TEST(AmoebaNetModelTest, ImagesOf224GiveLogProbabilitiesOfATousandClasses) {
  torch::manual_seed(1);
  auto model = MakeAmoebaNet(6, 32);
  ASSERT_TRUE(model.ok());
  const auto x = torch::rand({2, 3, 224, 224});
  // Between layers: one tensor after the stem, two (output, skip) after each cell.
  auto states = (*model)->Run(0, 1, {x});
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].sizes(), (std::vector<int64_t>{2, 8, 112, 112}));
  states = (*model)->Run(1, 2, states);
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0].sizes(), (std::vector<int64_t>{2, 48, 56, 56}));  // 16 x 3 (concat)
  const auto y = (*model)->forward(x);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 1000}));
  EXPECT_TRUE(torch::allclose(y.exp().sum(1), torch::ones({2}), 1e-4, 1e-4));
}

// One thread and a batch under 16 is where ATen sends 1x1 convolutions to its slow im2col path
// on the BLAS (the generic one in Debian's LibTorch: 25x slower); the model must keep them on
// oneDNN. The profiler's trace names every ATen op the step ran.
TEST(AmoebaNetModelTest, AOneThreadStepNeverTakesTheSlowConvolutionPath) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  torch::manual_seed(3);
  auto model = MakeAmoebaNet(6, 32).value();
  const auto x = torch::rand({2, 3, 224, 224});
  std::ostringstream trace;
  {
    torch::autograd::profiler::RecordProfile profile(trace);
    model->forward(x).sum().backward();
  }
  at::set_num_threads(threads);
  EXPECT_NE(trace.str().find("mkldnn_convolution"), std::string::npos);  // the trace has ops
  EXPECT_EQ(trace.str().find("slow_conv2d"), std::string::npos);
}

// Layers 1..4 of a small AmoebaNet on a batch, with and without checkpointing.
struct Pass {
  std::vector<torch::Tensor> grads;
  uint64_t held = 0;  // allocated after forward, above before it
};

Pass ForwardBackward(bool checkpoint) {
  torch::manual_seed(7);
  auto model = MakeAmoebaNet(6, 32).value();
  const auto x = torch::rand({4, 3, 224, 224});
  auto* counter = CountingAllocator::Install();
  const uint64_t before = counter->current();
  Segment seg = [&](const torch::autograd::variable_list& in) { return model->Run(0, 4, in); };
  auto out = checkpoint ? Checkpoint(seg, {x}) : seg({x});
  Pass r;
  r.held = counter->current() - before;
  (out[0].sum() + out[1].sum()).backward();
  for (const auto& p : model->parameters())
    if (p.grad().defined()) r.grads.push_back(p.grad().clone());
  return r;
}

TEST(AmoebaNetModelTest, CheckpointingGivesTheSameGradientsAndHoldsLess) {
  const Pass plain = ForwardBackward(false), checked = ForwardBackward(true);
  ASSERT_FALSE(plain.grads.empty());
  ASSERT_EQ(checked.grads.size(), plain.grads.size());  // every parameter got its gradient
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_TRUE(torch::allclose(checked.grads[i], plain.grads[i], 1e-4, 1e-5)) << i;
  // Only the segment's outputs are held between forward and backward.
  EXPECT_LT(checked.held * 4, plain.held) << checked.held << " vs " << plain.held;
}

}  // namespace
}  // namespace shoal
