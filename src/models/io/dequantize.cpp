// Dequantisation of ggml tensor blocks into float. Block layouts follow ggml's ggml-common.h (little-endian):
//   Q4_0 (32 values, 18 bytes): f16 d; u8 qs[16]       x[j] = d * ((qs[j] & 15) - 8), x[j+16] = d * ((qs[j] >> 4) - 8)
//   Q4_1 (32 values, 20 bytes): f16 d, m; u8 qs[16]    x[j] = d * (qs[j] & 15) + m,   x[j+16] = d * (qs[j] >> 4) + m
//   Q8_0 (32 values, 34 bytes): f16 d; i8 qs[32]       x[j] = d * qs[j]
//   Q4_K (256 values, 144 bytes): f16 d, dmin; u8 scales[12] (8 six-bit scales + 8 six-bit mins); u8 qs[128]
//   Q6_K (256 values, 210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
//   Q5_0 (32 values, 22 bytes): f16 d; u8 qh[4]; u8 qs[16]   5-bit q = nibble | bit j (j+16 for x[j+16]) of qh << 4;
//                                                             x = d * (q - 16)
//   Q5_1 (32 values, 24 bytes): f16 d, m; u8 qh[4]; u8 qs[16] x = d * q + m
//   Q5_K (256 values, 176 bytes): f16 d, dmin; u8 scales[12] (as Q4_K); u8 qh[32]; u8 qs[128]   sub-block j's 5th bit is
//                                 bit j of qh[l]
//   Q2_K (256 values, 84 bytes): u8 scales[16] (4-bit scale | 4-bit min << 4); u8 qs[64]; f16 d, dmin   2-bit values
//   Q3_K (256 values, 110 bytes): u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 six-bit scales); f16 d   x = d * (scale - 32)
//                                 * (2-bit value - (hmask bit ? 0 : 4))
//   IQ4_NL (32 values, 18 bytes): f16 d; u8 qs[16]          x = d * kIq4Values[nibble]
//   IQ4_XS (256 values, 136 bytes): f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]   x = d * (scale - 32) * kIq4Values[nibble]
#include <cstring>

#include <fmt/format.h>

#include "specdec/models/detail/ggml_blocks.hpp"
#include "specdec/models/float16.hpp"
#include "specdec/models/gguf.hpp"

namespace specdec::models {

namespace {


std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float load_half(const std::byte* p) { return half_to_float(load_u16(p)); }
std::uint8_t u8(const std::byte* p, std::size_t i) { return static_cast<std::uint8_t>(p[i]); }


void dequant_q4_0(const std::byte* b, float* y) {
  const float d = load_half(b);
  const std::byte* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((u8(qs, j) & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((u8(qs, j) >> 4) - 8);
  }
}

void dequant_q4_1(const std::byte* b, float* y) {
  const float d = load_half(b);
  const float m = load_half(b + 2);
  const std::byte* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(u8(qs, j) & 0xF) + m;
    y[j + 16] = d * static_cast<float>(u8(qs, j) >> 4) + m;
  }
}

void dequant_q8_0(const std::byte* b, float* y) {
  const float d = load_half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<std::int8_t>(u8(b + 2, j)));
}

void dequant_q4_k(const std::byte* b, float* y) {
  const float d = load_half(b);
  const float dmin = load_half(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* q = b + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    std::uint8_t sc, m;
    detail::q4k_scale_min(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    detail::q4k_scale_min(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(u8(q, l) & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(u8(q, l) >> 4) - m2;
    q += 32;
    is += 2;
  }
}

void dequant_q6_k(const std::byte* b, float* y) {
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* sc = b + 192;
  const float d = load_half(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((u8(ql, l) & 0xF) | (((u8(qh, l) >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((u8(ql, l + 32) & 0xF) | (((u8(qh, l) >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((u8(ql, l) >> 4) | (((u8(qh, l) >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((u8(ql, l + 32) >> 4) | (((u8(qh, l) >> 6) & 3) << 4)) - 32;
      const auto s = [&](int i) { return static_cast<float>(static_cast<std::int8_t>(u8(sc, i))); };
      y[l + 0] = d * s(is + 0) * static_cast<float>(q1);
      y[l + 32] = d * s(is + 2) * static_cast<float>(q2);
      y[l + 64] = d * s(is + 4) * static_cast<float>(q3);
      y[l + 96] = d * s(is + 6) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// The 5th bit of element j (0-31) of a Q5_0/Q5_1 block: bit j of the little-endian 32-bit qh.
int q5_high(const std::byte* qh, int j) { return (u8(qh, static_cast<std::size_t>(j / 8)) >> (j % 8)) & 1; }

void dequant_q5_0(const std::byte* b, float* y) {
  const float d = load_half(b);
  const std::byte* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(((u8(qs, j) & 0xF) | (q5_high(b + 2, j) << 4)) - 16);
    y[j + 16] = d * static_cast<float>(((u8(qs, j) >> 4) | (q5_high(b + 2, j + 16) << 4)) - 16);
  }
}

void dequant_q5_1(const std::byte* b, float* y) {
  const float d = load_half(b);
  const float m = load_half(b + 2);
  const std::byte* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((u8(qs, j) & 0xF) | (q5_high(b + 4, j) << 4)) + m;
    y[j + 16] = d * static_cast<float>((u8(qs, j) >> 4) | (q5_high(b + 4, j + 16) << 4)) + m;
  }
}

void dequant_q5_k(const std::byte* b, float* y) {
  const float d = load_half(b);
  const float dmin = load_half(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* qh = b + 16;
  const std::byte* q = b + 48;
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc, m;
    detail::q4k_scale_min(j, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    const std::byte* ql = q + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      const int low = j % 2 == 0 ? (u8(ql, l) & 0xF) : (u8(ql, l) >> 4);
      *y++ = d1 * static_cast<float>(low | (((u8(qh, l) >> j) & 1) << 4)) - m1;
    }
  }
}

void dequant_q2_k(const std::byte* b, float* y) {
  const std::byte* scales = b;
  const std::byte* qs = b + 16;
  const float d = load_half(b + 80);
  const float dmin = load_half(b + 82);
  for (int s = 0; s < 16; ++s) {  // 16-value sub-block s: bits 2 ((s % 8) / 2) of qs[32 (s / 8) + 16 (s % 2) + l]
    const float dl = d * static_cast<float>(u8(scales, s) & 0xF), ml = dmin * static_cast<float>(u8(scales, s) >> 4);
    const std::byte* q = qs + 32 * (s / 8) + 16 * (s % 2);
    const int shift = 2 * ((s % 8) / 2);
    for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((u8(q, l) >> shift) & 3) - ml;
  }
}

void dequant_q3_k(const std::byte* b, float* y) {
  const std::byte* hmask = b;
  const std::byte* qs = b + 32;
  const std::byte* scales = b + 96;
  const float d = load_half(b + 108);
  for (int s = 0; s < 16; ++s) {  // as Q2_K's values; the high bit is bit 4 (s / 8) + (s % 8) / 2 of hmask[16 (s % 2) + l]
    const float dl = d * static_cast<float>(detail::q3k_scale(s, scales) - 32);
    const std::byte* q = qs + 32 * (s / 8) + 16 * (s % 2);
    const int shift = 2 * ((s % 8) / 2), hbit = 4 * (s / 8) + (s % 8) / 2;
    for (int l = 0; l < 16; ++l) {
      const int high = (u8(hmask, static_cast<std::size_t>(16 * (s % 2) + l)) >> hbit) & 1;
      *y++ = dl * static_cast<float>(((u8(q, l) >> shift) & 3) - (high ? 0 : 4));
    }
  }
}

// 32 values of 16 bytes of 4-bit table indices (low nibbles first), each d times its table value.
void iq4_values(const std::byte* qs, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(detail::kIq4Values[u8(qs, j) & 0xF]);
    y[j + 16] = d * static_cast<float>(detail::kIq4Values[u8(qs, j) >> 4]);
  }
}

void dequant_iq4_nl(const std::byte* b, float* y) { iq4_values(b + 2, load_half(b), y); }

void dequant_iq4_xs(const std::byte* b, float* y) {
  const float d = load_half(b);
  for (int ib = 0; ib < 8; ++ib)
    iq4_values(b + 8 + 16 * ib, d * static_cast<float>(detail::iq4xs_scale(ib, b) - 32), y + 32 * ib);
}

template <class F>
void for_blocks(std::span<const std::byte> in, std::span<float> out, std::size_t block_elems, std::size_t block_bytes, F f) {
  const std::size_t nb = out.size() / block_elems;
  for (std::size_t i = 0; i < nb; ++i) f(in.data() + i * block_bytes, out.data() + i * block_elems);
}

}  // namespace

bool can_dequantize(GgmlType type) noexcept {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS: return true;
    default: return false;
  }
}

const char* dequantizable_type_names() noexcept {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";
}

void dequantize(GgmlType type, std::span<const std::byte> in, std::span<float> out) {
  const auto traits = ggml_type_traits(static_cast<std::uint32_t>(type));
  if (!traits) throw specdec::error(fmt::format("dequantize: unknown ggml type {}", static_cast<std::uint32_t>(type)));
  if (!can_dequantize(type))
    throw specdec::error(
        fmt::format("dequantize: ggml type {} is not supported (supported: {})", to_string(type), dequantizable_type_names()));
  if (out.size() % traits->block_elements != 0)
    throw specdec::error(fmt::format("dequantize: {} values of type {} is not a multiple of the block size {}", out.size(),
                                     to_string(type), traits->block_elements));
  const std::size_t need = out.size() / traits->block_elements * traits->block_bytes;
  if (in.size() != need)
    throw specdec::error(fmt::format("dequantize: {} values of type {} need {} bytes, got {}", out.size(), to_string(type), need,
                                     in.size()));
  if (out.empty()) return;  // a zero-sized tensor (its data pointer may be null)
  switch (type) {
    case GgmlType::kF32: std::memcpy(out.data(), in.data(), need); break;
    case GgmlType::kF16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = load_half(in.data() + 2 * i);
      break;
    case GgmlType::kBF16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(load_u16(in.data() + 2 * i));
      break;
    case GgmlType::kQ4_0: for_blocks(in, out, 32, 18, dequant_q4_0); break;
    case GgmlType::kQ4_1: for_blocks(in, out, 32, 20, dequant_q4_1); break;
    case GgmlType::kQ8_0: for_blocks(in, out, 32, 34, dequant_q8_0); break;
    case GgmlType::kQ4_K: for_blocks(in, out, 256, 144, dequant_q4_k); break;
    case GgmlType::kQ6_K: for_blocks(in, out, 256, 210, dequant_q6_k); break;
    case GgmlType::kQ5_0: for_blocks(in, out, 32, 22, dequant_q5_0); break;
    case GgmlType::kQ5_1: for_blocks(in, out, 32, 24, dequant_q5_1); break;
    case GgmlType::kQ5_K: for_blocks(in, out, 256, 176, dequant_q5_k); break;
    case GgmlType::kQ2_K: for_blocks(in, out, 256, 84, dequant_q2_k); break;
    case GgmlType::kQ3_K: for_blocks(in, out, 256, 110, dequant_q3_k); break;
    case GgmlType::kIQ4_NL: for_blocks(in, out, 32, 18, dequant_iq4_nl); break;
    case GgmlType::kIQ4_XS: for_blocks(in, out, 256, 136, dequant_iq4_xs); break;
    default: break;
  }
}

}  // namespace specdec::models
