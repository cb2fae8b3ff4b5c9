#include "worker/kinds/data_loading.h"

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "shared/kind_rules.h"
#include "shared/process.h"
#include "worker/scoreboard.h"

namespace shoal {

EpochPlan DataLoadingPlan(const v1::ExperimentSpec& spec, uint64_t n_train) {
  EpochPlan p;
  p.epochs = spec.epochs();
  p.samples =
      spec.has_epoch_samples() ? std::min<uint64_t>(spec.epoch_samples(), n_train) : n_train;
  p.batch = spec.batch_size();
  return p;
}

namespace {

AugmentOptions AugmentFor(const DataHeader& h) {
  AugmentOptions o;
  o.rows = h.rows;
  o.cols = h.cols;
  return o;
}

// Adds one batch's CPU time to its epoch's record; the loader's epochs_done follows the latest
// epoch it has worked on.
void RecordLoad(WorkerSlot* slot, uint32_t epoch, uint64_t cpu_ns) {
  if (epoch <= kMaxEpochRecords) slot->epochs[epoch - 1].load_cpu_ns.fetch_add(cpu_ns);
  if (slot->epochs_done.load() < epoch) slot->epochs_done.store(epoch, std::memory_order_release);
  slot->last_step_ns.store(RealtimeNs(), std::memory_order_relaxed);
}

}  // namespace

int RunLoader(WorkerEnv& env, const DataView& data, BatchRing ring) {
  WorkerSlot* slot = env.slot;
  slot->pid.store(getpid());
  at::set_num_threads(1);  // as DataLoader's workers do
  Arrive(&env.board->at_gate);
  if (!WaitForCount(&env.board->at_gate, env.board->workers, slot, env.lifetime_fd))
    return kLeaderGoneExit;
  slot->first_step_ns.store(RealtimeNs());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  const EpochPlan plan = DataLoadingPlan(env.spec, data.header->n_train);
  const AugmentOptions o = AugmentFor(*data.header);
  const BatchRing::KeepWaiting keep = [&] { return !LeaderGone(env.lifetime_fd); };
  std::vector<uint32_t> order;
  uint32_t order_epoch = 0;
  for (uint64_t b = ring.Claim(); b < plan.TotalBatches(); b = ring.Claim()) {
    const BatchSlice s = plan.Slice(b);
    StatusOr<uint8_t*> out = ring.BeginWrite(b, keep);
    if (!out.ok()) return LeaderGone(env.lifetime_fd) ? kLeaderGoneExit : 0;  // else: closed
    const uint64_t c0 = ThreadCpuNs();
    if (s.epoch != order_epoch) {
      order = EpochOrder(env.spec.seed(), s.epoch, data.header->n_train);
      order_epoch = s.epoch;
    }
    MakeLoaderBatch(data.train_images(), data.train_labels(), order, s, b, env.spec.seed(), o,
                    *out);
    ring.EndWrite(b, uint32_t(LoaderBatchBytes(s.n, o.rows * o.cols)));
    RecordLoad(slot, s.epoch, ThreadCpuNs() - c0);
  }
  slot->vmhwm_bytes.store(SelfVmHwm());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  Arrive(&env.board->finished);
  return 0;
}

void DataLoadingKind::Warm() {
  at::set_num_threads(1);
  torch::manual_seed(0);
  ModelPtr scratch = MakeModel("mnist_convnet").value();
  torch::optim::SGD opt(scratch->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  float loss = 0;
  TrainStep(*scratch, opt, torch::randn({2, 1, 28, 28}), torch::tensor({1, 2}, torch::kLong),
            &loss);
}

Status DataLoadingKind::Prepare(LeaderEnv& env) {
  const auto& spec = env.spec;
  ASSIGN_OR_RETURN(data_, LoadDataSegment(spec, SegmentName(env.experiment_id, "data")));
  env.segment_created("data", data_.size());
  const auto* dh = static_cast<const DataHeader*>(data_.data());
  if (dh->n_train == 0) return InvalidArgument("dataset: it has no training images");
  if (spec.loaders() == 0) return Status::Ok();
  const uint64_t slot_bytes = LoaderBatchBytes(spec.batch_size(), dh->rows * dh->cols);
  const uint32_t slots = DataLoadingRingSlots(spec);
  ASSIGN_OR_RETURN(ring_, ShmSegment::Create(SegmentName(env.experiment_id, "ring"),
                                             BatchRing::Bytes(slots, slot_bytes)));
  BatchRing::Create(ring_.data(), slots, slot_bytes);
  env.segment_created("ring", ring_.size());
  return Status::Ok();
}

Status DataLoadingKind::Attach(const WorkerEnv& env) {
  ASSIGN_OR_RETURN(data_, ShmSegment::Open(SegmentName(env.experiment_id, "data"), false));
  RETURN_IF_ERROR(ValidateData(*static_cast<const DataHeader*>(data_.data()), data_.size()));
  if (env.spec.loaders() == 0) return Status::Ok();
  ASSIGN_OR_RETURN(ring_, ShmSegment::Open(SegmentName(env.experiment_id, "ring"), true));
  return BatchRing::Attach(ring_.data(), ring_.size()).status();
}

int DataLoadingKind::RunWorker(WorkerEnv& env, bool forked_from_leader) {
  ApplyAllocatorPolicy(env.spec.allocator());
  at::set_num_threads(1);  // until the trainer sets the spec's count
  if (!forked_from_leader) {
    if (Status st = Attach(env); !st.ok()) {
      std::fprintf(stderr, "worker %u: %s\n", env.index, st.message().c_str());
      return 1;
    }
  }
  const DataView data{static_cast<const DataHeader*>(data_.data()),
                      static_cast<const uint8_t*>(data_.data())};
  std::optional<BatchRing> ring;
  if (env.spec.loaders() > 0) {
    auto attached = BatchRing::Attach(ring_.data(), ring_.size());
    if (!attached.ok()) {
      std::fprintf(stderr, "worker %u: %s\n", env.index, attached.status().message().c_str());
      return 1;
    }
    ring = *attached;
  }
  if (env.index > 0) return RunLoader(env, data, *ring);
  torch::manual_seed(env.spec.seed());
  auto model = MakeModel(env.spec.model());
  if (!model.ok()) {
    std::fprintf(stderr, "worker 0: %s\n", model.status().message().c_str());
    return 1;
  }
  DataLoadingTrainer trainer(env, **model, data, ring ? &*ring : nullptr);
  return trainer.Run();
}

}  // namespace shoal
