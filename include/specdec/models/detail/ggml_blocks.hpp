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

}  // namespace specdec::models::detail
