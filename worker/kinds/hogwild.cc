#include "worker/kinds/hogwild.h"

#include <cstring>

#include "shared/spec.h"
#include "worker/kinds/hogwild_trainer.h"
#include "worker/training.h"

namespace shoal {

void HogwildKind::Warm() {
  at::set_num_threads(1);
  torch::manual_seed(0);
  prototype_ = MakeModel("mnist_convnet").value();
  WarmConvNetOnce();  // one tiny step on a throwaway copy
}

Status HogwildKind::Prepare(LeaderEnv& env) {
  const auto& spec = env.spec;
  ASSIGN_OR_RETURN(data_, LoadDataSegment(spec, SegmentName(env.experiment_id, "data")));
  env.segment_created("data", data_.size());
  const auto* dh = static_cast<const DataHeader*>(data_.data());
  if (dh->n_train == 0) return InvalidArgument("dataset: it has no training images");
  if (spec.has_epochs() && BatchesPerEpoch(spec, dh->n_train) == 0) {
    return InvalidArgument("epoch_samples: an epoch of " + std::to_string(dh->n_train) +
                           " samples over " + std::to_string(spec.workers()) +
                           " workers leaves none to a worker");
  }
  torch::manual_seed(spec.seed());
  ASSIGN_OR_RETURN(model_, MakeModel(spec.model()));
  ASSIGN_OR_RETURN(plan_, PlanWeights(ModelTensors(*model_)));
  ASSIGN_OR_RETURN(
      weights_, ShmSegment::Create(SegmentName(env.experiment_id, "weights"), plan_.total_bytes));
  std::memcpy(weights_.data(), &plan_, sizeof(WeightsHeader));
  CopyParamsToSegment(*model_, plan_, weights_.data());
  initial_checksum_ = SegmentChecksum(plan_, weights_.data());
  // With sharing off the segment is only where attached workers copy their initial weights from;
  // forked workers inherit the leader's private copy.
  if (spec.share()) RETURN_IF_ERROR(BindParamsToSegment(*model_, plan_, weights_.data()));
  env.segment_created("weights", weights_.size());
  return Status::Ok();
}

Status HogwildKind::Attach(WorkerEnv& env) {
  const auto& spec = env.spec;
  ASSIGN_OR_RETURN(data_, ShmSegment::Open(SegmentName(env.experiment_id, "data"), false));
  ASSIGN_OR_RETURN(weights_,
                   ShmSegment::Open(SegmentName(env.experiment_id, "weights"), spec.share()));
  const auto* dh = static_cast<const DataHeader*>(data_.data());
  const auto* wh = static_cast<const WeightsHeader*>(weights_.data());
  RETURN_IF_ERROR(ValidateData(*dh, data_.size()));
  RETURN_IF_ERROR(ValidateWeights(*wh, weights_.size()));
  if (prototype_ != nullptr && spec.model() == "mnist_convnet") {
    model_ = prototype_;
  } else {
    ASSIGN_OR_RETURN(model_, MakeModel(spec.model()));
  }
  if (spec.share()) return BindParamsToSegment(*model_, *wh, weights_.data());
  // A private copy: take the initial weights and let go of the segment, so this worker cannot
  // quietly train the shared copy (torch.multiprocessing's spawn pitfall).
  CopyParamsFromSegment(*model_, *wh, weights_.data());
  weights_.Unmap();
  return Status::Ok();
}

int HogwildKind::RunWorker(WorkerEnv& env, bool forked_from_leader) {
  ApplyAllocatorPolicy(env.spec.allocator());
  at::set_num_threads(1);  // until the trainer sets the spec's count
  if (!forked_from_leader) {
    Status st = Attach(env);
    if (!st.ok()) {
      std::fprintf(stderr, "worker %u: %s\n", env.index, st.message().c_str());
      return 1;
    }
  }
  const auto* dh = static_cast<const DataHeader*>(data_.data());
  HogwildTrainer trainer(env, *model_, DataView{dh, static_cast<const uint8_t*>(data_.data())});
  return trainer.Run();
}

void HogwildKind::Finish(ipc::v1::LeaderResult* result) {
  result->set_initial_checksum(initial_checksum_);
  result->set_final_checksum(SegmentChecksum(plan_, weights_.data()));
}

}  // namespace shoal
