// specdec — Philox4x32-10 counter-based generator (Salmon et al., SC'11) and the variates built on it.
//
// The RNG contract. Every random number specdec uses is a pure function of
//   (seed, position, purpose, index)
// with key = seed (64 bits) and counter = {index / 4, purpose, position low 32 bits, position high 32 bits};
// word index % 4 of the Philox output block is taken. So a request's tokens never depend on which other
// requests share its batch, and host and device produce the same bits. Every function here is usable on host
// and device (SPECDEC_HD) and uses only operations that round identically on both: integer arithmetic, single
// IEEE float operations and explicit fused multiply-adds (fmaf is correctly rounded on both sides).
// Build code that includes this without -ffast-math / --use_fast_math.
#pragma once

#include <cmath>
#include <cstdint>

#include "specdec/sampling/config.hpp"

namespace specdec {

/// What a random number is used for; part of the counter, so purposes never share bits.
enum class Purpose : std::uint32_t {
  kAccept = 0,        ///< the uniform of an accept/reject test
  kResidualTile = 1,  ///< exponential race between vocabulary tiles of a residual distribution
  kResidual = 2,      ///< exponential race between tokens inside the chosen tile
  kBonusTile = 3,     ///< as kResidualTile, for the bonus token drawn after every draft was accepted
  kBonus = 4,         ///< as kResidual, for the bonus token
  kBlockAccept = 5,   ///< block verification's stop uniforms eta_i (sampling/block.hpp), keyed by the block's start
};

struct Philox4x32 {
  std::uint32_t v[4];
};

namespace detail {

SPECDEC_INLINE void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b);
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

/// fmaf that is correctly rounded on host and device alike.
SPECDEC_INLINE float fma_rn(float a, float b, float c) {
#if defined(SPECDEC_ON_DEVICE)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace detail

/// Philox4x32 with 10 rounds on a 128-bit counter and 64-bit key.
SPECDEC_INLINE Philox4x32 philox4x32_10(Philox4x32 ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    detail::mulhilo32(kM0, ctr.v[0], hi0, lo0);
    detail::mulhilo32(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

/// The four words of block `block` (= index / 4) for (seed, position, purpose).
SPECDEC_INLINE Philox4x32 random_block(std::uint64_t seed, std::int64_t position, Purpose purpose,
                                       std::uint32_t block) {
  const auto pos = static_cast<std::uint64_t>(position);
  Philox4x32 ctr{{block, static_cast<std::uint32_t>(purpose), static_cast<std::uint32_t>(pos),
                  static_cast<std::uint32_t>(pos >> 32)}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// Maps 32 random bits to a float uniform in (0, 1): the top 23 bits b give (2b + 1) * 2^-24, exactly
/// representable, so the result lies in [2^-24, 1 - 2^-24] and is never exactly 0 or 1.
SPECDEC_INLINE float bits_to_uniform(std::uint32_t bits) {
  return static_cast<float>((bits >> 9) * 2u + 1u) * 5.9604644775390625e-8f;  // 2^-24
}

/// The uniform for (seed, position, purpose, index).
SPECDEC_INLINE float uniform(std::uint64_t seed, std::int64_t position, Purpose purpose, std::uint32_t index) {
  return bits_to_uniform(random_block(seed, position, purpose, index >> 2).v[index & 3u]);
}

/// Natural logarithm of a positive, finite, normal float, computed with the same bits on host and device.
/// Range reduction to m in [sqrt(1/2), sqrt(2)), then log(1+f) = 2 atanh(s), s = f / (2 + f), with the
/// minimax polynomial of fdlibm's logf; every multiply-add is an explicit fmaf. Error about 1.2 ulp
/// at most over the uniforms specdec draws (checked exhaustively in tests/core/test_philox.cpp).
SPECDEC_INLINE float log_positive(float x) {
  std::uint32_t ix;
  static_assert(sizeof(float) == sizeof(std::uint32_t));
#if defined(SPECDEC_ON_DEVICE)
  ix = __float_as_uint(x);
#else
  __builtin_memcpy(&ix, &x, sizeof ix);
#endif
  // Move m into [sqrt(1/2), sqrt(2)): 0x3f3504f3 is the bit pattern of sqrt(1/2).
  ix += 0x3f800000u - 0x3f3504f3u;
  const int k = static_cast<int>(ix >> 23) - 127;
  ix = (ix & 0x007fffffu) + 0x3f3504f3u;
  float m;
#if defined(SPECDEC_ON_DEVICE)
  m = __uint_as_float(ix);
#else
  __builtin_memcpy(&m, &ix, sizeof m);
#endif
  // Every product below either feeds an explicit fmaf or is itself the result of one, so no separate multiply is
  // ever followed by an add: a compiler that contracts a * b + c (nvcc by default, GCC with -ffp-contract=fast and
  // FMA hardware) has nothing to contract, and host and device compute the same bits.
  const float f = m - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s;
  const float w = z * z;
  constexpr float kLg1 = 0.66666662693f, kLg2 = 0.40000972152f, kLg3 = 0.28498786688f, kLg4 = 0.24279078841f;
  const float t1 = w * detail::fma_rn(w, kLg4, kLg2);
  const float r = detail::fma_rn(z, detail::fma_rn(w, kLg3, kLg1), t1);
  const float hfsq = detail::fma_rn(0.5f * f, f, 0.0f);
  const float dk = static_cast<float>(k);
  constexpr float kLn2Hi = 6.9313812256e-01f, kLn2Lo = 9.0580006145e-06f;
  // log(x) = k ln2 + f - hfsq + s (hfsq + r)
  return detail::fma_rn(dk, kLn2Hi, (f - hfsq) + detail::fma_rn(s, hfsq + r, detail::fma_rn(dk, kLn2Lo, 0.0f)));
}

/// A standard exponential variate -log(u) > 0 for the uniform of (seed, position, purpose, index).
SPECDEC_INLINE float exponential(std::uint64_t seed, std::int64_t position, Purpose purpose, std::uint32_t index) {
  return -log_positive(uniform(seed, position, purpose, index));
}

}  // namespace specdec
