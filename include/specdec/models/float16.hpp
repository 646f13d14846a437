// IEEE half and bfloat16 bit patterns to float (exact; subnormals, infinities and NaN included). Torch-free.
#pragma once

#include <cstdint>
#include <cstring>

namespace specdec::models {

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float to IEEE half, rounding to nearest even (overflow to infinity, NaN kept a NaN, subnormals exact).
inline std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t mag = x & 0x7FFFFFFFu;
  if (mag >= 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7C00u | (mag > 0x7F800000u ? 0x200u : 0u));
  if (mag >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: infinity
  if (mag < 0x38800000u) {  // below the smallest normal half: a subnormal (or 0), rounded to nearest even
    if (mag < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
    const std::uint32_t mant = (mag & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - static_cast<int>(mag >> 23);  // value = mant * 2^(E - 150) = (mant >> (126 - E)) * 2^-24
    const std::uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    return static_cast<std::uint16_t>(sign | (q + (rem > halfway || (rem == halfway && (q & 1u)) ? 1u : 0u)));
  }
  const std::uint32_t rebias = mag - 0x38000000u;  // exponent 127 -> 15
  const std::uint32_t q = rebias >> 13, rem = rebias & 0x1FFFu;
  return static_cast<std::uint16_t>(sign | (q + (rem > 0x1000u || (rem == 0x1000u && (q & 1u)) ? 1u : 0u)));
}

inline float bf16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace specdec::models
