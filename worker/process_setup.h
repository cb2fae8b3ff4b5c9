// What a training process sets up once, before it builds anything: the spec's allocator and
// kernels, and (in the forkserver) the convnet's kernels paged in ahead of the workers it forks.
#pragma once

#include <string>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

// Builds an mnist_convnet and takes one tiny step on it, once per process (later calls return at
// once): pages in the kernels and allocator paths its training uses. The forkserver calls it
// from every kind that trains this network.
void WarmConvNetOnce();

// Applies the allocator policy named in the spec ("retain" keeps freed step buffers mapped).
void ApplyAllocatorPolicy(const std::string& policy);

// What a training process applies before it builds anything: the spec's allocator, and its
// kernels ("shoal": Shoal's CPU kernels in the dispatcher for the rest of the process,
// worker/kernels/shoal_kernels.h; "libtorch" or unset: LibTorch's own).
void ApplyRuntimePolicies(const v1::ExperimentSpec& spec);

}  // namespace shoal
