// The AVX-512 VNNI, AVX-VNNI and AVX2 packed products (compiled with target attributes, chosen at run time by PackedMatrix::linear).
//
// A tile holds 16 weight rows; its block's values sit 4 bytes of each row side by side, so one 64-byte load is a VNNI
// operand: vpdpbusd multiplies it (unsigned) by 4 activation bytes broadcast to every row (signed) and adds the 16 rows'
// 4-term sums into 16 int32 lanes. 8 such steps give every row's exact integer block sum. A 4-bit block is blk / 8 loads,
// each split into its low nibbles (values 4c..4c+3) and high nibbles (blk/2+4c..); a 5-bit block then adds 16 to the
// bytes its plane of fifth bits marks, a 6-bit one (Q6_K) ors in its 2-bit fields of higher bits
// (PackedMatrix::Layout::high_bits), and an IQ4 block maps its indices to the table's values + 128 by one vpshufb
// (Layout::table). AVX2 does the same per 8-row half tile with vpmaddubsw + vpmaddwd (Q8_0's 8-bit values go whole as
// signed values where the matrix has no -128, else as two nibble halves, so no 16-bit sum can saturate; IQ4's table
// values go as signed values). The float stage
// is the same few operations on every path (see packed_matrix.hpp), so the result does not depend on the path. AVX-VNNI
// (8-lane vpdpbusd, on CPUs without AVX-512) runs the AVX2 code with vpdpbusd for the integer sums (8-bit values whole).
//
// Each weight block is unpacked once per call for every token row of a group (up to 9 rows; more rows go in balanced
// groups over the same tile while it is in L1), so the integer sums of the group's rows overlap in the pipeline.
#include <algorithm>
#include <cstring>

#include "packed_x86.hpp"

namespace specdec::models::detail {

#ifdef SPECDEC_PACKED_X86

namespace {

// Token rows in balanced groups of <= MaxGroup, calling fn.template operator()<NT>(t0) for rows [t0, t0 + NT).
template <int MaxGroup, class Fn>
inline void for_token_groups(std::int64_t n, Fn&& fn) {
  const std::int64_t groups = (n + MaxGroup - 1) / MaxGroup;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t t0 = g * n / groups, t1 = (g + 1) * n / groups;
    switch (t1 - t0) {
      case 1: fn.template operator()<1>(t0); break;
      case 2: fn.template operator()<2>(t0); break;
      case 3: fn.template operator()<3>(t0); break;
      case 4: fn.template operator()<4>(t0); break;
      case 5: fn.template operator()<5>(t0); break;
      case 6: fn.template operator()<6>(t0); break;
      case 7: if constexpr (MaxGroup >= 7) fn.template operator()<7>(t0); break;
      case 8: if constexpr (MaxGroup >= 8) fn.template operator()<8>(t0); break;
      default: if constexpr (MaxGroup >= 9) fn.template operator()<9>(t0); break;
    }
  }
}

// --- AVX-512 VNNI --------------------------------------------------------------------------------------------------------


#ifndef SPECDEC_PREFETCH_TILES
#define SPECDEC_PREFETCH_TILES 1
#endif
constexpr std::int64_t kPrefetchTiles = SPECDEC_PREFETCH_TILES;

template <class F, int P, int TR, int NT>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void avx512_tiles(const PackedArgs& a, std::int64_t tile,
                                                                      std::int64_t t0) {
  const PackedMatrix& w = *a.w;
  const QuantizedRows& x = *a.x;
  const std::int64_t blocks = w.cols() / F::blk;
  const std::byte* tp[TR];
  #pragma GCC unroll 16
  for (int r = 0; r < TR; ++r) tp[r] = w.tile(tile + r);
  const std::byte* xr[NT];
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) xr[t] = x.data.data() + (t0 + t) * x.stride;
  constexpr std::int64_t xbb = P * F::blk + QuantizedRows::header;

  __m512 acc[TR][NT];
  #pragma GCC unroll 16
  for (int r = 0; r < TR; ++r)
    #pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();

  // The tile kPrefetchTiles ahead (in the same matrix) is prefetched block by block, so its lines are on their way while
  // this tile computes.
  const std::byte* ahead = tile + TR + kPrefetchTiles <= w.tiles() ? w.tile(tile + TR - 1 + kPrefetchTiles) : nullptr;
  Avx512ScaleStream<F> scales[TR];
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (ahead != nullptr) prefetch_block<F>(ahead, b);
    __m512i is[TR][NT], is2[TR][NT];  // plane 1 and plane 2 sums
    #pragma GCC unroll 16
    for (int r = 0; r < TR; ++r)
      #pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) is[r][t] = is2[r][t] = _mm512_setzero_si512();
    if constexpr (u2<F>()) {
      #pragma GCC unroll 16
      for (int r = 0; r < TR; ++r) {
        __m512i op[4];
        avx512_u2_operands<F>(values_at<F>(tp[r], b), op);
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
          #pragma GCC unroll 16
          for (int t = 0; t < NT; ++t) {
            const std::byte* q = xr[t] + b * xbb;
            is[r][t] = _mm512_dpbusd_epi32(is[r][t], op[k], _mm512_set1_epi32(load_i32(q + 4 * k)));
            if constexpr (P == 2) is2[r][t] = _mm512_dpbusd_epi32(is2[r][t], op[k], _mm512_set1_epi32(load_i32(q + F::blk + 4 * k)));
          }
      }
    } else if constexpr (F::u4) {
      constexpr int kHalf = F::blk / 2;  // the high nibbles' first element
      #pragma GCC unroll 16
      for (int c = 0; c < F::blk / 8; ++c) {
        #pragma GCC unroll 16
        for (int r = 0; r < TR; ++r) {
          __m512i lo, hi;
          avx512_u4_chunk<F>(values_at<F>(tp[r], b), c, lo, hi);
          #pragma GCC unroll 16
          for (int t = 0; t < NT; ++t) {
            const std::byte* q = xr[t] + b * xbb;
            is[r][t] = _mm512_dpbusd_epi32(is[r][t], lo, _mm512_set1_epi32(load_i32(q + 4 * c)));
            is[r][t] = _mm512_dpbusd_epi32(is[r][t], hi, _mm512_set1_epi32(load_i32(q + kHalf + 4 * c)));
            if constexpr (P == 2) {
              is2[r][t] = _mm512_dpbusd_epi32(is2[r][t], lo, _mm512_set1_epi32(load_i32(q + F::blk + 4 * c)));
              is2[r][t] = _mm512_dpbusd_epi32(is2[r][t], hi, _mm512_set1_epi32(load_i32(q + F::blk + kHalf + 4 * c)));
            }
          }
        }
      }
    } else {
      #pragma GCC unroll 16
      for (int c = 0; c < F::blk / 4; ++c) {
        #pragma GCC unroll 16
        for (int r = 0; r < TR; ++r) {
          const __m512i raw = _mm512_loadu_si512(values_at<F>(tp[r], b) + 64 * c);
          #pragma GCC unroll 16
          for (int t = 0; t < NT; ++t) {
            is[r][t] = _mm512_dpbusd_epi32(is[r][t], raw, _mm512_set1_epi32(load_i32(xr[t] + b * xbb + 4 * c)));
            if constexpr (P == 2)
              is2[r][t] = _mm512_dpbusd_epi32(is2[r][t], raw, _mm512_set1_epi32(load_i32(xr[t] + b * xbb + F::blk + 4 * c)));
          }
        }
      }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < TR; ++r) {
      __m512 d, m;
      scales[r].at(tp[r], b, d, m);
      #pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        __m512i s = is[r][t];
        if constexpr (P == 2) s = _mm512_add_epi32(_mm512_slli_epi32(s, 8), is2[r][t]);
        acc[r][t] = avx512_block_step<F>(s, d, m, xr[t] + b * xbb + P * F::blk, acc[r][t]);
      }
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < TR; ++r) {
    const std::int64_t o = (tile + r) * kTileRows;
    const std::int64_t valid = std::min<std::int64_t>(kTileRows, w.rows() - o);
    const __mmask16 mask = static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1u);
    #pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      float* y = a.y + (t0 + t) * a.ldy + o;
      __m512 v = acc[r][t];
      if (a.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
      _mm512_mask_storeu_ps(y, mask, v);
    }
  }
}

template <class F, int P>
SPECDEC_TARGET_AVX512 void avx512_run(const PackedArgs& a) {
  // One tile at a time (measured: interleaving 2-4 tiles' streams was up to 2x slower), every token group passing over it
  // while it is in L1 (so a prefill reads each tile from memory once). Groups of up to 9 rows with either plane count:
  // 9 rows x 2 planes of integer sums and 9 accumulators still fit the 32 zmm registers, and a verification of g <= 8
  // drafts passes over each tile once (faster than groups of up to 6 or 8 rows in bench_model BM_Decode; the figures are
  // in docs/cpu-forward.md).
  for (std::int64_t t = a.tile_begin; t < a.tile_end; ++t)
    for_token_groups<9>(a.x->n, [&]<int NT>(std::int64_t t0) SPECDEC_TARGET_AVX512 { avx512_tiles<F, P, 1, NT>(a, t, t0); });
}

// --- AVX2 ------------------------------------------------------------------------------------------------------------------

#define SPECDEC_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

// AVX-VNNI's vpdpbusd on 8 lanes (the VEX form, on CPUs with AVX-VNNI but no AVX-512 VNNI): acc + the 4-term products of
// u's bytes (unsigned) and q4's 4 bytes (signed) per lane, in 32 bits (no saturation), so the same integer sums as the
// AVX2 steps. Not always_inline: avxvnni_run's token-group functions flatten it into themselves with their target.
__attribute__((target("avx2,fma,f16c,avxvnni"))) inline __m256i dpbusd8(__m256i acc, __m256i u, std::int32_t q4) {
  return _mm256_dpbusd_avx_epi32(acc, u, _mm256_set1_epi32(q4));
}

// Half tile h (rows 8h .. 8h + 7 of the tile), NT token rows; kVnni: the integer sums by AVX-VNNI (the same values);
// kSigned: a Q8_0 matrix without -128 (PackedMatrix::values_above_min), its bytes taken whole as signed values.
template <class F, int P, int NT, bool kVnni = false, bool kSigned = false>
SPECDEC_TARGET_AVX2 [[gnu::always_inline]] inline void avx2_half_tile(const PackedArgs& a, std::int64_t tile, int h,
                                                                      std::int64_t t0) {
  const PackedMatrix& w = *a.w;
  const QuantizedRows& x = *a.x;
  const std::int64_t blocks = w.cols() / F::blk;
  constexpr std::int64_t xbb = P * F::blk + QuantizedRows::header;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const std::byte* tp = w.tile(tile) + 32 * h;
  const std::byte* xr[NT];
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) xr[t] = x.data.data() + (t0 + t) * x.stride;
  __m256 acc[NT];
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  // IQ4 indices on AVX2: the table's signed values w = u - 128 multiply the activations as |x| (w sgn x), as kSigned's
  // bytes do, so the sums lack the zero point's 128 S, which the float stage then does not subtract.
  constexpr bool kSignedTable = table<F>() && !kVnni;
  auto dot4 = [&](__m256i u, std::int32_t q4) SPECDEC_TARGET_AVX2 {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_set1_epi32(q4)), ones);
  };
  // As in avx512_tiles: the first pass over a tile (first half, first token group) prefetches the tile kPrefetchTiles
  // ahead block by block; the second half and later groups find this tile in L1.
  const std::byte* ahead =
      h == 0 && t0 == 0 && tile + kPrefetchTiles < w.tiles() ? w.tile(tile + kPrefetchTiles) : nullptr;
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (ahead != nullptr) prefetch_block<F>(ahead, b);
    const std::byte* tb = values_at<F>(tp, b);
    __m256i is[NT], is2[NT];  // plane 1 and plane 2 sums
    #pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) is[t] = is2[t] = _mm256_setzero_si256();
    if constexpr (u2<F>()) {
      // 2-bit values (Layout::u2), rows 8h..: operand k is crumb k of the half tile's 32 bytes, + 4 where the third bit
      // is set (bit k, or 4 + k for rows 8-15, of the 32 bytes after the values); pairs of at most 2 * 7 * 127, so a
      // block's 16-bit sums (4 per lane) are exact and widen once.
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb));
      __m256i g = _mm256_setzero_si256();
      if constexpr (high_bits<F>() == 1) {
        g = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb - 32 * h + 64));
        if (h == 1) g = _mm256_srli_epi16(g, 4);
      }
      const auto sll = [](__m256i v, int n) SPECDEC_TARGET_AVX2 { return _mm256_slli_epi16(v, n); };
      const auto srl = [](__m256i v, int n) SPECDEC_TARGET_AVX2 { return _mm256_srli_epi16(v, n); };
      const __m256i three = _mm256_set1_epi8(3);
      __m256i op[4] = {_mm256_and_si256(raw, three), _mm256_and_si256(_mm256_srli_epi16(raw, 2), three),
                       _mm256_and_si256(_mm256_srli_epi16(raw, 4), three), _mm256_and_si256(_mm256_srli_epi16(raw, 6), three)};
      if constexpr (high_bits<F>() == 1) {
        const __m256i four = _mm256_set1_epi8(4);
        op[0] = _mm256_or_si256(op[0], _mm256_and_si256(third_bits_at_2<0>(g, sll, srl), four));
        op[1] = _mm256_or_si256(op[1], _mm256_and_si256(third_bits_at_2<1>(g, sll, srl), four));
        op[2] = _mm256_or_si256(op[2], _mm256_and_si256(third_bits_at_2<2>(g, sll, srl), four));
        op[3] = _mm256_or_si256(op[3], _mm256_and_si256(third_bits_at_2<3>(g, sll, srl), four));
      }
      __m256i s16[NT], r16[NT];
      #pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) s16[t] = r16[t] = _mm256_setzero_si256();
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        #pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          const std::byte* q = xr[t] + b * xbb;
          if constexpr (kVnni) {
            is[t] = dpbusd8(is[t], op[k], load_i32(q + 4 * k));
            if constexpr (P == 2) is2[t] = dpbusd8(is2[t], op[k], load_i32(q + F::blk + 4 * k));
          } else {
            s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(op[k], _mm256_set1_epi32(load_i32(q + 4 * k))));
            if constexpr (P == 2) r16[t] = _mm256_add_epi16(r16[t], _mm256_maddubs_epi16(op[k], _mm256_set1_epi32(load_i32(q + F::blk + 4 * k))));
          }
        }
      }
      if constexpr (!kVnni) {
        #pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          is[t] = _mm256_madd_epi16(s16[t], ones);
          if constexpr (P == 2) is2[t] = _mm256_madd_epi16(r16[t], ones);
        }
      }
    } else if constexpr (F::u4) {
      // AVX2: the block's pair products summed in 16 bits, widened once per block: a 4-bit weight times an activation
      // byte (|x| <= 127: quantize_rows clamps both planes) gives pairs of at most 3810, and 8 of them (the block's 32
      // columns) at most 30480, so the 16-bit sums are exact and the 32-bit sums those of widening every pair, with a
      // quarter fewer instructions per weight. 5- and 6-bit values (high bits) give pairs of at most 7874 and 16002, so their
      // 16-bit sums widen every chunk (its low and high nibbles' pairs: at most 32004). AVX-VNNI: vpdpbusd straight into
      // the 32-bit sums.
      __m256i s16[NT], r16[NT];
      #pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) s16[t] = r16[t] = _mm256_setzero_si256();
      auto pairs = [&](__m256i u, std::int32_t q4) SPECDEC_TARGET_AVX2 { return _mm256_maddubs_epi16(u, _mm256_set1_epi32(q4)); };
      constexpr int kHalf = F::blk / 2;  // the high nibbles' first element
      #pragma GCC unroll 16
      for (int c = 0; c < F::blk / 8; ++c) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + 64 * c));
        __m256i lo = _mm256_and_si256(raw, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if constexpr (high_bits<F>() == 1) {  // rows 8h..: bits 32h.. of the chunk's masks; + 16 where the fifth bit is set
          const std::byte* plane = tb - 32 * h + 8 * F::blk + 16 * c + 4 * h;
          const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                  2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
          const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
          const __m256i sixteen = _mm256_set1_epi8(16);
          auto fifth = [&](std::int32_t m) SPECDEC_TARGET_AVX2 {
            const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(m), spread), bit);
            return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), sixteen);
          };
          lo = _mm256_or_si256(lo, fifth(load_i32(plane)));
          hi = _mm256_or_si256(hi, fifth(load_i32(plane + 8)));
        } else if constexpr (high_bits<F>() == 2) {  // the 2-bit fields into bits 4-5: bits 0-3 for rows 0-7, 4-7 for 8-15
          const __m256i fields = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb - 32 * h + 8 * F::blk + 32 * c));
          const __m256i bits45 = _mm256_set1_epi8(0x30);
          if (h == 0) {
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(fields, 4), bits45));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(fields, 2), bits45));
          } else {
            lo = _mm256_or_si256(lo, _mm256_and_si256(fields, bits45));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(fields, 2), bits45));
          }
        }
        if constexpr (table<F>()) {  // AVX-VNNI: the table values + 128; AVX2: the signed values (kSignedTable)
          const __m256i tab = _mm256_load_si256(reinterpret_cast<const __m256i*>(kVnni ? kIq4Unsigned.v : kIq4Signed.v));
          lo = _mm256_shuffle_epi8(tab, lo);
          hi = _mm256_shuffle_epi8(tab, hi);
        }
        #pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          const std::byte* q = xr[t] + b * xbb;
          if constexpr (kVnni) {
            is[t] = dpbusd8(dpbusd8(is[t], lo, load_i32(q + 4 * c)), hi, load_i32(q + kHalf + 4 * c));
            if constexpr (P == 2)
              is2[t] = dpbusd8(dpbusd8(is2[t], lo, load_i32(q + F::blk + 4 * c)), hi, load_i32(q + F::blk + kHalf + 4 * c));
          } else if constexpr (kSignedTable) {  // w x as |x| (w sgn x): pairs of at most 2 * 127 * 127, widened at once
            auto spairs = [&](__m256i w, std::int32_t q4) SPECDEC_TARGET_AVX2 {
              const __m256i xb = _mm256_set1_epi32(q4);
              return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(xb), _mm256_sign_epi8(w, xb)), ones);
            };
            is[t] = _mm256_add_epi32(is[t], _mm256_add_epi32(spairs(lo, load_i32(q + 4 * c)), spairs(hi, load_i32(q + kHalf + 4 * c))));
            if constexpr (P == 2)
              is2[t] = _mm256_add_epi32(
                  is2[t], _mm256_add_epi32(spairs(lo, load_i32(q + F::blk + 4 * c)), spairs(hi, load_i32(q + F::blk + kHalf + 4 * c))));
          } else if constexpr (high_bits<F>() > 0) {
            is[t] = _mm256_add_epi32(
                is[t], _mm256_madd_epi16(_mm256_add_epi16(pairs(lo, load_i32(q + 4 * c)), pairs(hi, load_i32(q + kHalf + 4 * c))), ones));
            if constexpr (P == 2)
              is2[t] = _mm256_add_epi32(is2[t], _mm256_madd_epi16(_mm256_add_epi16(pairs(lo, load_i32(q + F::blk + 4 * c)),
                                                                                   pairs(hi, load_i32(q + F::blk + kHalf + 4 * c))),
                                                                  ones));
          } else {
            s16[t] = _mm256_add_epi16(s16[t], _mm256_add_epi16(pairs(lo, load_i32(q + 4 * c)), pairs(hi, load_i32(q + kHalf + 4 * c))));
            if constexpr (P == 2)
              r16[t] = _mm256_add_epi16(
                  r16[t], _mm256_add_epi16(pairs(lo, load_i32(q + F::blk + 4 * c)), pairs(hi, load_i32(q + F::blk + kHalf + 4 * c))));
          }
        }
      }
      if constexpr (!kVnni && high_bits<F>() == 0 && !table<F>()) {
        #pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          is[t] = _mm256_madd_epi16(s16[t], ones);
          if constexpr (P == 2) is2[t] = _mm256_madd_epi16(r16[t], ones);
        }
      }
    } else {
      // 8-bit values. vpmaddubsw saturates a pair at 32767, so values up to 255 (Q8_0's, offset by 128) go as two nibble
      // halves; values below 64 would go whole (a pair at most 2 * 63 * 127 = 16002). AVX-VNNI's
      // 32-bit sums take any byte whole. kSigned: Q8_0's values w = byte - 128 in [-127, 127] multiply the activations as
      // |x| * (w sgn x) (vpsignb), pairs of at most 2 * 127 * 127 = 32258; the sums then lack the zero point's
      // 128 * sum(x), which the float stage below would subtract, so it skips that.
      constexpr bool kWhole = kVnni || F::vmax < 64;
      #pragma GCC unroll 16
      for (int c = 0; c < F::blk / 4; ++c) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + 64 * c));
        auto sum4 = [&](__m256i acc, std::int32_t q4) SPECDEC_TARGET_AVX2 {
          if constexpr (kVnni) {
            return dpbusd8(acc, raw, q4);
          } else if constexpr (kWhole) {
            return _mm256_add_epi32(acc, dot4(raw, q4));
          } else if constexpr (kSigned) {
            const __m256i xb = _mm256_set1_epi32(q4);
            const __m256i w = _mm256_xor_si256(raw, _mm256_set1_epi8(static_cast<char>(0x80)));
            return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(xb), _mm256_sign_epi8(w, xb)), ones));
          } else {
            const __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            return _mm256_add_epi32(acc, _mm256_add_epi32(dot4(lo, q4), _mm256_slli_epi32(dot4(hi, q4), 4)));
          }
        };
        #pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          is[t] = sum4(is[t], load_i32(xr[t] + b * xbb + 4 * c));
          if constexpr (P == 2) is2[t] = sum4(is2[t], load_i32(xr[t] + b * xbb + F::blk + 4 * c));
        }
      }
    }
    // Scales of rows 8h.. sit 16h (half) or 8h (int8 sub-scale; its super-block's halves 16h) bytes into their arrays.
    const std::byte* sc = scales_at<F>(tp - 32 * h, b);
    __m256 d, m = _mm256_setzero_ps();
    if constexpr (F::half) {
      d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * h)));
      if constexpr (F::min) m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 32 + 16 * h)));
    } else {  // float(D) * float(s): the exact products (Layout::scale_min)
      const std::byte* sup = supers_at<F>(tp - 32 * h, b);
      const auto s8 = [](const std::byte* p) SPECDEC_TARGET_AVX2 {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
      };
      __m256 s, s_min = _mm256_setzero_ps();
      if constexpr (scale_nibbles<F>()) {  // Q2_K: s and s_min in a byte's low and high nibbles
        const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8 * h)), low4 = _mm_set1_epi8(0x0F);
        s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(raw, low4)));
        s_min = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), low4)));
      } else {
        s = s8(sc + 8 * h);
        if constexpr (F::min) s_min = s8(sc + 16 + 8 * h);
      }
      d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sup + 16 * h))), s);
      if constexpr (F::min)
        m = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sup + 32 + 16 * h))), s_min);
    }
    #pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const std::byte* q = xr[t] + b * xbb + P * F::blk;  // dx, S, float(S)
      __m256i s = is[t];
      if constexpr (P == 2) s = _mm256_add_epi32(_mm256_slli_epi32(s, 8), is2[t]);
      if constexpr (F::z != 0 && !kSigned && !kSignedTable) s = _mm256_sub_epi32(s, _mm256_set1_epi32(F::z * load_i32(q + 4)));
      const __m256 f = _mm256_cvtepi32_ps(s);
      __m256 e;
      if constexpr (F::min)
        e = _mm256_fmadd_ps(d, f, _mm256_mul_ps(m, _mm256_set1_ps(load_f32(q + 8))));
      else
        e = _mm256_mul_ps(d, f);
      acc[t] = _mm256_fmadd_ps(e, _mm256_set1_ps(load_f32(q)), acc[t]);
    }
  }
  const std::int64_t o = tile * kTileRows + 8 * h;
  const std::int64_t valid = std::min<std::int64_t>(8, w.rows() - o);
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) {
    float* y = a.y + (t0 + t) * a.ldy + o;
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[t]);
    for (std::int64_t l = 0; l < valid; ++l) y[l] = a.accumulate ? y[l] + v[l] : v[l];
  }
}

// Token rows [t0, t0 + NT) over half tile h: groups of up to 4 rows in registers (5 or 6 go as 3 and the rest).
template <class F, int P, int NT, bool kVnni, bool kSigned = false>
SPECDEC_TARGET_AVX2 [[gnu::always_inline]] inline void avx2_group(const PackedArgs& a, std::int64_t t, int h, std::int64_t t0) {
  if constexpr (NT <= 4) {
    avx2_half_tile<F, P, NT, kVnni, kSigned>(a, t, h, t0);
  } else {
    avx2_half_tile<F, P, 3, kVnni, kSigned>(a, t, h, t0);
    avx2_half_tile<F, P, NT - 3, kVnni, kSigned>(a, t, h, t0 + 3);
  }
}
// One function per token-group size, as for AVX2; the AVX-VNNI ones take AVX-VNNI's target and flatten dpbusd8 into
// themselves (a flatten over the whole tile loop made one function so large that the sanitizer build spent minutes on it).
template <class F, int P, bool kSigned>
SPECDEC_TARGET_AVX2 void avx2_tiles(const PackedArgs& a) {
  for (std::int64_t t = a.tile_begin; t < a.tile_end; ++t)
    for (int h = 0; h < 2; ++h) {
      if (t * kTileRows + 8 * h >= a.w->rows()) break;
      for_token_groups<6>(a.x->n, [&]<int NT>(std::int64_t t0) SPECDEC_TARGET_AVX2 { avx2_group<F, P, NT, false, kSigned>(a, t, h, t0); });
    }
}
template <class F, int P>
SPECDEC_TARGET_AVX2 void avx2_run(const PackedArgs& a) {
  if constexpr (F::z == 128) {
    if (a.w->values_above_min()) {
      avx2_tiles<F, P, true>(a);
      return;
    }
  }
  avx2_tiles<F, P, false>(a);
}
template <class F, int P>
__attribute__((target("avx2,fma,f16c,avxvnni"))) void avxvnni_run(const PackedArgs& a) {
  for (std::int64_t t = a.tile_begin; t < a.tile_end; ++t)
    for (int h = 0; h < 2; ++h) {
      if (t * kTileRows + 8 * h >= a.w->rows()) break;
      for_token_groups<6>(a.x->n, [&]<int NT>(std::int64_t t0) __attribute__((target("avx2,fma,f16c,avxvnni"), flatten)) {
        avx2_group<F, P, NT, true>(a, t, h, t0);
      });
    }
}

template <class F>
struct Avx512Run {
  static void go(const PackedArgs& a) { a.x->planes == 2 ? avx512_run<F, 2>(a) : avx512_run<F, 1>(a); }
};
template <class F>
struct Avx2Run {
  static void go(const PackedArgs& a) { a.x->planes == 2 ? avx2_run<F, 2>(a) : avx2_run<F, 1>(a); }
};
template <class F>
struct AvxVnniRun {
  static void go(const PackedArgs& a) { a.x->planes == 2 ? avxvnni_run<F, 2>(a) : avxvnni_run<F, 1>(a); }
};

}  // namespace

// 8 values rounded half to even and clamped to +-127 (as floats, exact integers).
SPECDEC_TARGET_AVX2 [[gnu::always_inline]] inline __m256 round_clamp8(__m256 v) {
  v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.f)), _mm256_set1_ps(127.f));
}

// Stores 8 such values as int8; returns them as int32.
SPECDEC_TARGET_AVX2 [[gnu::always_inline]] inline __m256i store8(__m256 v, std::byte* dst) {
  const __m256i q = _mm256_cvtps_epi32(v);
  const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packs_epi16(w16, w16));
  return q;
}

// One block's planes (q1 = round(x / d1); with two, q2 = round((x - d1 q1) / d2), the residual from q1 as a float, which
// is the value the int8 holds); returns the lanes' sums of q1 (times 256, plus those of q2).
template <bool TWO>
SPECDEC_TARGET_AVX2 [[gnu::always_inline]] inline __m256i quantize_block8(const float* xb, std::int64_t block, float d1,
                                                                         float id1, float id2, std::byte* dst) {
  __m256i sum = _mm256_setzero_si256(), sum2 = _mm256_setzero_si256();
  for (std::int64_t i = 0; i < block; i += 8) {
    const __m256 xv = _mm256_loadu_ps(xb + i);
    const __m256 q = round_clamp8(_mm256_mul_ps(xv, _mm256_set1_ps(id1)));
    sum = _mm256_add_epi32(sum, store8(q, dst + i));
    if constexpr (TWO) {
      const __m256 residual = _mm256_sub_ps(xv, _mm256_mul_ps(_mm256_set1_ps(d1), q));
      sum2 = _mm256_add_epi32(sum2, store8(round_clamp8(_mm256_mul_ps(residual, _mm256_set1_ps(id2))), dst + block + i));
    }
  }
  // 256 S1 + S2 is exact in int32 (|S1| <= 127 * 32)
  return TWO ? _mm256_add_epi32(_mm256_slli_epi32(sum, 8), sum2) : sum;
}

// Lane k of the result = op over the 8 lanes of v[k] (k < 8): pairs of neighbouring lanes, then pairs of pairs, then the
// two 128-bit halves. Used for max (any order gives the same value) and exact int32 sums.
template <class Op>
SPECDEC_TARGET_AVX2 [[gnu::always_inline]] inline __m256 reduce8x8(const __m256* v, Op op) {
  auto pairs = [&](__m256 a, __m256 b) SPECDEC_TARGET_AVX2 {  // per 128-bit half: a0 op a1, a2 op a3, b0 op b1, b2 op b3
    return op(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  const __m256 s0123 = pairs(pairs(v[0], v[1]), pairs(v[2], v[3]));  // per half: v0 .. v3 reduced over that half
  const __m256 s4567 = pairs(pairs(v[4], v[5]), pairs(v[6], v[7]));
  return op(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// Blocks go in groups of 8: their maxima reduced together, the scales d1 = max / 127, 1 / d1, d2 = d1 / 256, 1 / d2
// divided as one vector each (IEEE division, so the bits of the scalar operations), and their sums reduced together,
// so no block waits on a chain of scalar reductions and divisions before the next starts.
SPECDEC_TARGET_AVX2 void quantize_rows_avx2(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld,
                                            QuantizedRows& out) {
  const std::int64_t block = out.block;
  const bool two = out.planes == 2;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), zero = _mm256_setzero_ps();
  auto max_op = [](__m256 a, __m256 b) SPECDEC_TARGET_AVX2 { return _mm256_max_ps(a, b); };
  auto add_op = [](__m256 a, __m256 b) SPECDEC_TARGET_AVX2 {
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(a), _mm256_castps_si256(b)));
  };
  auto inverse = [&](__m256 d) SPECDEC_TARGET_AVX2 {  // d > 0 ? 1 / d : 0
    return _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.f), d), _mm256_cmp_ps(d, zero, _CMP_GT_OQ));
  };
  for (std::int64_t t = row_begin; t < row_end; ++t) {
    for (std::int64_t b0 = 0; b0 < out.blocks; b0 += 8) {
      const int g = static_cast<int>(std::min<std::int64_t>(8, out.blocks - b0));
      const float* xg = x + t * ld + b0 * block;
      std::byte* dg = out.data.data() + t * out.stride + b0 * out.block_bytes();
      __m256 v[8];
      for (int k = 0; k < 8; ++k) {
        __m256 mx = zero;
        if (k < g)
          for (std::int64_t i = 0; i < block; i += 8)
            mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xg + k * block + i), abs_mask));
        v[k] = mx;
      }
      const __m256 d1 = _mm256_div_ps(reduce8x8(v, max_op), _mm256_set1_ps(127.f));
      const __m256 d2 = _mm256_div_ps(d1, _mm256_set1_ps(256.f));
      alignas(32) float d1s[8], id1s[8], d2s[8], id2s[8];
      _mm256_store_ps(d1s, d1);
      _mm256_store_ps(id1s, inverse(d1));
      _mm256_store_ps(d2s, d2);
      _mm256_store_ps(id2s, inverse(d2));
      for (int k = 0; k < 8; ++k) {
        __m256i sum = _mm256_setzero_si256();
        if (k < g) {
          std::byte* dst = dg + k * out.block_bytes();
          sum = two ? quantize_block8<true>(xg + k * block, block, d1s[k], id1s[k], id2s[k], dst)
                    : quantize_block8<false>(xg + k * block, block, d1s[k], id1s[k], id2s[k], dst);
        }
        v[k] = _mm256_castsi256_ps(sum);
      }
      alignas(32) std::int32_t totals[8];
      _mm256_store_ps(reinterpret_cast<float*>(totals), reduce8x8(v, add_op));
      for (int k = 0; k < g; ++k)
        QuantizedRows::write_header(dg + k * out.block_bytes() + out.planes * block, two ? d2s[k] : d1s[k], totals[k]);
    }
  }
}

// The same quantisation on 16 lanes (blocks of 16 or 32 values: one or two vectors a block), with the same operations per
// value (max of |x|, the IEEE divisions, x * (1 / d1), round half to even, the clamps in the same order, x - d1 * q1 as a
// product then a difference), so the same bytes as quantize_rows_avx2 and the portable loop.
template <bool TWO>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline __m512i quantize_block16(const float* xb, std::int64_t block, float d1,
                                                                           float id1, float id2, std::byte* dst) {
  // Clamping before rounding to nearest even gives round-then-clamp's integer for every float (NaN: -127, as the
  // max's second operand), so the conversion rounds and no separate rounding is needed.
  auto round_clamp = [](__m512 v) SPECDEC_TARGET_AVX512 {
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.f)), _mm512_set1_ps(127.f));
    return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  };
  auto store = [](__m512i q, std::byte* at) SPECDEC_TARGET_AVX512 {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm512_cvtepi32_epi8(q));
  };
  __m512i sum = _mm512_setzero_si512(), sum2 = _mm512_setzero_si512();
  for (std::int64_t i = 0; i < block; i += 16) {
    const __m512 xv = _mm512_loadu_ps(xb + i);
    const __m512i q = round_clamp(_mm512_mul_ps(xv, _mm512_set1_ps(id1)));
    store(q, dst + i);
    sum = _mm512_add_epi32(sum, q);
    if constexpr (TWO) {
      const __m512 residual = _mm512_sub_ps(xv, _mm512_mul_ps(_mm512_set1_ps(d1), _mm512_cvtepi32_ps(q)));
      const __m512i q2 = round_clamp(_mm512_mul_ps(residual, _mm512_set1_ps(id2)));
      store(q2, dst + block + i);
      sum2 = _mm512_add_epi32(sum2, q2);
    }
  }
  return TWO ? _mm512_add_epi32(_mm512_slli_epi32(sum, 8), sum2) : sum;
}

// Lane k of the result = op over the 16 lanes of v[k]: neighbouring lanes, then pairs, within each 128-bit quarter (4
// vectors' quarters side by side), then the quarters. Used for max (any order gives the same value) and exact int32 sums.
template <class Op>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline __m512 reduce16x16(const __m512* v, Op op) {
  auto pairs = [&](__m512 a, __m512 b) SPECDEC_TARGET_AVX512 {  // per quarter: a0 op a1, a2 op a3, b0 op b1, b2 op b3
    return op(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  __m512 s[4];  // s[m], quarter q, lane i: v[4m + i] reduced over its quarter q
  #pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) s[m] = pairs(pairs(v[4 * m], v[4 * m + 1]), pairs(v[4 * m + 2], v[4 * m + 3]));
  auto quarters = [&](__m512 a, __m512 b) SPECDEC_TARGET_AVX512 {  // a.(q0 op q1), a.(q2 op q3), b.(q0 op q1), b.(q2 op q3)
    return op(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  return quarters(quarters(s[0], s[1]), quarters(s[2], s[3]));
}

// Blocks in groups of 16 (one vector of maxima, scales and sums per group), as quantize_rows_avx2 does in groups of 8.
SPECDEC_TARGET_AVX512 void quantize_rows_avx512(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld,
                                                QuantizedRows& out) {
  const std::int64_t block = out.block;
  const bool two = out.planes == 2;
  const __m512 zero = _mm512_setzero_ps();
  auto max_op = [](__m512 a, __m512 b) SPECDEC_TARGET_AVX512 { return _mm512_max_ps(a, b); };
  auto add_op = [](__m512 a, __m512 b) SPECDEC_TARGET_AVX512 {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  };
  auto inverse = [&](__m512 d) SPECDEC_TARGET_AVX512 {  // d > 0 ? 1 / d : 0
    return _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, zero, _CMP_GT_OQ), _mm512_set1_ps(1.f), d);
  };
  for (std::int64_t t = row_begin; t < row_end; ++t) {
    for (std::int64_t b0 = 0; b0 < out.blocks; b0 += 16) {
      const int g = static_cast<int>(std::min<std::int64_t>(16, out.blocks - b0));
      const float* xg = x + t * ld + b0 * block;
      std::byte* dg = out.data.data() + t * out.stride + b0 * out.block_bytes();
      __m512 v[16];
      #pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        __m512 mx = zero;
        if (k < g)
          for (std::int64_t i = 0; i < block; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(xg + k * block + i)));
        v[k] = mx;
      }
      const __m512 d1 = _mm512_div_ps(reduce16x16(v, max_op), _mm512_set1_ps(127.f));
      const __m512 d2 = _mm512_div_ps(d1, _mm512_set1_ps(256.f));
      alignas(64) float d1s[16], id1s[16], d2s[16], id2s[16];
      _mm512_store_ps(d1s, d1);
      _mm512_store_ps(id1s, inverse(d1));
      _mm512_store_ps(d2s, d2);
      _mm512_store_ps(id2s, inverse(d2));
      #pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        __m512i sum = _mm512_setzero_si512();
        if (k < g) {
          std::byte* dst = dg + k * out.block_bytes();
          sum = two ? quantize_block16<true>(xg + k * block, block, d1s[k], id1s[k], id2s[k], dst)
                    : quantize_block16<false>(xg + k * block, block, d1s[k], id1s[k], id2s[k], dst);
        }
        v[k] = _mm512_castsi512_ps(sum);
      }
      alignas(64) std::int32_t totals[16];
      _mm512_store_ps(reinterpret_cast<float*>(totals), reduce16x16(v, add_op));
      for (int k = 0; k < g; ++k)
        QuantizedRows::write_header(dg + k * out.block_bytes() + out.planes * block, two ? d2s[k] : d1s[k], totals[k]);
    }
  }
}

void packed_linear_avx512vnni(const PackedArgs& a) { dispatch<Avx512Run>(a); }
void packed_linear_avx2(const PackedArgs& a) { dispatch<Avx2Run>(a); }
void packed_linear_avxvnni(const PackedArgs& a) { dispatch<AvxVnniRun>(a); }

#else

void packed_linear_avx512vnni(const PackedArgs& a) { packed_linear_portable(a); }
void packed_linear_avx2(const PackedArgs& a) { packed_linear_portable(a); }
void packed_linear_avxvnni(const PackedArgs& a) { packed_linear_portable(a); }
void quantize_rows_avx2(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld, QuantizedRows& out) {
  quantize_rows(x, row_begin, row_end, ld, out, CpuIsa::kPortable);
}
void quantize_rows_avx512(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld, QuantizedRows& out) {
  quantize_rows(x, row_begin, row_end, ld, out, CpuIsa::kPortable);
}

#endif

}  // namespace specdec::models::detail
