#include "worker/kinds/hogwild_trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <thread>

#include "shared/process.h"
#include "shared/spec.h"
#include "worker/optimizers/from_spec.h"
#include "worker/scoreboard.h"
#include "worker/step_cache_allocator.h"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t Ns(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

void PrintAllocatorStats(uint32_t index) {
  auto st = StepCacheAllocator::Stats();
  std::fprintf(stderr,
               "worker %u allocator: hits %lu reshapes %lu misses %lu mapped %lu MiB peak mapped "
               "%lu MiB peak live %lu MiB\n",
               index, (unsigned long)st.hits, (unsigned long)st.reshapes, (unsigned long)st.misses,
               (unsigned long)(st.mapped_bytes >> 20), (unsigned long)(st.peak_mapped_bytes >> 20),
               (unsigned long)(st.peak_live_bytes >> 20));
}

}  // namespace

HogwildTrainer::HogwildTrainer(WorkerEnv& env, Model& model, DataView data)
    : env_(env), spec_(env.spec), model_(model), data_(data), slot_(env.slot) {
  n_train_ = static_cast<int64_t>(data_.header->n_train);
  pixels_ = int64_t(data_.header->rows) * data_.header->cols;
  batch_ = std::min<int64_t>(spec_.batch_size(), n_train_);
  total_steps_ = StepsPerWorker(spec_, uint64_t(n_train_));
  loss_k_ = std::clamp<uint64_t>(total_steps_ / 4, 1, 10);  // batches behind first/tail loss
  curve_every_ = std::max<uint64_t>(1, (total_steps_ + kCurvePoints - 1) / kCurvePoints);
}

int HogwildTrainer::Run() {
  slot_->pid.store(getpid());
  slot_->accuracy_bits.store(FloatToBits(std::nanf("")));
  at::set_num_threads(static_cast<int>(spec_.threads()));
  torch::manual_seed(spec_.seed() * 7919 + env_.index + 1);
  model_.train();
  auto opt = MakeOptimizer(ConfigFromSpec(spec_.optimizer()), model_.parameters());
  if (!opt.ok()) {
    std::fprintf(stderr, "worker %u: %s\n", env_.index, opt.status().message().c_str());
    return 1;
  }
  opt_ = std::move(opt).value();
  if (!WaitAtGate()) return kLeaderGoneExit;
  slot_->first_step_ns.store(RealtimeNs());
  slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  if (!(spec_.has_epochs() ? RunEpochs() : RunBatches())) return kLeaderGoneExit;
  slot_->tail_loss_bits.store(FloatToBits(float(tail_sum_ / double(loss_k_))));
  if (!WaitForPeers()) return kLeaderGoneExit;
  slot_->weights_checksum.store(ParamsChecksum(model_));
  if (env_.index == 0 && spec_.eval_samples() > 0 && data_.header->n_test > 0) {
    EvaluateInto(&slot_->accuracy_bits);
    const uint32_t last = spec_.epochs();
    if (spec_.has_epochs() && last <= kMaxEpochRecords)
      slot_->epochs[last - 1].accuracy_bits.store(slot_->accuracy_bits.load());
  }
  slot_->vmhwm_bytes.store(SelfVmHwm());
  if (std::getenv("SHOAL_ALLOC_STATS") != nullptr && spec_.allocator() == "cache")
    PrintAllocatorStats(env_.index);
  slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  return 0;
}

// Nobody trains until everyone is set up: workers still starting are not starved of CPU by ones
// already training, and the training window is the same for all. A futex on the shared counter:
// the last one in wakes everyone at once.
bool HogwildTrainer::WaitAtGate() {
  Arrive(&env_.board->at_gate);
  return WaitForCount(&env_.board->at_gate, env_.board->workers, slot_, env_.lifetime_fd);
}

// Without epochs each worker draws its own random order of the whole set, again when it runs out.
bool HogwildTrainer::RunBatches() {
  torch::Tensor perm = torch::randperm(n_train_, torch::kLong);
  int64_t pos = 0;
  EpochTotals unused;
  for (uint64_t s = 0; s < spec_.batches(); ++s) {
    if (pos + batch_ > n_train_) {
      perm = torch::randperm(n_train_, torch::kLong);
      pos = 0;
    }
    if (!Step(perm.data_ptr<int64_t>() + pos, batch_, &unused)) return false;
    pos += batch_;
  }
  return true;
}

// Epoch e's order is one permutation every worker draws alike (seeded by the spec's seed and e);
// worker i takes the i-th of W equal shards of its first epoch_samples, as DistributedSampler does.
std::vector<int64_t> HogwildTrainer::EpochShard(uint32_t epoch) const {
  auto gen = at::detail::createCPUGenerator(spec_.seed() * 1000003ull + epoch);
  torch::Tensor perm = torch::randperm(n_train_, gen, torch::kLong);
  const int64_t per_epoch =
      spec_.has_epoch_samples() ? std::min<int64_t>(spec_.epoch_samples(), n_train_) : n_train_;
  const int64_t shard = per_epoch / int64_t(spec_.workers());
  const int64_t* p = perm.data_ptr<int64_t>() + shard * int64_t(env_.index);
  return std::vector<int64_t>(p, p + shard);
}

bool HogwildTrainer::RunEpochs() {
  for (uint32_t e = 1; e <= spec_.epochs(); ++e) {
    EpochTotals t;
    const auto t0 = Clock::now();
    if (!RunShard(EpochShard(e), &t)) return false;
    t.wall_ns = Ns(t0, Clock::now());
    PublishEpoch(e, t);
    // The last epoch is evaluated after every worker has finished (Run), the others now.
    const bool evaluate = env_.index == 0 && spec_.eval_samples() > 0 && data_.header->n_test > 0;
    if (evaluate && e < spec_.epochs() && e <= kMaxEpochRecords)
      EvaluateInto(&slot_->epochs[e - 1].accuracy_bits);
  }
  return true;
}

bool HogwildTrainer::RunShard(const std::vector<int64_t>& order, EpochTotals* totals) {
  const int64_t n = static_cast<int64_t>(order.size());
  for (int64_t pos = 0; pos < n; pos += batch_) {
    if (!Step(order.data() + pos, std::min(batch_, n - pos), totals)) return false;
  }
  return true;
}

bool HogwildTrainer::Step(const int64_t* idx, int64_t n, EpochTotals* totals) {
  if (LeaderGone(env_.lifetime_fd)) return false;
  const auto t0 = Clock::now();
  torch::Tensor x, y;
  MakeBatch(data_.train_images(), data_.train_labels(), idx, n, pixels_, &x, &y);
  const auto t1 = Clock::now();
  auto loss = torch::nll_loss(model_.forward(x), y);
  const auto t2 = Clock::now();
  opt_->zero_grad();
  loss.backward();
  const auto t3 = Clock::now();
  opt_->step();
  const auto t4 = Clock::now();
  const float l = loss.item<float>();
  train_ns_ += Ns(t0, t4);
  totals->data_ns += Ns(t0, t1);
  totals->steps += 1;
  totals->samples += uint64_t(n);
  totals->loss_sum += l;
  slot_->data_ns.fetch_add(Ns(t0, t1), std::memory_order_relaxed);
  slot_->forward_ns.fetch_add(Ns(t1, t2), std::memory_order_relaxed);
  slot_->backward_ns.fetch_add(Ns(t2, t3), std::memory_order_relaxed);
  slot_->optimizer_ns.fetch_add(Ns(t3, t4), std::memory_order_relaxed);
  RecordLoss(l);
  slot_->samples.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  slot_->last_step_ns.store(RealtimeNs(), std::memory_order_relaxed);
  slot_->steps.fetch_add(1, std::memory_order_release);
  slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
  return true;
}

// Last, first-k and tail-k losses, and one curve point per curve_every_ steps.
void HogwildTrainer::RecordLoss(float l) {
  slot_->last_loss_bits.store(FloatToBits(l), std::memory_order_relaxed);
  if (step_ < loss_k_) first_sum_ += l;
  if (step_ + 1 == loss_k_) slot_->first_loss_bits.store(FloatToBits(float(first_sum_ / loss_k_)));
  if (step_ + loss_k_ >= total_steps_) tail_sum_ += l;
  ++step_;
  curve_sum_ += l;
  ++curve_n_;
  if (curve_n_ == curve_every_ || step_ == total_steps_) {
    const uint32_t k = slot_->curve_points.load();
    if (k < kCurvePoints) {
      slot_->curve[k].step.store(step_);
      slot_->curve[k].t_ns.store(train_ns_);
      slot_->curve[k].loss_bits.store(FloatToBits(float(curve_sum_ / double(curve_n_))));
      slot_->curve_points.store(k + 1, std::memory_order_release);
    }
    curve_sum_ = 0;
    curve_n_ = 0;
  }
}

void HogwildTrainer::PublishEpoch(uint32_t epoch, const EpochTotals& t) {
  if (epoch <= kMaxEpochRecords) {
    EpochRecord& r = slot_->epochs[epoch - 1];
    r.wall_ns.store(t.wall_ns);
    r.data_ns.store(t.data_ns);
    r.steps.store(t.steps);
    r.samples.store(t.samples);
    r.loss_sum_bits.store(DoubleToBits(t.loss_sum));
  }
  slot_->epochs_done.store(epoch, std::memory_order_release);
}

// Fingerprints are taken when every worker has finished: with sharing on, the others are still
// writing the weights. The leader kills us if a peer dies, so this cannot hang.
bool HogwildTrainer::WaitForPeers() {
  env_.board->finished.fetch_add(1);
  while (env_.board->finished.load() < env_.board->workers) {
    if (LeaderGone(env_.lifetime_fd)) return false;
    slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

void HogwildTrainer::EvaluateInto(std::atomic<uint32_t>* bits) {
  const auto e0 = Clock::now();
  const double acc = Evaluate(model_, data_, spec_.eval_samples(), std::max<int64_t>(batch_, 64));
  slot_->eval_ns.fetch_add(Ns(e0, Clock::now()));
  bits->store(FloatToBits(static_cast<float>(acc)));
  slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
}

}  // namespace shoal
