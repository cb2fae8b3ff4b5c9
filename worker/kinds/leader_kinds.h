// shoal-leader's kinds: the leader halves that need no LibTorch (shared/spec ChooseLeader).
#pragma once

#include <memory>

#include "worker/kind.h"

namespace shoal {

// The LibTorch-free leader's kind for this spec; FailedPrecondition when its leader needs
// LibTorch, unless shoal-worker's leader prepared it and handed off (`handed_off`).
StatusOr<std::unique_ptr<WorkerKind>> MakeLibTorchFreeLeaderKind(
    const v1::ExperimentSpec& spec, const ipc::v1::LeaderHandOff* handed_off = nullptr);

}  // namespace shoal
