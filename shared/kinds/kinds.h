// One function per kind, returning its rules; registry.cc lists them.
#pragma once

#include "shared/kind_rules.h"

namespace shoal {

KindRules HogwildRules();
KindRules MultiModelRules();
KindRules DataLoadingRules();
KindRules DataParallelRules();
KindRules PipelineRules();

}  // namespace shoal
