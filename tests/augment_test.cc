// The data_loading kind's transforms: crop with padding, flip, normalise — exact, seeded, and with
// the distribution they claim.
#include "shared/kinds/data_loading/augment.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <tuple>
#include <vector>

namespace shoal {
namespace {

std::vector<uint8_t> Image() {
  std::vector<uint8_t> img(28 * 28);
  for (size_t i = 0; i < img.size(); ++i) img[i] = uint8_t((i * 37) % 251);
  return img;
}

float Norm(uint8_t v, const AugmentOptions& o) { return (float(v) / 255.0f - o.mean) / o.std; }

// The image augmented once, with the generator of (seed, batch).
std::vector<float> Augmented(const std::vector<uint8_t>& img, const AugmentOptions& o,
                             uint64_t seed = 1, uint64_t batch = 0) {
  std::vector<float> out(784);
  auto rng = AugmentRng(seed, batch);
  AugmentImage(img.data(), o, rng, out.data());
  return out;
}

// Whether `out` is the image (mirrored first when `mirror`) shifted by (dy, dx), zeros where it
// left the frame.
bool IsShift(const std::vector<float>& out, const std::vector<uint8_t>& img,
             const AugmentOptions& o, bool mirror, int dy, int dx) {
  for (int r = 0; r < 28; ++r) {
    for (int c = 0; c < 28; ++c) {
      const int sr = r + dy, sc = (mirror ? 27 - c : c) + dx;
      const bool in = sr >= 0 && sr < 28 && sc >= 0 && sc < 28;
      if (out[r * 28 + c] != (in ? Norm(img[sr * 28 + sc], o) : Norm(0, o))) return false;
    }
  }
  return true;
}

// The (mirror, dy, dx) that `out` is, if any.
std::optional<std::tuple<bool, int, int>> ShiftOf(const std::vector<float>& out,
                                                  const std::vector<uint8_t>& img,
                                                  const AugmentOptions& o) {
  for (bool mirror : {false, true})
    for (int dy = -4; dy <= 4; ++dy)
      for (int dx = -4; dx <= 4; ++dx)
        if (IsShift(out, img, o, mirror, dy, dx)) return std::tuple{mirror, dy, dx};
  return std::nullopt;
}

TEST(AugmentTest, NoPadNoFlipIsNormaliseOnly) {
  AugmentOptions o;
  o.pad = 0;
  o.flip_p = 0;
  const auto img = Image();
  const auto out = Augmented(img, o);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_FLOAT_EQ(out[i], Norm(img[i], o)) << i;
}

TEST(AugmentTest, AlwaysFlipMirrorsEachRow) {
  AugmentOptions o;
  o.pad = 0;
  o.flip_p = 1;
  const auto img = Image();
  const auto out = Augmented(img, o);
  for (int r = 0; r < 28; ++r)
    for (int c = 0; c < 28; ++c) ASSERT_FLOAT_EQ(out[r * 28 + c], Norm(img[r * 28 + 27 - c], o));
}

// Each output is the image shifted by one (dy, dx) in [-4, 4]^2, zeros where it left the frame;
// over many draws every shift occurs and about half are flipped.
TEST(AugmentTest, CropsAreShiftsWithinThePaddingAndFlipsHalf) {
  AugmentOptions o;
  const auto img = Image();
  std::set<std::pair<int, int>> shifts;
  int flipped = 0;
  const int n = 2000;
  for (int k = 0; k < n; ++k) {
    const auto shift = ShiftOf(Augmented(img, o, 7, uint64_t(k)), img, o);
    ASSERT_TRUE(shift.has_value()) << "draw " << k << " is no shift of the image";
    const auto [mirror, dy, dx] = *shift;
    shifts.insert({dy, dx});
    flipped += mirror;
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
