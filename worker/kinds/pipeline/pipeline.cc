#include "worker/kinds/pipeline/pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <optional>

#include "shared/ipc/batch_ring.h"
#include "shared/kinds/pipeline/board.h"
#include "shared/kinds/pipeline/pipeline.h"
#include "shared/os/process.h"
#include "worker/counting_allocator.h"
#include "worker/cuda_memory.h"
#include "worker/kinds/pipeline/pipeline_stage.h"
#include "worker/kinds/pipeline/ring_link.h"
#include "worker/optimizers/from_spec.h"
#include "worker/process_setup.h"
#include "worker/scoreboard.h"
#include "worker/step_recorder.h"
#include "worker/train_device.h"

namespace shoal {
namespace {

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

// `losses` is the last stage's: it alone sees the loss and the samples leaving the pipeline.
void Record(WorkerSlot* slot, const StageStep& t, uint64_t data_ns, uint64_t wall_ns,
            LossWindows* losses, uint64_t batch) {
  pipeline::BoardOf(slot)->step_wall_ns.fetch_add(wall_ns, std::memory_order_relaxed);
  slot->data_ns.fetch_add(data_ns, std::memory_order_relaxed);
  slot->forward_ns.fetch_add(t.forward_ns, std::memory_order_relaxed);
  slot->backward_ns.fetch_add(t.backward_ns, std::memory_order_relaxed);
  slot->optimizer_ns.fetch_add(t.optimizer_ns, std::memory_order_relaxed);
  slot->comm_ns.fetch_add(t.wait_ns, std::memory_order_relaxed);
  if (losses != nullptr) {
    losses->Add(float(t.loss));
    slot->samples.fetch_add(batch, std::memory_order_relaxed);
  }
  MarkStepEnded(slot);
  slot->steps.fetch_add(1, std::memory_order_release);
}

// The stage's peak allocations of this step: LibTorch's CUDA allocator's on a GPU, the counting
// allocator's (CPU) otherwise.
void RecordPeaks(WorkerSlot* slot, const CountingAllocator* counter, const TrainDevice& dev) {
  slot->alloc_peak_bytes.store(std::max(slot->alloc_peak_bytes.load(), counter->peak()));
  if (dev.is_cuda()) RecordCudaMemoryPeaks(dev.device().index(), slot);
}

int Train(WorkerEnv& env, const PipelineLayout& layout, RingLink* link, const TrainDevice& dev) {
  const auto& spec = env.spec;
  WorkerSlot* slot = env.slot;
  const auto [begin, end] = StageLayers(layout.balance, env.index);
  // Installed first, so the weights count: the seed's peak includes them (model memory).
  CountingAllocator* counter = CountingAllocator::Install();
  AmoebaNetD model(layout.plan, kPipelineClasses, spec.seed(), begin, end);
  model.to(dev.device());  // built on the CPU from the seed, so every device starts alike
  uint64_t params = 0;
  for (const auto& p : model.parameters()) params += uint64_t(p.numel());
  slot->parameters.store(params);
  auto opt = MakeOptimizer(ConfigFromSpec(spec.optimizer()), model.parameters());
  if (!opt.ok()) return WorkerFails(slot, env.index, opt.status().message());
  StageConfig cfg{begin,
                  end,
                  spec.pipeline().stages(),
                  env.index,
                  spec.pipeline().chunks(),
                  spec.pipeline().checkpoint(),
                  [&dev] { dev.Sync(); }};
  PipelineStage stage(&model, opt->get(), cfg, link);
  if (Status st = link->ExportDeviceSlots(); !st.ok())
    return WorkerFails(slot, env.index, st.message());
  if (!PassStartGate(env.board, slot, env.lifetime_fd)) return kLeaderGoneExit;
  slot->first_step_ns.store(RealtimeNs());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  const bool first = env.index == 0, last = env.index + 1 == spec.pipeline().stages();
  LossWindows losses(slot, spec.batches());
  for (uint64_t step = 0; step < spec.batches(); ++step) {
    counter->ResetPeak();
    if (dev.is_cuda()) ResetCudaMemoryPeaks(dev.device().index());
    const auto t0 = SteadyClock::now();
    // Made on the CPU (the same numbers on every device), then moved.
    const torch::Tensor images = first ? Images(spec, step).to(dev.device()) : torch::Tensor();
    const torch::Tensor labels = last ? Labels(spec, step).to(dev.device()) : torch::Tensor();
    dev.Sync();
    const uint64_t data_ns = ElapsedNs(t0, SteadyClock::now());
    auto times = stage.Step(step, images, labels);
    const uint64_t wall_ns = ElapsedNs(t0, SteadyClock::now());
    if (!times.ok()) {
      if (LeaderGone(env.lifetime_fd)) return kLeaderGoneExit;
      return WorkerFails(slot, env.index, times.status().message());
    }
    RecordPeaks(slot, counter, dev);
    Record(slot, *times, data_ns, wall_ns, last ? &losses : nullptr, spec.batch_size());
  }
  slot->vmhwm_bytes.store(SelfVmHwm());
  slot->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  return 0;
}

// After the last step: on CUDA a stage's slot buffers are mapped by its neighbours, so each
// stage closes its mappings, says it is done, and frees its own buffers (the link's destructor)
// only once every stage has said so.
int EndStage(WorkerEnv& env, RingLink* link, const TrainDevice& dev) {
  link->CloseViews();
  Arrive(&env.board->finished);
  if (dev.is_cuda() &&
      !WaitForCount(&env.board->finished, env.spec.pipeline().stages(), env.slot, env.lifetime_fd))
    return kLeaderGoneExit;
  return 0;
}

}  // namespace

Status PipelineKind::Prepare(LeaderEnv& env) {
  ASSIGN_OR_RETURN(PipelineLayout layout, PlanPipeline(env.spec));
  if (layout.total_bytes == 0) return Status::Ok();  // one stage: nothing crosses
  // On CUDA a slot's data is in a device buffer and only its headers are written here: the
  // rest of its pages are never touched, and admission does not count them (pipeline_rules).
  const ShmReserve reserve = env.spec.device() == "cuda" ? ShmReserve::kSparse : ShmReserve::kAll;
  ASSIGN_OR_RETURN(rings_, ShmSegment::Create(SegmentName(env.experiment_id, "rings"),
                                              layout.total_bytes, reserve));
  for (const auto& r : layout.rings)
    BatchRing::Create(static_cast<uint8_t*>(rings_.data()) + r.offset, r.slots, r.slot_bytes);
  env.segment_created("rings", rings_.size());
  return Status::Ok();
}

int PipelineKind::RunWorker(WorkerEnv& env, bool forked_from_leader) {
  env.slot->pid.store(getpid());
  ApplyRuntimePolicies(env.spec);
  at::set_num_threads(int(env.spec.threads()));
  auto layout = PlanPipeline(env.spec);
  if (!layout.ok()) return WorkerFails(env.slot, env.index, layout.status().message());
  auto dev = TrainDevice::ForSpec(env.spec, env.index);
  if (!dev.ok()) return WorkerFails(env.slot, env.index, dev.status().message());
  if (!forked_from_leader && layout->total_bytes > 0) {
    auto seg = ShmSegment::Open(SegmentName(env.experiment_id, "rings"), true);
    if (!seg.ok()) return WorkerFails(env.slot, env.index, seg.status().message());
    rings_ = std::move(seg).value();
  }
  auto lanes = StageLanes(rings_.data(), *layout, env.index);
  if (!lanes.ok()) return WorkerFails(env.slot, env.index, lanes.status().message());
  const TrainDevice* d = dev->get();
  RingLink link(
      std::move(lanes).value(),
      LinkDevice{d->driver(), d->device(), d->device().index(), [d] { d->Sync(); }, getpid()},
      [&] { return !LeaderGone(env.lifetime_fd); });
  // A stage that fails frees its slot buffers at once (the link goes): a neighbour still copying
  // from one may then fail too, but the supervisor reports the first exit, this one.
  if (int rc = Train(env, *layout, &link, **dev); rc != 0) return rc;
  return EndStage(env, &link, **dev);
}

}  // namespace shoal
