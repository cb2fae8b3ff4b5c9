#include "worker/planned_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include "worker/step_plan.h"

namespace shoal {
namespace {

enum class Phase { kTrace, kReplay };

struct State {
  std::mutex mu;
  size_t min_bytes = size_t(64) << 10;
  Phase phase = Phase::kTrace;
  bool in_step = false;
  std::thread::id step_thread;
  uint32_t event = 0;  // the step's allocations and frees so far (tracing)
  std::vector<TracedBuffer> trace;
  std::unordered_map<void*, uint32_t> traced_live;  // pointer -> trace index
  std::unordered_map<void*, size_t> mapped;         // traced buffers' own mappings -> bytes
  // The traced step's freed mappings, kept (filled) for a later buffer of the same size and
  // then for the arena; with the live ones they never exceed the step's live peak so far.
  std::vector<std::pair<void*, size_t>> pool;         // mapping, page-rounded bytes
  uint64_t traced_live_bytes = 0, traced_mapped = 0;  // page-rounded
  StepPlan plan;
  char* arena = nullptr;   // the current step's (shared) or the worker's own
  bool shared = false;     // ShareArenas: steps run in the arena BeginStep gives
  char* region = nullptr;  // the shared arenas, [region, region_end)
  char* region_end = nullptr;
  uint32_t live_count = 0;  // planned buffers live
  uint32_t next = 0;        // the step's allocations so far (replaying)
  bool deviated = false;
  std::vector<char> live;                       // per slot
  std::unordered_map<void*, uint32_t> slot_at;  // live arena pointer -> slot
  uint64_t minflt_at_begin = 0;
  PlannedStats stats;
};

std::atomic<PlannedAllocator*> g_installed{nullptr};

State& TheState() {
  static State* s = new State();  // never destroyed: tensors may be freed during exit
  return *s;
}

uint64_t Minflt() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return uint64_t(r.ru_minflt);
}

void* Malloc(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, n == 0 ? 64 : n) != 0) throw std::bad_alloc();
  return p;
}

// The traced step's buffers, each in a mapping of its own filled by the kernel as it is made
// (MAP_POPULATE) and, when freed, kept for the next buffer of its size or given back
// (TraceMapping). On glibc's defaults every page of every buffer faults in one by one, ~12 us a
// fault on some VMs, and the traced step took 13x a planned one; with glibc's thresholds raised
// (PyTorch's best tuning) freed pages are reused but the heap's fragmentation held 60 MB a
// worker more than the step's live peak. A populated mapping costs the kernel's page clearing,
// paid once per page the step's live peak needs.
size_t PageRound(size_t n) {
  static const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

void* MapPopulated(size_t n) {
  void* p = ::mmap(nullptr, PageRound(n), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

bool InArena(const State& s, const char* p) {
  if (s.region != nullptr && p >= s.region && p < s.region_end) return true;
  return !s.shared && s.arena != nullptr && p >= s.arena && p < s.arena + s.plan.arena_bytes;
}

void FreeAny(void* p) {
  if (p == nullptr) return;
  State& s = TheState();
  size_t bytes = 0;  // of its own mapping (a traced buffer), else 0: malloc's
  {
    std::lock_guard<std::mutex> l(s.mu);
    if (InArena(s, static_cast<char*>(p))) {
      auto it = s.slot_at.find(p);
      if (it == s.slot_at.end())
        std::abort();  // an arena pointer not handed out: a broken invariant
      s.live[it->second] = 0;
      --s.live_count;
      s.slot_at.erase(it);
      return;
    }
    if (auto it = s.traced_live.find(p); it != s.traced_live.end()) {
      s.trace[it->second].free_at = s.event++;
      s.traced_live.erase(it);
    }
    if (auto it = s.mapped.find(p); it != s.mapped.end()) {
      bytes = PageRound(it->second);
      s.mapped.erase(it);
      if (s.phase == Phase::kTrace) {
        s.traced_live_bytes -= bytes;
        s.pool.emplace_back(p, bytes);
        return;
      }
    }
  }
  if (bytes > 0) {
    ::munmap(p, bytes);
  } else {
    std::free(p);
  }
}

// A traced buffer's mapping: a freed one of the same size if the pool has it (no page to fill),
// else a new one, filled, after unmapping pooled ones until what is mapped stays within the
// step's live peak so far: tracing never holds more than a replay will.
void* TraceMapping(State& s, size_t n) {
  const size_t bytes = PageRound(n);
  s.traced_live_bytes += bytes;
  s.stats.traced_live_peak = std::max(s.stats.traced_live_peak, s.traced_live_bytes);
  for (auto it = s.pool.begin(); it != s.pool.end(); ++it) {
    if (it->second != bytes) continue;
    void* p = it->first;
    s.pool.erase(it);
    return p;
  }
  while (s.traced_mapped + bytes > s.stats.traced_live_peak && !s.pool.empty()) {
    ::munmap(s.pool.front().first, s.pool.front().second);
    s.traced_mapped -= s.pool.front().second;
    s.pool.erase(s.pool.begin());
  }
  s.traced_mapped += bytes;
  s.stats.traced_mapped_peak = std::max(s.stats.traced_mapped_peak, s.traced_mapped);
  return MapPopulated(n);
}

// The arena, `n` bytes at one address (null for none): the traced step's pooled pages moved into
// it (mremap moves page tables: nothing is copied or cleared), the rest filled by the kernel;
// pooled pages it has no room for are unmapped.
char* ArenaFromPool(State& s, size_t n) {
  const size_t total = PageRound(n);
  char* arena = nullptr;
  if (total > 0) {
    void* a = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) throw std::bad_alloc();
    arena = static_cast<char*>(a);
  }
  size_t at = 0;
  for (const auto& [p, bytes] : s.pool) {
    const bool moved =
        at + bytes <= total &&
        ::mremap(p, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, arena + at) != MAP_FAILED;
    if (moved) {
      at += bytes;
      s.stats.arena_reused_bytes += bytes;
    } else {
      ::munmap(p, bytes);
    }
  }
  s.pool.clear();
  s.traced_mapped = s.traced_live_bytes = 0;
  if (at < total && ::madvise(arena + at, total - at, MADV_POPULATE_WRITE) != 0)
    std::memset(arena + at, 0, total - at);
  return arena;
}

// How many traced allocations a replay may look past for the next one: those of the traced first
// step that do not come back (the optimiser's state, the gradients, made once and kept).
constexpr uint32_t kLookahead = 32;
constexpr uint32_t kNoSlot = UINT32_MAX;

// The first slot from `next` on, within the lookahead, traced with exactly n bytes.
uint32_t FindSlot(const State& s, size_t n) {
  const auto end = uint32_t(std::min<size_t>(s.plan.slots.size(), s.next + kLookahead));
  for (uint32_t k = s.next; k < end; ++k)
    if (s.plan.slots[k].size == n) return k;
  return kNoSlot;
}

bool SharersFree(const State& s, uint32_t k) {
  for (uint32_t c : s.plan.slots[k].conflicts)
    if (s.live[c]) return false;
  return true;
}

// The arena place of the step's next allocation, or null (then malloc serves it).
// The rest of this step goes to malloc: the plan no longer says what is free.
void* Deviate(State& s) {
  s.deviated = true;
  ++s.stats.fallback_allocs;
  return nullptr;
}

void* Replay(State& s, size_t n) {
  const uint32_t k = s.deviated ? kNoSlot : FindSlot(s, n);
  if (k == kNoSlot) return Deviate(s);
  s.next = k + 1;
  if (!s.plan.slots[k].planned) return nullptr;  // outlived the traced step: malloc, as traced
  if (!SharersFree(s, k) || s.arena == nullptr) return Deviate(s);
  s.live[k] = 1;
  ++s.live_count;
  void* p = s.arena + s.plan.slots[k].offset;
  s.slot_at[p] = k;
  return p;
}

// Plans from the traced step and maps the arena, every page in place at once: the traced step's
// own where they reach, the kernel's filling for the rest (several times faster than the same
// pages faulting in one by one).
// With shared arenas the traced step's pages are given back: the step's next arena is a shared one.
void MakePlan(State& s) {
  s.plan = PlanStep(s.trace);
  s.traced_live.clear();  // what outlived the step is freed later, untraced
  s.live.assign(s.plan.slots.size(), 0);
  s.arena = ArenaFromPool(s, s.shared ? 0 : s.plan.arena_bytes);
  s.stats.planned = true;
  s.stats.arena_bytes = s.plan.arena_bytes;
  s.stats.peak_live_bytes = s.plan.peak_live_bytes;
}

}  // namespace

PlannedAllocator* PlannedAllocator::Install(size_t min_bytes) {
  static PlannedAllocator* a = [min_bytes] {
    TheState().min_bytes = min_bytes;
    auto* p = new PlannedAllocator();
    c10::SetCPUAllocator(p, /*priority=*/10);
    g_installed.store(p);
    return p;
  }();
  return a;
}

PlannedAllocator* PlannedAllocator::Installed() { return g_installed.load(); }

PlannedStats PlannedAllocator::Stats() const {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  return s.stats;
}

void PlannedAllocator::BeginStep(char* arena) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.shared) s.arena = arena;
  s.in_step = true;
  s.step_thread = std::this_thread::get_id();
  s.event = 0;
  s.next = 0;
  s.deviated = false;
  if (s.phase == Phase::kTrace) s.trace.clear();
  if (s.phase == Phase::kReplay) s.minflt_at_begin = Minflt();
}

void PlannedAllocator::EndStep() {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  s.in_step = false;
  ++s.stats.steps;
  switch (s.phase) {
    case Phase::kTrace:
      MakePlan(s);
      s.phase = Phase::kReplay;
      break;
    case Phase::kReplay:
      ++s.stats.replayed_steps;
      if (s.deviated) ++s.stats.fallback_steps;
      s.stats.replay_minflt += Minflt() - s.minflt_at_begin;
      break;
  }
}

bool PlannedAllocator::ShareArenas() {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.stats.steps != 0 || s.in_step) return false;
  s.shared = true;
  return true;
}

void PlannedAllocator::SetSharedRegion(char* region, size_t bytes) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  s.region = region;
  s.region_end = region + bytes;
}

void PlannedAllocator::OwnArena() {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  if (!s.shared || s.phase != Phase::kReplay || s.in_step) return;
  s.shared = false;
  s.arena = ArenaFromPool(s, s.plan.arena_bytes);
}

bool PlannedAllocator::Adopt(const std::vector<TracedBuffer>& trace) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.stats.steps != 0 || s.phase != Phase::kTrace || s.in_step) return false;
  s.trace = trace;
  MakePlan(s);
  s.trace.clear();
  s.phase = Phase::kReplay;
  return true;
}

std::vector<TracedBuffer> PlannedAllocator::Trace() const {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  return s.phase == Phase::kReplay ? s.trace : std::vector<TracedBuffer>{};
}

bool PlannedAllocator::ArenaInUse() const {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  return s.live_count > 0;
}

PlannedAllocator::StepScope::StepScope(char* arena) {
  if (auto* a = Installed()) a->BeginStep(arena);
}

PlannedAllocator::StepScope::~StepScope() {
  if (auto* a = Installed()) a->EndStep();
}

c10::DeleterFnPtr PlannedAllocator::raw_deleter() const { return &FreeAny; }

c10::DataPtr PlannedAllocator::allocate(size_t n) SHOAL_ALLOCATE_CONST {
  State& s = TheState();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> l(s.mu);
    const bool ours = s.in_step && n >= s.min_bytes && s.step_thread == std::this_thread::get_id();
    if (ours && s.phase == Phase::kReplay) p = Replay(s, n);
    if (ours && s.phase == Phase::kTrace) {
      p = TraceMapping(s, n);
      s.mapped[p] = n;
      s.traced_live[p] = uint32_t(s.trace.size());
      s.trace.push_back({n, s.event++, kOutlivesStep});
    }
  }
  if (p == nullptr) p = Malloc(n);
  return {p, p, &FreeAny, c10::Device(c10::DeviceType::CPU)};
}

}  // namespace shoal
