// shoal-leader's kinds: the leader halves that need no LibTorch (shared/spec ChooseLeader).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/kind.h"

namespace shoal {

// The LibTorch-free leader's kind for this spec; FailedPrecondition when its leader needs
// LibTorch, unless shoal-worker's leader prepared it and handed off (`handed_off`).
StatusOr<std::unique_ptr<WorkerKind>> MakeLibTorchFreeLeaderKind(
    const v1::ExperimentSpec& spec, const ipc::v1::LeaderHandOff* handed_off = nullptr);
// The kinds shoal-leader can lead (its registry's names).
std::vector<std::string> LibTorchFreeLeaderKinds();

}  // namespace shoal
