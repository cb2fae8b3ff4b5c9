// shoal-leader's kinds: the leader halves that need no LibTorch (shared/spec ChooseLeader).
#pragma once

#include <memory>

#include "worker/kind.h"

namespace shoal {

// The LibTorch-free leader's kind for this spec; FailedPrecondition when its leader needs
// LibTorch.
StatusOr<std::unique_ptr<WorkerKind>> MakeLibTorchFreeLeaderKind(const v1::ExperimentSpec& spec);

}  // namespace shoal
