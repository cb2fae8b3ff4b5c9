// The data_loading kind's batches (seed 003): which samples each batch holds, and the bytes a
// finished batch occupies in a slot of the batch ring (shared/ipc/batch_ring.h), written by a
// loader process (or the trainer itself, with no loaders) and read in place by the trainer. Pure:
// no LibTorch, so the daemon can size the ring and tests can check it byte for byte.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/kinds/data_loading/augment.h"

namespace shoal {

// Batch b's place in the run: epoch (1-based), its first position in that epoch's order, its size.
struct BatchSlice {
  uint32_t epoch = 0;
  uint64_t first = 0;
  uint32_t n = 0;
};

// Epochs of `samples` samples in batches of `batch`, the last of an epoch possibly short (as
// DataLoader's drop_last=False); batches are numbered 0.. across epochs.
struct EpochPlan {
  uint32_t epochs = 1;
  uint64_t samples = 0;  // per epoch
  uint32_t batch = 1;

  uint64_t BatchesPerEpoch() const { return (samples + batch - 1) / batch; }
  uint64_t TotalBatches() const { return BatchesPerEpoch() * epochs; }
  BatchSlice Slice(uint64_t b) const;
};

// Epoch e's order of the training set: a shuffle seeded by (seed, e), the same in every process
// (DataLoader's shuffle=True). The first plan.samples of it make the epoch.
std::vector<uint32_t> EpochOrder(uint64_t seed, uint32_t epoch, uint64_t n_train);

// A batch in a ring slot: this header, n * pixels floats (augmented, normalised), n int64 labels.
struct LoaderBatchHeader {
  uint32_t n;
  uint32_t epoch;
  uint64_t batch;
};

// The slot bytes a batch of up to `batch` samples of `pixels` needs.
uint64_t LoaderBatchBytes(uint32_t batch, uint32_t pixels);
const float* BatchImages(const uint8_t* slot);
const int64_t* BatchLabels(const uint8_t* slot, uint32_t pixels);

// Writes batch b into `out` (LoaderBatchBytes long): the samples order[slice.first ..] of the
// training images and labels, each augmented with the batch's own generator, so any process
// makes the same bytes for the same b.
void MakeLoaderBatch(const uint8_t* images, const uint8_t* labels,
                     const std::vector<uint32_t>& order, const BatchSlice& slice, uint64_t b,
                     uint64_t seed, const AugmentOptions& o, uint8_t* out);

}  // namespace shoal
