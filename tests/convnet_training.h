// The study's ConvNet trained a few SGD steps on seeded random batches, for tests that compare two
// ways of computing the same training bit for bit (lean activations, Shoal's kernels).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "worker/models/models.h"
#include "worker/train_device.h"

namespace shoal::testing {

// Its weights after `steps` steps of batch `batch` on one thread (dropout seeded alike).
inline std::vector<torch::Tensor> TrainConvNet(bool lean, int steps, uint64_t seed = 3,
                                               int64_t batch = 16) {
  at::set_num_threads(1);
  SeedCpu(seed);
  MnistConvNet model(lean);
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  for (int i = 0; i < steps; ++i) {
    auto x = torch::randn({batch, 1, 28, 28});
    auto y = torch::randint(0, 10, {batch}, torch::kLong);
    float loss = 0;
    TrainStep(model, opt, x, y, &loss, nullptr, nullptr);
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace shoal::testing
