#include "worker/planned_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
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
  StepPlan plan;
  char* arena = nullptr;
  uint32_t next = 0;  // the step's allocations so far (replaying)
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
// (MAP_POPULATE) and unmapped when freed. On glibc's defaults every page of every buffer faults
// in one by one, ~12 us a fault on some VMs, and the traced step took 13x a planned one; with
// glibc's thresholds raised (PyTorch's best tuning) freed pages are reused but the heap's
// fragmentation held 60 MB a worker more than the step's live peak. A populated mapping costs
// the kernel's page clearing and holds exactly the live bytes.
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

void FreeAny(void* p) {
  if (p == nullptr) return;
  State& s = TheState();
  size_t bytes = 0;  // of its own mapping (a traced buffer), else 0: malloc's
  {
    std::lock_guard<std::mutex> l(s.mu);
    if (s.arena != nullptr && p >= s.arena && p < s.arena + s.plan.arena_bytes) {
      auto it = s.slot_at.find(p);
      if (it == s.slot_at.end())
        std::abort();  // an arena pointer not handed out: a broken invariant
      s.live[it->second] = 0;
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
    }
  }
  if (bytes > 0) {
    ::munmap(p, bytes);
  } else {
    std::free(p);
  }
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
  if (!SharersFree(s, k)) return Deviate(s);
  s.live[k] = 1;
  void* p = s.arena + s.plan.slots[k].offset;
  s.slot_at[p] = k;
  return p;
}

// Plans from the traced step and maps the arena, populated at once (the kernel fills a mapping
// several times faster than the same pages fault in one by one).
void MakePlan(State& s) {
  s.plan = PlanStep(s.trace);
  s.traced_live.clear();  // what outlived the step is freed later, untraced
  s.live.assign(s.plan.slots.size(), 0);
  if (s.plan.arena_bytes > 0) {
    void* a = ::mmap(nullptr, s.plan.arena_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (a == MAP_FAILED) throw std::bad_alloc();
    s.arena = static_cast<char*>(a);
  }
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

void PlannedAllocator::BeginStep() {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
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

PlannedAllocator::StepScope::StepScope() {
  if (auto* a = Installed()) a->BeginStep();
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
      p = MapPopulated(n);
      s.mapped[p] = n;
      s.traced_live[p] = uint32_t(s.trace.size());
      s.trace.push_back({n, s.event++, kOutlivesStep});
    }
  }
  if (p == nullptr) p = Malloc(n);
  return {p, p, &FreeAny, c10::Device(c10::DeviceType::CPU)};
}

}  // namespace shoal
