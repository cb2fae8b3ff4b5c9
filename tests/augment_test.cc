// The data_loading kind's transforms: crop with padding, flip, normalise — exact, seeded, and with
// the distribution they claim.
#include "shared/augment.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace shoal {
namespace {

std::vector<uint8_t> Image() {
  std::vector<uint8_t> img(28 * 28);
  for (size_t i = 0; i < img.size(); ++i) img[i] = uint8_t((i * 37) % 251);
  return img;
}

float Norm(uint8_t v, const AugmentOptions& o) { return (float(v) / 255.0f - o.mean) / o.std; }

TEST(AugmentTest, NoPadNoFlipIsNormaliseOnly) {
  AugmentOptions o;
  o.pad = 0;
  o.flip_p = 0;
  auto img = Image();
  std::vector<float> out(784);
  auto rng = AugmentRng(1, 0);
  AugmentImage(img.data(), o, rng, out.data());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_FLOAT_EQ(out[i], Norm(img[i], o)) << i;
}

TEST(AugmentTest, AlwaysFlipMirrorsEachRow) {
  AugmentOptions o;
  o.pad = 0;
  o.flip_p = 1;
  auto img = Image();
  std::vector<float> out(784);
  auto rng = AugmentRng(1, 0);
  AugmentImage(img.data(), o, rng, out.data());
  for (int r = 0; r < 28; ++r)
    for (int c = 0; c < 28; ++c) ASSERT_FLOAT_EQ(out[r * 28 + c], Norm(img[r * 28 + 27 - c], o));
}

// Each output is the image shifted by one (dy, dx) in [-4, 4]^2, zeros where it left the frame;
// over many draws every shift occurs and about half are flipped.
TEST(AugmentTest, CropsAreShiftsWithinThePaddingAndFlipsHalf) {
  AugmentOptions o;
  auto img = Image();
  std::vector<float> out(784);
  std::set<std::pair<int, int>> shifts;
  int flipped = 0;
  const int n = 2000;
  for (int k = 0; k < n; ++k) {
    auto rng = AugmentRng(7, uint64_t(k));
    AugmentImage(img.data(), o, rng, out.data());
    bool found = false;
    for (int mirror = 0; mirror < 2 && !found; ++mirror)
      for (int dy = -4; dy <= 4 && !found; ++dy)
        for (int dx = -4; dx <= 4 && !found; ++dx) {
          bool all = true;
          for (int r = 0; r < 28 && all; ++r)
            for (int c = 0; c < 28 && all; ++c) {
              const int sr = r + dy, sc = (mirror ? 27 - c : c) + dx;
              const bool in = sr >= 0 && sr < 28 && sc >= 0 && sc < 28;
              all = out[r * 28 + c] == (in ? Norm(img[sr * 28 + sc], o) : Norm(0, o));
            }
          if (all) {
            found = true;
            shifts.insert({dy, dx});
            flipped += mirror;
          }
        }
    ASSERT_TRUE(found) << "draw " << k << " is no shift of the image";
  }
  EXPECT_EQ(shifts.size(), 81u);
  EXPECT_NEAR(double(flipped) / n, 0.5, 0.05);
}

TEST(AugmentTest, TheSameBatchGetsTheSameTransformsWhoeverMakesIt) {
  AugmentOptions o;
  auto img = Image();
  std::vector<float> a(784), b(784), c(784);
  auto r1 = AugmentRng(3, 41), r2 = AugmentRng(3, 41), r3 = AugmentRng(3, 42);
  for (int i = 0; i < 8; ++i) {
    AugmentImage(img.data(), o, r1, a.data());
    AugmentImage(img.data(), o, r2, b.data());
    AugmentImage(img.data(), o, r3, c.data());
    ASSERT_EQ(a, b);
  }
  EXPECT_NE(a, c);  // another batch, other draws (this pair differs; checked)
}

}  // namespace
}  // namespace shoal
