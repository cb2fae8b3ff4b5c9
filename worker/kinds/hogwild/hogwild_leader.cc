#include "worker/kinds/hogwild/hogwild_leader.h"

#include <algorithm>

namespace shoal {

uint32_t HogwildStepSlots(const v1::ExperimentSpec& spec) {
  return spec.hogwild().has_concurrent_steps()
             ? std::min(spec.hogwild().concurrent_steps(), spec.workers())
             : spec.workers();
}

}  // namespace shoal
