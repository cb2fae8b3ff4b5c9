#include "worker/kinds/data_loading/data_loading.h"

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "shared/kinds/data_loading/board.h"
#include "shared/kinds/data_loading/ring.h"
#include "shared/kinds/kind.h"
#include "shared/os/process.h"
#include "worker/process_setup.h"
#include "worker/scoreboard.h"
#include "worker/train_device.h"

namespace shoal {

EpochPlan DataLoadingPlan(const v1::ExperimentSpec& spec, uint64_t n_train) {
  EpochPlan p;
  p.epochs = spec.epochs();
  p.samples =
      spec.has_epoch_samples() ? std::min<uint64_t>(spec.epoch_samples(), n_train) : n_train;
  p.batch = spec.batch_size();
  return p;
}

BatchMaker::BatchMaker(const v1::ExperimentSpec& spec, const DataView& data)
    : data_(data), seed_(spec.seed()), plan_(DataLoadingPlan(spec, data.header->n_train)) {
  augment_.rows = data.header->rows;
  augment_.cols = data.header->cols;
}

BatchSlice BatchMaker::Make(uint64_t b, uint8_t* out) {
  const BatchSlice s = plan_.Slice(b);
  if (s.epoch != order_epoch_) {
    order_ = EpochOrder(seed_, s.epoch, data_.header->n_train);
    order_epoch_ = s.epoch;
  }
  MakeLoaderBatch(data_.train_images(), data_.train_labels(), order_, s, b, seed_, augment_, out);
  return s;
}

namespace {

// Adds one batch's CPU time to its epoch's record; the loader's epochs_done follows the latest
// epoch it has worked on.
void RecordLoad(WorkerSlot* slot, uint32_t epoch, uint64_t cpu_ns) {
  if (epoch <= kMaxEpochRecords)
    data_loading::BoardOf(slot)->load_cpu_ns[epoch - 1].fetch_add(cpu_ns);
  if (slot->epochs_done.load() < epoch) slot->epochs_done.store(epoch, std::memory_order_release);
  MarkStepEnded(slot);
}

}  // namespace

int RunLoader(WorkerEnv& env, const DataView& data, BatchRing ring) {
  WorkerSlot* slot = env.slot;
  slot->pid.store(getpid());
  at::set_num_threads(1);  // as DataLoader's workers do
  if (!PassStartGate(env.board, slot, env.lifetime_fd)) return kLeaderGoneExit;
  slot->first_step_ns.store(RealtimeNs());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  BatchMaker maker(env.spec, data);
  const BatchRing::KeepWaiting keep = [&] { return !LeaderGone(env.lifetime_fd); };
  for (uint64_t b = ring.Claim(); b < maker.plan().TotalBatches(); b = ring.Claim()) {
    StatusOr<uint8_t*> out = ring.BeginWrite(b, keep);
    if (!out.ok()) return LeaderGone(env.lifetime_fd) ? kLeaderGoneExit : 0;  // else: closed
    const uint64_t c0 = ThreadCpuNs();
    const BatchSlice s = maker.Make(b, *out);
    ring.EndWrite(b, uint32_t(LoaderBatchBytes(s.n, maker.pixels())));
    RecordLoad(slot, s.epoch, ThreadCpuNs() - c0);
  }
  slot->vmhwm_bytes.store(SelfVmHwm());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  Arrive(&env.board->finished);
  return 0;
}

void DataLoadingKind::Warm() {
  at::set_num_threads(1);
  WarmConvNetOnce();
}

Status DataLoadingKind::Prepare(LeaderEnv& env) {
  const auto& spec = env.spec;
  ASSIGN_OR_RETURN(data_, LoadDataSegment(spec, SegmentName(env.experiment_id, "data")));
  env.segment_created("data", data_.size());
  const auto* dh = static_cast<const DataHeader*>(data_.data());
  RETURN_IF_ERROR(CheckTrainingSet(spec, dh->n_train));
  if (spec.data_loading().loaders() == 0) return Status::Ok();
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
  if (env.spec.data_loading().loaders() == 0) return Status::Ok();
  ASSIGN_OR_RETURN(ring_, ShmSegment::Open(SegmentName(env.experiment_id, "ring"), true));
  return BatchRing::Attach(ring_.data(), ring_.size()).status();
}

int DataLoadingKind::RunWorker(WorkerEnv& env, bool forked_from_leader) {
  ApplyRuntimePolicies(env.spec);
  at::set_num_threads(1);  // until the trainer sets the spec's count
  if (!forked_from_leader) {
    if (Status st = Attach(env); !st.ok()) {
      return WorkerFails(env.slot, env.index, st.message());
    }
  }
  const DataView data{static_cast<const DataHeader*>(data_.data()),
                      static_cast<const uint8_t*>(data_.data())};
  std::optional<BatchRing> ring;
  if (env.spec.data_loading().loaders() > 0) {
    auto attached = BatchRing::Attach(ring_.data(), ring_.size());
    if (!attached.ok()) {
      return WorkerFails(env.slot, env.index, attached.status().message());
    }
    ring = *attached;
  }
  if (env.index > 0) return RunLoader(env, data, *ring);
  SeedCpu(env.spec.seed());
  auto model = MakeModel(env.spec.model(), env.spec.activations());
  if (!model.ok()) return WorkerFails(env.slot, env.index, model.status().message());
  DataLoadingTrainer trainer(env, **model, data, ring ? &*ring : nullptr);
  return trainer.Run();
}

}  // namespace shoal
