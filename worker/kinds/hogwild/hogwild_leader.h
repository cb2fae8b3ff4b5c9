// hogwild's LibTorch-free leader (shoal-leader): the image leader, with turns at the steps.
#pragma once

#include "worker/image/image_leader.h"

namespace shoal {

// Turns at the steps: concurrent_steps where set (at most the workers), else none.
uint32_t HogwildStepSlots(const v1::ExperimentSpec& spec);

class HogwildLeaderKind : public ImageLeaderKind {
 public:
  using ImageLeaderKind::ImageLeaderKind;
  uint32_t StepSlots(const v1::ExperimentSpec& spec) const override {
    return HogwildStepSlots(spec);
  }
};

}  // namespace shoal
