#include "worker/image/image_trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "shared/kinds/kind.h"
#include "shared/os/process.h"
#include "shared/spec/spec.h"
#include "worker/cuda_memory.h"
#include "worker/optimizers/from_spec.h"
#include "worker/optimizers/in_backward.h"
#include "worker/planned_allocator.h"
#include "worker/scoreboard.h"
#include "worker/segment_weights.h"
#include "worker/step_cache_allocator.h"

namespace shoal {
namespace {

void PrintAllocatorStats(uint32_t index) {
  auto st = StepCacheAllocator::Stats();
  std::fprintf(stderr,
               "worker %u allocator: hits %lu reshapes %lu misses %lu mapped %lu MiB peak mapped "
               "%lu MiB peak live %lu MiB\n",
               index, (unsigned long)st.hits, (unsigned long)st.reshapes, (unsigned long)st.misses,
               (unsigned long)(st.mapped_bytes >> 20), (unsigned long)(st.peak_mapped_bytes >> 20),
               (unsigned long)(st.peak_live_bytes >> 20));
}

// --allocator planned: the plan's figures, for the leader to report (nothing before the plan).
void PublishStepMemory(WorkerSlot* slot) {
  const PlannedAllocator* a = PlannedAllocator::Installed();
  if (a == nullptr) return;
  const PlannedStats st = a->Stats();
  if (!st.planned) return;
  slot->plan_arena_bytes.store(st.arena_bytes);
  slot->plan_peak_live_bytes.store(st.peak_live_bytes);
  slot->plan_replayed_steps.store(st.replayed_steps);
  slot->plan_fallback_steps.store(st.fallback_steps);
  slot->plan_replay_minflt.store(st.replay_minflt);
  slot->plan_made.store(1, std::memory_order_release);
}

}  // namespace

ImageTrainer::ImageTrainer(WorkerEnv& env, Model& model, DataView data, const TrainDevice& device,
                           const StepSync* sync)
    : env_(env),
      spec_(env.spec),
      model_(model),
      data_(data),
      device_(device),
      step_sync_(sync),
      slot_(env.slot),
      n_train_(int64_t(data.header->n_train)),
      pixels_(int64_t(ImageBytes(*data.header))),
      batch_(std::min<int64_t>(BatchOf(env.spec), n_train_)),
      recorder_(env.slot, StepsPerWorker(env.spec, uint64_t(n_train_))) {}

ImageTrainer::ImageTrainer(WorkerEnv& env, Model& model, const TensorSetHeader* tensors,
                           const TrainDevice& device, const StepSync* sync)
    : env_(env),
      spec_(env.spec),
      model_(model),
      tensors_(tensors),
      device_(device),
      step_sync_(sync),
      slot_(env.slot),
      n_train_(int64_t(tensors->n)),
      batch_(std::min<int64_t>(BatchOf(env.spec), n_train_)),
      recorder_(env.slot, StepsPerWorker(env.spec, uint64_t(n_train_))) {}

// With fewer concurrent steps than workers: a turn at each step and, on the CPU with the planned
// allocator (not data_parallel's replicas, which wait for each other inside their steps), the
// step arenas shared.
void ImageTrainer::TakeTurns() {
  gate_ = std::make_unique<StepGate>(env_.board, slot_, env_.lifetime_fd);
  if (!gate_->active()) return;
  slot_->step_gated.store(1);
  PlannedAllocator* planned = PlannedAllocator::Installed();
  if (planned == nullptr || device_.is_cuda() || step_sync_ != nullptr) return;
  if (!planned->ShareArenas()) return;  // it has stepped already: its own arena
  arenas_ = std::make_unique<SharedArenas>(env_.board, SegmentName(env_.experiment_id, "arenas"),
                                           env_.index, planned, env_.lifetime_fd);
}

StatusOr<std::unique_ptr<torch::optim::Optimizer>> ImageTrainer::MakeTrainerOptimizer() {
  const OptimizerConfig config = ConfigFromSpec(spec_.optimizer());
  if (!spec_.optimizer().in_backward()) return MakeOptimizer(config, model_.parameters());
  ASSIGN_OR_RETURN(auto in_backward, InBackwardOptimizer::Make(config, model_.parameters()));
  return std::unique_ptr<torch::optim::Optimizer>(std::move(in_backward));
}

int ImageTrainer::Run() {
  slot_->pid.store(getpid());
  slot_->accuracy_bits.store(FloatToBits(std::nanf("")));
  at::set_num_threads(static_cast<int>(spec_.threads()));
  // Its rank among every node's ranks (data_parallel across nodes): no two draw the same batches.
  device_.Seed(spec_.seed() * 7919 + RankOf(spec_, env_.index) + 1);
  model_.train();
  auto opt = MakeTrainerOptimizer();
  if (!opt.ok()) {
    return WorkerFails(slot_, env_.index, opt.status().message());
  }
  opt_ = std::move(opt).value();
  if (device_.is_cuda()) {
    if (tensors_ != nullptr)
      tensors_on_device_ = WholeTensors(*tensors_, tensors_, device_.device());
    else
      on_device_ = UploadTrainSet(data_, device_.device());
    // cuda_sync step: no wait but the loss read at the step's end.
    if (spec_.cuda_sync() == "phases") sync_ = [this] { device_.Sync(); };
    if (spec_.cuda_sync() == "events") {
      auto events = PhaseEvents::Make(device_.driver());
      if (!events.ok())
        return WorkerFails(slot_, env_.index, "cuda_sync events: " + events.status().message());
      events_ = std::move(events).value();
    }
  }
  // The pages of its libraries it read to load and set up (relocation tables, LibTorch's
  // operator registrations): no step reads them again. The first step faults back the code it
  // runs (~15 MiB), the rest stops counting in its memory (~40 MiB a spawned worker).
  DropCleanFilePages();
  TakeTurns();
  if (!PassStartGate(env_.board, slot_, env_.lifetime_fd)) return kLeaderGoneExit;
  slot_->first_step_ns.store(RealtimeNs());
  slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  if (!(spec_.has_epochs() ? RunEpochs() : RunBatches())) return kLeaderGoneExit;
  if (!WaitForPeers()) return kLeaderGoneExit;
  if (arenas_ != nullptr) arenas_->Release();  // nobody steps again
  slot_->weights_checksum.store(ParamsChecksum(model_));
  if (env_.index == 0 && spec_.eval_samples() > 0 && data_.header->n_test > 0) {
    slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kEvaluating));
    EvaluateInto(&slot_->accuracy_bits);
    const uint32_t last = spec_.epochs();
    if (spec_.has_epochs() && last <= kMaxEpochRecords)
      slot_->epochs[last - 1].accuracy_bits.store(slot_->accuracy_bits.load());
  }
  slot_->vmhwm_bytes.store(SelfVmHwm());
  // torch.cuda.max_memory_* beside NVML's figure of the process, which adds the CUDA context.
  if (device_.is_cuda()) RecordCudaMemoryPeaks(device_.device().index(), slot_);
  if (std::getenv("SHOAL_ALLOC_STATS") != nullptr && spec_.allocator() == "cache")
    PrintAllocatorStats(env_.index);
  slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  return 0;
}

// Without epochs each worker draws its own random order of the whole set, again when it runs out.
bool ImageTrainer::RunBatches() {
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
std::vector<int64_t> ImageTrainer::EpochShard(uint32_t epoch) const {
  auto gen = at::detail::createCPUGenerator(spec_.seed() * 1000003ull + epoch);
  torch::Tensor perm = torch::randperm(n_train_, gen, torch::kLong);
  const int64_t per_epoch =
      spec_.has_epoch_samples() ? std::min<int64_t>(spec_.epoch_samples(), n_train_) : n_train_;
  const int64_t shard = per_epoch / int64_t(Ranks(spec_));
  const int64_t* p = perm.data_ptr<int64_t>() + shard * int64_t(RankOf(spec_, env_.index));
  return std::vector<int64_t>(p, p + shard);
}

bool ImageTrainer::RunEpochs() {
  for (uint32_t e = 1; e <= spec_.epochs(); ++e) {
    EpochTotals t;
    const auto t0 = SteadyClock::now();
    if (!RunShard(EpochShard(e), &t)) return false;
    t.wall_ns = ElapsedNs(t0, SteadyClock::now());
    recorder_.Epoch(e, t);
    // The last epoch is evaluated after every worker has finished (Run), the others now — but
    // not with replicas in lockstep (data_parallel): the others would wait in their next
    // all-reduce, and that wait would count as communication.
    const bool evaluate = env_.index == 0 && spec_.eval_samples() > 0 && data_.header->n_test > 0 &&
                          step_sync_ == nullptr;
    if (evaluate && e < spec_.epochs() && e <= kMaxEpochRecords)
      EvaluateInto(&slot_->epochs[e - 1].accuracy_bits);
  }
  return true;
}

bool ImageTrainer::RunShard(const std::vector<int64_t>& order, EpochTotals* totals) {
  const int64_t n = static_cast<int64_t>(order.size());
  for (int64_t pos = 0; pos < n; pos += batch_) {
    if (!Step(order.data() + pos, std::min(batch_, n - pos), totals)) return false;
  }
  return true;
}

bool ImageTrainer::Step(const int64_t* idx, int64_t n, EpochTotals* totals) {
  const auto map_arenas = [this] {
    if (arenas_ != nullptr) arenas_->MapIfReady();
  };
  if (LeaderGone(env_.lifetime_fd) || !gate_->Enter(map_arenas)) return false;
  char* arena = arenas_ != nullptr ? arenas_->BeforeStep() : nullptr;
  // The step a plan is traced from: the leader reports it finely (worker/supervisor.h).
  const bool traces = PlannedAllocator::Installed() != nullptr && slot_->plan_made.load() == 0;
  if (traces) slot_->tracing_step.store(1);
  {
    // --allocator planned: one step, buffers freed within (in `arena` when shared)
    PlannedAllocator::StepScope step_memory(arena);
    const auto t0 = SteadyClock::now();
    if (events_ != nullptr) events_->Record(PhaseEvents::kData);
    torch::Tensor x, y;
    std::vector<torch::Tensor> inputs;
    if (tensors_ != nullptr && device_.is_cuda()) {
      GatherBatch(*tensors_, tensors_on_device_, idx, n, &inputs, &y);
      if (sync_) sync_();
    } else if (tensors_ != nullptr) {
      GatherBatch(*tensors_, tensors_, idx, n, &inputs, &y);
    } else if (device_.is_cuda()) {
      MakeDeviceBatch(on_device_, idx, n, &x, &y);
      if (sync_) sync_();
    } else {
      MakeBatch(data_.train_images(), data_.train_labels(), idx, n, pixels_, &x, &y,
                data_.header->channels);
    }
    const uint64_t data_ns = ElapsedNs(t0, SteadyClock::now());
    float loss = 0;
    uint64_t buffers_ns = 0;
    if (step_sync_ != nullptr && step_sync_->before_forward)
      buffers_ns = step_sync_->before_forward();
    if (tensors_ == nullptr) inputs.push_back(x);
    StepTimes t =
        TrainStep(model_, *opt_, inputs, y, &loss, sync_,
                  step_sync_ != nullptr ? step_sync_->after_backward : nullptr, events_.get());
    t.data_ns =
        events_ != nullptr ? events_->Ns(PhaseEvents::kData, PhaseEvents::kForward) : data_ns;
    t.comm_ns += buffers_ns;
    // Reading the loss waited for everything queued before it: the step is done now.
    if (device_.is_cuda() && !sync_ && events_ == nullptr) {
      t = StepTimes();
      t.unsplit_ns = ElapsedNs(t0, SteadyClock::now());
    }
    recorder_.Step(t, loss, uint64_t(n), totals);
  }
  if (arenas_ != nullptr) arenas_->AfterStep();
  gate_->Leave();
  if (gate_->active()) slot_->step_wait_ns.store(gate_->waited_ns());
  if (arenas_ != nullptr) slot_->plan_shared_arenas.store(arenas_->count());
  PublishStepMemory(slot_);
  if (traces) slot_->tracing_step.store(0);
  return true;
}

// Fingerprints are taken when every worker has finished: with sharing on, the others are still
// writing the weights. The leader kills us if a peer dies, so this cannot hang.
bool ImageTrainer::WaitForPeers() {
  env_.board->finished.fetch_add(1);
  while (env_.board->finished.load() < env_.board->workers) {
    if (LeaderGone(env_.lifetime_fd)) return false;
    slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

void ImageTrainer::EvaluateInto(std::atomic<uint32_t>* bits) {
  const auto e0 = SteadyClock::now();
  const double acc = Evaluate(model_, data_, spec_.eval_samples(), std::max<int64_t>(batch_, 64),
                              device_.device(), slot_);
  slot_->eval_ns.fetch_add(ElapsedNs(e0, SteadyClock::now()));
  bits->store(FloatToBits(static_cast<float>(acc)));
  slot_->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
}

}  // namespace shoal
