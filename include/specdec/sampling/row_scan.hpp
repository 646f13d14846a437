// specdec — one pass over a row of V floats: whether every value is valid, and the argmax (largest value, lowest index
// on ties). Host only (the CUDA kernels reduce in their own order). Used for the argmax of logits and of probability rows
// on the CPU. With GCC or clang it runs on 16 lanes of 4-wide vectors (SSE2, the x86-64 baseline; any target with
// 16-byte vectors): a one-lane loop that compares every value with the running argmax's took ~1.4 ns a value, 70 us for
// a 49,152-token row, most of a greedy step's verification. Comparisons only, so the result is exact whatever the split.
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <limits>

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

/// The argmax of v[0, n) (n < 2^31) and whether every value is valid. Meaningful only when all_valid.
template <RowValues kKind>
inline RowArgmax row_argmax(const float* v, std::int64_t n) {
  RowArgmax r;
  std::int64_t x = 0;
#if defined(__GNUC__) || defined(__clang__)
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
    for (int j = 0; j < 4; ++j) {
      if (first || m[u][j] > r.max || (m[u][j] == r.max && idx[u][j] < r.index)) {
        r.max = m[u][j];
        r.index = idx[u][j];
        first = false;
      }
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
