// silu_mul and gelu_tanh_mul on 16 lanes (AVX-512F): gu / (1 + exp(-gu)) * up with exp16, the steps of linear_kernel.cpp's 8-lane loop
// at twice the width, so each value gets the bits the 8-lane AVX2 code gives it. Chosen at run time by silu_mul.
#include <cstdint>
#include <climits>

#include "specdec/models/detail/cpu_kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "exp_x86.hpp"
// GCC 12's intrinsic headers start some operations from an "undefined" register, which -Wmaybe-uninitialized reports.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace specdec::models::detail {

SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline __m512 silu16(__m512 x) {
  const __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));  // -x
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.f), e));
}

// linear_kernel.cpp's gelu8 steps (the cubic's multiply-add fused, as the compiler fuses it there) at twice the width.
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline __m512 gelu16(__m512 x) {
  const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 inner = _mm512_fmadd_ps(cube, _mm512_set1_ps(0.044715f), x);
  const __m512 e = exp16(_mm512_mul_ps(inner, _mm512_set1_ps(-1.5957691216057308f)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.f), e));
}

// out[r, i] = act(gu[r, i]) * gu[r, f + i] on 16 lanes; the last partial step reads zeros past f, as the 8-lane loop's
// zero-padded one does.
template <__m512 (*Act)(__m512)>
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline void act_mul16(const float* gu, float* out, std::int64_t rows,
                                                                   std::int64_t f) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* g = gu + r * 2 * f;
    const float* u = g + f;
    float* o = out + r * f;
    for (std::int64_t i = 0; i < f; i += 16) {
      const __mmask16 m = f - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (f - i)) - 1u);
      _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(Act(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i)));
    }
  }
}

SPECDEC_TARGET_AVX512F void silu_mul_avx512(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  act_mul16<silu16>(gu, out, rows, f);
}
SPECDEC_TARGET_AVX512F void gelu_tanh_mul_avx512(const float* gu, float* out, std::int64_t rows, std::int64_t f) {
  act_mul16<gelu16>(gu, out, rows, f);
}

}  // namespace specdec::models::detail
#else
namespace specdec::models::detail {
void silu_mul_avx512(const float* gu, float* out, std::int64_t rows, std::int64_t f) { silu_mul(gu, out, rows, f); }
void gelu_tanh_mul_avx512(const float* gu, float* out, std::int64_t rows, std::int64_t f) { gelu_tanh_mul(gu, out, rows, f); }
}  // namespace specdec::models::detail
#endif
