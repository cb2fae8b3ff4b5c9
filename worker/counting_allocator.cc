#include "worker/counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <stdexcept>

namespace shoal {
namespace {

// Each block carries its size in a header before the data. LibTorch's raw_allocate paths (oneDNN)
// need data == context, so the size cannot live in a separate context object.
constexpr size_t kHeader = 64;  // keeps the inner allocator's 64-byte alignment

CountingAllocator* the_allocator = nullptr;
c10::DeleterFnPtr inner_free = nullptr;

}  // namespace

CountingAllocator* CountingAllocator::Install() {
  static CountingAllocator* a = [] {
    c10::Allocator* inner = c10::GetCPUAllocator();
    inner_free = inner->raw_deleter();
    if (inner_free == nullptr) throw std::runtime_error("the CPU allocator has no raw deleter");
    the_allocator = new CountingAllocator(inner);
    c10::SetCPUAllocator(the_allocator, /*priority=*/20);  // above the step cache's 10
    return the_allocator;
  }();
  return a;
}

void CountingAllocator::Add(uint64_t n) const {
  const uint64_t now = current_.fetch_add(n) + n;
  for (uint64_t p = peak_.load(); now > p && !peak_.compare_exchange_weak(p, now);) {
  }
}

c10::DataPtr CountingAllocator::allocate(size_t n) SHOAL_ALLOCATE_CONST {
  void* block = inner_->raw_allocate(n + kHeader);
  *static_cast<uint64_t*>(block) = n;
  void* data = static_cast<char*>(block) + kHeader;
  Add(n);
  return {data, data, &CountingAllocator::Free, c10::Device(c10::DeviceType::CPU)};
}

void CountingAllocator::Free(void* data) {
  if (data == nullptr) return;
  void* block = static_cast<char*>(data) - kHeader;
  the_allocator->current_.fetch_sub(*static_cast<uint64_t*>(block));
  inner_free(block);
}

}  // namespace shoal
