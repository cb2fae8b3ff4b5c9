// One function per kind, returning its rules; registry.cc lists them.
#pragma once

#include "shared/kinds/kind.h"

namespace shoal {

KindRules HogwildRules();
KindRules MultiModelRules();
KindRules DataLoadingRules();
KindRules DataParallelRules();
KindRules PipelineRules();

}  // namespace shoal
