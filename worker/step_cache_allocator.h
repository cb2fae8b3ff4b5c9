// A CPU allocator for LibTorch that keeps large freed blocks mapped and hands them back for the
// next request of exactly the same size.
//
// A training step allocates the same large activation and gradient buffers every step. glibc
// maps and unmaps each of them (they are far above its mmap threshold), so every step pays for
// hundreds of thousands of page faults; keeping glibc's heap instead (mallopt) avoids the faults
// but fragments and grows the working set. Exact-size reuse of whole mappings gets both: after the
// first step nothing faults, and what stays mapped is what the step needs at its peak.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>

#include "worker/torch_compat.h"

namespace shoal {

struct StepCacheStats {
  uint64_t hits = 0, misses = 0, reshapes = 0, cached_bytes = 0, mapped_bytes = 0,
           peak_mapped_bytes = 0;
  uint64_t live_bytes = 0, peak_live_bytes = 0;  // large blocks handed out and not yet freed
};

class StepCacheAllocator final : public c10::Allocator {
 public:
  // Makes this the CPU allocator of the process. Blocks below `min_bytes` go to malloc; at most
  // `max_cached_bytes` of freed blocks are kept.
  static StepCacheAllocator* Install(size_t min_bytes = 128 << 10,
                                     size_t max_cached_bytes = size_t(2) << 30);
  static StepCacheStats Stats();

  c10::DataPtr allocate(size_t n) SHOAL_ALLOCATE_CONST override;
  SHOAL_ALLOCATOR_COPY_DATA
  c10::DeleterFnPtr raw_deleter() const override;
};

}  // namespace shoal
