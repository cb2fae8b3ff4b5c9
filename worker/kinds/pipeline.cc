#include "worker/kinds/pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <optional>

#include "shared/batch_ring.h"
#include "shared/pipeline.h"
#include "shared/process.h"
#include "worker/counting_allocator.h"
#include "worker/optimizers/from_spec.h"
#include "worker/pipeline_stage.h"
#include "worker/scoreboard.h"
#include "worker/step_recorder.h"
#include "worker/training.h"

namespace shoal {
namespace {

// The rings on either side of a stage: the previous boundary's (read forward, write backward) and
// the next one's (write forward, read backward).
class RingLink : public StageLink {
 public:
  RingLink(std::optional<BatchRing> from_prev, std::optional<BatchRing> to_prev,
           std::optional<BatchRing> to_next, std::optional<BatchRing> from_next,
           BatchRing::KeepWaiting keep)
      : from_prev_(from_prev),
        to_prev_(to_prev),
        to_next_(to_next),
        from_next_(from_next),
        keep_(std::move(keep)) {}
  Status SendForward(uint64_t msg, const AmoebaStates& s) override {
    return Send(*to_next_, msg, s);
  }
  Status SendBackward(uint64_t msg, const AmoebaStates& g) override {
    return Send(*to_prev_, msg, g);
  }
  StatusOr<AmoebaStates> ReceiveForward(uint64_t msg) override { return Receive(*from_prev_, msg); }
  StatusOr<AmoebaStates> ReceiveBackward(uint64_t msg) override {
    return Receive(*from_next_, msg);
  }

 private:
  Status Send(BatchRing& ring, uint64_t msg, const AmoebaStates& s) {
    ASSIGN_OR_RETURN(uint8_t * buf, ring.BeginWrite(msg, keep_));
    ASSIGN_OR_RETURN(uint64_t n, EncodeStates(s, buf, ring.slot_bytes()));
    ring.EndWrite(msg, uint32_t(n));
    return Status::Ok();
  }
  StatusOr<AmoebaStates> Receive(BatchRing& ring, uint64_t msg) {
    ASSIGN_OR_RETURN(auto in, ring.BeginRead(msg, keep_));
    auto states = DecodeStates(in.first, in.second);
    ring.EndRead(msg);
    return states;
  }
  std::optional<BatchRing> from_prev_, to_prev_, to_next_, from_next_;
  BatchRing::KeepWaiting keep_;
};

StatusOr<std::optional<BatchRing>> RingAt(const ShmSegment& seg, const PipelineLayout& layout,
                                          int index) {
  if (index < 0 || size_t(index) >= layout.rings.size()) return std::optional<BatchRing>();
  const PipelineRing& r = layout.rings[size_t(index)];
  ASSIGN_OR_RETURN(BatchRing ring,
                   BatchRing::Attach(static_cast<uint8_t*>(seg.data()) + r.offset, r.bytes));
  return std::optional<BatchRing>(ring);
}

// Step `step`'s mini-batch, the same on every stage that needs it: random images (the seed's
// torch.rand input) and random labels of its 1000 classes.
torch::Tensor Images(const v1::ExperimentSpec& s, uint64_t step) {
  auto gen = at::detail::createCPUGenerator(s.seed() * 1000003 + step);
  return torch::rand({s.batch_size(), 3, kPipelineSide, kPipelineSide}, gen);
}
torch::Tensor Labels(const v1::ExperimentSpec& s, uint64_t step) {
  auto gen = at::detail::createCPUGenerator(s.seed() * 1000003 + step + (1ull << 40));
  return torch::randint(0, kPipelineClasses, {s.batch_size()}, gen, torch::kLong);
}

void Record(WorkerSlot* slot, const StageStep& t, uint64_t data_ns, bool last, uint64_t step,
            uint64_t batch) {
  slot->data_ns.fetch_add(data_ns, std::memory_order_relaxed);
  slot->forward_ns.fetch_add(t.forward_ns, std::memory_order_relaxed);
  slot->backward_ns.fetch_add(t.backward_ns, std::memory_order_relaxed);
  slot->optimizer_ns.fetch_add(t.optimizer_ns, std::memory_order_relaxed);
  slot->comm_ns.fetch_add(t.wait_ns, std::memory_order_relaxed);
  if (last) {  // the loss, and the samples that finished the pipeline
    const float l = float(t.loss);
    if (step == 0) slot->first_loss_bits.store(FloatToBits(l));
    slot->last_loss_bits.store(FloatToBits(l), std::memory_order_relaxed);
    slot->tail_loss_bits.store(FloatToBits(l), std::memory_order_relaxed);
    slot->samples.fetch_add(batch, std::memory_order_relaxed);
  }
  slot->last_step_ns.store(RealtimeNs(), std::memory_order_relaxed);
  slot->steps.fetch_add(1, std::memory_order_release);
}

int Train(WorkerEnv& env, const PipelineLayout& layout, StageLink* link) {
  const auto& spec = env.spec;
  WorkerSlot* slot = env.slot;
  const auto [begin, end] = StageLayers(layout.balance, env.index);
  // Installed first, so the weights count: the seed's peak includes them (model memory).
  CountingAllocator* counter = CountingAllocator::Install();
  AmoebaNetD model(layout.plan, kPipelineClasses, spec.seed(), begin, end);
  uint64_t params = 0;
  for (const auto& p : model.parameters()) params += uint64_t(p.numel());
  slot->parameters.store(params);
  auto opt = MakeOptimizer(ConfigFromSpec(spec.optimizer()), model.parameters());
  if (!opt.ok()) return WorkerFails(slot, env.index, opt.status().message());
  StageConfig cfg{begin, end, spec.stages(), env.index, spec.chunks(), spec.checkpoint()};
  PipelineStage stage(&model, opt->get(), cfg, link);
  if (!PassStartGate(env.board, slot, env.lifetime_fd)) return kLeaderGoneExit;
  slot->first_step_ns.store(RealtimeNs());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  const bool first = env.index == 0, last = env.index + 1 == spec.stages();
  for (uint64_t step = 0; step < spec.batches(); ++step) {
    counter->ResetPeak();
    const auto t0 = SteadyClock::now();
    const torch::Tensor images = first ? Images(spec, step) : torch::Tensor();
    const torch::Tensor labels = last ? Labels(spec, step) : torch::Tensor();
    const uint64_t data_ns = ElapsedNs(t0, SteadyClock::now());
    auto times = stage.Step(step, images, labels);
    if (!times.ok()) {
      if (LeaderGone(env.lifetime_fd)) return kLeaderGoneExit;
      return WorkerFails(slot, env.index, times.status().message());
    }
    slot->alloc_peak_bytes.store(std::max(slot->alloc_peak_bytes.load(), counter->peak()));
    Record(slot, *times, data_ns, last, step, spec.batch_size());
  }
  slot->vmhwm_bytes.store(SelfVmHwm());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  Arrive(&env.board->finished);
  return 0;
}

}  // namespace

Status PipelineKind::Prepare(LeaderEnv& env) {
  ASSIGN_OR_RETURN(PipelineLayout layout, PlanPipeline(env.spec));
  if (layout.total_bytes == 0) return Status::Ok();  // one stage: nothing crosses
  ASSIGN_OR_RETURN(rings_,
                   ShmSegment::Create(SegmentName(env.experiment_id, "rings"), layout.total_bytes));
  for (const auto& r : layout.rings)
    BatchRing::Create(static_cast<uint8_t*>(rings_.data()) + r.offset, r.slots, r.slot_bytes);
  env.segment_created("rings", rings_.size());
  return Status::Ok();
}

int PipelineKind::RunWorker(WorkerEnv& env, bool forked_from_leader) {
  env.slot->pid.store(getpid());
  ApplyAllocatorPolicy(env.spec.allocator());
  at::set_num_threads(int(env.spec.threads()));
  auto layout = PlanPipeline(env.spec);
  if (!layout.ok()) return WorkerFails(env.slot, env.index, layout.status().message());
  if (!forked_from_leader && layout->total_bytes > 0) {
    auto seg = ShmSegment::Open(SegmentName(env.experiment_id, "rings"), true);
    if (!seg.ok()) return WorkerFails(env.slot, env.index, seg.status().message());
    rings_ = std::move(seg).value();
  }
  const int b = int(env.index);  // boundary b - 1 before this stage, b after it
  auto from_prev = RingAt(rings_, *layout, 2 * (b - 1)),
       to_prev = RingAt(rings_, *layout, 2 * (b - 1) + 1);
  auto to_next = RingAt(rings_, *layout, 2 * b), from_next = RingAt(rings_, *layout, 2 * b + 1);
  for (const auto* r : {&from_prev, &to_prev, &to_next, &from_next})
    if (!r->ok()) return WorkerFails(env.slot, env.index, r->status().message());
  RingLink link(*from_prev, *to_prev, *to_next, *from_next,
                [&] { return !LeaderGone(env.lifetime_fd); });
  return Train(env, *layout, &link);
}

}  // namespace shoal
