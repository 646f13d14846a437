// detail::attention_rows with AVX-512 (16 lanes): the algorithm of linear_kernel.cpp's attention_rows_impl at twice the
// width, for head dimensions that are multiples of 16 up to 128, and 256 (Gemma 3). Chosen at run time by attention_rows where the CPU has
// AVX-512F. Every value a query row gets is computed by the same steps whatever the other rows of the call:
//   1. a score is a fixed-order dot product over a transposed block of 16 keys (the last block repeats key total - 1):
//      four partial sums by dimension mod 4, ascending, then (p0 + p1) + (p2 + p3);
//   2. the softmax runs over the row's visible keys only, packed in order (context, then its ancestors and itself), in
//      16-key steps (padding gives exactly 0);
//   3. an output element sums p[j] * v[j] over those keys in that order, one fused multiply-add after another (rows share
//      the value loads: every row of the call over the cached context, the group members of a token over its new keys).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "specdec/models/detail/cpu_kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "exp_x86.hpp"
// GCC 12's intrinsic headers start some conversions from an "undefined" register, which -Wmaybe-uninitialized reports.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace specdec::models::detail {

namespace {

// 16 keys' or values' elements as float: a float32 cache's as stored, a float16 cache's converted exactly (vcvtph2ps).
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline __m512 load16(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Software prefetch distances: key blocks ahead in the scores' pass, keys ahead in the weighted sum. Between a forward's
// layers the weights stream through the caches and evict the KV cache, so the attention reads it from memory, where
// the hardware prefetcher alone left one thread at about 8 GB/s (bench_model BM_Attention copies:128 and BM_Decode at
// context 1024 measure what the prefetch gains; the figures are in docs/cpu-forward.md).
constexpr std::int64_t kPrefetchKeys = 4, kPrefetchValues = 16;
constexpr std::int64_t kValueChunk = 64;  // keys per pass of the weighted sum (their values stay in L1 across the rows)
// Rows sharing a pass of the weighted sum at head size 256 (Gemma 3), whose 16 accumulators a row leave room for two:
// bench_model BM_Attention head_size:256 measured 1 row 15-20% slower than 2, and 4 (spilling) within 3% of 2.
constexpr int kWideHeadRows = 2;

// Transposes the 16 x 16 block held in r (row i in r[i]) in place (column j ends in r[j]).
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline void transpose16(__m512* r) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  auto lo = [](__m512 a, __m512 b) SPECDEC_TARGET_AVX512F {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  auto hi = [](__m512 a, __m512 b) SPECDEC_TARGET_AVX512F {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  // u[4k + c], per 128-bit lane L: column 4L + c of rows 4k .. 4k + 3.
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    u[4 * k + 0] = lo(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = hi(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = lo(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = hi(t[4 * k + 1], t[4 * k + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44), y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(x0, y0, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(x0, y0, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(x1, y1, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(x1, y1, 0xDD);
  }
}

// scores[r, kb .. kb + 15] for rows [r0, r0 + R) from the transposed key block kt ([hd][16]); `scores` points at column kb.
template <int NV, int R>
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline void score_rows(const float* q, std::int64_t r0, const float* kt,
                                                                     float* scores, std::int64_t ld_scores) {
  constexpr int hd = 16 * NV;
  __m512 acc[R][4];
#pragma GCC unroll 4
  for (int m = 0; m < R; ++m)
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) acc[m][p] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int d = 0; d < hd; d += 4) {
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512 kv = _mm512_load_ps(kt + (d + p) * 16);
#pragma GCC unroll 4
      for (int m = 0; m < R; ++m) acc[m][p] = _mm512_fmadd_ps(_mm512_set1_ps(q[(r0 + m) * hd + d + p]), kv, acc[m][p]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < R; ++m)
    _mm512_storeu_ps(scores + (r0 + m) * ld_scores,
                     _mm512_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]), _mm512_add_ps(acc[m][2], acc[m][3])));
}

// out[r] (+)= sum_{j in [c0, c1)} p[r, j] * v[key j] for R rows (their outputs start at 0 when c0 == k0, the first key
// summed): over the cached
// context (c1 <= cached) any rows of the call, over the new keys rows of one token (i = their token).
template <int NV, int R, class KV>
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline void value_rows(const std::int64_t* rows, std::int64_t k0, std::int64_t c0, std::int64_t c1,
                                                                     std::int64_t i, std::int64_t n, std::int64_t group,
                                                                     std::int64_t cached, const std::int32_t* visible,
                                                                     const KV* v, const float* scores,
                                                                     std::int64_t ld_scores, float* out,
                                                                     std::int64_t ld_out_token, std::int64_t ld_out_member) {
  constexpr std::int64_t hd = 16 * NV;
  const float* p[R];
  float* o[R];
  __m512 acc[R][NV];
#pragma GCC unroll 4
  for (int m = 0; m < R; ++m) {
    p[m] = scores + rows[m] * ld_scores;
    o[m] = out + (rows[m] / group) * ld_out_token + (rows[m] % group) * ld_out_member;
#pragma GCC unroll 8
    for (int e = 0; e < NV; ++e) acc[m][e] = c0 == k0 ? _mm512_setzero_ps() : _mm512_loadu_ps(o[m] + 16 * e);
  }
  for (std::int64_t j = c0; j < c1; ++j) {
    const KV* vj = v + (j < cached ? j : cached + visible[i * n + (j - cached)]) * hd;
    if (j + kPrefetchValues < cached)
      for (std::size_t off = 0; off < hd * sizeof(KV); off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(vj + kPrefetchValues * hd) + off, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int e = 0; e < NV; ++e) {
      const __m512 ve = load16(vj + 16 * e);
#pragma GCC unroll 4
      for (int m = 0; m < R; ++m) acc[m][e] = _mm512_fmadd_ps(_mm512_set1_ps(p[m][j]), ve, acc[m][e]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < R; ++m)
#pragma GCC unroll 8
    for (int e = 0; e < NV; ++e) _mm512_storeu_ps(o[m] + 16 * e, acc[m][e]);
}

template <int NV, class KV>  // hd = 16 NV; KV: float, or std::uint16_t (IEEE float16)
SPECDEC_TARGET_AVX512F void attention_rows_w16(const float* q, std::int64_t row_begin, std::int64_t row_end, std::int64_t n,
                                               std::int64_t group, const KV* k, const KV* v, std::int64_t total, std::int64_t cached,
                                               const std::int32_t* visible, const std::int32_t* visible_count, float* scores,
                                               std::int64_t ld_scores, float* out, std::int64_t ld_out_token,
                                               std::int64_t ld_out_member, AttentionPart part) {
  constexpr std::int64_t hd = 16 * NV;
  const std::int64_t padded = (total + 15) / 16 * 16;
  const bool all = part.kind == AttentionPart::kAll;
  const std::int64_t kb_begin = all ? 0 : part.key_begin, kb_end = all ? padded : std::min(part.key_end, padded);
  // 1. scores[r, j] = q[r] . k[j] in blocks of 16 keys: the block is transposed once ([hd][16 keys]) and every row runs
  //    over it with its query elements broadcast (four rows at a time share each load), summing d = 0, 4, 8, ... into
  //    partial 0, d = 1, 5, ... into partial 1 and so on, then (p0 + p1) + (p2 + p3): the same steps for every row.
  alignas(64) float kt[hd * 16];
  const KV* key_blocks = static_cast<const KV*>(part.key_blocks);
  for (std::int64_t kb = kb_begin; part.kind != AttentionPart::kFinish && kb < kb_end; kb += 16) {
    const float* ktp = kt;
    if (key_blocks != nullptr) {  // the block as the cache keeps it (its lanes past `total` are never read as scores)
      const KV* src = key_blocks + kb * hd;
      if (kb + 16 * kPrefetchKeys < kb_end) {
        const char* ahead = reinterpret_cast<const char*>(src + 16 * kPrefetchKeys * hd);
        for (std::size_t off = 0; off < 16 * hd * sizeof(KV); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
      }
      if constexpr (std::is_same_v<KV, float>) {
        ktp = src;
      } else {
#pragma GCC unroll 16
        for (int t = 0; t < hd; ++t) _mm512_store_ps(kt + t * 16, load16(src + t * 16));
      }
    } else {
      const KV* kp[16];
#pragma GCC unroll 16
      for (int c = 0; c < 16; ++c) kp[c] = k + std::min<std::int64_t>(kb + c, total - 1) * hd;
#pragma GCC unroll 8
      for (int dc = 0; dc < NV; ++dc) {
        __m512 rws[16];
#pragma GCC unroll 16
        for (int c = 0; c < 16; ++c) rws[c] = load16(kp[c] + 16 * dc);
        transpose16(rws);
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) _mm512_store_ps(kt + (16 * dc + t) * 16, rws[t]);
      }
    }
    std::int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) score_rows<NV, 4>(q, r, ktp, scores + kb, ld_scores);
    switch (row_end - r) {
      case 3: score_rows<NV, 3>(q, r, ktp, scores + kb, ld_scores); break;
      case 2: score_rows<NV, 2>(q, r, ktp, scores + kb, ld_scores); break;
      case 1: score_rows<NV, 1>(q, r, ktp, scores + kb, ld_scores); break;
      default: break;
    }
  }
  if (part.kind == AttentionPart::kScores) return;
  // The first key the softmax and the weighted sum read: 0, or a kFinish part's key_begin (every key before it masked).
  const std::int64_t k0 = part.kind == AttentionPart::kFinish ? part.key_begin : 0;
  // 2. softmax per row over the keys it sees, in place.
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    float* row = scores + r * ld_scores;
    const std::int64_t i = r / group;
    const std::int64_t count16 = pack_visible_scores(row, cached, visible + i * n, visible_count[i], 16);
    __m512 mx = _mm512_loadu_ps(row + k0);
    for (std::int64_t j = k0 + 16; j < count16; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(row + j));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (std::int64_t j = k0; j < count16; j += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), m));
      _mm512_storeu_ps(row + j, e);
      sum = _mm512_add_ps(sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(sum));
    for (std::int64_t j = k0; j < count16; j += 16) _mm512_storeu_ps(row + j, _mm512_mul_ps(_mm512_loadu_ps(row + j), inv));
  }
  // 3. out[r] = sum_j p[r, j] * v[key j], over the row's keys in the order of step 2, in chunks of keys whose values stay
  //    in L1: over the cached context every row sees the same keys, so up to 4 rows share each value load; over the new
  //    keys, the rows of one token (its group members). Each row still sums its own products in ascending key order.
  //    Up to 4 rows share a pass up to head size 128, kWideHeadRows at 256 (their NV accumulators each must fit the 32
  //    zmm registers).
  constexpr int kMaxRows = NV <= 8 ? 4 : kWideHeadRows;
  std::int64_t members[4];
  int count = 0;
  auto flush = [&](std::int64_t c0, std::int64_t c1, std::int64_t i) SPECDEC_TARGET_AVX512F {
    switch (count) {
      case 1: value_rows<NV, 1, KV>(members, k0, c0, c1, i, n, group, cached, visible, v, scores, ld_scores, out, ld_out_token, ld_out_member); break;
      case 2:
        if constexpr (kMaxRows >= 2)
          value_rows<NV, 2, KV>(members, k0, c0, c1, i, n, group, cached, visible, v, scores, ld_scores, out, ld_out_token, ld_out_member);
        break;
      case 3:
        if constexpr (kMaxRows >= 3)
          value_rows<NV, 3, KV>(members, k0, c0, c1, i, n, group, cached, visible, v, scores, ld_scores, out, ld_out_token, ld_out_member);
        break;
      case 4:
        if constexpr (kMaxRows >= 4)
          value_rows<NV, 4, KV>(members, k0, c0, c1, i, n, group, cached, visible, v, scores, ld_scores, out, ld_out_token, ld_out_member);
        break;
      default: break;
    }
    count = 0;
  };
  for (std::int64_t c0 = k0; c0 < cached + n; c0 += kValueChunk) {
    const std::int64_t context_end = std::min(cached, c0 + kValueChunk);
    if (c0 < context_end) {  // cached keys [c0, context_end): every row
      for (std::int64_t r = row_begin; r < row_end; ++r) {
        members[count++] = r;
        if (count == kMaxRows) flush(c0, context_end, 0);
      }
      flush(c0, context_end, 0);
    }
    const std::int64_t new_begin = std::max(c0, cached);
    for (std::int64_t i = row_begin / group; i * group < row_end; ++i) {  // new keys [new_begin, c1): per token
      const std::int64_t c1 = std::min(cached + visible_count[i], c0 + kValueChunk);
      if (new_begin >= c1) continue;
      for (std::int64_t r = std::max(row_begin, i * group); r < std::min(row_end, (i + 1) * group); ++r) {
        members[count++] = r;
        if (count == kMaxRows) flush(new_begin, c1, i);
      }
      flush(new_begin, c1, i);
    }
  }
}


}  // namespace

}  // namespace specdec::models::detail
#endif

namespace specdec::models::detail {

template <class KV>
bool attention_rows_avx512([[maybe_unused]] const float* q, [[maybe_unused]] std::int64_t row_begin,
                           [[maybe_unused]] std::int64_t row_end, [[maybe_unused]] std::int64_t n,
                           [[maybe_unused]] std::int64_t group, std::int64_t hd, [[maybe_unused]] const KV* k,
                           [[maybe_unused]] const KV* v, [[maybe_unused]] std::int64_t total,
                           [[maybe_unused]] std::int64_t cached, [[maybe_unused]] const std::int32_t* visible,
                           [[maybe_unused]] const std::int32_t* visible_count, [[maybe_unused]] float* scores,
                           [[maybe_unused]] std::int64_t ld_scores, [[maybe_unused]] float* out,
                           [[maybe_unused]] std::int64_t ld_out_token, [[maybe_unused]] std::int64_t ld_out_member,
                           [[maybe_unused]] AttentionPart part) {
  switch (hd) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPECDEC_CASE(NV)                                                                                                   \
  case 16 * NV:                                                                                                            \
    attention_rows_w16<NV>(q, row_begin, row_end, n, group, k, v, total, cached, visible, visible_count, scores, ld_scores, out,   \
                           ld_out_token, ld_out_member, part);                                                             \
    return true;
    SPECDEC_CASE(1)
    SPECDEC_CASE(2)
    SPECDEC_CASE(3)
    SPECDEC_CASE(4)
    SPECDEC_CASE(5)
    SPECDEC_CASE(6)
    SPECDEC_CASE(7)
    SPECDEC_CASE(8)
    SPECDEC_CASE(16)
#undef SPECDEC_CASE
#endif
    default: return false;  // another head size, or not x86: the 8-lane kernel
  }
}
template bool attention_rows_avx512<float>(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                           std::int64_t, const float*, const float*, std::int64_t, std::int64_t,
                                           const std::int32_t*, const std::int32_t*, float*, std::int64_t, float*,
                                           std::int64_t, std::int64_t, AttentionPart);
template bool attention_rows_avx512<std::uint16_t>(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                   std::int64_t, const std::uint16_t*, const std::uint16_t*, std::int64_t,
                                                   std::int64_t, const std::int32_t*, const std::int32_t*, float*,
                                                   std::int64_t, float*, std::int64_t, std::int64_t, AttentionPart);

}  // namespace specdec::models::detail
