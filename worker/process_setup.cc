#include "worker/process_setup.h"

#include <malloc.h>
#include <torch/torch.h>

#include <climits>
#include <mutex>

#include "worker/kernels/shoal_kernels.h"
#include "worker/models/models.h"
#include "worker/planned_allocator.h"
#include "worker/step_cache_allocator.h"
#include "worker/train_device.h"

namespace shoal {

void ApplyAllocatorPolicy(const std::string& policy) {
  if (policy == "cache") {
    StepCacheAllocator::Install();
    return;
  }
  if (policy == "planned") {
    PlannedAllocator::Install();
    return;
  }
  if (policy != "retain") return;
  // The step's activation buffers (~150 MB each at batch 64) are above glibc's mmap threshold,
  // so by default every step maps and unmaps them: ~235k page faults a batch, half the CPU in
  // the kernel. Serving them from the heap and never trimming it keeps the pages mapped, and
  // the same sizes come back every step, so the heap does not keep growing.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_ARENA_MAX, 1);
}

void ApplyRuntimePolicies(const v1::ExperimentSpec& spec) {
  ApplyAllocatorPolicy(spec.allocator());
  if (spec.kernels() != "shoal") return;
  static const ShoalKernels* const kept = new ShoalKernels();  // for the process's life
  (void)kept;
}

void WarmConvNetOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    SeedCpu(0);
    ModelPtr scratch = MakeModel("mnist_convnet").value();
    torch::optim::SGD opt(scratch->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
    auto x = torch::randn({2, 1, 28, 28});
    auto y = torch::tensor({1, 2}, torch::kLong);
    opt.zero_grad();
    auto loss = torch::nll_loss(scratch->forward(x), y);
    if (BackwardTouchesCuda()) {  // the forkserver must stay off CUDA: the step without backward
      for (auto& p : scratch->parameters()) p.mutable_grad() = torch::zeros_like(p);
    } else {
      loss.backward();
    }
    opt.step();
  });
}

}  // namespace shoal
