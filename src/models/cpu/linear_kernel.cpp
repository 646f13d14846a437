// y[t, o] (+)= sum_i x[t, i] * w[o, i] for a few rows t (decode and speculative verify: 1-16 new tokens) and a block of
// output rows o — the product that dominates a decode forward. BLAS gemm packs the weight for every call, which triples the
// cost of a 2-16 row product on this workload; this kernel streams each weight row once from memory (every token row of a
// group of up to 6 in one pass, the rows a few tiles ahead prefetched), so a 6-token product costs well under 6x a 1-token
// product. Also the attention of a few new tokens against one kv head of the cache (attention_rows).
//
// Plain C++ with GCC/Clang vector extensions; an AVX2+FMA build of the same code is chosen at first
// use when the CPU has both (the attention's also converts a float16 cache with F16C). No torch in this file.
#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/models/float16.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

// Vector-extension types wider than the baseline ISA are only used inside always-inlined helpers.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace specdec::models::detail {

namespace {

using v8 = float __attribute__((vector_size(32)));

[[gnu::always_inline]] inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline float hsum(v8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// Each output y[t, o] is one dot product summed in a fixed order whatever the tile it is computed in: eight lanes
// accumulate x[t, 8k + l] * w[o, 8k + l] in ascending k (a last partial block of `in` is zero-padded into one more vector
// step), then hsum adds the lanes in a fixed tree. So a row's outputs do not depend on how many token rows share the call
// or on how the output rows are split between threads (batch invariance).
//
// Tiles: R weight rows x NT token rows, every token row of a group in one pass over the weight rows, so the weight stream
// from memory overlaps the arithmetic (a 6-token product reads each weight row once instead of once per token pair).
// R x NT <= 12 vector accumulators (of 16 AVX registers). Above 6 token rows, the rows go in balanced groups of <= 6.
constexpr int kMaxGroup = 6;
constexpr int kBlockRows = 12;      // weight rows per outer block above 6 token rows (every group passes over them in cache)
constexpr int kPrefetchTiles = 4;  // how far ahead (in tiles) the weight rows are prefetched
template <int NT>
constexpr int rows_for_tokens() {
  return NT == 1 ? 6 : NT == 2 ? 6 : NT == 3 ? 4 : NT == 4 ? 3 : 2;
}

[[gnu::always_inline]] inline v8 load_partial(const float* p, std::int64_t count) {
  float buf[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (std::int64_t j = 0; j < count; ++j) buf[j] = p[j];
  return load8(buf);
}

using v8i = std::int32_t __attribute__((vector_size(32)));

// 8 IEEE float16 values (a half KV cache) to float, exactly (subnormals, infinities and NaN included; half_to_float's
// values): the exponent and mantissa move up 13 bits and the exponent is rebased; a subnormal is renormalised by
// subtracting 2^-14 after giving it the smallest normal exponent, which is exact.
[[gnu::always_inline]] inline v8 load8(const std::uint16_t* p) {
  std::uint16_t h[8];
  std::memcpy(h, p, sizeof h);
  v8i x = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]};
  const v8i exp_mask = v8i{} + (0x7C00 << 13);
  v8i o = (x & 0x7FFF) << 13;
  const v8i e = o & exp_mask;
  o += (127 - 15) << 23;
  o += e == exp_mask ? v8i{} + ((128 - 16) << 23) : v8i{};  // infinity / NaN: the float exponent's top value
  const v8i sub = e == 0;                                     // zero or subnormal
  o += sub & (1 << 23);
  v8 f;
  std::memcpy(&f, &o, sizeof f);
  const v8 magic = v8{} + 6.103515625e-05f;  // 2^-14: the value the renormalising exponent added
  f = sub ? f - magic : f;
  v8i bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= (x & 0x8000) << 16;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
[[gnu::always_inline]] inline v8 load_partial(const std::uint16_t* p, std::int64_t count) {
  std::uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t j = 0; j < count; ++j) buf[j] = p[j];
  return load8(buf);
}

// The same 8 values with F16C's vcvtph2ps (exact too; a signalling NaN comes back quiet). Not always_inline: it is
// inlined where its caller is compiled for F16C (attention_rows_avx2 flattens the kernel into itself).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma,f16c"))) inline v8 load8_f16c(const std::uint16_t* p) {
  return reinterpret_cast<v8>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
#else
inline v8 load8_f16c(const std::uint16_t* p) { return load8(p); }
#endif
// A key's or value's 8 elements: float32 as stored, float16 converted by F16C (kF16C) or by load8's bit operations.
template <bool kF16C>
[[gnu::always_inline]] inline v8 load8_kv(const float* p) {
  return load8(p);
}
template <bool kF16C>
[[gnu::always_inline]] inline v8 load8_kv(const std::uint16_t* p) {
  if constexpr (kF16C) return load8_f16c(p);
  else return load8(p);
}

// R output rows x NT token rows, all in registers.
template <int R, int NT>
[[gnu::always_inline]] inline void tile(const float* x, std::int64_t in, const float* w, float* y, std::int64_t ldy, bool accumulate) {
  v8 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = v8{};
  std::int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    // Software prefetch of the rows kPrefetchTiles tiles ahead, one per 64-byte line: the hardware prefetcher alone leaves
    // the memory stream idle while a tile computes (measured: a 6-token product 25-30% slower without it).
    if ((i & 15) == 0)
      for (int r = 0; r < R; ++r) __builtin_prefetch(w + (r + kPrefetchTiles * R) * in + i);
    v8 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load8(w + r * in + i);
    for (int t = 0; t < NT; ++t) {
      const v8 xv = load8(x + t * in + i);
      for (int r = 0; r < R; ++r) acc[r][t] += wv[r] * xv;
    }
  }
  if (i < in) {
    v8 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_partial(w + r * in + i, in - i);
    for (int t = 0; t < NT; ++t) {
      const v8 xv = load_partial(x + t * in + i, in - i);
      for (int r = 0; r < R; ++r) acc[r][t] += wv[r] * xv;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) {
      const float s = hsum(acc[r][t]);
      float& dst = y[t * ldy + r];
      dst = accumulate ? dst + s : s;
    }
}

// Output rows [o_begin, o_end) for NT token rows: tiles of rows_for_tokens<NT>() rows, then single rows.
template <int NT>
[[gnu::always_inline]] inline void group_rows(const float* x, std::int64_t in, const float* w, std::int64_t o_begin,
                                              std::int64_t o_end, float* y, std::int64_t ldy, bool accumulate) {
  constexpr int R = rows_for_tokens<NT>();
  std::int64_t o = o_begin;
  for (; o + R <= o_end; o += R) tile<R, NT>(x, in, w + o * in, y + o, ldy, accumulate);
  for (; o < o_end; ++o) tile<1, NT>(x, in, w + o * in, y + o, ldy, accumulate);
}

[[gnu::always_inline]] inline void linear_rows_impl(const float* x, std::int64_t n, std::int64_t in, const float* w,
                                                    std::int64_t o_begin, std::int64_t o_end, float* y, std::int64_t ldy,
                                                    bool accumulate) {
  const std::int64_t groups = (n + kMaxGroup - 1) / kMaxGroup;
  const std::int64_t block = groups == 1 ? o_end - o_begin : kBlockRows;
  for (std::int64_t o = o_begin; o < o_end; o += block) {
    const std::int64_t oe = std::min(o_end, o + block);
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t t0 = g * n / groups, t1 = (g + 1) * n / groups;
      const float* xg = x + t0 * in;
      float* yg = y + t0 * ldy;
      switch (t1 - t0) {
        case 1: group_rows<1>(xg, in, w, o, oe, yg, ldy, accumulate); break;
        case 2: group_rows<2>(xg, in, w, o, oe, yg, ldy, accumulate); break;
        case 3: group_rows<3>(xg, in, w, o, oe, yg, ldy, accumulate); break;
        case 4: group_rows<4>(xg, in, w, o, oe, yg, ldy, accumulate); break;
        case 5: group_rows<5>(xg, in, w, o, oe, yg, ldy, accumulate); break;
        default: group_rows<6>(xg, in, w, o, oe, yg, ldy, accumulate); break;
      }
    }
  }
}

// --- attention of a few query rows against one kv head ------------------------------------------------------------------
// Every value a query row gets is computed by the same steps whatever the other rows of the call (batch invariance): a score
// is a fixed-order dot product (lanes in ascending order of the head dimension, then reduce8's fixed tree); the softmax
// runs over the row's visible keys only, packed in order (context, then ancestors, then itself) into 8-key blocks (padding
// gives exactly 0); an output element sums p[j] * v[j] over those keys in the same order. So a token gets bit-identical
// values fed alone, in a chain or as a tree node.

// Lane c of the result = ((a[c]_0 + a[c]_1) + (a[c]_2 + a[c]_3)) + ((a[c]_4 + a[c]_5) + (a[c]_6 + a[c]_7)).
[[gnu::always_inline]] inline v8 reduce8(const v8* a) {
  const v8i even = {0, 8, 2, 10, 4, 12, 6, 14}, odd = {1, 9, 3, 11, 5, 13, 7, 15};
  const v8i lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
  const v8i lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
  v8 t[4], u[2];
  for (int p = 0; p < 4; ++p)
    t[p] = __builtin_shuffle(a[2 * p], a[2 * p + 1], even) + __builtin_shuffle(a[2 * p], a[2 * p + 1], odd);
  for (int p = 0; p < 2; ++p)
    u[p] = __builtin_shuffle(t[2 * p], t[2 * p + 1], lo2) + __builtin_shuffle(t[2 * p], t[2 * p + 1], hi2);
  return __builtin_shuffle(u[0], u[1], lo4) + __builtin_shuffle(u[0], u[1], hi4);
}

// exp(x) for each lane (Cephes expf: range reduction by ln 2, degree-6 polynomial, relative error ~2e-7); exactly 0 below
// about -87.3 (and for -inf), so masked scores vanish.
[[gnu::always_inline]] inline v8 exp8(v8 x) {
  const v8 lo = v8{} - 87.3365447505531f, hi = v8{} + 88.3762626647949f;
  const v8i underflow = x < lo;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const v8 fx = x * 1.44269504088896341f + 0.5f;
  v8i n = __builtin_convertvector(fx, v8i);  // truncation; fix up to floor below
  n += fx < __builtin_convertvector(n, v8) ? v8i{} - 1 : v8i{};
  const v8 fn = __builtin_convertvector(n, v8);
  x = x - fn * 0.693359375f;
  x = x - fn * -2.12194440e-4f;
  v8 y = x * 1.9875691500e-4f + 1.3981999507e-3f;
  y = y * x + 8.3333452e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * (x * x) + x + 1.f;
  const v8i bits = (n + 127) << 23;
  v8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  y *= scale;
  v8i yi;
  std::memcpy(&yi, &y, sizeof yi);
  yi &= ~underflow;
  std::memcpy(&y, &yi, sizeof y);
  return y;
}

constexpr std::int64_t kValueChunk = 64;  // keys per pass of the weighted sum (their values stay in L1 across the rows)

// Software prefetch distances of the attention (keys ahead in the scores' pass, values ahead in the weighted sum): a
// forward's weights evict the KV cache between layers, so it is read from memory (attention_x86.cpp's note).
constexpr std::int64_t kPrefetchKeys = 32, kPrefetchValues = 16;
constexpr std::int64_t kMaxConvertedHead = 256;  // head sizes whose float16 key blocks are converted once per block

// KV: float, or std::uint16_t: IEEE float16 keys and values, converted exactly as they are read (kF16C: by F16C).
template <class KV, bool kF16C = false>
[[gnu::always_inline]] inline void attention_rows_impl(const float* q, std::int64_t row_begin, std::int64_t row_end,
                                                       std::int64_t n, std::int64_t group, std::int64_t hd, const KV* k, const KV* v,
                                                       std::int64_t total, std::int64_t cached, const std::int32_t* visible,
                                                       const std::int32_t* visible_count, float* scores,
                                                       std::int64_t ld_scores, float* out, std::int64_t ld_out_token,
                                                       std::int64_t ld_out_member, AttentionPart part) {
  const std::int64_t padded = (total + 7) / 8 * 8;
  const bool all = part.kind == AttentionPart::kAll;
  const std::int64_t kb_begin = all ? 0 : part.key_begin, kb_end = all ? padded : std::min(part.key_end, padded);
  // 1. scores[r, j] = q[r] . k[j] in blocks of 8 keys (the last block repeats key total - 1 past the end).
  for (std::int64_t kb = kb_begin; part.kind != AttentionPart::kFinish && kb < kb_end; kb += 8) {
    const KV* kp[8];
    for (int c = 0; c < 8; ++c) kp[c] = k + std::min<std::int64_t>(kb + c, total - 1) * hd;
    if (kb + kPrefetchKeys + 8 <= total)  // the keys read kPrefetchKeys ahead (the cache comes from memory)
      for (std::size_t off = 0; off < 8 * hd * sizeof(KV); off += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(k + (kb + kPrefetchKeys) * hd) + off);
    // (always inline: a lambda does not take the enclosing function's target attribute otherwise)
    auto score_rows = [&](const auto* const* keys) __attribute__((always_inline)) {
      for (std::int64_t r = row_begin; r < row_end; ++r) {
        const float* qr = q + r * hd;
        v8 acc[8];
        for (int c = 0; c < 8; ++c) acc[c] = v8{};
        std::int64_t d = 0;
        for (; d + 8 <= hd; d += 8) {
          const v8 qv = load8(qr + d);
          for (int c = 0; c < 8; ++c) acc[c] += qv * load8_kv<kF16C>(keys[c] + d);
        }
        if (d < hd) {
          const v8 qv = load_partial(qr + d, hd - d);
          for (int c = 0; c < 8; ++c) acc[c] += qv * load_partial(keys[c] + d, hd - d);
        }
        const v8 sv = reduce8(acc);
        std::memcpy(scores + r * ld_scores + kb, &sv, sizeof sv);
      }
    };
    if constexpr (std::is_same_v<KV, std::uint16_t>) {
      // float16 keys: the block's 8 keys converted once (exactly) for every row, not once per row
      if (hd % 8 == 0 && hd <= kMaxConvertedHead && row_end - row_begin > 1) {
        alignas(32) float converted[8 * kMaxConvertedHead];
        const float* kf[8];
        for (int c = 0; c < 8; ++c) {
          kf[c] = converted + c * hd;
          for (std::int64_t d = 0; d < hd; d += 8) {
            const v8 x = load8_kv<kF16C>(kp[c] + d);
            std::memcpy(converted + c * hd + d, &x, sizeof x);
          }
        }
        score_rows(kf);
        continue;
      }
    }
    score_rows(kp);
  }
  if (part.kind == AttentionPart::kScores) return;
  // The first key the softmax and the weighted sum read: 0, or a kFinish part's key_begin (every key before it masked).
  const std::int64_t k0 = part.kind == AttentionPart::kFinish ? part.key_begin : 0;
  // 2. softmax per row over the keys it sees, in place: the context, then its visible new keys moved down to follow it
  //    (so a tree node's keys sit where its path's keys sit in a chain), then -inf up to a multiple of 8.
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    float* row = scores + r * ld_scores;
    const std::int64_t i = r / group;
    const std::int64_t count8 = pack_visible_scores(row, cached, visible + i * n, visible_count[i], 8);
    v8 mx = load8(row + k0);
    for (std::int64_t j = k0 + 8; j < count8; j += 8) {
      const v8 x = load8(row + j);
      mx = x > mx ? x : mx;
    }
    float m = mx[0];
    for (int l = 1; l < 8; ++l) m = mx[l] > m ? mx[l] : m;
    v8 sum{};
    for (std::int64_t j = k0; j < count8; j += 8) {
      const v8 e = exp8(load8(row + j) - m);
      std::memcpy(row + j, &e, sizeof e);
      sum += e;
    }
    const float inv = 1.f / hsum(sum);
    for (std::int64_t j = k0; j < count8; j += 8) {
      const v8 p = load8(row + j) * inv;
      std::memcpy(row + j, &p, sizeof p);
    }
  }
  // 3. out[r] = sum_j p[r, j] * v[key j], over the row's keys in the order of step 2.
  auto out_row = [&](std::int64_t r) { return out + (r / group) * ld_out_token + (r % group) * ld_out_member; };
  auto value = [&](std::int64_t r, std::int64_t j) {
    return v + (j < cached ? j : cached + visible[(r / group) * n + (j - cached)]) * hd;
  };
  auto count_of = [&](std::int64_t r) { return cached + visible_count[r / group]; };
  // Head sizes up to 128 and Gemma's 256 sum in registers, NV blocks of 8 values per row (others: the loop below).
  if (hd % 8 == 0 && (hd <= 128 || hd == 256)) {
    auto sum_rows = [&]<int NV>() __attribute__((always_inline)) {
      // float16 values of the cached context converted once per chunk (exactly) for every row of the call
      constexpr bool kHalf = std::is_same_v<KV, std::uint16_t>;
      const bool convert = kHalf && row_end - row_begin > 1;
      alignas(32) float converted[kHalf ? kValueChunk * NV * 8 : 1];
      auto prefetch_value = [&](std::int64_t j) __attribute__((always_inline)) {  // the cached value kPrefetchValues ahead
        if (j + kPrefetchValues < cached)
          for (std::size_t off = 0; off < NV * 8 * sizeof(KV); off += 64)
            __builtin_prefetch(reinterpret_cast<const char*>(v + (j + kPrefetchValues) * hd) + off);
      };
      for (std::int64_t c0 = k0; c0 < cached + n; c0 += kValueChunk) {
        const std::int64_t context_end = std::min(cached, c0 + kValueChunk);
        if constexpr (kHalf)
          if (convert)
            for (std::int64_t j = c0; j < context_end; ++j) {
              const KV* vj = v + j * hd;
              prefetch_value(j);
              for (int e = 0; e < NV; ++e) {
                const v8 x = load8_kv<kF16C>(vj + 8 * e);
                std::memcpy(converted + (j - c0) * hd + 8 * e, &x, sizeof x);
              }
            }
        for (std::int64_t r = row_begin; r < row_end; ++r) {
          const std::int64_t c1 = std::min(count_of(r), c0 + kValueChunk);
          if (c0 >= c1) continue;
          const float* p = scores + r * ld_scores;
          float* o = out_row(r);
          v8 acc[NV];
          for (int e = 0; e < NV; ++e) acc[e] = c0 == k0 ? v8{} : load8(o + 8 * e);
          std::int64_t j = c0;
          if (convert)
            for (; j < std::min(c1, context_end); ++j) {
              const float pj = p[j];
              const float* vj = converted + (j - c0) * hd;
              for (int e = 0; e < NV; ++e) acc[e] += pj * load8_kv<kF16C>(vj + 8 * e);
            }
          for (; j < c1; ++j) {
            const float pj = p[j];
            const KV* vj = value(r, j);
            prefetch_value(j);
            for (int e = 0; e < NV; ++e) acc[e] += pj * load8_kv<kF16C>(vj + 8 * e);
          }
          for (int e = 0; e < NV; ++e) std::memcpy(o + 8 * e, &acc[e], sizeof(v8));
        }
      }
    };
    switch (hd / 8) {
      case 1: sum_rows.template operator()<1>(); return;
      case 2: sum_rows.template operator()<2>(); return;
      case 3: sum_rows.template operator()<3>(); return;
      case 4: sum_rows.template operator()<4>(); return;
      case 5: sum_rows.template operator()<5>(); return;
      case 6: sum_rows.template operator()<6>(); return;
      case 7: sum_rows.template operator()<7>(); return;
      case 8: sum_rows.template operator()<8>(); return;
      case 9: sum_rows.template operator()<9>(); return;
      case 10: sum_rows.template operator()<10>(); return;
      case 11: sum_rows.template operator()<11>(); return;
      case 12: sum_rows.template operator()<12>(); return;
      case 13: sum_rows.template operator()<13>(); return;
      case 14: sum_rows.template operator()<14>(); return;
      case 15: sum_rows.template operator()<15>(); return;
      case 32: sum_rows.template operator()<32>(); return;
      default: sum_rows.template operator()<16>(); return;
    }
  }
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const float* p = scores + r * ld_scores;
    float* o = out_row(r);
    for (std::int64_t d = 0; d < hd; ++d) o[d] = 0.f;
    for (std::int64_t j = k0; j < count_of(r); ++j) {
      const KV* vj = value(r, j);
      for (std::int64_t d = 0; d < hd; d += 8) {  // a last partial block converts only the values that exist
        const v8 vv = load_partial(vj + d, std::min<std::int64_t>(8, hd - d));
        for (std::int64_t l = 0; l < 8 && d + l < hd; ++l) o[d + l] += p[j] * vv[l];
      }
    }
  }
}

[[gnu::always_inline]] inline v8 silu8(v8 x) { return x / (1.f + exp8(-x)); }

// gelu_tanh(x) = 0.5 x (1 + tanh(z)) = x / (1 + exp(-2 z)), z = sqrt(2 / pi) (x + 0.044715 x^3): SiLU's form with
// exp8, so the 8- and 16-lane paths share their steps (x^3 c + x is one fused multiply-add where the target has FMA).
[[gnu::always_inline]] inline v8 gelu8(v8 x) {
  const v8 cube = x * x * x;
  const v8 inner = cube * 0.044715f + x;
  return x / (1.f + exp8(inner * -1.5957691216057308f));  // -2 sqrt(2 / pi)
}

// out[r, i] = act(gu[r, i]) * gu[r, f + i], 8 lanes at a time (a last partial step padded with zeros); act: silu8 or gelu8.
template <v8 (*Act)(v8)>
[[gnu::always_inline]] inline void act_mul_impl(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* g = gu + r * 2 * f;
    const float* u = g + f;
    float* o = out + r * f;
    std::int64_t i = 0;
    for (; i + 8 <= f; i += 8) {
      const v8 ov = Act(load8(g + i)) * load8(u + i);
      std::memcpy(o + i, &ov, sizeof ov);
    }
    if (i < f) {
      const v8 ov = Act(load_partial(g + i, f - i)) * load_partial(u + i, f - i);
      for (std::int64_t j = 0; i + j < f; ++j) o[i + j] = ov[j];
    }
  }
}
[[gnu::always_inline]] inline void silu_mul_impl(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  act_mul_impl<silu8>(gu, out, rows, f);
}
[[gnu::always_inline]] inline void gelu_tanh_mul_impl(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  act_mul_impl<gelu8>(gu, out, rows, f);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPECDEC_LINEAR_X86_DISPATCH 1
__attribute__((target("avx2,fma"))) void silu_mul_avx2_impl(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  silu_mul_impl(gu, out, rows, f);
}
__attribute__((target("avx2,fma"))) void gelu_tanh_mul_avx2_impl(const float* gu, float* out, std::int64_t rows,
                                                                 std::int64_t f) {
  gelu_tanh_mul_impl(gu, out, rows, f);
}
__attribute__((target("avx2,fma"))) void linear_rows_avx2(const float* x, std::int64_t n, std::int64_t in, const float* w,
                                                          std::int64_t o_begin, std::int64_t o_end, float* y,
                                                          std::int64_t ldy, bool accumulate) {
  linear_rows_impl(x, n, in, w, o_begin, o_end, y, ldy, accumulate);
}
// (flatten: the kernel's helpers, load8_f16c among them, are inlined here with this function's target)
template <class KV>
__attribute__((target("avx2,fma,f16c"), flatten)) void attention_rows_avx2(const float* q, std::int64_t row_begin, std::int64_t row_end,
                                                            std::int64_t n, std::int64_t group, std::int64_t hd, const KV* k, const KV* v,
                                                            std::int64_t total, std::int64_t cached,
                                                            const std::int32_t* visible, const std::int32_t* visible_count,
                                                            float* scores, std::int64_t ld_scores, float* out,
                                                            std::int64_t ld_out_token, std::int64_t ld_out_member,
                                                            AttentionPart part) {
  attention_rows_impl<KV, true>(q, row_begin, row_end, n, group, hd, k, v, total, cached, visible, visible_count, scores,
                                ld_scores, out, ld_out_token, ld_out_member, part);
}
__attribute__((target("avx2,fma,f16c"))) void floats_to_halves_f16c(const float* x, std::uint16_t* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = float_to_half(x[i]);
}
#endif

template <class KV>
void attention_rows_baseline(const float* q, std::int64_t row_begin, std::int64_t row_end, std::int64_t n,
                             std::int64_t group, std::int64_t hd,
                             const KV* k, const KV* v, std::int64_t total, std::int64_t cached,
                             const std::int32_t* visible, const std::int32_t* visible_count, float* scores,
                             std::int64_t ld_scores, float* out, std::int64_t ld_out_token, std::int64_t ld_out_member,
                             AttentionPart part) {
  attention_rows_impl(q, row_begin, row_end, n, group, hd, k, v, total, cached, visible, visible_count, scores, ld_scores, out,
                      ld_out_token, ld_out_member, part);
}

void silu_mul_baseline(const float* gu, float* out, std::int64_t rows, std::int64_t f) { silu_mul_impl(gu, out, rows, f); }
void gelu_tanh_mul_baseline(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  gelu_tanh_mul_impl(gu, out, rows, f);
}

bool has_avx2_fma() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// AVX2 + FMA + F16C: the float16 cache's conversions (the attention's and floats_to_halves).
bool has_avx2_fma_f16c() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  return has_avx2_fma() && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// AVX-512F + DQ (and AVX2 + FMA): the 16-lane attention and SiLU.
bool has_avx512f_dq_fma() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  return has_avx2_fma() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

void linear_rows_baseline(const float* x, std::int64_t n, std::int64_t in, const float* w, std::int64_t o_begin,
                          std::int64_t o_end, float* y, std::int64_t ldy, bool accumulate) {
  linear_rows_impl(x, n, in, w, o_begin, o_end, y, ldy, accumulate);
}

using LinearRowsFn = void (*)(const float*, std::int64_t, std::int64_t, const float*, std::int64_t, std::int64_t, float*,
                              std::int64_t, bool);

template <class KV>
using AttentionRowsFn = void (*)(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 const KV*, const KV*, std::int64_t, std::int64_t, const std::int32_t*,
                                 const std::int32_t*, float*, std::int64_t, float*, std::int64_t, std::int64_t,
                                 AttentionPart);

LinearRowsFn select_linear_rows() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  if (has_avx2_fma()) return &linear_rows_avx2;
#endif
  return &linear_rows_baseline;
}
template <class KV>
AttentionRowsFn<KV> select_attention_rows() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  if (has_avx2_fma_f16c()) return &attention_rows_avx2<KV>;
#endif
  return &attention_rows_baseline<KV>;
}

// Whether attention goes to the AVX-512 kernel: the CPU has it and SPECDEC_CPU_ISA (as for the packed products) does not
// name another instruction set.
bool attention_avx512() {
  static const bool avx512 = [] {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
    if (const char* isa = std::getenv("SPECDEC_CPU_ISA"); isa != nullptr && std::string_view(isa) != "avx512-vnni")
      return false;
    return has_avx512f_dq_fma();
#else
    return false;
#endif
  }();
  return avx512;
}

// The AVX-512 kernel where the CPU has it (and SPECDEC_CPU_ISA does not rule it out), else the 8-lane one.
template <class KV>
void attention_rows_any(const float* q, std::int64_t row_begin, std::int64_t row_end, std::int64_t n, std::int64_t group,
                        std::int64_t hd, const KV* k, const KV* v, std::int64_t total, std::int64_t cached,
                        const std::int32_t* visible, const std::int32_t* visible_count, float* scores, std::int64_t ld_scores,
                        float* out, std::int64_t ld_out_token, std::int64_t ld_out_member, AttentionPart part) {
  if (attention_avx512() && attention_rows_avx512(q, row_begin, row_end, n, group, hd, k, v, total, cached, visible, visible_count, scores,
                                      ld_scores, out, ld_out_token, ld_out_member, part))
    return;
  static const AttentionRowsFn<KV> fn = select_attention_rows<KV>();
  fn(q, row_begin, row_end, n, group, hd, k, v, total, cached, visible, visible_count, scores, ld_scores, out, ld_out_token,
     ld_out_member, part);
}

using SiluMulFn = void (*)(const float*, float*, std::int64_t, std::int64_t);
// 16 lanes where the attention takes its AVX-512 kernel (the CPU has AVX-512F and SPECDEC_CPU_ISA does not rule it out;
// bench_model BM_SiluMul measures it, docs/cpu-forward.md), else 8.
SiluMulFn select_silu_mul() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  if (attention_avx512()) return &silu_mul_avx512;
  if (has_avx2_fma()) return &silu_mul_avx2_impl;
#endif
  return &silu_mul_baseline;
}

// gelu_tanh_mul's path, chosen as silu_mul's.
SiluMulFn select_gelu_tanh_mul() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  if (attention_avx512()) return &gelu_tanh_mul_avx512;
  if (has_avx2_fma()) return &gelu_tanh_mul_avx2_impl;
#endif
  return &gelu_tanh_mul_baseline;
}

}  // namespace

void gelu_tanh_mul(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  static const SiluMulFn fn = select_gelu_tanh_mul();
  fn(gu, out, rows, f);
}
void gelu_tanh_mul_avx2(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  gelu_tanh_mul_avx2_impl(gu, out, rows, f);
#else
  gelu_tanh_mul_baseline(gu, out, rows, f);
#endif
}

void floats_to_halves(const float* x, std::uint16_t* out, std::int64_t n) {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  static const bool f16c = has_avx2_fma_f16c();
  if (f16c) {
    floats_to_halves_f16c(x, out, n);
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) out[i] = float_to_half(x[i]);
}

bool attention_reads_key_blocks(std::int64_t hd) {
  return attention_avx512() && ((hd % 16 == 0 && hd >= 16 && hd <= 128) || hd == 256);
}

void silu_mul(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  static const SiluMulFn fn = select_silu_mul();
  fn(gu, out, rows, f);
}

bool silu_mul_has_avx2() { return has_avx2_fma(); }
bool silu_mul_has_avx512() { return has_avx512f_dq_fma(); }
void silu_mul_avx2(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  silu_mul_avx2_impl(gu, out, rows, f);
#else
  silu_mul_baseline(gu, out, rows, f);
#endif
}

/// x [n, in] (row stride in), w [*, in] (row stride in), y [n, ldy]: computes columns [o_begin, o_end) of y = x w^T, adding to y
/// when `accumulate`. Each weight row is read from memory once; token rows are processed in pairs against it.
void linear_rows(const float* x, std::int64_t n, std::int64_t in, const float* w, std::int64_t o_begin, std::int64_t o_end,
                 float* y, std::int64_t ldy, bool accumulate) {
  static const LinearRowsFn fn = select_linear_rows();
  fn(x, n, in, w, o_begin, o_end, y, ldy, accumulate);
}

/// See cpu_kernels.hpp; the AVX-512 kernel where the CPU has it, else the 8-lane one (attention_rows_any).
template <class KV>
void attention_rows(const float* q, std::int64_t row_begin, std::int64_t row_end, std::int64_t n, std::int64_t group,
                    std::int64_t hd, const KV* k, const KV* v, std::int64_t total, std::int64_t cached,
                    const std::int32_t* visible, const std::int32_t* visible_count, float* scores, std::int64_t ld_scores,
                    float* out, std::int64_t ld_out_token, std::int64_t ld_out_member, AttentionPart part) {
  attention_rows_any(q, row_begin, row_end, n, group, hd, k, v, total, cached, visible, visible_count, scores, ld_scores, out,
                     ld_out_token, ld_out_member, part);
}
template void attention_rows<float>(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                    const float*, const float*, std::int64_t, std::int64_t, const std::int32_t*,
                                    const std::int32_t*, float*, std::int64_t, float*, std::int64_t, std::int64_t,
                                    AttentionPart);
template void attention_rows<std::uint16_t>(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                            std::int64_t, const std::uint16_t*, const std::uint16_t*, std::int64_t,
                                            std::int64_t, const std::int32_t*, const std::int32_t*, float*, std::int64_t,
                                            float*, std::int64_t, std::int64_t, AttentionPart);

}  // namespace specdec::models::detail
