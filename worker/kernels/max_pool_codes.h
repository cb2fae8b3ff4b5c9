// Max-pooling with kernel = stride = k (k <= 16, no padding, floor mode) over float planes, by
// ATen's rule and with its results, recording where each maximum was as a one-byte code
// (kh * k + kw) rather than ATen's int64 index. The lean max-pool (worker/models/lean_ops.h)
// saves the codes; Shoal's CPU kernels (worker/kernels/shoal_kernels.h) turn them into ATen's
// indices. The 2x2 case runs four windows at a time without a branch.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace shoal::kernels {

// Planes (N*C) of H x W pooled by k x k windows at stride k, floor mode.
struct PoolShape {
  int64_t planes, h, w, k, oh, ow;
};

PoolShape ShapeOf(int64_t planes, int64_t h, int64_t w, int64_t k);

// One plane: `in` H x W, `out` and `code` OH x OW.
void PoolPlane(const PoolShape& s, const float* in, float* out, uint8_t* code);
// One plane's input gradient, H x W, every element written: the output's gradient (0 + g, as
// ATen adds into zeros) where the code says the maximum was, +0 elsewhere and in the rows and
// columns the floor mode left out.
void UnpoolPlane(const PoolShape& s, const float* grad, const uint8_t* code, float* gin);

// Runs fn(plane, codes) over every plane on ATen's intra-op threads, `codes` a scratch plane of
// OH x OW codes for the caller's use. (ATen's parallel_for is inline: the calling file must be
// built with OpenMP to run on more than one thread, worker/CMakeLists.txt.)
template <typename Fn>
void ForPlanes(const PoolShape& s, Fn fn) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.h * s.w));
  at::parallel_for(0, s.planes, grain, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> codes(size_t(s.oh * s.ow));
    for (int64_t p = begin; p < end; ++p) fn(p, codes.data());
  });
}

// Every plane, on ATen's intra-op threads. With `relu`, then LibTorch's relu of the maxima in
// place (below 0 becomes +0; NaN and -0 stay), the code marked kReluBlocked where the ReLU's
// backward passes nothing (the maximum <= 0); Unpool then writes +0 over that window, as the
// unfused pair does. k <= 8 with `relu` (codes below 64).
void Pool(const PoolShape& s, const float* in, float* out, uint8_t* code, bool relu = false);
constexpr uint8_t kReluBlocked = 0x80;
void Unpool(const PoolShape& s, const float* grad, const uint8_t* code, float* gin);

}  // namespace shoal::kernels
