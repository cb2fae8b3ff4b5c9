#include "worker/planned_allocator.h"

#include <ATen/Parallel.h>
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

// Filled pages at one range of addresses inside one kernel mapping (VMA), so that one mremap
// moves them all. Pages moved from several mappings stay several VMAs (their origins differ),
// and mremap will not move a range that spans two.
struct Piece {
  char* at;
  size_t bytes;  // page-rounded
};

// A traced buffer's mapping: `n` bytes asked for, over the pieces it was built from.
struct TracedMapping {
  size_t n;
  std::vector<Piece> pieces;
};

struct State {
  std::mutex mu;
  size_t min_bytes = size_t(64) << 10;
  Phase phase = Phase::kTrace;
  bool in_step = false;
  std::thread::id step_thread;
  uint32_t event = 0;  // the step's allocations and frees so far (tracing)
  std::vector<TracedBuffer> trace;
  std::unordered_map<void*, uint32_t> traced_live;  // pointer -> trace index
  std::unordered_map<void*, TracedMapping> mapped;  // traced buffers' own mappings
  // The traced step's freed pages, kept filled for its later buffers and then for the arena:
  // with the live ones they are the step's live peak so far, never more.
  std::vector<Piece> pool;
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

// The traced step's buffers are each in a mapping of its own, filled by the kernel as it is made
// (TraceMapping), so that when the step ends their pages can move into the arena. Not glibc's
// heap: with its thresholds raised (PyTorch's best tuning) freed pages are reused, but the
// heap's fragmentation held 60 MB a worker more than the step's live peak.
size_t PageRound(size_t n) {
  static const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
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
      bytes = PageRound(it->second.n);
      if (s.phase == Phase::kTrace) {
        s.traced_live_bytes -= bytes;
        s.pool.insert(s.pool.end(), it->second.pieces.begin(), it->second.pieces.end());
        s.mapped.erase(it);
        return;
      }
      s.mapped.erase(it);  // unmapped whole below: munmap spans VMAs
    }
  }
  if (bytes > 0) {
    ::munmap(p, bytes);
  } else {
    std::free(p);
  }
}

// Moves `from`'s pages to `to` (mremap moves page tables: nothing is copied or cleared).
bool MovePages(const Piece& from, char* to) {
  return ::mremap(from.at, from.bytes, from.bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED;
}

// Has the kernel fill [p, p + bytes) at once, several times faster than a fault a page.
void FillRange(char* p, size_t bytes) {
  if (::madvise(p, bytes, MADV_POPULATE_WRITE) != 0) std::memset(p, 0, bytes);  // before 5.14
}

// Split over the step's intra-op threads, which wait for the step's own thread meanwhile: the
// kernel's filling scales (300 MiB: 105 ms on one thread, 70 on two, on the 2-core VM).
void Fill(char* p, size_t bytes) {
  constexpr size_t kChunkMin = size_t(8) << 20;
  const size_t threads =
      std::max<size_t>(1, std::min<size_t>(size_t(at::get_num_threads()), bytes / kChunkMin));
  const size_t chunk = PageRound(bytes / threads);
  std::vector<std::thread> helpers;
  for (size_t at = chunk; at < bytes; at += chunk)
    helpers.emplace_back(FillRange, p + at, std::min(chunk, bytes - at));
  FillRange(p, std::min(chunk, bytes));
  for (std::thread& t : helpers) t.join();
}

char* Reserve(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<char*>(p);
}

// Moves pooled pages, newest first, into [to, to + bytes) as far as they reach (splitting the
// last piece it takes); appends what it moved to `pieces` and returns how many bytes it moved.
size_t MoveFromPool(State& s, char* to, size_t bytes, std::vector<Piece>* pieces) {
  size_t at = 0;
  while (at < bytes && !s.pool.empty()) {
    Piece& from = s.pool.back();
    const size_t k = std::min(from.bytes, bytes - at);
    if (!MovePages({from.at, k}, to + at)) break;
    pieces->push_back({to + at, k});
    at += k;
    if (k == from.bytes) {
      s.pool.pop_back();
    } else {
      from.at += k;
      from.bytes -= k;
    }
  }
  return at;
}

// The newest pooled piece of exactly `bytes`, out of the pool; {nullptr, 0} when none.
Piece TakeEqual(State& s, size_t bytes) {
  const auto it = std::find_if(s.pool.rbegin(), s.pool.rend(),
                               [bytes](const Piece& q) { return q.bytes == bytes; });
  if (it == s.pool.rend()) return {nullptr, 0};
  const Piece q = *it;
  s.pool.erase(std::next(it).base());
  return q;
}

// A traced buffer's mapping, filled before it is written: a freed one of the same size as it is,
// else pooled pages moved into place and the kernel's filling for the rest. So the traced step
// fills its live peak's pages once (on glibc's defaults every page of every buffer faulted in
// one by one, ~12 us a fault on some VMs, and the traced step took 13x a planned one; a new
// filled mapping per buffer filled 2.4x the live peak, ~0.4 ms a MiB on the 2-core VM).
void* TraceMapping(State& s, size_t n) {
  const size_t bytes = PageRound(n);
  s.traced_live_bytes += bytes;
  s.stats.traced_live_peak = std::max(s.stats.traced_live_peak, s.traced_live_bytes);
  TracedMapping m{n, {}};
  const Piece same = TakeEqual(s, bytes);
  char* p = same.at;
  if (p != nullptr) {
    m.pieces.push_back(same);
  } else {
    p = Reserve(bytes);
    const size_t moved = MoveFromPool(s, p, bytes, &m.pieces);
    if (moved < bytes) {
      Fill(p + moved, bytes - moved);
      m.pieces.push_back({p + moved, bytes - moved});
      s.traced_mapped += bytes - moved;
      s.stats.traced_filled_bytes += bytes - moved;
    }
  }
  s.stats.traced_mapped_peak = std::max(s.stats.traced_mapped_peak, s.traced_mapped);
  s.mapped.emplace(p, std::move(m));
  return p;
}

// The arena, `n` bytes at one address (null for none): the traced step's pooled pages moved into
// it, the rest filled by the kernel; pooled pages it has no room for are unmapped.
char* ArenaFromPool(State& s, size_t n) {
  const size_t total = PageRound(n);
  char* arena = total > 0 ? Reserve(total) : nullptr;
  std::vector<Piece> moved;
  const size_t at = total > 0 ? MoveFromPool(s, arena, total, &moved) : 0;
  s.stats.arena_reused_bytes += at;
  for (const Piece& left : s.pool) ::munmap(left.at, left.bytes);
  s.pool.clear();
  s.traced_mapped = s.traced_live_bytes = 0;
  if (at < total) Fill(arena + at, total - at);
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
      s.traced_live[p] = uint32_t(s.trace.size());
      s.trace.push_back({n, s.event++, kOutlivesStep});
    }
  }
  if (p == nullptr) p = Malloc(n);
  return {p, p, &FreeAny, c10::Device(c10::DeviceType::CPU)};
}

}  // namespace shoal
