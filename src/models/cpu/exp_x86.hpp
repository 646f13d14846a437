// exp16: exp(x) on 16 lanes with AVX-512F (the Cephes expf scheme of linear_kernel.cpp's exp8, with the fused
// multiply-adds the 8-lane code gets from the compiler, so the same bits lane for lane), shared by the AVX-512 attention
// and the AVX-512 SiLU. Include only inside `#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))`.
#pragma once

#include <immintrin.h>

#define SPECDEC_TARGET_AVX512F __attribute__((target("avx512f,avx512dq,fma")))

namespace specdec::models::detail {

// exp(x) per lane (the Cephes expf scheme of linear_kernel.cpp's exp8, relative error ~2e-7); exactly 0 below about
// -87.3 (and for -inf).
SPECDEC_TARGET_AVX512F [[gnu::always_inline]] inline __m512 exp16(__m512 x) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3365447505531f), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3365447505531f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
  const __m512 fx = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
  const __m512 fn = _mm512_roundscale_ps(fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_fmadd_ps(x, _mm512_set1_ps(1.9875691500e-4f), _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3333452e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(x, x), x), _mm512_set1_ps(1.f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fn), _mm512_set1_epi32(127)), 23);
  y = _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), y);
}

}  // namespace specdec::models::detail
