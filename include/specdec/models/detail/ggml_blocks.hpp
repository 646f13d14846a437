// Internal: pieces of ggml's block layouts shared by the GGUF dequantiser and the packed-matrix repacker. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specdec::models::detail {

/// Q4_K: the 6-bit scale and minimum of sub-block j (0-7) from the block's 12 packed bytes `q` (ggml's get_scale_min_k4).
inline void q4k_scale_min(int j, const std::byte* q, std::uint8_t& sc, std::uint8_t& m) {
  auto u8 = [q](int i) { return static_cast<std::uint8_t>(q[i]); };
  if (j < 4) {
    sc = u8(j) & 63;
    m = u8(j + 4) & 63;
  } else {
    sc = static_cast<std::uint8_t>((u8(j + 4) & 0xF) | ((u8(j - 4) >> 6) << 4));
    m = static_cast<std::uint8_t>((u8(j + 4) >> 4) | ((u8(j) >> 6) << 4));
  }
}

/// Q3_K: the 6-bit scale of sub-block s (0-15) from the block's 12 packed bytes `q` (ggml's scale unpacking: low nibbles of
/// bytes 0-7 for s < 8, their high nibbles for s >= 8; the top 2 bits from byte 8 + s % 4, bits 2 (s / 4)). The weight
/// scale is d * (result - 32).
inline int q3k_scale(int s, const std::byte* q) {
  auto u8 = [q](int i) { return static_cast<int>(static_cast<std::uint8_t>(q[i])); };
  const int low = s < 8 ? (u8(s) & 0xF) : (u8(s - 8) >> 4);
  const int high = (u8(8 + s % 4) >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

/// IQ4_NL and IQ4_XS: the 16 non-linear values a 4-bit index selects (ggml's kvalues_iq4nl).
inline constexpr std::int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/// IQ4_XS: the 6-bit scale of 32-value sub-block ib (0-7) of a block (b: its first byte: f16 d, u16 scales_h,
/// u8 scales_l[4]). The weight scale is d * (result - 32).
inline int iq4xs_scale(int ib, const std::byte* b) {
  const int scales_h = static_cast<int>(static_cast<std::uint8_t>(b[2])) | (static_cast<int>(static_cast<std::uint8_t>(b[3])) << 8);
  const int low = (static_cast<std::uint8_t>(b[4 + ib / 2]) >> (4 * (ib % 2))) & 0xF;
  return low | (((scales_h >> (2 * ib)) & 3) << 4);
}

}  // namespace specdec::models::detail
