#include "worker/kinds/hogwild/hogwild.h"

#include "worker/kinds/hogwild/hogwild_leader.h"

namespace shoal {

uint32_t HogwildKind::StepSlots(const v1::ExperimentSpec& spec) const {
  return HogwildStepSlots(spec);
}

}  // namespace shoal
