// A ring of batch slots in shared memory, between loader processes and one trainer (the
// data_loading kind, seed 003): loaders write finished batches straight into the slots, the
// trainer reads them in batch order, and nothing is copied through a pipe. Batch b always lives in
// slot b % slots; a slot takes batch b + slots only after the trainer has released batch b, so
// order is kept however many loaders there are and however fast each is. Waits are futexes on the
// slot's state word with short timeouts, and every wait asks the caller whether to go on (a loader
// that died, a trainer that went away), so no one waits forever.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>

#include "shared/status.h"

namespace shoal {

constexpr uint64_t kRingMagic = 0x53484f414c524e31ull;  // "SHOALRN1"

struct RingSlot {
  std::atomic<uint64_t> turn;  // the batch this slot may hold next
  std::atomic<uint32_t> full;  // 1: holds batch `turn`, written; 0: free for it
  uint32_t bytes;              // of the batch held
};

struct RingHeader {
  uint64_t magic;
  uint32_t slots;
  uint32_t pad;
  uint64_t slot_bytes;
  std::atomic<uint64_t> next_claim;  // the next batch a loader takes on
  std::atomic<uint32_t> closed;      // the trainer wants no more
};

class BatchRing {
 public:
  // Called every wait slice (about 10 ms); returning false ends the wait with UNAVAILABLE.
  using KeepWaiting = std::function<bool()>;

  // The bytes a ring of `slots` slots of `slot_bytes` needs.
  static uint64_t Bytes(uint32_t slots, uint64_t slot_bytes);
  // A new ring in `mem` (zeroed or not) of at least Bytes(slots, slot_bytes).
  static BatchRing Create(void* mem, uint32_t slots, uint64_t slot_bytes);
  // A ring another process created; checks its header against the mapping's size.
  static StatusOr<BatchRing> Attach(void* mem, uint64_t size);

  // Loader: the next batch number to produce (each number goes to exactly one loader).
  uint64_t Claim();
  // Loader: waits until batch b's slot is free for it; its buffer (slot_bytes long). UNAVAILABLE
  // when the ring is closed or `keep` says stop.
  StatusOr<uint8_t*> BeginWrite(uint64_t b, const KeepWaiting& keep);
  // Loader: batch b is written (`bytes` of it); the trainer may take it.
  void EndWrite(uint64_t b, uint32_t bytes);
  // Trainer: waits until batch b is there; its bytes. UNAVAILABLE when `keep` says stop.
  StatusOr<std::pair<const uint8_t*, uint32_t>> BeginRead(uint64_t b, const KeepWaiting& keep);
  // Trainer: done with batch b; its slot is free for batch b + slots.
  void EndRead(uint64_t b);
  // Trainer: no more batches are wanted; waiting loaders return UNAVAILABLE.
  void Close();

  uint32_t slots() const { return header_->slots; }
  uint64_t slot_bytes() const { return header_->slot_bytes; }

 private:
  explicit BatchRing(RingHeader* h) : header_(h) {}
  RingSlot* slot(uint64_t b) const;
  uint8_t* data(uint64_t b) const;
  // Waits until `ready` holds, waking on the slot's `full` word.
  Status Wait(RingSlot* s, const std::function<bool()>& ready, const KeepWaiting& keep,
              const char* what, uint64_t b);

  RingHeader* header_;
};

}  // namespace shoal
