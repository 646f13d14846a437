// specdec — the arithmetic of logits processing (temperature, top-k, top-p, min-p -> probabilities) shared by the CPU
// reference (sampling/logits.hpp) and the CUDA kernel (cuda/logits.cuh). Every value that decides a probability is
// computed by the SPECDEC_HD functions below, from integer operations and single IEEE float operations only (no fused
// multiply-add: products go through mul_rn, which neither side can contract), so the host and the device produce the
// same float bits whatever the contraction flags (build without fast-math).
//
// One row of V logits l_x, parameters (T, k, p, m):
//  1. Checks: NaN or +inf anywhere -> kInvalidProbability; every l_x = -inf -> kZeroMass. The argmax is the largest
//     l_x, lowest id on ties. T = 0: one-hot on the argmax.
//  2. Weights e_x = exp_nonpositive((l_x - l_max) * inverse_temperature(T)) (1 / T once a row, at most FLT_MAX,
//     then a product per token): a deterministic exp (range reduction by ln 2, Cephes polynomial with every product
//     rounded on its own, exact scaling by 2^n, denormals kept), so e_argmax = 1 exactly and -inf logits give 0.
//  3. The cut. The descending order of the tokens with e_x > 0, ties broken by lower id, is the order of the 64-bit
//     key(x) = bits(e_x) << 32 | (V - 1 - x) (positive floats order like their bit patterns). Top-k, top-p and min-p
//     each keep a prefix of that order, i.e. the set {x : e_x > 0, key(x) >= T} for a threshold key T; the kept set
//     is that of the largest of the three thresholds:
//       top-k (0 < k < number of positive weights): T_k = the k-th largest key;
//       top-p (p < 1): T_p = the largest T with M(max(T, T_k)) >= p * M(T_k), where M(T) is the masked mass below:
//         the smallest prefix (inside the top-k set) whose mass reaches p times the top-k set's mass, the crossing
//         token included;
//       min-p (m > 0): T_m = bits(m * e_argmax) << 32, i.e. {e_x >= m * e_max}.
//     M(T), the masked mass, is the float sum of e_x over {e_x > 0, key(x) >= T} in the fixed order of residual.hpp
//     step 1 (tiles of 1024, lane l adds tokens 32 j + l in increasing j, lanes halve 16, 8, .., 1), and tiles
//     combined pairwise: for s = 1, 2, 4, ..: m[t] += m[t + s] for t = 0, 2s, 4s, ... (combine_tiles). Rounding is
//     monotone, so M is non-increasing in T, and both thresholds are found by a digit search on the key, 4 bits at a
//     time from the top (8 digits for the weight, ceil(bits(V - 1) / 4) for the id): at each digit the 15 thresholds
//     base | c << shift (c = 1..15) are measured together (a count for top-k, M for top-p) and the largest c that
//     still reaches the target is kept. The CPU sums only the candidates still above the base (adding 0.0f to a
//     lane is exact, so skipping an excluded token is the same as adding 0); the kernel sums every token.
//  4. probs_x = e_x * inverse_mass(M(T)) for the kept tokens (one division per row, 1 / M, then a product per token:
//     M >= e_argmax = 1, so 1 / M is a normal float in [1 / V, 1]), exactly 0 for the others.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "specdec/sampling/config.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/residual.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec {

/// How one row turns logits into probabilities: SamplingParams without the seed (the layout the kernels read).
struct LogitsParams {
  float temperature = 1.0f;  ///< 0 = greedy
  std::int32_t top_k = 0;    ///< 0 = off
  float top_p = 1.0f;        ///< 1 = off
  float min_p = 0.0f;        ///< 0 = off
};

namespace detail {

/// Digits of the cut search: 15 thresholds are measured per pass.
inline constexpr int kCutDigitBits = 4;
inline constexpr int kCutDigitValues = 1 << kCutDigitBits;  // 16: slot 0 is the base itself
inline constexpr int kMaxCutDigits = 16;

SPECDEC_INLINE std::uint32_t float_bits(float v) {
#if defined(SPECDEC_ON_DEVICE)
  return __float_as_uint(v);
#else
  std::uint32_t u;
  __builtin_memcpy(&u, &v, sizeof u);
  return u;
#endif
}

SPECDEC_INLINE float bits_float(std::uint32_t u) {
#if defined(SPECDEC_ON_DEVICE)
  return __uint_as_float(u);
#else
  float v;
  __builtin_memcpy(&v, &u, sizeof v);
  return v;
#endif
}

/// The domain of every parameter (validate() of params.hpp without the messages).
SPECDEC_INLINE bool logits_params_ok(const LogitsParams& p) {
  return p.temperature >= 0.0f && p.temperature <= FLT_MAX && p.top_k >= 0 && p.top_p > 0.0f && p.top_p <= 1.0f &&
         p.min_p >= 0.0f && p.min_p <= 1.0f;
}

/// NaN or +inf (a logit may be -inf: a banned token).
SPECDEC_INLINE bool logit_invalid(float v) { return !(v <= FLT_MAX); }

/// a * b rounded once, never fused with a following add: __fmul_rn on the device (nvcc never contracts it, whatever
/// -fmad says); on an x86 host built without FMA instructions the plain product (there is nothing to contract it into);
/// otherwise an empty asm that takes the rounded product as its operand, so no compiler can contract it into a later
/// add (GCC -ffp-contract=fast with -mfma or on aarch64, clang -ffp-contract=fast). Unlike std::fma, never a software
/// call.
SPECDEC_INLINE float mul_rn(float a, float b) {
#if defined(SPECDEC_ON_DEVICE)
  return __fmul_rn(a, b);
#elif (defined(__x86_64__) || defined(__i386__)) && !defined(__FMA__) && !defined(__FMA4__)
  return a * b;  // no FMA instructions in this build: nothing can be contracted
#else
  float p = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(p));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(p));
#else
  volatile float barrier = p;
  p = barrier;
#endif
  return p;
#endif
}

/// a + b rounded once (never reassociated or fused on the device).
SPECDEC_INLINE float add_rn(float a, float b) {
#if defined(SPECDEC_ON_DEVICE)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// exp(x) for x <= 0 (or -inf, or NaN -> 0), within 2 ulp of the true value, the same bits on host and device.
/// exp(0) = 1 exactly; results below 2^-126 are denormals, below ~2^-150 zero. Every product is rounded on its own
/// (mul_rn), so the bits do not depend on contraction flags on either side.
SPECDEC_INLINE float exp_nonpositive(float x) {
  if (!(x > -104.0f)) return 0.0f;  // exp(-104) < 2^-150: rounds to 0 (also -inf and NaN)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // Cephes' split of ln 2 (n * kLn2Hi is exact)
  constexpr float kRound = 12582912.0f;                             // 1.5 * 2^23: t + kRound - kRound = rint(t)
  const float n = add_rn(add_rn(mul_rn(x, kLog2e), kRound), -kRound);  // in [-150, 0]
  float r = add_rn(x, -mul_rn(n, kLn2Hi));
  r = add_rn(r, -mul_rn(n, kLn2Lo));  // |r| <= ~0.347
  // Cephes expf: e^r = 1 + r + r^2 * P(r).
  float poly = add_rn(mul_rn(1.9875691500e-4f, r), 1.3981999507e-3f);
  poly = add_rn(mul_rn(poly, r), 8.3334519073e-3f);
  poly = add_rn(mul_rn(poly, r), 4.1665795894e-2f);
  poly = add_rn(mul_rn(poly, r), 1.6666665459e-1f);
  poly = add_rn(mul_rn(poly, r), 5.0000001201e-1f);
  const float y = add_rn(add_rn(mul_rn(poly, mul_rn(r, r)), r), 1.0f);
  const int ni = static_cast<int>(n);
  if (ni >= -126) return mul_rn(y, bits_float(static_cast<std::uint32_t>(ni + 127) << 23));
  // Denormal range: scale in two exact-exponent steps (the first stays normal).
  return mul_rn(mul_rn(y, bits_float(static_cast<std::uint32_t>(ni + 64 + 127) << 23)),
                bits_float(static_cast<std::uint32_t>(127 - 64) << 23));
}

/// Step 2's factor for temperature T > 0: 1 / T, correctly rounded, at most FLT_MAX (below T = 2^-128 the quotient
/// overflows, and +inf times the argmax's difference 0 would be NaN; with FLT_MAX that difference stays 0, and any
/// difference beyond 2^-121 in magnitude still scales below -104, a weight of 0).
SPECDEC_INLINE float inverse_temperature(float temperature) {
  const float v = 1.0f / temperature;
  return v < FLT_MAX ? v : FLT_MAX;
}

/// The unnormalised weight of one logit (step 2): exp((logit - max_logit) * inverse), inverse =
/// inverse_temperature(T); the product rounded once (mul_rn: never fused into exp's first add).
SPECDEC_INLINE float logit_weight(float logit, float max_logit, float inverse) {
  return exp_nonpositive(mul_rn(logit - max_logit, inverse));
}

/// Step 4's factor: 1 / M, correctly rounded (M >= 1: the argmax's weight 1 is always kept).
SPECDEC_INLINE float inverse_mass(float mass) { return 1.0f / mass; }

/// A kept weight normalised (step 4): e * (1 / M), rounded once.
SPECDEC_INLINE float normalised_weight(float e, float inverse) { return mul_rn(e, inverse); }

/// The order key of step 3 (only meaningful for weight > 0).
SPECDEC_INLINE std::uint64_t cut_key(float weight, std::int64_t x, std::int64_t vocab_size) {
  return (static_cast<std::uint64_t>(float_bits(weight)) << 32) |
         static_cast<std::uint64_t>(static_cast<std::uint32_t>(vocab_size - 1 - x));
}

/// The shifts of the digit search, most significant first; returns their number (<= kMaxCutDigits).
SPECDEC_INLINE int cut_digit_shifts(std::int64_t vocab_size, int* shifts) {
  int n = 0;
  for (int s = 64 - kCutDigitBits; s >= 32; s -= kCutDigitBits) shifts[n++] = s;
  int id_bits = 0;
  while (id_bits < 32 && (static_cast<std::uint64_t>(vocab_size - 1) >> id_bits) != 0) ++id_bits;
  const int id_digits = (id_bits + kCutDigitBits - 1) / kCutDigitBits;
  for (int d = id_digits - 1; d >= 0; --d) shifts[n++] = d * kCutDigitBits;
  return n;
}

/// How many of the thresholds base | c << shift (c = 1..15) `key` reaches (0..15), or -1 when key < base. The bits
/// of base below shift + 4 are zero (the digits not yet decided).
SPECDEC_INLINE int cut_digit(std::uint64_t key, std::uint64_t base, int shift) {
  if (key < base) return -1;
  if (((key >> shift) >> kCutDigitBits) > ((base >> shift) >> kCutDigitBits)) return kCutDigitValues - 1;
  return static_cast<int>((key >> shift) & static_cast<std::uint64_t>(kCutDigitValues - 1));
}

/// Lane `lane` of tile `tile` of the masked sums (step 3's M): acc[c] (c = 1..15) is the sum in increasing j of the
/// weights w[x], x = tile * 1024 + 32 j + lane < V, with w[x] > 0, key(x) >= floor and key(x) >= base | c << shift;
/// acc[0] is the sum over key(x) >= max(floor, base). The kernel's threads and the emulation test call exactly this.
SPECDEC_INLINE void cut_lane_sums(const float* w, std::int64_t tile, int lane, std::int64_t vocab_size,
                                  std::uint64_t floor, std::uint64_t base, int shift,
                                  float (&acc)[kCutDigitValues]) {
  for (int c = 0; c < kCutDigitValues; ++c) acc[c] = 0.0f;
  for (int j = 0; j < kTileSize / kTileLanes; ++j) {
    const std::int64_t x = tile * kTileSize + j * kTileLanes + lane;
    if (x >= vocab_size) break;
    const float v = w[x];
    if (!(v > 0.0f)) continue;
    const std::uint64_t key = cut_key(v, x, vocab_size);
    if (key < floor) continue;
    const int d = cut_digit(key, base, shift);
    for (int c = 0; c < kCutDigitValues; ++c)
      if (c <= d) acc[c] += v;
  }
}

/// Lane `lane` of tile `tile` of one masked sum M(floor).
SPECDEC_INLINE float masked_lane_sum(const float* w, std::int64_t tile, int lane, std::int64_t vocab_size,
                                     std::uint64_t floor) {
  float acc = 0.0f;
  for (int j = 0; j < kTileSize / kTileLanes; ++j) {
    const std::int64_t x = tile * kTileSize + j * kTileLanes + lane;
    if (x >= vocab_size) break;
    const float v = w[x];
    if (v > 0.0f && cut_key(v, x, vocab_size) >= floor) acc += v;
  }
  return acc;
}

/// The pairwise combine of tile masses m[t * stride], t < tiles (in place); returns the total.
SPECDEC_INLINE float combine_tiles(float* m, std::int64_t tiles, std::int64_t stride) {
  for (std::int64_t s = 1; s < tiles; s *= 2)
    for (std::int64_t t = 0; t + s < tiles; t += 2 * s) m[t * stride] += m[(t + s) * stride];
  return m[0];
}

/// The request that owns row r: request b owns rows [cu[b] + extra * b, cu[b + 1] + extra * (b + 1)) (extra = 0: draft
/// rows, cu = cu_num_draft_tokens; extra = 1: target rows, K_b + 1 each); cu == nullptr: row r is request r. Returns
/// -1 when no request owns r. A binary search (cu is read at O(log B) places); a decreasing cu can only name a wrong
/// owner or none, never read outside cu[0 .. B].
template <class IdT>
SPECDEC_HD std::int64_t logits_row_request(const IdT* cu, std::int64_t num_requests, std::int32_t rows_extra,
                                           std::int64_t r) {
  if (cu == nullptr) return r >= 0 && r < num_requests ? r : -1;
  std::int64_t lo = 0, hi = num_requests - 1, found = -1;
  while (lo <= hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<std::int64_t>(cu[mid]) + rows_extra * mid <= r) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (found < 0 || r >= static_cast<std::int64_t>(cu[found + 1]) + rows_extra * (found + 1)) return -1;
  return found;
}

/// Request b's parameters from per-request arrays (a null array means the parameter is off; temperature 1).
SPECDEC_INLINE LogitsParams request_logits_params(const float* temperature, const std::int32_t* top_k,
                                                  const float* top_p, const float* min_p, std::int64_t b) {
  LogitsParams p;
  if (temperature) p.temperature = temperature[b];
  if (top_k) p.top_k = top_k[b];
  if (top_p) p.top_p = top_p[b];
  if (min_p) p.min_p = min_p[b];
  return p;
}

/// One level of the pairwise combine (combine_tiles), split into independent pairs: pair i adds m[(t + s) * stride]
/// into m[t * stride], t = 2 s i (nothing when t + s >= tiles). Running every pair of level s = 1, 2, 4, .. in turn
/// is combine_tiles.
SPECDEC_INLINE void combine_pair(float* m, std::int64_t tiles, std::int64_t stride, std::int64_t s, std::int64_t i) {
  const std::int64_t t = 2 * s * i;
  if (t + s < tiles) m[t * stride] += m[(t + s) * stride];
}

/// The digit of a count search: the largest c in 1..15 with count(base | c << shift) >= k, else 0.
/// hist[d] counts the candidates whose cut_digit is d (count(c) = sum over d >= c).
SPECDEC_INLINE int pick_count_digit(const std::int64_t (&hist)[kCutDigitValues], std::int64_t k) {
  std::int64_t count = 0;
  for (int c = kCutDigitValues - 1; c >= 1; --c) {
    count += hist[c];
    if (count >= k) return c;
  }
  return 0;
}

/// The digit of a mass search: the largest c in 1..15 with mass[c] >= target, else 0.
SPECDEC_INLINE int pick_mass_digit(const float (&mass)[kCutDigitValues], float target) {
  for (int c = kCutDigitValues - 1; c >= 1; --c)
    if (mass[c] >= target) return c;
  return 0;
}

/// The min-p threshold key (0 when min_p is 0).
SPECDEC_INLINE std::uint64_t min_p_floor(float min_p, float max_weight) {
  return static_cast<std::uint64_t>(float_bits(min_p * max_weight)) << 32;
}

/// Which cut steps a row needs.
struct CutSteps {
  bool top_k;  ///< 0 < k < V (the kernel also skips it when k >= the number of positive weights)
  bool top_p;  ///< p < 1
};

SPECDEC_INLINE CutSteps cut_steps(const LogitsParams& p, std::int64_t vocab_size) {
  return CutSteps{p.top_k > 0 && static_cast<std::int64_t>(p.top_k) < vocab_size, p.top_p < 1.0f};
}

}  // namespace detail
}  // namespace specdec
