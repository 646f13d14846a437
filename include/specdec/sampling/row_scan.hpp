// specdec — one pass over a row of V floats: whether every value is valid, and the argmax (largest value, lowest index
// on ties). Host only (the CUDA kernels reduce in their own order). Used for the argmax of logits and of probability rows
// on the CPU. With GCC or clang it runs on 64 lanes of AVX-512 when the CPU has it (chosen at run time), else on 16
// lanes of 4-wide vectors (SSE2, the x86-64 baseline; any target with 16-byte vectors): a one-lane loop that compares every value with the running argmax's took ~1.4 ns a value, 70 us for
// a 49,152-token row, most of a greedy step's verification. Comparisons only, so the result is exact whatever the split.
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <limits>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace specdec::detail {

/// What counts as a valid value: logits (anything but NaN and +inf) or probabilities (finite and >= 0).
enum class RowValues { kLogits, kProbabilities };

struct RowArgmax {
  bool all_valid = true;
  float max = -std::numeric_limits<float>::infinity();
  std::int64_t index = 0;  ///< the lowest index holding max (0 for an empty row or one of -inf only)
};

template <RowValues kKind>
inline bool row_value_valid(float v) {
  if constexpr (kKind == RowValues::kLogits) return v <= FLT_MAX;
  return v >= 0.0f && v <= FLT_MAX;
}

/// Folds lane (value m, index i) into r: the largest value, lowest index on ties.
inline void fold_lane(RowArgmax& r, float m, std::int64_t i, bool& first) {
  if (first || m > r.max || (m == r.max && i < r.index)) {
    r.max = m;
    r.index = i;
    first = false;
  }
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define SPECDEC_ROW_SCAN_AVX512 1
/// The body on 64 lanes of AVX-512 (4 vectors of 16 in flight): returns how many values it covered, folded into r.
template <RowValues kKind>
__attribute__((target("avx512f"))) inline std::int64_t row_argmax_avx512(const float* v, std::int64_t n,
                                                                         RowArgmax& r) {
  constexpr int kVectors = 4;
  __m512 m[kVectors];
  __m512i idx[kVectors];
  for (int u = 0; u < kVectors; ++u) {
    m[u] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    idx[u] = _mm512_setzero_si512();
  }
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 big = _mm512_set1_ps(FLT_MAX), zero = _mm512_setzero_ps();
  __mmask16 good = 0xffff;
  std::int64_t x = 0;
  for (; x + 16 * kVectors <= n; x += 16 * kVectors)
    for (int u = 0; u < kVectors; ++u) {
      const __m512 a = _mm512_loadu_ps(v + x + 16 * u);
      good &= _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ);  // false for NaN and +inf
      if constexpr (kKind == RowValues::kProbabilities) good &= _mm512_cmp_ps_mask(a, zero, _CMP_GE_OQ);
      const __mmask16 gt = _mm512_cmp_ps_mask(a, m[u], _CMP_GT_OQ);
      m[u] = _mm512_mask_blend_ps(gt, m[u], a);
      idx[u] = _mm512_mask_blend_epi32(gt, idx[u], _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(x + 16 * u))));
    }
  r.all_valid = r.all_valid && good == 0xffff;
  bool first = true;
  for (int u = 0; u < kVectors; ++u) {
    alignas(64) float mv[16];
    alignas(64) std::int32_t iv[16];
    _mm512_store_ps(mv, m[u]);
    _mm512_store_si512(iv, idx[u]);
    for (int j = 0; j < 16; ++j) fold_lane(r, mv[j], iv[j], first);
  }
  return x;
}
#endif

/// The argmax of v[0, n) (n < 2^31) and whether every value is valid. Meaningful only when all_valid.
template <RowValues kKind>
inline RowArgmax row_argmax(const float* v, std::int64_t n) {
  RowArgmax r;
  std::int64_t x = 0;
#if defined(SPECDEC_ROW_SCAN_AVX512)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && n >= 64) {
    x = row_argmax_avx512<kKind>(v, n, r);
  } else
#endif
#if defined(__GNUC__) || defined(__clang__)
  {
    typedef float F4 __attribute__((vector_size(16)));
    typedef std::int32_t I4 __attribute__((vector_size(16)));
    constexpr int kVectors = 4;  // 16 lanes: independent chains for the pipeline
    const float ninf = -std::numeric_limits<float>::infinity();
    F4 m[kVectors];
    I4 idx[kVectors];
    I4 bad = {0, 0, 0, 0};
    for (int u = 0; u < kVectors; ++u) {
      m[u] = F4{ninf, ninf, ninf, ninf};
      idx[u] = I4{0, 0, 0, 0};
    }
    const I4 lane = {0, 1, 2, 3};
    for (; x + 4 * kVectors <= n; x += 4 * kVectors)
      for (int u = 0; u < kVectors; ++u) {
        F4 a;
        std::memcpy(&a, v + x + 4 * u, sizeof a);
        if constexpr (kKind == RowValues::kLogits)
          bad |= ~(a <= FLT_MAX);
        else
          bad |= ~(a >= 0.0f) | ~(a <= FLT_MAX);
        const I4 gt = a > m[u];
        m[u] = gt ? a : m[u];
        idx[u] = gt ? lane + static_cast<std::int32_t>(x + 4 * u) : idx[u];
      }
    for (int j = 0; j < 4; ++j) r.all_valid = r.all_valid && bad[j] == 0;
    bool first = true;
    for (int u = 0; u < kVectors; ++u)
      for (int j = 0; j < 4; ++j) fold_lane(r, m[u][j], idx[u][j], first);
  }
#endif
  for (; x < n; ++x) {
    r.all_valid = r.all_valid && row_value_valid<kKind>(v[x]);
    if (v[x] > r.max) {
      r.max = v[x];
      r.index = x;
    }
  }
  return r;
}

}  // namespace specdec::detail
