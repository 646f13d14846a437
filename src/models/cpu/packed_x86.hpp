// Internal to src/models/cpu: what the x86 packed products (AVX-512 VNNI, AVX2, AMX) share: the formats' compile-time
// traits, unaligned scalar loads, and the AVX-512 float stage of one block (packed_matrix.hpp's file comment), so every
// path applies the same operations to a block's exact integer sums.
#pragma once

#include <cstdint>
#include <cstring>

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

// u4: 4-bit values; half: d (and m) stored as half; min: has a minimum; z: zero point; blk: values per block; vmax: the
// largest value (AVX2 takes 8-bit values below 64 whole).
struct FQ4_0 { static constexpr bool u4 = true, half = true, min = false; static constexpr int z = 8, blk = 32, vmax = 15; };
struct FQ4_1 { static constexpr bool u4 = true, half = true, min = true; static constexpr int z = 0, blk = 32, vmax = 15; };
struct FQ8_0 { static constexpr bool u4 = false, half = true, min = false; static constexpr int z = 128, blk = 32, vmax = 255; };
struct FQ4_K { static constexpr bool u4 = true, half = false, min = true; static constexpr int z = 0, blk = 32, vmax = 15; };
struct FQ6_K { static constexpr bool u4 = false, half = false, min = false; static constexpr int z = 32, blk = 16, vmax = 63; };
// Q5_1 and Q5_K (5-bit values, float d and m), Q2_K (2-bit values in 16-value blocks), IQ4_XS (Q8_0's values, float d).
struct FQ5_K { static constexpr bool u4 = false, half = false, min = true; static constexpr int z = 0, blk = 32, vmax = 31; };
struct FQ2_K { static constexpr bool u4 = false, half = false, min = true; static constexpr int z = 0, blk = 16, vmax = 3; };
struct FIQ4_XS { static constexpr bool u4 = false, half = false, min = false; static constexpr int z = 128, blk = 32, vmax = 255; };

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

template <class F>
constexpr std::int64_t value_bytes() {
  return F::u4 ? 8 * F::blk : 16 * F::blk;
}
template <class F>
constexpr std::int64_t scale_bytes() {
  return F::half ? 32 : 64;
}
template <class F>
constexpr std::int64_t tile_block_bytes() {
  return value_bytes<F>() + scale_bytes<F>() * (F::min ? 2 : 1);
}

// Runs Run<F>::go(a) for the weight's layout (packed_matrix.hpp: formats share layouts).
template <template <class> class Run>
void dispatch(const PackedArgs& a) {
  switch (a.w->type()) {
    case GgmlType::kQ4_0: Run<FQ4_0>::go(a); return;
    case GgmlType::kQ4_1: Run<FQ4_1>::go(a); return;
    case GgmlType::kQ8_0:
    case GgmlType::kQ5_0:
    case GgmlType::kIQ4_NL: Run<FQ8_0>::go(a); return;
    case GgmlType::kQ4_K: Run<FQ4_K>::go(a); return;
    case GgmlType::kQ6_K:
    case GgmlType::kQ3_K: Run<FQ6_K>::go(a); return;
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K: Run<FQ5_K>::go(a); return;
    case GgmlType::kQ2_K: Run<FQ2_K>::go(a); return;
    case GgmlType::kIQ4_XS: Run<FIQ4_XS>::go(a); return;
    default: return;
  }
}

#define SPECDEC_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// The 16 rows' scales d and minimums m (0 without one) of a tile block (tb: the block's first byte).
template <class F>
SPECDEC_TARGET_AVX512 [[gnu::always_inline]] inline void avx512_scales(const std::byte* tb, __m512& d, __m512& m) {
  const std::byte* sc = tb + value_bytes<F>();
  m = _mm512_setzero_ps();
  if constexpr (F::half) {
    d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
    if constexpr (F::min) m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32)));
  } else {
    d = _mm512_loadu_ps(sc);
    if constexpr (F::min) m = _mm512_loadu_ps(sc + 64);
  }
}

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
