// hogwild (seed 000): N workers train one network Hogwild-style on weights in one shared segment
// (or each on its own copy): the image training of worker/image/image_kind.h, with turns at the
// steps (concurrent_steps) its own.
#pragma once

#include "worker/image/image_kind.h"

namespace shoal {

class HogwildKind : public ImageKind {
 public:
  uint32_t StepSlots(const v1::ExperimentSpec& spec) const override;
};

}  // namespace shoal
