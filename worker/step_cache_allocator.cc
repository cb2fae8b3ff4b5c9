#include "worker/step_cache_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace shoal {
namespace {

// Every block starts with this header, 64 bytes so the data stays 64-byte aligned.
struct alignas(64) BlockHeader {
  uint64_t magic;
  uint64_t mapped_bytes;  // 0 for a malloc'ed block
};
constexpr uint64_t kMagic = 0x53484f414c414c43ull;
constexpr size_t kPage = 4096;

struct Cache {
  std::mutex mu;
  size_t min_bytes = 128 << 10;
  size_t max_cached = size_t(2) << 30;
  // How far mapped memory may exceed the peak of live blocks before a miss reshapes a cached
  // block instead of mapping a new one. Measured on the ConvNet step (bench/README): 0.4 keeps
  // page faults at retain's level for ~120 MB less than glibc-retain per worker.
  double slack = 0.4;
  std::map<size_t, std::vector<void*>> free_blocks;  // by mapped size
  StepCacheStats stats;
};

Cache& TheCache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during exit
  return *c;
}

void FreeBlock(void* data) {
  if (data == nullptr) return;
  auto* h = reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - sizeof(BlockHeader));
  if (h->magic != kMagic) std::abort();  // not ours: a broken invariant, not an error
  if (h->mapped_bytes == 0) {
    std::free(h);
    return;
  }
  Cache& c = TheCache();
  std::lock_guard<std::mutex> l(c.mu);
  c.stats.live_bytes -= h->mapped_bytes;
  if (c.stats.cached_bytes + h->mapped_bytes > c.max_cached) {
    c.stats.mapped_bytes -= h->mapped_bytes;
    ::munmap(h, h->mapped_bytes);
    return;
  }
  c.free_blocks[h->mapped_bytes].push_back(h);
  c.stats.cached_bytes += h->mapped_bytes;
}

}  // namespace

StepCacheAllocator* StepCacheAllocator::Install(size_t min_bytes, size_t max_cached_bytes) {
  static StepCacheAllocator* a = new StepCacheAllocator();
  Cache& c = TheCache();
  {
    std::lock_guard<std::mutex> l(c.mu);
    c.min_bytes = min_bytes;
    c.max_cached = max_cached_bytes;
  }
  c10::SetCPUAllocator(a, /*priority=*/10);
  return a;
}

StepCacheStats StepCacheAllocator::Stats() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> l(c.mu);
  return c.stats;
}

c10::DeleterFnPtr StepCacheAllocator::raw_deleter() const { return &FreeBlock; }

c10::DataPtr StepCacheAllocator::allocate(size_t n) SHOAL_ALLOCATE_CONST {
  Cache& c = TheCache();
  const size_t total = n + sizeof(BlockHeader);
  void* block = nullptr;
  if (n < c.min_bytes) {
    if (posix_memalign(&block, 64, total) != 0) throw std::bad_alloc();
    new (block) BlockHeader{kMagic, 0};
  } else {
    const size_t mapped = (total + kPage - 1) / kPage * kPage;
    void* reshape = nullptr;
    size_t reshape_from = 0;
    {
      std::lock_guard<std::mutex> l(c.mu);
      auto take = [&](std::map<size_t, std::vector<void*>>::iterator it) {
        void* b = it->second.back();
        it->second.pop_back();
        c.stats.cached_bytes -= it->first;
        if (it->second.empty()) c.free_blocks.erase(it);
        return b;
      };
      auto it = c.free_blocks.find(mapped);
      if (it != c.free_blocks.end()) {
        block = take(it);
        ++c.stats.hits;
      } else if (!c.free_blocks.empty() &&
                 double(c.stats.mapped_bytes + mapped) >
                     double(
                         std::max<uint64_t>(c.stats.peak_live_bytes, c.stats.live_bytes + mapped)) *
                         (1.0 + c.slack)) {
        // No block of this size: reshape a cached one rather than map more. Prefer the smallest
        // larger block (shrinking it keeps its pages), else the largest smaller one (growing it
        // faults only the difference). Mapped memory then stays close to what is live.
        auto larger = c.free_blocks.lower_bound(mapped);
        auto from = larger != c.free_blocks.end() ? larger : std::prev(c.free_blocks.end());
        reshape_from = from->first;
        reshape = take(from);
        ++c.stats.reshapes;
      } else {
        ++c.stats.misses;
      }
    }
    if (reshape != nullptr) {
      void* moved = ::mremap(reshape, reshape_from, mapped, MREMAP_MAYMOVE);
      std::lock_guard<std::mutex> l(c.mu);
      if (moved == MAP_FAILED) {
        ::munmap(reshape, reshape_from);
        c.stats.mapped_bytes -= reshape_from;
      } else {
        block = moved;
        static_cast<BlockHeader*>(block)->mapped_bytes = mapped;
        c.stats.mapped_bytes = c.stats.mapped_bytes - reshape_from + mapped;
        if (c.stats.mapped_bytes > c.stats.peak_mapped_bytes)
          c.stats.peak_mapped_bytes = c.stats.mapped_bytes;
      }
    }
    if (block == nullptr) {
      block = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (block == MAP_FAILED) throw std::bad_alloc();
      new (block) BlockHeader{kMagic, mapped};
      std::lock_guard<std::mutex> l(c.mu);
      c.stats.mapped_bytes += mapped;
      if (c.stats.mapped_bytes > c.stats.peak_mapped_bytes)
        c.stats.peak_mapped_bytes = c.stats.mapped_bytes;
    }
  }
  if (n >= c.min_bytes) {
    std::lock_guard<std::mutex> l(c.mu);
    c.stats.live_bytes += static_cast<BlockHeader*>(block)->mapped_bytes;
    if (c.stats.live_bytes > c.stats.peak_live_bytes) c.stats.peak_live_bytes = c.stats.live_bytes;
  }
  void* data = static_cast<char*>(block) + sizeof(BlockHeader);
  return {data, data, &FreeBlock, c10::Device(c10::DeviceType::CPU)};
}

}  // namespace shoal
