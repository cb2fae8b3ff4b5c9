#include "worker/shared_arenas.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "worker/scoreboard.h"

namespace shoal {
namespace {

constexpr uint64_t kArenasMagic = 0x4e5241414c414f53ull;  // "SHOALARN"
// Arenas start on 2 MiB boundaries: where /dev/shm hands out huge pages, they can use them.
constexpr uint64_t kArenaAlign = uint64_t(2) << 20;
constexpr uint32_t kMaxArenas = 32;  // one bit each in the board's arenas_free

// The segment: this header, the published trace, then `count` arenas `stride` bytes apart.
struct ArenasHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t count;
  uint64_t arena_bytes;  // the plan's arena
  uint64_t stride;
  uint64_t first_arena;  // offset of arena 0
  uint64_t trace_len;    // TracedBuffers right after this header
};
static_assert(std::is_trivially_copyable_v<TracedBuffer>);

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

ArenasState StateOf(const BoardHeader* b) { return ArenasState(b->arenas_state.load()); }

void SetState(BoardHeader* b, ArenasState st) {
  b->arenas_state.store(uint32_t(st));
  WakeAll(&b->arenas_state);
}

const TracedBuffer* TraceOf(const ArenasHeader* h) {
  return reinterpret_cast<const TracedBuffer*>(h + 1);
}

}  // namespace

SharedArenas::SharedArenas(BoardHeader* board, std::string segment_name, uint32_t index,
                           PlannedAllocator* allocator, int lifetime_fd)
    : board_(board),
      name_(std::move(segment_name)),
      index_(index),
      allocator_(allocator),
      lifetime_fd_(lifetime_fd) {}

SharedArenas::~SharedArenas() {
  if (arenas_ != nullptr) new ShmSegment(std::move(segment_));  // never unmapped: see the header
}

char* SharedArenas::BeforeStep() {
  if (held_ != nullptr || own_arena_) return held_;
  if (!stepped_) {
    stepped_ = true;
    // One worker traces: the others wait for its plan rather than each tracing in memory of
    // its own, which would be resident beside the shared arenas.
    uint32_t none = uint32_t(ArenasState::kNone);
    tracer_ = board_->arenas_state.compare_exchange_strong(none, uint32_t(ArenasState::kMaking));
    if (!tracer_) WaitWhileMaking();
    MapIfReady();
  }
  if (arenas_ == nullptr) return nullptr;  // its first step: tracing
  held_ = TakeFree();
  return held_;
}

// Every arena's pages are mapped in the process when it maps the segment, in one call each rather
// than faulting in one by one during its steps (~100 thousand faults for mnist_convnet's). All
// of them, at once: from then on every page has all its sharers, so a process's PSS stops
// moving without its RSS moving, which an estimate between page-table walks cannot follow
// (shoald's sampler; each worker populating an arena on its first turn in it read the peak PSS
// sum 32% high against an independent reader's).
void SharedArenas::Populate(char* arena) {
  const uint32_t bit = 1u << uint32_t((arena - arenas_) / stride_);
  if ((populated_ & bit) != 0) return;
  populated_ |= bit;
  ::madvise(arena, stride_, MADV_POPULATE_WRITE);  // best effort: a fault serves what it misses
}

void SharedArenas::MapIfReady() {
  if (arenas_ != nullptr || own_arena_ || tracer_) return;
  if (StateOf(board_) != ArenasState::kReady || !Map()) return;
  const auto* h = static_cast<const ArenasHeader*>(segment_.data());
  allocator_->Adopt(std::vector<TracedBuffer>(TraceOf(h), TraceOf(h) + h->trace_len));
}

void SharedArenas::AfterStep() {
  if (!own_arena_ && arenas_ == nullptr) Publish();
  if (held_ == nullptr || allocator_->ArenaInUse()) return;
  board_->arenas_free.fetch_or(1u << uint32_t((held_ - arenas_) / stride_));
  held_ = nullptr;
}

// The tracer makes the segment from its traced step; a worker that traced because there is none
// (it could not be made) builds its own arena.
void SharedArenas::Publish() {
  if (tracer_) SetState(board_, Make() ? ArenasState::kReady : ArenasState::kFailed);
  tracer_ = false;
  WaitWhileMaking();
  const bool fits = StateOf(board_) == ArenasState::kReady && Map() &&
                    arena_bytes_ >= allocator_->Stats().arena_bytes;
  if (!fits) UseOwnArena();
}

bool SharedArenas::Make() {
  const std::vector<TracedBuffer> trace = allocator_->Trace();
  const uint64_t bytes = allocator_->Stats().arena_bytes;
  const uint32_t count = board_->step_slots;
  if (trace.empty() || bytes == 0 || count == 0 || count > kMaxArenas) return false;
  const uint64_t stride = RoundUp(bytes, kArenaAlign);
  const uint64_t first =
      RoundUp(sizeof(ArenasHeader) + trace.size() * sizeof(TracedBuffer), kArenaAlign);
  const uint64_t total = first + count * stride;
  // Every page reserved now (no room in /dev/shm: no segment, not a SIGBUS later) and filled by
  // tmpfs, mapped by nobody yet: the workers then map them all within moments of each other
  // (MapIfReady), so no process holds them alone for longer than its own mapping takes.
  auto seg = ShmSegment::Create(name_, total, ShmReserve::kAll);
  if (!seg.ok()) return false;
  auto* h = static_cast<ArenasHeader*>(seg->data());
  *h = ArenasHeader{kArenasMagic, kLayoutVersion, count, bytes, stride, first, trace.size()};
  std::memcpy(h + 1, trace.data(), trace.size() * sizeof(TracedBuffer));
  board_->arenas_free.store(count == kMaxArenas ? ~0u : (1u << count) - 1);
  segment_ = std::move(seg).value();
  return true;
}

bool SharedArenas::Map() {
  if (arenas_ != nullptr) return true;
  if (segment_.data() == nullptr) {
    auto seg = ShmSegment::Open(name_, /*writable=*/true);
    if (!seg.ok()) return false;
    segment_ = std::move(seg).value();
  }
  const auto* h = static_cast<const ArenasHeader*>(segment_.data());
  const bool valid = segment_.size() >= sizeof(ArenasHeader) && h->magic == kArenasMagic &&
                     h->version == kLayoutVersion && h->count > 0 && h->count <= kMaxArenas &&
                     h->first_arena + h->count * h->stride <= segment_.size();
  if (!valid) return false;
  arenas_ = static_cast<char*>(segment_.data()) + h->first_arena;
  stride_ = h->stride;
  arena_bytes_ = h->arena_bytes;
  count_ = h->count;
  allocator_->SetSharedRegion(arenas_, count_ * stride_);
  for (uint32_t j = 0; j < count_; ++j) Populate(arenas_ + j * stride_);
  return true;
}

// A chunk at a time: the kernel takes a range's pages from one process's mapping after another,
// so while it works through a whole arena the last processes hold pages the first no longer share
// (their PSS whole, their USS too). A reader of the processes one after another counted up to 3%
// of the arenas twice (a 4-worker run's peak PSS sum 1.03x the steady one); a chunk is freed
// from every mapping within microseconds.
namespace {
void FreePages(char* at, uint64_t bytes) {
  constexpr uint64_t kChunk = uint64_t(2) << 20;
  for (uint64_t off = 0; off < bytes; off += kChunk)
    ::madvise(at + off, std::min(kChunk, bytes - off), MADV_REMOVE);
}
}  // namespace

// The others wait until it is done: freeing 774 MiB mapped by 16 workers takes ~0.2 s, and a
// worker that exited meanwhile left the one freeing them holding what was left of them alone.
void SharedArenas::Release() {
  if (arenas_ == nullptr) return;
  uint32_t ready = uint32_t(ArenasState::kReady);
  if (board_->arenas_state.compare_exchange_strong(ready, uint32_t(ArenasState::kReleasing))) {
    const uint32_t free = board_->arenas_free.exchange(0);  // nobody takes an arena again
    for (uint32_t j = 0; j < count_; ++j)
      if ((free & (1u << j)) != 0) FreePages(arenas_ + j * stride_, stride_);
    SetState(board_, ArenasState::kReleased);
    return;
  }
  while (StateOf(board_) == ArenasState::kReleasing && !LeaderGone(lifetime_fd_))
    FutexWait(&board_->arenas_state, uint32_t(ArenasState::kReleasing));
}

void SharedArenas::WaitWhileMaking() {
  while (StateOf(board_) == ArenasState::kMaking && !LeaderGone(lifetime_fd_)) {
    FutexWait(&board_->arenas_state, uint32_t(ArenasState::kMaking));
  }
}

// Any free arena, this worker's own index first (so a worker mostly touches one arena's pages).
char* SharedArenas::TakeFree() {
  const uint32_t mine = 1u << (index_ % count_);
  uint32_t free = board_->arenas_free.load();
  while (free != 0) {
    const uint32_t pick = (free & mine) != 0 ? mine : (free & (~free + 1));
    if (board_->arenas_free.compare_exchange_weak(free, free & ~pick))
      return arenas_ + uint64_t(__builtin_ctz(pick)) * stride_;
  }
  return nullptr;
}

void SharedArenas::UseOwnArena() {
  own_arena_ = true;
  allocator_->OwnArena();
}

}  // namespace shoal
