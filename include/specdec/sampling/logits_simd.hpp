// specdec — vector forms of the element-wise passes of logits processing on the host: the weights of step 2
// (logits_core.hpp), the unmasked mass M(0) and the normalisation of step 4. Each gives the same bits as the one-lane
// SPECDEC_HD code it replaces: per element the same IEEE operations in the same order (every product kept apart from
// the add after it by an empty asm, so no compiler fuses them), and the mass summed in the same 32 lanes of each tile
// in increasing j, then reduce_lanes and combine_tiles as before. With the one-lane loops a sampled row of 49,152 logits
// took about 300 us (bench_verify), most of a sampled decoder step's overhead; now about 45 us. Inside the AVX-512
// functions even the tails run as (padded) vectors: one-lane code compiled there may be contracted into FMAs.
//
// Paths: AVX-512 (16 lanes, chosen at run time when the CPU has AVX512F), 4-wide vectors (SSE2, the x86-64 baseline;
// any GCC/clang target with 16-byte vectors), one lane (any compiler). tests/core/test_logits.cpp compares every path
// the CPU has with the one-lane code bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "specdec/sampling/logits_core.hpp"
#include "specdec/sampling/residual.hpp"

namespace specdec::detail {

enum class LogitsPath { kOneLane, kVector4, kAvx512 };

/// The one-lane passes (the reference the vector paths equal).
inline void logit_weights_one_lane(const float* logits, std::int64_t n, float max_logit, float temperature,
                                   float* w) {
  const float inverse = inverse_temperature(temperature);
  for (std::int64_t x = 0; x < n; ++x) w[x] = logit_weight(logits[x], max_logit, inverse);
}

inline void tile_masses_one_lane(const float* w, std::int64_t n, float* masses) {
  for (std::int64_t t = 0; t < num_tiles(n); ++t) {
    float acc[kTileLanes] = {};
    const std::int64_t begin = t * kTileSize;
    for (std::int32_t j = 0; j < kTileSize / kTileLanes; ++j)
      for (std::int32_t l = 0; l < kTileLanes; ++l) {
        const std::int64_t x = begin + j * kTileLanes + l;
        if (x < n) acc[l] += w[x];
      }
    masses[t] = reduce_lanes(acc);
  }
}

inline void normalise_one_lane(float* w, std::int64_t n, float inverse) {
  for (std::int64_t x = 0; x < n; ++x) w[x] = normalised_weight(w[x], inverse);
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__SSE2__) || defined(__aarch64__))
#define SPECDEC_LOGITS_VECTORS 1

namespace simd {

template <int W>
struct Vec {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef std::int32_t I __attribute__((vector_size(4 * W)));
};

/// The value leaves a register untouched by the compiler's algebra: a product passed through here is never fused
/// into the following add (the vector twin of mul_rn's barrier).
template <class F>
__attribute__((always_inline)) inline F opaque(F v) {
#if defined(__x86_64__) || defined(__i386__)
  if constexpr (sizeof(F) == 64)
    __asm__("" : "+v"(v));
  else
    __asm__("" : "+x"(v));
#elif defined(__aarch64__)
  __asm__("" : "+w"(v));
#endif
  return v;
}

template <int W>
__attribute__((always_inline)) inline typename Vec<W>::F splat(float v) {
  typename Vec<W>::F r;
  for (int i = 0; i < W; ++i) r[i] = v;
  return r;
}

template <int W>
__attribute__((always_inline)) inline typename Vec<W>::I splat_i(std::int32_t v) {
  typename Vec<W>::I r;
  for (int i = 0; i < W; ++i) r[i] = v;
  return r;
}

/// exp_nonpositive on W lanes, operation for operation.
template <int W>
__attribute__((always_inline)) inline typename Vec<W>::F exp_nonpositive_v(typename Vec<W>::F x) {
  using F = typename Vec<W>::F;
  using I = typename Vec<W>::I;
  const F kLog2e = splat<W>(1.44269504088896341f), kLn2Hi = splat<W>(0.693359375f),
          kLn2Lo = splat<W>(-2.12194440e-4f), kRound = splat<W>(12582912.0f);
  const I live = x > splat<W>(-104.0f);  // false for -inf and NaN as well
  const F n = (opaque(x * kLog2e) + kRound) - kRound;
  F r = x + -opaque(n * kLn2Hi);
  r = r + -opaque(n * kLn2Lo);
  F poly = opaque(splat<W>(1.9875691500e-4f) * r) + splat<W>(1.3981999507e-3f);
  poly = opaque(poly * r) + splat<W>(8.3334519073e-3f);
  poly = opaque(poly * r) + splat<W>(4.1665795894e-2f);
  poly = opaque(poly * r) + splat<W>(1.6666665459e-1f);
  poly = opaque(poly * r) + splat<W>(5.0000001201e-1f);
  const F y = (opaque(poly * opaque(r * r)) + r) + splat<W>(1.0f);
  I ni = __builtin_convertvector(n, I);
  ni = live ? ni : splat_i<W>(0);  // dead lanes: any exponent in range; their result is 0 below
  const F normal = y * (F)((ni + 127) << 23);
  const F low = opaque(y * (F)((ni + (64 + 127)) << 23)) * splat<W>(bits_float(static_cast<std::uint32_t>(127 - 64) << 23));
  const F e = ni >= splat_i<W>(-126) ? normal : low;
  return live ? e : splat<W>(0.0f);
}

template <int W>
__attribute__((always_inline)) inline void logit_weights_v(const float* logits, std::int64_t n, float max_logit,
                                                           float temperature, float* w) {
  using F = typename Vec<W>::F;
  const F m = splat<W>(max_logit), t = splat<W>(inverse_temperature(temperature));
  std::int64_t x = 0;
  if (temperature == 1.0f) {
    for (; x + W <= n; x += W) {  // d * 1 == d for every float, so the product is skipped
      F l;
      std::memcpy(&l, logits + x, sizeof l);
      const F e = exp_nonpositive_v<W>(l - m);
      std::memcpy(w + x, &e, sizeof e);
    }
  }
  for (; x + W <= n; x += W) {
    F l;
    std::memcpy(&l, logits + x, sizeof l);
    const F e = exp_nonpositive_v<W>(opaque((l - m) * t));
    std::memcpy(w + x, &e, sizeof e);
  }
  if (x < n) {  // the tail in a vector too: one-lane code compiled for AVX-512 could fuse mul_rn's plain product
    F l = m;
    for (std::int64_t i = x; i < n; ++i) l[i - x] = logits[i];
    const F e = exp_nonpositive_v<W>(opaque((l - m) * t));
    for (std::int64_t i = x; i < n; ++i) w[i] = e[i - x];
  }
}

/// The mass of the tile starting at `begin` in step 1's order, lanes(x) giving the W weights of tokens [x, x + W): lane
/// l adds tokens begin + 32 j + l in increasing j from +0, then reduce_lanes. Shared by the tile masses of a weight row
/// (below) and of the race weights (race_weights.hpp).
template <int W, class Lanes>
__attribute__((always_inline)) inline float lane_order_mass(std::int64_t begin, Lanes&& lanes) {
  using F = typename Vec<W>::F;
  constexpr int kVectors = kTileLanes / W;
  F acc[kVectors];
  for (int u = 0; u < kVectors; ++u) acc[u] = splat<W>(0.0f);
  for (std::int32_t j = 0; j < kTileSize / kTileLanes; ++j)
    for (int u = 0; u < kVectors; ++u) acc[u] = acc[u] + lanes(begin + j * kTileLanes + u * W);
  float sums[kTileLanes];
  std::memcpy(sums, acc, sizeof sums);
  return reduce_lanes(sums);
}

template <int W>
__attribute__((always_inline)) inline void tile_masses_v(const float* w, std::int64_t n, float* masses) {
  using F = typename Vec<W>::F;
  for (std::int64_t t = 0; t < num_tiles(n); ++t)
    masses[t] = lane_order_mass<W>(t * kTileSize, [&](std::int64_t x) {
      F v = splat<W>(0.0f);  // tokens past n add +0 (exact: the lanes hold +0 or more)
      if (x + W <= n)
        std::memcpy(&v, w + x, sizeof v);
      else
        for (int i = 0; i < W && x + i < n; ++i) v[i] = w[x + i];
      return v;
    });
}

template <int W>
__attribute__((always_inline)) inline void normalise_v(float* w, std::int64_t n, float inverse) {
  using F = typename Vec<W>::F;
  const F m = splat<W>(inverse);
  std::int64_t x = 0;
  for (; x + W <= n; x += W) {
    F v;
    std::memcpy(&v, w + x, sizeof v);
    v = v * m;  // a lone product: nothing to contract it into
    std::memcpy(w + x, &v, sizeof v);
  }
  for (; x < n; ++x) w[x] = normalised_weight(w[x], inverse);
}

#if defined(__x86_64__)
#define SPECDEC_LOGITS_AVX512 1
__attribute__((target("avx512f"))) inline void logit_weights_avx512(const float* logits, std::int64_t n,
                                                                    float max_logit, float temperature, float* w) {
  logit_weights_v<16>(logits, n, max_logit, temperature, w);
}
__attribute__((target("avx512f"))) inline void tile_masses_avx512(const float* w, std::int64_t n, float* masses) {
  tile_masses_v<16>(w, n, masses);
}
__attribute__((target("avx512f"))) inline void normalise_avx512(float* w, std::int64_t n, float inverse) {
  normalise_v<16>(w, n, inverse);
}
#endif

}  // namespace simd
#endif

/// Whether this build and CPU can run `path`.
inline bool logits_path_available(LogitsPath path) {
  switch (path) {
    case LogitsPath::kOneLane:
      return true;
    case LogitsPath::kVector4:
#if defined(SPECDEC_LOGITS_VECTORS)
      return true;
#else
      return false;
#endif
    case LogitsPath::kAvx512:
#if defined(SPECDEC_LOGITS_AVX512)
      return __builtin_cpu_supports("avx512f");
#else
      return false;
#endif
  }
  return false;
}

/// The fastest path this CPU has (decided once).
inline LogitsPath best_logits_path() {
  static const LogitsPath best = logits_path_available(LogitsPath::kAvx512)    ? LogitsPath::kAvx512
                                 : logits_path_available(LogitsPath::kVector4) ? LogitsPath::kVector4
                                                                               : LogitsPath::kOneLane;
  return best;
}

/// w[x] = logit_weight(logits[x], max_logit, temperature) for x < n. `path` must be available.
inline void logit_weights(LogitsPath path, const float* logits, std::int64_t n, float max_logit, float temperature,
                          float* w) {
#if defined(SPECDEC_LOGITS_AVX512)
  if (path == LogitsPath::kAvx512) return simd::logit_weights_avx512(logits, n, max_logit, temperature, w);
#endif
#if defined(SPECDEC_LOGITS_VECTORS)
  if (path == LogitsPath::kVector4) return simd::logit_weights_v<4>(logits, n, max_logit, temperature, w);
#endif
  logit_weights_one_lane(logits, n, max_logit, temperature, w);
}

/// masses[t] = the mass of tile t of w (every weight >= +0, none masked), t < num_tiles(n).
inline void tile_masses(LogitsPath path, const float* w, std::int64_t n, float* masses) {
#if defined(SPECDEC_LOGITS_AVX512)
  if (path == LogitsPath::kAvx512) return simd::tile_masses_avx512(w, n, masses);
#endif
#if defined(SPECDEC_LOGITS_VECTORS)
  if (path == LogitsPath::kVector4) return simd::tile_masses_v<4>(w, n, masses);
#endif
  tile_masses_one_lane(w, n, masses);
}

/// The largest probability of softmax(logits[0 .. n) / temperature), whose largest logit is `max_logit`:
/// 1 / sum_x exp((l_x - max) / temperature), the sum with the weights and tile masses above (the same bits on every
/// path). A proposer's confidence in its argmax draft (DraftBatch::confidence). `scratch` is resized to n + the tile
/// count.
inline double top_probability(const float* logits, std::int64_t n, float max_logit, std::vector<float>& scratch,
                              float temperature = 1.0f) {
  const std::int64_t tiles = num_tiles(n);
  scratch.resize(static_cast<std::size_t>(n + tiles));
  const LogitsPath path = best_logits_path();
  logit_weights(path, logits, n, max_logit, temperature, scratch.data());
  float* masses = scratch.data() + n;
  tile_masses(path, scratch.data(), n, masses);
  const float total = combine_tiles(masses, tiles, 1);
  return total > 0.f ? std::min(1.0, 1.0 / static_cast<double>(total)) : 1.0;
}

/// w[x] = normalised_weight(w[x], inverse) for x < n (inverse = inverse_mass(M)).
inline void normalise_row(LogitsPath path, float* w, std::int64_t n, float inverse) {
#if defined(SPECDEC_LOGITS_AVX512)
  if (path == LogitsPath::kAvx512) return simd::normalise_avx512(w, n, inverse);
#endif
#if defined(SPECDEC_LOGITS_VECTORS)
  if (path == LogitsPath::kVector4) return simd::normalise_v<4>(w, n, inverse);
#endif
  normalise_one_lane(w, n, inverse);
}

}  // namespace specdec::detail
