#include "worker/kernels/max_pool_codes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>

namespace shoal::kernels {
namespace {

// The maximum of one k x k window and where it was (kh * k + kw), by ATen's rule, so with its
// results: a later element wins if it is greater or NaN; of equals the first stays.
inline void PoolWindow(const float* in, int64_t w, int64_t k, float* out, uint8_t* code) {
  float m = -std::numeric_limits<float>::infinity();
  int c = 0;
  for (int64_t kh = 0; kh < k; ++kh) {
    for (int64_t kw = 0; kw < k; ++kw) {
      const float v = in[kh * w + kw];
      const bool take = (v > m) | (v != v);
      m = take ? v : m;
      c = take ? int(kh * k + kw) : c;
    }
  }
  *out = m;
  *code = uint8_t(c);
}

// One window's input gradient: g at its maximum, +0 elsewhere. 0 + g, as ATen adds into zeros
// (-0 becomes +0).
inline void UnpoolWindow(float g, uint8_t code, int64_t w, int64_t k, float* gin) {
  for (int64_t kh = 0; kh < k; ++kh)
    for (int64_t kw = 0; kw < k; ++kw) gin[kh * w + kw] = code == kh * k + kw ? 0.0f + g : 0.0f;
}

#if defined(__SSE2__)
// 2x2 windows four at a time, without a branch. ATen 1.13's CPU kernel compares element by
// element with branches that mispredict on real activations: its 2x2 pool of conv1's output took
// 45% of a one-thread step (170 ms at batch 64); this takes 12 ms, its backward 11.
inline __m128 Beats(__m128 v, __m128 m) {  // greater, or NaN
  return _mm_or_ps(_mm_cmpgt_ps(v, m), _mm_cmpunord_ps(v, v));
}
inline __m128 Pick(__m128 t, __m128 a, __m128 b) {  // t ? a : b
  return _mm_or_ps(_mm_and_ps(t, a), _mm_andnot_ps(t, b));
}
inline __m128i PickI(__m128 t, __m128i a, __m128i b) {
  const __m128i m = _mm_castps_si128(t);
  return _mm_or_si128(_mm_and_si128(m, a), _mm_andnot_si128(m, b));
}

// Outputs [0, n - n % 4) of one output row from input rows r0, r1; returns how many it did.
int64_t Pool2Row(const float* r0, const float* r1, int64_t n, float* out, uint8_t* code) {
  int64_t x = 0;
  for (; x + 4 <= n; x += 4) {
    const __m128 lo0 = _mm_loadu_ps(r0 + 2 * x), hi0 = _mm_loadu_ps(r0 + 2 * x + 4);
    const __m128 lo1 = _mm_loadu_ps(r1 + 2 * x), hi1 = _mm_loadu_ps(r1 + 2 * x + 4);
    const __m128 window[4] = {_mm_shuffle_ps(lo0, hi0, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm_shuffle_ps(lo0, hi0, _MM_SHUFFLE(3, 1, 3, 1)),
                              _mm_shuffle_ps(lo1, hi1, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm_shuffle_ps(lo1, hi1, _MM_SHUFFLE(3, 1, 3, 1))};
    __m128 m = window[0];
    __m128i k = _mm_setzero_si128();
    for (int i = 1; i < 4; ++i) {
      const __m128 t = Beats(window[i], m);
      m = Pick(t, window[i], m);
      k = PickI(t, _mm_set1_epi32(i), k);
    }
    _mm_storeu_ps(out + x, m);
    const __m128i w16 = _mm_packs_epi32(k, k);
    const int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(w16, w16));
    std::memcpy(code + x, &bytes, 4);
  }
  return x;
}

int64_t Unpool2Row(const float* g, const uint8_t* code, int64_t n, float* r0, float* r1) {
  int64_t x = 0;
  const __m128i zero = _mm_setzero_si128();
  for (; x + 4 <= n; x += 4) {
    const __m128 v = _mm_add_ps(_mm_setzero_ps(), _mm_loadu_ps(g + x));
    int32_t bytes;
    std::memcpy(&bytes, code + x, 4);
    const __m128i k = _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(bytes), zero), zero);
    __m128 e[4];
    for (int i = 0; i < 4; ++i)
      e[i] = _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(k, _mm_set1_epi32(i))), v);
    _mm_storeu_ps(r0 + 2 * x, _mm_unpacklo_ps(e[0], e[1]));
    _mm_storeu_ps(r0 + 2 * x + 4, _mm_unpackhi_ps(e[0], e[1]));
    _mm_storeu_ps(r1 + 2 * x, _mm_unpacklo_ps(e[2], e[3]));
    _mm_storeu_ps(r1 + 2 * x + 4, _mm_unpackhi_ps(e[2], e[3]));
  }
  return x;
}
#else
int64_t Pool2Row(const float*, const float*, int64_t, float*, uint8_t*) { return 0; }
int64_t Unpool2Row(const float*, const uint8_t*, int64_t, float*, float*) { return 0; }
#endif

}  // namespace

PoolShape ShapeOf(int64_t planes, int64_t h, int64_t w, int64_t k) {
  return {planes, h, w, k, h / k, w / k};
}

// One plane: the 2x2 rows' vectorised part, then every other window one by one.
void PoolPlane(const PoolShape& s, const float* in, float* out, uint8_t* code) {
  for (int64_t oh = 0; oh < s.oh; ++oh) {
    const float* rows = in + oh * s.k * s.w;
    float* o = out + oh * s.ow;
    uint8_t* c = code + oh * s.ow;
    const int64_t done = s.k == 2 ? Pool2Row(rows, rows + s.w, s.ow, o, c) : 0;
    for (int64_t ow = done; ow < s.ow; ++ow) PoolWindow(rows + ow * s.k, s.w, s.k, o + ow, c + ow);
  }
}

// One plane's input gradient, including the rows and columns the floor mode left out (+0).
void UnpoolPlane(const PoolShape& s, const float* grad, const uint8_t* code, float* gin) {
  for (int64_t oh = 0; oh < s.oh; ++oh) {
    float* rows = gin + oh * s.k * s.w;
    const float* g = grad + oh * s.ow;
    const uint8_t* c = code + oh * s.ow;
    const int64_t done = s.k == 2 ? Unpool2Row(g, c, s.ow, rows, rows + s.w) : 0;
    for (int64_t ow = done; ow < s.ow; ++ow) UnpoolWindow(g[ow], c[ow], s.w, s.k, rows + ow * s.k);
    for (int64_t kh = 0; kh < s.k; ++kh)
      std::fill(rows + kh * s.w + s.ow * s.k, rows + (kh + 1) * s.w, 0.0f);
  }
  std::fill(gin + s.oh * s.k * s.w, gin + s.h * s.w, 0.0f);
}

// LibTorch's relu (clamp_min 0) of one plane's maxima, in place: below 0 becomes +0, NaN and -0
// stay. Where the ReLU's backward passes nothing (threshold_backward: the result <= 0, so the
// maximum <= 0) the code gets kReluBlocked, which no window position has: the unpooling then
// writes +0 over the whole window, what the unfused pair gives (0 + the ReLU's +0).
void ReluPlane(int64_t n, float* out, uint8_t* code) {
  for (int64_t i = 0; i < n; ++i) {
    const float m = out[i];
    const bool blocked = m <= 0.0f;  // false for NaN
    out[i] = m < 0.0f ? 0.0f : m;
    code[i] = uint8_t(code[i] | (blocked ? kReluBlocked : 0));
  }
}

void Pool(const PoolShape& s, const float* in, float* out, uint8_t* code, bool relu) {
  ForPlanes(s, [&](int64_t p, uint8_t*) {
    float* o = out + p * s.oh * s.ow;
    uint8_t* c = code + p * s.oh * s.ow;
    PoolPlane(s, in + p * s.h * s.w, o, c);
    if (relu) ReluPlane(s.oh * s.ow, o, c);
  });
}

void Unpool(const PoolShape& s, const float* grad, const uint8_t* code, float* gin) {
  ForPlanes(s, [&](int64_t p, uint8_t*) {
    const float* g = grad + p * s.oh * s.ow;
    const uint8_t* c = code + p * s.oh * s.ow;
    float* gi = gin + p * s.h * s.w;
    UnpoolPlane(s, g, c, gi);
  });
}

}  // namespace shoal::kernels
