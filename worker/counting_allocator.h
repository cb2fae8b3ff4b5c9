// Counts what LibTorch allocates on the CPU: current and peak bytes, as torch.cuda's
// memory_allocated / max_memory_allocated do on a GPU. It wraps whatever CPU allocator is
// installed when it is (the step cache or LibTorch's own) and passes every call through.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>

#include "worker/torch_compat.h"

namespace shoal {

class CountingAllocator final : public c10::Allocator {
 public:
  // Installs one for the process (once; later calls return it).
  static CountingAllocator* Install();

  uint64_t current() const { return current_.load(); }
  uint64_t peak() const { return peak_.load(); }
  // The peak starts again from what is allocated now.
  void ResetPeak() { peak_.store(current_.load()); }

  c10::DataPtr allocate(size_t n) SHOAL_ALLOCATE_CONST override;
  SHOAL_ALLOCATOR_COPY_DATA
  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::Free; }

 private:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  void Add(uint64_t n) const;
  static void Free(void* ctx);

  c10::Allocator* inner_;
  mutable std::atomic<uint64_t> current_{0}, peak_{0};
};

}  // namespace shoal
