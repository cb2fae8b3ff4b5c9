// multi_model (seed 001, benchmark-pytorch-mmodel): n independent Linear(256, 512) models trained
// as n Linears, as n Conv1d(k=1) and as one grouped Conv1d (n = 1: one Linear and one Conv1d).
// Each variant is one worker process; they run one after the other, so no variant's times or
// memory hide another's.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "worker/kind.h"

namespace shoal {

// One variant's module, its forward and its tensors' shapes, for batch B.
struct MultiModelVariant {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<int64_t> x_shape, y_shape;
};

// linear, conv1d, mlinear, mconv1d or gconv1d over n models.
MultiModelVariant MakeMultiModelVariant(const std::string& name, int64_t models, int64_t batch);

class MultiModelKind : public WorkerKind {
 public:
  void Warm() override;
  Status Prepare(LeaderEnv&) override { return Status::Ok(); }  // random data, no segments
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  std::vector<std::string> SegmentWhats() const override { return {}; }
};

}  // namespace shoal
