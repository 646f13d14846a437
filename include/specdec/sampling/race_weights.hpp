// specdec — the weights the host draws tokens from (residual.hpp's race: p itself, p with the rejected draft removed,
// max(p - q, 0)) and the tile masses of step 1 over them, on vectors. Host only; the CUDA kernels have their own
// (cuda/common.cuh, the same weights element for element).
//
// A draw reads every token's weight once for the tile masses, so after a rejection or for a sampled bonus token that
// pass is most of the draw: one lane at a time p without the rejected draft took 38 us for a 49,152-token row in cache,
// 3.0 us on AVX-512 (bench_verify BM_race_tile_masses; block.hpp's BlockResidualWeight also has a 16-lane form, figures
// in docs/block-verification.md). The vector forms give the same bits: a tile's 32 lanes become 2 AVX-512 (or 8 4-wide) vectors, lane
// l still adds the weights of tokens 32 j + l in increasing j from +0, then reduce_lanes; each weight is the same IEEE
// operations (a subtraction or block's fused w p - q, a comparison), invalid values become NaN as before. A partial
// last tile goes through the one-lane tile_mass. tests/core/test_chain.cpp compares every path the CPU has with it bit
// for bit, and each vector form with the one-lane weight token by token.
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "specdec/sampling/logits_simd.hpp"
#include "specdec/sampling/residual.hpp"

#if defined(SPECDEC_LOGITS_AVX512)
#include <immintrin.h>
#endif

namespace specdec::detail {

#if defined(SPECDEC_LOGITS_VECTORS)
namespace simd {
/// valid_probability on W lanes (all-ones where a >= 0 and a <= FLT_MAX; NaN compares false).
template <int W>
__attribute__((always_inline)) inline typename Vec<W>::I valid_lanes(typename Vec<W>::F a) {
  return (a >= splat<W>(0.0f)) & (a <= splat<W>(FLT_MAX));
}
template <int W>
__attribute__((always_inline)) inline typename Vec<W>::F load_lanes(const float* p) {
  typename Vec<W>::F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace simd
#endif

#if defined(SPECDEC_LOGITS_AVX512)
// The weights' 16-lane forms (members lanes16) use AVX-512 intrinsics: GCC 12 splits vector-extension comparisons of
// 64-byte vectors into one-lane compares. The same operations, the comparisons as masks.
#define SPECDEC_RACE_AVX512 __attribute__((target("avx512f"), always_inline))
namespace simd {
/// valid_probability on 16 lanes.
SPECDEC_RACE_AVX512 inline __mmask16 valid16(__m512 a) {
  return _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_GE_OQ) & _mm512_cmp_ps_mask(a, _mm512_set1_ps(FLT_MAX), _CMP_LE_OQ);
}
SPECDEC_RACE_AVX512 inline __m512 nan16() { return _mm512_set1_ps(__builtin_nanf("")); }
/// A residual's last steps on 16 lanes: max(d, 0), NaN where the probability a or b is not valid.
SPECDEC_RACE_AVX512 inline __m512 residual16(__m512 d, __m512 a, __m512 b) {
  const __m512 r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_GT_OQ), d);
  return _mm512_mask_blend_ps(valid16(a) & valid16(b), nan16(), r);
}
}  // namespace simd
#endif

/// The residual max(p - q, 0) (NaN where p or q is not a valid probability).
struct ResidualWeight {
  const float* p;
  const float* q;
  float operator()(std::int64_t x) const {
    const float a = p[x], b = q[x];
    const float d = a - b;
    const float w = d > 0.0f ? d : 0.0f;
    return valid_probability(a) && valid_probability(b) ? w : __builtin_nanf("");
  }
#if defined(SPECDEC_LOGITS_VECTORS)
  /// Tokens [x, x + W) at once, the operations of operator() lane by lane.
  template <int W>
  __attribute__((always_inline)) typename simd::Vec<W>::F lanes(std::int64_t x) const {
    using F = typename simd::Vec<W>::F;
    const F a = simd::load_lanes<W>(p + x), b = simd::load_lanes<W>(q + x);
    const F d = a - b;
    const F w = d > simd::splat<W>(0.0f) ? d : simd::splat<W>(0.0f);
    return (simd::valid_lanes<W>(a) & simd::valid_lanes<W>(b)) ? w : simd::splat<W>(__builtin_nanf(""));
  }
#endif
#if defined(SPECDEC_LOGITS_AVX512)
  SPECDEC_RACE_AVX512 __m512 lanes16(std::int64_t x) const {
    const __m512 a = _mm512_loadu_ps(p + x), b = _mm512_loadu_ps(q + x);
    return simd::residual16(_mm512_sub_ps(a, b), a, b);
  }
#endif
};

/// p with one token removed (NaN where p is not a valid probability).
struct RemovedWeight {
  const float* p;
  std::int64_t removed;
  float operator()(std::int64_t x) const {
    const float a = p[x];
    const float w = x == removed ? 0.0f : a;
    return valid_probability(a) ? w : __builtin_nanf("");
  }
#if defined(SPECDEC_LOGITS_VECTORS)
  template <int W>
  __attribute__((always_inline)) typename simd::Vec<W>::F lanes(std::int64_t x) const {
    using F = typename simd::Vec<W>::F;
    const F a = simd::load_lanes<W>(p + x);
    F w = a;
    if (removed >= x && removed < x + W) w[removed - x] = 0.0f;
    return simd::valid_lanes<W>(a) ? w : simd::splat<W>(__builtin_nanf(""));
  }
#endif
#if defined(SPECDEC_LOGITS_AVX512)
  SPECDEC_RACE_AVX512 __m512 lanes16(std::int64_t x) const {
    const __m512 a = _mm512_loadu_ps(p + x);
    __m512 w = a;
    if (removed >= x && removed < x + 16)
      w = _mm512_mask_mov_ps(w, static_cast<__mmask16>(1u << (removed - x)), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(simd::valid16(a), simd::nan16(), w);
  }
#endif
};

/// p itself (NaN where p is not a valid probability).
struct RowWeight {
  const float* p;
  float operator()(std::int64_t x) const {
    const float a = p[x];
    return valid_probability(a) ? a : __builtin_nanf("");
  }
#if defined(SPECDEC_LOGITS_VECTORS)
  template <int W>
  __attribute__((always_inline)) typename simd::Vec<W>::F lanes(std::int64_t x) const {
    const typename simd::Vec<W>::F a = simd::load_lanes<W>(p + x);
    return simd::valid_lanes<W>(a) ? a : simd::splat<W>(__builtin_nanf(""));
  }
#endif
#if defined(SPECDEC_LOGITS_AVX512)
  SPECDEC_RACE_AVX512 __m512 lanes16(std::int64_t x) const {
    const __m512 a = _mm512_loadu_ps(p + x);
    return _mm512_mask_blend_ps(simd::valid16(a), simd::nan16(), a);
  }
#endif
};

/// masses[t] = tile_mass(weight, t, vocab_size) for every tile, one lane at a time.
template <class Weight>
inline void race_tile_masses_one_lane(const Weight& weight, std::int64_t vocab_size, float* masses) {
  for (std::int64_t t = 0; t < num_tiles(vocab_size); ++t) masses[t] = tile_mass(weight, t, vocab_size);
}

#if defined(SPECDEC_LOGITS_VECTORS)
namespace simd {
template <int W, class Weight>
__attribute__((always_inline)) inline void race_tile_masses_v(const Weight& weight, std::int64_t vocab_size,
                                                              float* masses) {
  const std::int64_t full = vocab_size / kTileSize;
  for (std::int64_t t = 0; t < full; ++t)
    masses[t] = lane_order_mass<W>(t * kTileSize, [&](std::int64_t x) { return weight.template lanes<W>(x); });
  if (full < num_tiles(vocab_size)) masses[full] = tile_mass(weight, full, vocab_size);
}
#if defined(SPECDEC_LOGITS_AVX512)

// lane_order_mass's loop with the intrinsic weights (which a generic helper cannot inline without AVX-512 itself): lanes
// 0-15 and 16-31 of the tile.
template <class Weight>
__attribute__((target("avx512f"))) inline void race_tile_masses_avx512(const Weight& weight, std::int64_t vocab_size,
                                                                       float* masses) {
  const std::int64_t full = vocab_size / kTileSize;
  for (std::int64_t t = 0; t < full; ++t) {
    const std::int64_t begin = t * kTileSize;
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    for (std::int32_t j = 0; j < kTileSize / kTileLanes; ++j) {
      lo = _mm512_add_ps(lo, weight.lanes16(begin + j * kTileLanes));
      hi = _mm512_add_ps(hi, weight.lanes16(begin + j * kTileLanes + 16));
    }
    alignas(64) float lanes[kTileLanes];
    _mm512_store_ps(lanes, lo);
    _mm512_store_ps(lanes + 16, hi);
    masses[t] = reduce_lanes(lanes);
  }
  if (full < num_tiles(vocab_size)) masses[full] = tile_mass(weight, full, vocab_size);
}
#endif
}  // namespace simd
#endif

/// masses[t] = tile_mass(weight, t, vocab_size) for every tile t, on `path` (which must be available) for the weights
/// with a form for it (lanes16: ResidualWeight, RemovedWeight, RowWeight and block.hpp's BlockResidualWeight; lanes<4>:
/// the first three), one lane at a time otherwise.
template <class Weight>
inline void race_tile_masses(const Weight& weight, std::int64_t vocab_size, float* masses,
                             LogitsPath path = best_logits_path()) {
#if defined(SPECDEC_LOGITS_AVX512)
  if constexpr (requires { weight.lanes16(std::int64_t{0}); })
    if (path == LogitsPath::kAvx512) return simd::race_tile_masses_avx512(weight, vocab_size, masses);
#endif
#if defined(SPECDEC_LOGITS_VECTORS)
  if constexpr (requires { weight.template lanes<4>(std::int64_t{0}); })
    if (path == LogitsPath::kVector4) return simd::race_tile_masses_v<4>(weight, vocab_size, masses);
#endif
  (void)path;
  race_tile_masses_one_lane(weight, vocab_size, masses);
}

}  // namespace specdec::detail
