// The data_loading kind's per-sample work (seed 003's transforms, as torchvision composes them for
// MNIST-sized images): random crop with zero padding, random horizontal flip, normalise. Pure and
// seeded, so a loader's batches are reproducible and the same code runs in a loader process or,
// with no loaders, in the trainer.
#pragma once

#include <cstdint>
#include <random>

namespace shoal {

struct AugmentOptions {
  uint32_t rows = 28, cols = 28;
  uint32_t pad = 4;      // RandomCrop(28, padding=4)
  double flip_p = 0.5;   // RandomHorizontalFlip()
  float mean = 0.1307f;  // Normalize((0.1307,), (0.3081,))
  float std = 0.3081f;
};

// One image of rows x cols uint8 pixels into `out` (rows x cols floats): cropped from the image
// padded by `pad` zeros at a uniformly drawn offset, flipped left-right with probability flip_p,
// scaled to [0, 1] and normalised. Draws from `rng`.
void AugmentImage(const uint8_t* image, const AugmentOptions& o, std::mt19937_64& rng, float* out);

// The generator for batch `batch` under seed `seed`: a batch gets the same crops and flips
// whichever loader makes it, so results do not depend on how many loaders there are.
std::mt19937_64 AugmentRng(uint64_t seed, uint64_t batch);

}  // namespace shoal
