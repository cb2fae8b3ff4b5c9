#include "worker/image/image_leader.h"

#include <algorithm>

#include "shared/spec/spec.h"
#include "worker/data_segment.h"
#include "worker/scoreboard.h"

namespace shoal {

Status PrepareImageData(LeaderEnv& env, ShmSegment* data) {
  ASSIGN_OR_RETURN(*data, LoadDataSegment(env.spec, SegmentName(env.experiment_id, "data")));
  env.segment_created("data", data->size());
  return CheckTrainingSet(env.spec, static_cast<const DataHeader*>(data->data())->n_train);
}

Status ImageLeaderKind::Prepare(LeaderEnv& env) {
  weights_name_ = SegmentName(env.experiment_id, "weights");
  announce_ = env.segment_created;
  if (handed_off_) return Status::Ok();  // every segment made (and announced) before the exec
  RETURN_IF_ERROR(PrepareImageData(env, &data_));
  return PrepareMore(env);
}

int ImageLeaderKind::RunWorker(WorkerEnv& env, bool) {
  return WorkerFails(env.slot, env.index, "shoal-leader has no LibTorch to train with");
}

void ImageLeaderKind::Finish(ipc::v1::LeaderResult* result) {
  auto weights = ShmSegment::Open(weights_name_, false);
  if (!weights.ok()) return;  // worker 0 failed before writing them: the result says why
  auto plan = ReadWeights(weights->data(), weights->size());
  if (!plan.ok()) return;
  if (!handed_off_) announce_("weights", weights->size());  // else announced before the exec
  if (handed_off_) result->set_model_step_bytes(handed_off_->model_step_bytes());
  result->set_initial_checksum(plan->initial_checksum);
  if (SegmentHoldsFinalWeights())
    result->set_final_checksum(SegmentChecksum(*plan, weights->data()));
}

std::optional<StepBounds> ImageLeaderKind::Bounds() const {
  if (!handed_off_ || handed_off_->step_bound_why().empty()) return std::nullopt;
  return StepBounds{handed_off_->step_bound_ms(), handed_off_->warm_up_bound_ms(),
                    handed_off_->step_bound_why()};
}

}  // namespace shoal
