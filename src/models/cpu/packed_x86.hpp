// Internal to src/models/cpu: what the x86 packed products (AVX-512 VNNI, AVX2, AMX) share: the formats' compile-time
// traits, unaligned scalar loads, and the AVX-512 float stage of one block (packed_matrix.hpp's file comment), so every
// path applies the same operations to a block's exact integer sums.
#pragma once

#include <cstdint>
#include <cstring>

#include "specdec/models/detail/ggml_blocks.hpp"
#include "specdec/models/detail/packed_kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SPECDEC_PACKED_X86 1
// GCC 12's intrinsic headers start some conversions from an "undefined" register, which -Wmaybe-uninitialized reports.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace specdec::models::detail {

#ifdef SPECDEC_PACKED_X86
namespace {

// u4: 4-bit values; half: d (and m) stored as half per block, else sub-scales (an int8 per block times a half per
// 256-value super-block, PackedMatrix::Layout); min: has a minimum; z: zero point; blk: values per block; vmax: the
// largest value (4-bit values with higher bits up to 63; 255 for a 4-bit index into the IQ4 table).
struct FQ4_0 { static constexpr bool u4 = true, half = true, min = false; static constexpr int z = 8, blk = 32, vmax = 15; };
struct FQ4_1 { static constexpr bool u4 = true, half = true, min = true; static constexpr int z = 0, blk = 32, vmax = 15; };
struct FQ8_0 { static constexpr bool u4 = false, half = true, min = false; static constexpr int z = 128, blk = 32, vmax = 255; };
struct FQ4_K { static constexpr bool u4 = true, half = false, min = true; static constexpr int z = 0, blk = 32, vmax = 15; };
// Q6_K: 6-bit values as 4 bits and 2-bit fields of the higher bits (high_bits below), z 32, 16-value blocks.
struct FQ6_K { static constexpr bool u4 = true, half = false, min = false; static constexpr int z = 32, blk = 16, vmax = 63; };
// Q3_K: 3-bit values (value + 4 hbit) around zero point 4 as 2-bit values and their third bits (u2 below), 16-value
// blocks.
struct FQ3_K { static constexpr bool u4 = true, half = false, min = false; static constexpr int z = 4, blk = 16, vmax = 7; };
// Q5_0, Q5_1 (5-bit values, half d and m), Q5_K (5-bit values, sub-scales): 4-bit values and a plane of fifth bits
// (high_bits below); Q2_K (2-bit values in 16-value blocks: u2 below); IQ4_NL, IQ4_XS: 4-bit indices into the IQ4
// table (table below), whose value + 128 is u (z 128), half d or sub-scales.
struct FQ5_0 { static constexpr bool u4 = true, half = true, min = false; static constexpr int z = 16, blk = 32, vmax = 31; };
struct FQ5_1 { static constexpr bool u4 = true, half = true, min = true; static constexpr int z = 0, blk = 32, vmax = 31; };
struct FQ5_K { static constexpr bool u4 = true, half = false, min = true; static constexpr int z = 0, blk = 32, vmax = 31; };
struct FQ2_K { static constexpr bool u4 = true, half = false, min = true; static constexpr int z = 0, blk = 16, vmax = 3; };
struct FIQ4_NL { static constexpr bool u4 = true, half = true, min = false; static constexpr int z = 128, blk = 32, vmax = 255; };
struct FIQ4_XS { static constexpr bool u4 = true, half = false, min = false; static constexpr int z = 128, blk = 32, vmax = 255; };

inline std::int32_t load_i32(const std::byte* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// 2-bit values (PackedMatrix::Layout::u2), four a byte in 16-value blocks: Q2_K, and Q3_K with its third bits.
template <class F>
constexpr bool u2() {
  return F::u4 && F::vmax <= 7;
}
// 4-bit indices into the IQ4 table (PackedMatrix::Layout::table).
template <class F>
constexpr bool table() {
  return F::u4 && F::vmax > 63;
}
// The bits above 4-bit values (PackedMatrix::Layout::high_bits): 1 for the 5-bit formats (a bit plane), 2 for Q6_K
// (2-bit fields); above 2-bit values, 1 for Q3_K (its third bits).
template <class F>
constexpr int high_bits() {
  if constexpr (u2<F>()) return F::vmax > 3 ? 1 : 0;
  return !F::u4 || table<F>() ? 0 : F::vmax > 31 ? 2 : F::vmax > 15 ? 1 : 0;
}
template <class F>
constexpr std::int64_t value_bytes() {
  return F::u4 ? (u2<F>() ? 4 : 8) * F::blk + 2 * high_bits<F>() * F::blk : 16 * F::blk;
}
// The IQ4 table as vpshufb operands, its 16 bytes in each 128-bit lane of 64: as u = value + 128, and as the signed
// values (AVX2).
struct Iq4Lanes {
  alignas(64) std::int8_t v[64];
};
constexpr Iq4Lanes iq4_lanes(int offset) {
  Iq4Lanes t{};
  for (int i = 0; i < 64; ++i) t.v[i] = static_cast<std::int8_t>(static_cast<std::uint8_t>(kIq4Values[i % 16] + offset));
  return t;
}
inline constexpr Iq4Lanes kIq4Unsigned = iq4_lanes(128), kIq4Signed = iq4_lanes(0);
inline std::uint64_t load_u64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// Q2_K's sub-scales s and s_min (both 4 bits) share a byte a row (PackedMatrix::Layout::scale_nibbles).
template <class F>
constexpr bool scale_nibbles() {
  return !F::half && F::min && F::u4 && F::vmax <= 3;
}
// A block's scales for the 16 rows (d, then m): halves, or int8 sub-scales (Q2_K: one byte of nibbles a row).
template <class F>
constexpr std::int64_t scale_bytes() {
  return (F::half ? 32 : 16) * (F::min && !scale_nibbles<F>() ? 2 : 1);
}
// Half scales: a tile block (values, then scales).
template <class F>
constexpr std::int64_t tile_block_bytes() {
  return value_bytes<F>() + scale_bytes<F>();
}
// Sub-scales (PackedMatrix::Layout): blocks per super-block, a super-block's halves (D, then -Dmin) for the 16 rows, and
// its group in the tile (values, s, halves, padded to 64 bytes).
template <class F>
constexpr std::int64_t super_blocks() {
  return F::half ? 1 : 256 / F::blk;
}
template <class F>
constexpr std::int64_t super_bytes() {
  return 32 * (F::min ? 2 : 1);
}
template <class F>
constexpr std::int64_t group_bytes() {
  return (super_blocks<F>() * (value_bytes<F>() + scale_bytes<F>()) + super_bytes<F>() + 63) / 64 * 64;
}
// Block b's values, scales and super-block halves in a tile (PackedMatrix::Layout::values, scales, supers).
template <class F>
inline const std::byte* values_at(const std::byte* tile, std::int64_t b) {
  if constexpr (F::half) return tile + b * tile_block_bytes<F>();
  else return tile + b / super_blocks<F>() * group_bytes<F>() + b % super_blocks<F>() * value_bytes<F>();
}
template <class F>
inline const std::byte* scales_at(const std::byte* tile, std::int64_t b) {
  if constexpr (F::half) return tile + b * tile_block_bytes<F>() + value_bytes<F>();
  else return tile + b / super_blocks<F>() * group_bytes<F>() + super_blocks<F>() * value_bytes<F>() + b % super_blocks<F>() * scale_bytes<F>();
}
template <class F>
inline const std::byte* supers_at(const std::byte* tile, std::int64_t b) {
  return tile + b / super_blocks<F>() * group_bytes<F>() + super_blocks<F>() * (value_bytes<F>() + scale_bytes<F>());
}
// A prefetch into L1 that the compiler keeps: GCC deleted _mm_prefetch loops in a helper inlined into the kernels
// (the objdump of the Q4_1 kernels had none, and a 6-row product from memory took 1.7 times as long).
[[gnu::always_inline]] inline void prefetch_l1(const void* p) { asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }

// Prefetches block b's bytes of a tile: its tile block, or its values and, at a super-block's first block, the rest of
// that group (its scales and halves).
template <class F>
[[gnu::always_inline]] inline void prefetch_block(const std::byte* tile, std::int64_t b) {
  if constexpr (F::half) {
    const std::byte* v = tile + b * tile_block_bytes<F>();
    for (std::int64_t off = 0; off < tile_block_bytes<F>(); off += 64) prefetch_l1(v + off);
  } else {
    const std::byte* v = values_at<F>(tile, b);
    for (std::int64_t off = 0; off < value_bytes<F>(); off += 64) prefetch_l1(v + off);
    if (b % super_blocks<F>() == 0) {
      const std::byte* g = scales_at<F>(tile, b);
      constexpr std::int64_t rest = group_bytes<F>() - super_blocks<F>() * value_bytes<F>();
      for (std::int64_t off = 0; off < rest; off += 64) prefetch_l1(g + off);
    }
  }
}

// Runs Run<F>::go(a) for the weight's layout (packed_matrix.hpp: formats share layouts).
template <template <class> class Run>
void dispatch(const PackedArgs& a) {
  switch (a.w->type()) {
    case GgmlType::kQ4_0: Run<FQ4_0>::go(a); return;
    case GgmlType::kQ4_1: Run<FQ4_1>::go(a); return;
    case GgmlType::kQ8_0: Run<FQ8_0>::go(a); return;
    case GgmlType::kIQ4_NL: Run<FIQ4_NL>::go(a); return;
    case GgmlType::kQ5_0: Run<FQ5_0>::go(a); return;
    case GgmlType::kQ4_K: Run<FQ4_K>::go(a); return;
    case GgmlType::kQ6_K: Run<FQ6_K>::go(a); return;
    case GgmlType::kQ3_K: Run<FQ3_K>::go(a); return;
    case GgmlType::kQ5_1: Run<FQ5_1>::go(a); return;
    case GgmlType::kQ5_K: Run<FQ5_K>::go(a); return;
    case GgmlType::kQ2_K: Run<FQ2_K>::go(a); return;
    case GgmlType::kIQ4_XS: Run<FIQ4_XS>::go(a); return;
    default: return;
  }
}

#define SPECDEC_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// The 16 rows' sub-scales s and s_min (sc: the block's scales) as floats: int8, or Q2_K's nibbles.
template <class F>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void avx512_sub_scales(const std::byte* sc, __m512& s, __m512& s_min) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
  if constexpr (scale_nibbles<F>()) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    s = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, low4)));
    s_min = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), low4)));
  } else {
    s = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw));
    if constexpr (F::min)
      s_min = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16))));
  }
}

// The 16 rows' scales d and minimums m (0 without one) of a tile block (tb: the block's first byte).
template <class F>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void avx512_scales(const std::byte* tile, std::int64_t b, __m512& d,
                                                                       __m512& m) {
  const std::byte* sc = scales_at<F>(tile, b);
  m = _mm512_setzero_ps();
  if constexpr (F::half) {
    d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
    if constexpr (F::min) m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32)));
  } else {  // float(D) * float(s): the exact products (Layout::scale_min)
    const std::byte* sup = supers_at<F>(tile, b);
    __m512 s, s_min;
    avx512_sub_scales<F>(sc, s, s_min);
    d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sup))), s);
    if constexpr (F::min) m = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sup + 32))), s_min);
  }
}

// Adds the higher bits (Layout::high_bits) of chunk c of a block (vb: its values) to the chunk's low and high nibbles:
// + 16 where a byte's fifth bit is set (a masked byte add), or the 2-bit fields shifted into bits 4-5 (the chunk's first
// 32 bytes take their fields from bits 0-3 of the 32 field bytes, the last 32 from bits 4-7: per 16-bit lane shifts of
// 4 and 0 after the high nibbles' shift by 2).
template <class F>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void avx512_high_bits(const std::byte* vb, int c, __m512i& lo, __m512i& hi) {
  if constexpr (high_bits<F>() == 1) {
    const __m512i sixteen = _mm512_set1_epi8(16);
    const std::byte* plane = vb + 8 * F::blk + 16 * c;
    lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(load_u64(plane)), lo, sixteen);
    hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(load_u64(plane + 8)), hi, sixteen);
  } else if constexpr (high_bits<F>() == 2) {
    const __m512i fields = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vb + 8 * F::blk + 32 * c)));
    const __m512i shifts = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_setzero_si256(), 1);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    // lo | (x & 0x30): vpternlogd with the truth table of A | (B & C)
    lo = _mm512_ternarylogic_epi32(lo, _mm512_sllv_epi16(fields, shifts), bits45, 0xF8);
    hi = _mm512_ternarylogic_epi32(hi, _mm512_sllv_epi16(_mm512_srli_epi16(fields, 2), shifts), bits45, 0xF8);
  }
}

// Chunk c of a 4-bit block (vb: its values) as two VNNI operands: its low nibbles (values 4c..4c+3 of the 16 rows) and
// high nibbles (blk / 2 + 4c..), with their higher bits added, or IQ4's indices mapped to table value + 128.
template <class F>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void avx512_u4_chunk(const std::byte* vb, int c, __m512i& lo, __m512i& hi) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i raw = _mm512_loadu_si512(vb + 64 * c);
  lo = _mm512_and_si512(raw, low4);
  hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
  avx512_high_bits<F>(vb, c, lo, hi);
  if constexpr (table<F>()) {
    const __m512i lut = _mm512_load_si512(kIq4Unsigned.v);
    lo = _mm512_shuffle_epi8(lut, lo);
    hi = _mm512_shuffle_epi8(lut, hi);
  }
}

// Bit k of each byte of a 2-bit block's third bits g (Layout::u2: the rows' bits already taken to bits 0-3) at bit 2.
template <int K, class V, class Sll, class Srl>
[[gnu::always_inline]] inline V third_bits_at_2(V g, Sll sll, Srl srl) {
  if constexpr (K < 2) return sll(g, 2 - K);
  else if constexpr (K == 2) return g;
  else return srl(g, 1);
}

// The 4 operands of a 2-bit block (vb: its values; Layout::u2): operand k holds values 4k..4k+3 of the 16 rows, crumb k
// of each byte, plus 4 where its third bit is set (the 32 bytes after the values: bit k of byte j for chunk byte j, bit
// 4 + k for chunk byte j + 32).
template <class F>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void avx512_u2_operands(const std::byte* vb, __m512i* op) {
  const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
  const __m512i raw = _mm512_loadu_si512(vb);
  __m512i g = _mm512_setzero_si512();
  if constexpr (high_bits<F>() == 1) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vb + 64));
    g = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 4), 1);  // rows 8-15: bits 4-7 to 0-3
  }
  const auto sll = [](__m512i v, int n) SPECDEC_TARGET_AVX512 { return _mm512_slli_epi16(v, n); };
  const auto srl = [](__m512i v, int n) SPECDEC_TARGET_AVX512 { return _mm512_srli_epi16(v, n); };
  op[0] = _mm512_and_si512(raw, three);
  op[1] = _mm512_and_si512(_mm512_srli_epi16(raw, 2), three);
  op[2] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), three);
  op[3] = _mm512_and_si512(_mm512_srli_epi16(raw, 6), three);
  if constexpr (high_bits<F>() == 1) {  // op | (bit & 4): vpternlogd's A | (B & C)
    op[0] = _mm512_ternarylogic_epi32(op[0], third_bits_at_2<0>(g, sll, srl), four, 0xF8);
    op[1] = _mm512_ternarylogic_epi32(op[1], third_bits_at_2<1>(g, sll, srl), four, 0xF8);
    op[2] = _mm512_ternarylogic_epi32(op[2], third_bits_at_2<2>(g, sll, srl), four, 0xF8);
    op[3] = _mm512_ternarylogic_epi32(op[3], third_bits_at_2<3>(g, sll, srl), four, 0xF8);
  }
}

// avx512_scales for blocks taken in ascending order from 0: a super-block's halves are converted once, at its first block.
template <class F>
struct Avx512ScaleStream {
  __m512 D, M;
  SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void at(const std::byte* tile, std::int64_t b, __m512& d, __m512& m) {
    if constexpr (F::half) {
      avx512_scales<F>(tile, b, d, m);
    } else {
      const std::byte* sc = scales_at<F>(tile, b);
      if (b % super_blocks<F>() == 0) {
        const std::byte* sup = supers_at<F>(tile, b);
        D = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sup)));
        if constexpr (F::min) M = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sup + 32)));
      }
      __m512 s, s_min;
      avx512_sub_scales<F>(sc, s, s_min);
      d = _mm512_mul_ps(D, s);
      m = F::min ? _mm512_mul_ps(M, s_min) : _mm512_setzero_ps();
    }
  }
};

// One block of one token row for 16 weight rows: s = the exact integer sums (planes combined), q = the token block's
// dx and S. Returns e * dx + acc with e = d * float(s - z * S) (+ m * float(S)).
template <class F>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline __m512 avx512_block_step(__m512i s, __m512 d, __m512 m,
                                                                             const std::byte* q, __m512 acc) {
  if constexpr (F::z != 0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(F::z * load_i32(q + 4)));
  const __m512 f = _mm512_cvtepi32_ps(s);
  __m512 e;
  if constexpr (F::min)  // S as the quantiser stored it in float (q + 8): the bits of converting q + 4
    e = _mm512_fmadd_ps(d, f, _mm512_mul_ps(m, _mm512_set1_ps(load_f32(q + 8))));
  else
    e = _mm512_mul_ps(d, f);
  return _mm512_fmadd_ps(e, _mm512_set1_ps(load_f32(q)), acc);
}

}  // namespace
#endif

}  // namespace specdec::models::detail
