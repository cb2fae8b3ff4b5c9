#include "worker/kinds/multi_model/multi_model.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>

#include "shared/kinds/kind.h"
#include "shared/kinds/multi_model/board.h"
#include "shared/kinds/multi_model/variants.h"
#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "worker/counting_allocator.h"
#include "worker/optimizers/from_spec.h"
#include "worker/process_setup.h"
#include "worker/scoreboard.h"
#include "worker/step_recorder.h"
#include "worker/train_device.h"

namespace shoal {
namespace {

constexpr int64_t kIn = 256, kOut = 512;

// n modules of one kind, each applied to its own slice x[i]; the outputs stacked.
template <typename M>
MultiModelVariant Stacked(const std::string& name, int64_t n, std::vector<int64_t> x,
                          std::vector<int64_t> y, const std::function<M()>& make) {
  auto list = std::make_shared<torch::nn::Module>();
  std::vector<M> parts;
  for (int64_t i = 0; i < n; ++i) parts.push_back(list->register_module(std::to_string(i), make()));
  auto forward = [parts](const torch::Tensor& in) mutable {
    std::vector<torch::Tensor> outs;
    for (size_t i = 0; i < parts.size(); ++i) outs.push_back(parts[i]->forward(in[int64_t(i)]));
    return torch::stack(outs);
  };
  return {name, list, forward, std::move(x), std::move(y)};
}

}  // namespace

MultiModelVariant MakeMultiModelVariant(const std::string& name, int64_t n, int64_t b) {
  using torch::nn::Conv1d;
  using torch::nn::Conv1dOptions;
  using torch::nn::Linear;
  if (name == "linear") {
    Linear m(kIn, kOut);
    return {name,
            m.ptr(),
            [m](const torch::Tensor& x) mutable { return m->forward(x); },
            {b, kIn},
            {b, kOut}};
  }
  if (name == "conv1d") {
    Conv1d m(Conv1dOptions(kIn, kOut, 1));
    return {name,
            m.ptr(),
            [m](const torch::Tensor& x) mutable { return m->forward(x); },
            {b, kIn, 1},
            {b, kOut, 1}};
  }
  if (name == "mlinear")
    return Stacked<Linear>(name, n, {n, b, kIn}, {n, b, kOut}, [] { return Linear(kIn, kOut); });
  if (name == "mconv1d") {
    return Stacked<Conv1d>(name, n, {n, b, kIn, 1}, {n, b, kOut, 1},
                           [] { return Conv1d(Conv1dOptions(kIn, kOut, 1)); });
  }
  Conv1d g(Conv1dOptions(n * kIn, n * kOut, 1).groups(n));
  return {"gconv1d",
          g.ptr(),
          [g](const torch::Tensor& x) mutable { return g->forward(x); },
          {b, n * kIn, 1},
          {b, n * kOut, 1}};
}

void MultiModelKind::Warm() {
  at::set_num_threads(1);
  auto v = MakeMultiModelVariant("gconv1d", 2, 2);
  auto loss = torch::mse_loss(v.forward(torch::rand(v.x_shape)), torch::rand(v.y_shape));
  if (!BackwardTouchesCuda()) loss.backward();  // see there: the forkserver stays off CUDA
}

namespace {

// The original's loop: data, zero grad, forward, loss + backward, step; each phase timed.
bool TrainVariant(MultiModelVariant& v, torch::optim::Optimizer& opt, const WorkerEnv& env) {
  WorkerSlot* slot = env.slot;
  const uint64_t per_step =
      uint64_t(env.spec.batch_size()) * env.spec.multi_model().models();  // B per model
  LossWindows losses(slot, env.spec.multi_model().iterations());
  for (uint64_t it = 0; it < env.spec.multi_model().iterations(); ++it) {
    if ((it & 63) == 0 && LeaderGone(env.lifetime_fd)) return false;
    const auto t0 = SteadyClock::now();
    torch::Tensor x = torch::rand(v.x_shape), y = torch::rand(v.y_shape);
    const auto t1 = SteadyClock::now();
    opt.zero_grad();
    const auto t2 = SteadyClock::now();
    torch::Tensor out = v.forward(x);
    const auto t3 = SteadyClock::now();
    torch::Tensor loss = torch::mse_loss(out, y);
    loss.backward();
    const auto t4 = SteadyClock::now();
    opt.step();
    const auto t5 = SteadyClock::now();
    slot->data_ns.fetch_add(ElapsedNs(t0, t1), std::memory_order_relaxed);
    multi_model::BoardOf(slot)->zero_grad_ns.fetch_add(ElapsedNs(t1, t2),
                                                       std::memory_order_relaxed);
    slot->forward_ns.fetch_add(ElapsedNs(t2, t3), std::memory_order_relaxed);
    slot->backward_ns.fetch_add(ElapsedNs(t3, t4), std::memory_order_relaxed);
    slot->optimizer_ns.fetch_add(ElapsedNs(t4, t5), std::memory_order_relaxed);
    const float l = loss.item<float>();
    losses.Add(l);
    slot->samples.fetch_add(per_step, std::memory_order_relaxed);
    MarkStepEnded(slot);
    slot->steps.fetch_add(1, std::memory_order_release);
  }
  return true;
}

// Waits until the worker before this one has exited, its memory given back, not only finished
// training: its tear-down overlapping this one's first steps made the run's peak PSS sum a
// 10-30 ms moment that 50 ms samples caught or missed (0.87-1.04x an independent 5 ms reader's
// highest read). A pidfd becomes readable once the process has exited (its pages freed before
// it is a zombie). False: the leader went away meanwhile.
bool WaitForPreviousExit(const WorkerEnv& env) {
  if (env.index == 0) return true;
  const pid_t pid = BoardSlot(env.board, env.index - 1)->pid.load();
  const int fd = pid > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)) : -1;
  if (fd < 0) return true;  // gone already (ESRCH), or a kernel without pidfds: nothing to wait
  // Reaped and its pid taken by another process before the pidfd: that one is no sibling.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const auto st = ParseProcStat(std::string(std::istreambuf_iterator<char>(stat), {}));
  if (!st.ok() || st->ppid != ::getppid()) {
    ::close(fd);
    return true;
  }
  bool exited = false;
  while (!exited) {
    env.slot->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    if (LeaderGone(env.lifetime_fd)) break;
    pollfd p{fd, POLLIN, 0};
    exited = ::poll(&p, 1, 100) > 0;
  }
  ::close(fd);
  return exited;
}

}  // namespace

int MultiModelKind::RunWorker(WorkerEnv& env, bool) {
  const auto& spec = env.spec;
  WorkerSlot* slot = env.slot;
  ApplyRuntimePolicies(spec);
  CountingAllocator* counter = CountingAllocator::Install();
  slot->pid.store(getpid());
  at::set_num_threads(int(spec.threads()));
  if (!PassStartGate(env.board, slot, env.lifetime_fd)) return kLeaderGoneExit;
  // Its start-up ends here; what follows is its turn coming (start_ms measures the former).
  slot->ready_ns.store(RealtimeNs());
  // One variant at a time: worker i starts when the i before it have finished.
  if (!WaitForCount(&env.board->finished, env.index, slot, env.lifetime_fd)) return kLeaderGoneExit;
  if (!WaitForPreviousExit(env)) return kLeaderGoneExit;
  const std::string name = MultiModelVariants(spec.multi_model().models()).at(env.index);
  SeedCpu(spec.seed());
  counter->ResetPeak();
  const auto t0 = SteadyClock::now();
  slot->first_step_ns.store(RealtimeNs());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  MultiModelVariant v = MakeMultiModelVariant(name, spec.multi_model().models(), spec.batch_size());
  auto opt = MakeOptimizer(ConfigFromSpec(spec.optimizer()), v.module->parameters());
  if (!opt.ok()) {
    return WorkerFails(env.slot, env.index, opt.status().message());
  }
  multi_model::BoardOf(slot)->define_ns.store(ElapsedNs(t0, SteadyClock::now()));
  uint64_t params = 0;
  for (const auto& p : v.module->parameters()) params += uint64_t(p.numel());
  slot->parameters.store(params);
  if (!TrainVariant(v, **opt, env)) return kLeaderGoneExit;
  slot->alloc_peak_bytes.store(counter->peak());
  slot->vmhwm_bytes.store(SelfVmHwm());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  Arrive(&env.board->finished);
  return 0;
}

}  // namespace shoal
