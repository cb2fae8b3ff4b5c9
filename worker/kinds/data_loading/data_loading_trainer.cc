#include <unistd.h>

#include <chrono>
#include <cmath>

#include "shared/kinds/data_loading/board.h"
#include "shared/os/process.h"
#include "worker/kinds/data_loading/data_loading.h"
#include "worker/optimizers/from_spec.h"
#include "worker/scoreboard.h"
#include "worker/segment_weights.h"

namespace shoal {

DataLoadingTrainer::DataLoadingTrainer(WorkerEnv& env, Model& model, DataView data, BatchRing* ring)
    : env_(env),
      spec_(env.spec),
      model_(model),
      data_(data),
      ring_(ring),
      slot_(env.slot),
      maker_(env.spec, data),
      recorder_(env.slot, maker_.plan().TotalBatches()) {
  if (ring_ == nullptr) own_.resize(LoaderBatchBytes(maker_.plan().batch, maker_.pixels()));
}

int DataLoadingTrainer::Run() {
  slot_->pid.store(getpid());
  slot_->accuracy_bits.store(FloatToBits(std::nanf("")));
  at::set_num_threads(int(spec_.threads()));
  model_.train();
  auto opt = MakeOptimizer(ConfigFromSpec(spec_.optimizer()), model_.parameters());
  if (!opt.ok()) return WorkerFails(slot_, 0, opt.status().message());
  opt_ = std::move(opt).value();
  if (!PassStartGate(env_.board, slot_, env_.lifetime_fd)) return kLeaderGoneExit;
  slot_->first_step_ns.store(RealtimeNs());
  slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  for (uint32_t e = 1; e <= maker_.plan().epochs; ++e) {
    EpochTotals t;
    const auto t0 = SteadyClock::now();
    const bool trained = RunEpoch(e, &t);
    t.wall_ns = ElapsedNs(t0, SteadyClock::now());
    if (!trained) {
      if (ring_ != nullptr) ring_->Close();
      return kLeaderGoneExit;
    }
    // Before the epoch record: its epochs_done, stored last, publishes both.
    if (e <= kMaxEpochRecords) data_loading::BoardOf(slot_)->load_cpu_ns[e - 1].store(load_cpu_ns_);
    load_cpu_ns_ = 0;
    recorder_.Epoch(e, t);
  }
  slot_->weights_checksum.store(ParamsChecksum(model_));
  slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kEvaluating));
  Evaluate();
  slot_->vmhwm_bytes.store(SelfVmHwm());
  slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  Arrive(&env_.board->finished);
  return 0;
}

bool DataLoadingTrainer::RunEpoch(uint32_t epoch, EpochTotals* totals) {
  const uint64_t first = uint64_t(epoch - 1) * maker_.plan().BatchesPerEpoch();
  for (uint64_t b = first; b < first + maker_.plan().BatchesPerEpoch(); ++b)
    if (!Step(b, totals)) return false;
  return true;
}

const uint8_t* DataLoadingTrainer::Fetch(uint64_t b) {
  if (ring_ != nullptr) {
    auto got = ring_->BeginRead(b, [&] { return !LeaderGone(env_.lifetime_fd); });
    return got.ok() ? got->first : nullptr;
  }
  if (LeaderGone(env_.lifetime_fd)) return nullptr;
  const uint64_t c0 = ThreadCpuNs();
  maker_.Make(b, own_.data());
  load_cpu_ns_ += ThreadCpuNs() - c0;
  return own_.data();
}

// The step reads the batch in place (from_blob: no copy) and releases its slot when done.
bool DataLoadingTrainer::Step(uint64_t b, EpochTotals* totals) {
  const auto t0 = SteadyClock::now();
  const uint8_t* bytes = Fetch(b);
  if (bytes == nullptr) return false;
  const auto* h = reinterpret_cast<const LoaderBatchHeader*>(bytes);
  const int64_t n = h->n, rows = maker_.augment().rows, cols = maker_.augment().cols;
  auto x = torch::from_blob(const_cast<float*>(BatchImages(bytes)), {n, 1, rows, cols});
  auto y = torch::from_blob(const_cast<int64_t*>(BatchLabels(bytes, uint32_t(rows * cols))), {n},
                            torch::kLong);
  const uint64_t data_ns = ElapsedNs(t0, SteadyClock::now());
  float loss = 0;
  StepTimes t = TrainStep(model_, *opt_, x, y, &loss);
  t.data_ns = data_ns;
  if (ring_ != nullptr) ring_->EndRead(b);
  recorder_.Step(t, loss, uint64_t(n), totals);
  return true;
}

// After the last epoch, on the first eval_samples test images: the loaders' augmented batches
// trained a network that generalises (or did not).
void DataLoadingTrainer::Evaluate() {
  if (spec_.eval_samples() == 0 || data_.header->n_test == 0) return;
  const auto e0 = SteadyClock::now();
  const double acc =
      shoal::Evaluate(model_, data_, spec_.eval_samples(),
                      std::max<int64_t>(maker_.plan().batch, 64), torch::kCPU, slot_);
  slot_->eval_ns.store(ElapsedNs(e0, SteadyClock::now()));
  slot_->accuracy_bits.store(FloatToBits(float(acc)));
  if (maker_.plan().epochs <= kMaxEpochRecords)
    slot_->epochs[maker_.plan().epochs - 1].accuracy_bits.store(FloatToBits(float(acc)));
}

}  // namespace shoal
