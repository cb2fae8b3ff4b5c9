#include "shared/kinds/data_loading/augment.h"

namespace shoal {

void AugmentImage(const uint8_t* image, const AugmentOptions& o, std::mt19937_64& rng, float* out) {
  std::uniform_int_distribution<int> offset(0, int(2 * o.pad));
  std::bernoulli_distribution flip(o.flip_p);
  // The crop's top-left corner in the padded image; shifted back, its offset in the original.
  const int dy = offset(rng) - int(o.pad), dx = offset(rng) - int(o.pad);
  const bool mirror = flip(rng);
  const float zero = (0.0f - o.mean) / o.std;
  for (int r = 0; r < int(o.rows); ++r) {
    const int sr = r + dy;
    for (int c = 0; c < int(o.cols); ++c) {
      const int sc = (mirror ? int(o.cols) - 1 - c : c) + dx;
      const bool inside = sr >= 0 && sr < int(o.rows) && sc >= 0 && sc < int(o.cols);
      out[r * int(o.cols) + c] =
          inside ? (float(image[sr * int(o.cols) + sc]) / 255.0f - o.mean) / o.std : zero;
    }
  }
}

std::mt19937_64 AugmentRng(uint64_t seed, uint64_t batch) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(batch), uint32_t(batch >> 32)};
  return std::mt19937_64(seq);
}

}  // namespace shoal
