// GradAverager against a real ProcessGroupGloo: two ranks in two threads of this process, meeting
// in an in-memory c10d HashStore. The averaged gradients must be the mean of what each rank's
// backward made, on both ranks, whatever the bucketing.
#include "worker/kinds/data_parallel/grad_averager.h"

#include <gtest/gtest.h>

#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "shared/kinds/data_parallel/board.h"

namespace shoal {
namespace {

torch::nn::Sequential Net() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
}

torch::Tensor Input(int rank) { return torch::arange(8, torch::kFloat).view({2, 4}) * (rank + 1); }

// One rank's own gradients, with no averaging.
std::vector<torch::Tensor> LocalGrads(int rank) {
  auto net = Net();
  net->forward(Input(rank)).pow(2).sum().backward();
  std::vector<torch::Tensor> g;
  for (const auto& p : net->parameters()) g.push_back(p.grad().clone());
  return g;
}

struct RankOut {
  std::vector<torch::Tensor> grads;
  size_t buckets = 0;
  uint64_t bytes = 0;
  uint64_t blocked_ns = 0;
  std::vector<torch::Tensor> params_after_broadcast;
  WorkerSlot slot{};
};

// `net` is built before the threads start: torch's default generator is one for the process.
void RunRank(int rank, c10::intrusive_ptr<c10d::Store> store, uint64_t first_cap, uint64_t cap,
             torch::nn::Sequential net, RankOut* out) {
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(20));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, opts);
  if (rank == 1) {  // a replica that starts different: the broadcast must fix it
    torch::NoGradGuard ng;
    for (auto& p : net->parameters()) p.add_(1.0);
  }
  GradAverager avg(pg, *net, &out->slot, first_cap, cap);
  avg.BroadcastParameters();
  for (const auto& p : net->parameters()) out->params_after_broadcast.push_back(p.detach().clone());
  for (int step = 0; step < 2; ++step) {  // twice: the second reuses every bucket
    for (auto& p : net->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
    net->forward(Input(rank)).pow(2).sum().backward();
    out->blocked_ns = avg.AfterBackward();
  }
  for (const auto& p : net->parameters()) out->grads.push_back(p.grad().clone());
  out->buckets = avg.buckets();
  out->bytes = avg.bytes_per_step();
}

void ExpectAveraged(uint64_t first_cap, uint64_t cap, size_t want_buckets) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  RankOut out[2];
  std::thread t0(RunRank, 0, store, first_cap, cap, Net(), &out[0]);
  std::thread t1(RunRank, 1, store, first_cap, cap, Net(), &out[1]);
  t0.join();
  t1.join();
  const auto g0 = LocalGrads(0), g1 = LocalGrads(1);
  ASSERT_EQ(out[0].grads.size(), g0.size());
  for (size_t k = 0; k < g0.size(); ++k) {
    const torch::Tensor mean = (g0[k] + g1[k]) / 2;
    EXPECT_TRUE(torch::allclose(out[0].grads[k], mean)) << "parameter " << k;
    EXPECT_TRUE(torch::equal(out[0].grads[k], out[1].grads[k])) << "parameter " << k;
    EXPECT_TRUE(torch::equal(out[0].params_after_broadcast[k], out[1].params_after_broadcast[k]));
  }
  const uint64_t bytes = (4 * 3 + 3 + 3 * 2 + 2) * sizeof(float);
  for (const auto& o : out) {
    EXPECT_EQ(o.buckets, want_buckets);
    EXPECT_EQ(o.bytes, bytes);
    EXPECT_EQ(KindArea<data_parallel::Board>(o.slot)->allreduce_bytes.load(),
              2 * bytes);  // two steps
    EXPECT_EQ(KindArea<data_parallel::Board>(o.slot)->buckets.load(), want_buckets);
    EXPECT_EQ(o.slot.parameters.load(), bytes / sizeof(float));
    EXPECT_GT(KindArea<data_parallel::Board>(o.slot)->allreduce_busy_ns.load(), 0u);
  }
}

// A layer backward never reaches gets a zero gradient on every rank, and the others still average.
struct PartlyUsed : torch::nn::Module {
  PartlyUsed()
      : used(register_module("used", torch::nn::Linear(4, 2))),
        unused(register_module("unused", torch::nn::Linear(4, 2))) {}
  torch::nn::Linear used, unused;
};

TEST(GradAveragerTest, AnUnusedParameterGetsAZeroGradientAndTheRestAverage) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  torch::manual_seed(3);
  std::vector<std::shared_ptr<PartlyUsed>> nets = {std::make_shared<PartlyUsed>(),
                                                   std::make_shared<PartlyUsed>()};
  std::vector<torch::Tensor> used_grad(2), unused_grad(2);
  auto rank = [&](int r) {
    auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(20));
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, 2, opts);
    GradAverager avg(pg, *nets[r], nullptr, 16, 16);  // a bucket per parameter
    avg.BroadcastParameters();
    nets[r]->used->forward(Input(r)).sum().backward();
    avg.AfterBackward();
    used_grad[r] = nets[r]->used->weight.grad().clone();
    unused_grad[r] = nets[r]->unused->weight.grad().clone();
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  // d(sum(W x + b))/dW = the batch's x summed: rank 0's and rank 1's (twice as large), averaged.
  const torch::Tensor want = Input(0).sum(0).expand({2, 4}) * 1.5;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::allclose(used_grad[r], want)) << used_grad[r];
    EXPECT_TRUE(torch::equal(unused_grad[r], torch::zeros({2, 4})));
  }
}

TEST(GradAveragerTest, OneBucketAveragesEveryGradient) { ExpectAveraged(1 << 20, 1 << 20, 1); }

TEST(GradAveragerTest, ManySmallBucketsGoOutInOrderAndAverageAlike) {
  // 8, 24, 12, 48 bytes (in reverse: Linear(3,2) bias, weight, Linear(4,3) bias, weight): caps of
  // 16 then 32 bytes give a bucket each.
  ExpectAveraged(16, 32, 4);
}

}  // namespace
}  // namespace shoal
