// What `shoal node` shows: cores, memory, /dev/shm, GPUs and versions.
#pragma once

#include <string>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

// Asks `shoal-worker --version` once (LibTorch's version lives in the worker).
std::string QueryWorkerVersion(const std::string& worker_bin);

v1::NodeInfoResponse CollectNodeInfo(const std::string& state_dir, uint32_t max_workers,
                                     const std::string& torch_version);

}  // namespace shoal
