#include "shared/ipc/batch_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#include <new>

#include "shared/ipc/layout.h"

namespace shoal {
namespace {

uint64_t SlotsOffset() { return AlignUp(sizeof(RingHeader)); }
uint64_t DataOffset(uint32_t slots) { return SlotsOffset() + AlignUp(sizeof(RingSlot) * slots); }

void Wake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

uint64_t BatchRing::Bytes(uint32_t slots, uint64_t slot_bytes) {
  return DataOffset(slots) + AlignUp(slot_bytes) * slots;
}

BatchRing BatchRing::Create(void* mem, uint32_t slots, uint64_t slot_bytes) {
  auto* h = new (mem) RingHeader{};
  h->slots = slots;
  h->slot_bytes = slot_bytes;
  h->next_claim.store(0);
  h->closed.store(0);
  auto* s = reinterpret_cast<RingSlot*>(static_cast<char*>(mem) + SlotsOffset());
  for (uint32_t i = 0; i < slots; ++i) {
    new (&s[i]) RingSlot{};
    s[i].turn.store(i);
    s[i].full.store(0);
  }
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kRingMagic;
  return BatchRing(h);
}

StatusOr<BatchRing> BatchRing::Attach(void* mem, uint64_t size) {
  auto* h = static_cast<RingHeader*>(mem);
  if (size < sizeof(RingHeader) || h->magic != kRingMagic) return DataLoss("batch ring: bad magic");
  if (h->slots == 0 || Bytes(h->slots, h->slot_bytes) > size)
    return DataLoss("batch ring: header does not fit its segment");
  return BatchRing(h);
}

RingSlot* BatchRing::slot(uint64_t b) const {
  auto* s = reinterpret_cast<RingSlot*>(reinterpret_cast<char*>(header_) + SlotsOffset());
  return &s[b % header_->slots];
}

uint8_t* BatchRing::data(uint64_t b) const {
  return reinterpret_cast<uint8_t*>(header_) + DataOffset(header_->slots) +
         AlignUp(header_->slot_bytes) * (b % header_->slots);
}

uint64_t BatchRing::Claim() { return header_->next_claim.fetch_add(1); }

Status BatchRing::Wait(RingSlot* s, const std::function<bool()>& ready, const KeepWaiting& keep,
                       const char* what, uint64_t b) {
  for (;;) {
    const uint32_t seen = s->full.load(std::memory_order_acquire);
    if (ready()) return Status::Ok();
    if (keep && !keep())
      return Unavailable(std::string(what) + " batch " + std::to_string(b) + ": gave up waiting");
    timespec slice{0, 10'000'000};
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&s->full), FUTEX_WAIT, seen, &slice, nullptr,
              0);
  }
}

StatusOr<uint8_t*> BatchRing::BeginWrite(uint64_t b, const KeepWaiting& keep) {
  RingSlot* s = slot(b);
  bool closed = false;
  RETURN_IF_ERROR(Wait(
      s,
      [&] {
        closed = header_->closed.load() != 0;
        return closed || (s->turn.load(std::memory_order_acquire) == b && s->full.load() == 0);
      },
      keep, "writing", b));
  if (closed) return Unavailable("batch ring closed");
  return data(b);
}

void BatchRing::EndWrite(uint64_t b, uint32_t bytes) {
  RingSlot* s = slot(b);
  s->bytes = bytes;
  s->full.store(1, std::memory_order_release);
  Wake(&s->full);
}

StatusOr<std::pair<const uint8_t*, uint32_t>> BatchRing::BeginRead(uint64_t b,
                                                                   const KeepWaiting& keep) {
  RingSlot* s = slot(b);
  RETURN_IF_ERROR(Wait(
      s,
      [&] {
        return s->turn.load(std::memory_order_acquire) == b &&
               s->full.load(std::memory_order_acquire) == 1;
      },
      keep, "reading", b));
  return std::make_pair(static_cast<const uint8_t*>(data(b)), s->bytes);
}

void BatchRing::EndRead(uint64_t b) {
  RingSlot* s = slot(b);
  s->turn.store(b + header_->slots, std::memory_order_release);
  s->full.store(0, std::memory_order_release);
  Wake(&s->full);
}

void BatchRing::Close() {
  header_->closed.store(1);
  auto* s = reinterpret_cast<RingSlot*>(reinterpret_cast<char*>(header_) + SlotsOffset());
  for (uint32_t i = 0; i < header_->slots; ++i) Wake(&s[i].full);
}

}  // namespace shoal
