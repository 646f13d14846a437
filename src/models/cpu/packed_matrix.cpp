// PackedMatrix: GGUF block-format weights repacked (exactly, no value changes) into 16-row interleaved tiles, activation
// quantisation, row dequantisation, and the choice of the product's instruction set. The layout and the arithmetic every
// path computes are described in specdec/models/detail/packed_matrix.hpp; the products are in packed_linear*.cpp.
#include "specdec/models/detail/errors.hpp"
#include "specdec/models/detail/packed_matrix.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <system_error>
#include <thread>
#include <vector>

#include "specdec/models/detail/packed_kernels.hpp"
#include "specdec/models/detail/ggml_blocks.hpp"
#include "specdec/models/float16.hpp"

namespace specdec::models::detail {

namespace {

using specdec::models::detail::fail;

std::uint8_t u8(const std::byte* p, std::int64_t i) { return static_cast<std::uint8_t>(p[i]); }
std::uint16_t u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One canonical block of a source row: values u, and its scale and minimum as the layout stores them: half bits d_half and
// m_half, or sub-scales (the super-block's half D and -Dmin, the block's int8 s and s_min: d = D * s, m = -Dmin * s_min).
struct BlockValues {
  std::uint8_t u[32];
  std::uint16_t d_half = 0, m_half = 0;
  std::uint16_t super_d = 0, super_neg_min = 0;
  std::int8_t s = 0, s_min = 0;
};

// Sub-scales of a block: the super-block's halves (dmin negated by its sign bit) and the block's small integers.
void set_sub_scales(BlockValues& out, std::uint16_t d, int s, std::uint16_t dmin = 0, int s_min = 0) {
  out.super_d = d;
  out.super_neg_min = static_cast<std::uint16_t>(dmin ^ 0x8000u);
  out.s = static_cast<std::int8_t>(s);
  out.s_min = static_cast<std::int8_t>(s_min);
}

struct FormatInfo {
  PackedMatrix::Layout layout;
  std::int64_t source_block_elements;  // values per block of the file format
  std::int64_t source_block_bytes;
};

FormatInfo format_info(GgmlType type) {
  using L = PackedMatrix::Layout;
  switch (type) {
    case GgmlType::kQ4_0: return {L{true, true, false, 8, 32}, 32, 18};
    case GgmlType::kQ4_1: return {L{true, true, true, 0, 32}, 32, 20};
    case GgmlType::kQ8_0: return {L{false, true, false, 128, 32}, 32, 34};
    case GgmlType::kQ4_K: return {L{true, false, true, 0, 32}, 256, 144};
    case GgmlType::kQ6_K: return {L{true, false, false, 32, 16, 2}, 256, 210};
    // The other formats take one of these layouts, or one of three more (the values re-based exactly, see read_block).
    case GgmlType::kQ5_0: return {L{true, true, false, 16, 32, 1}, 32, 22};
    case GgmlType::kIQ4_NL: return {L{true, true, false, 128, 32, 0, true}, 32, 18};
    case GgmlType::kQ3_K: return {L{true, false, false, 4, 16, 1, false, true}, 256, 110};
    case GgmlType::kQ5_1: return {L{true, true, true, 0, 32, 1}, 32, 24};
    case GgmlType::kQ5_K: return {L{true, false, true, 0, 32, 1}, 256, 176};
    case GgmlType::kQ2_K: return {L{true, false, true, 0, 16, 0, false, true, true}, 256, 84};
    case GgmlType::kIQ4_XS: return {L{true, false, false, 128, 32, 0, true}, 256, 136};
    default: return {};
  }
}


// IQ4_NL / IQ4_XS: the 32 4-bit indices of 16 bytes (low nibbles first); the layout's table gives kIq4Values[u] + 128.
void iq4_values(const std::byte* qs, BlockValues& out) {
  for (int j = 0; j < 16; ++j) {
    out.u[j] = u8(qs, j) & 0xF;
    out.u[j + 16] = u8(qs, j) >> 4;
  }
}

// Canonical block b (of layout.block values) of a source row.
void read_block(GgmlType type, const std::byte* row, std::int64_t b, BlockValues& out) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const bool q41 = type == GgmlType::kQ4_1;
      const std::byte* blk = row + b * (q41 ? 20 : 18);
      out.d_half = u16(blk);
      if (q41) out.m_half = u16(blk + 2);
      const std::byte* qs = blk + (q41 ? 4 : 2);
      for (int j = 0; j < 16; ++j) {
        out.u[j] = u8(qs, j) & 0xF;
        out.u[j + 16] = u8(qs, j) >> 4;
      }
      return;
    }
    case GgmlType::kQ8_0: {
      const std::byte* blk = row + b * 34;
      out.d_half = u16(blk);
      for (int j = 0; j < 32; ++j) out.u[j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(u8(blk + 2, j)) + 128);
      return;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {  // Q5_K: Q4_K's scales and values (at 48), the 5th bit of sub-block sub's value l bit sub of qh[l]
      const bool q5 = type == GgmlType::kQ5_K;
      const std::byte* blk = row + (b / 8) * (q5 ? 176 : 144);
      const int sub = static_cast<int>(b % 8);
      std::uint8_t sc, m;
      detail::q4k_scale_min(sub, blk + 4, sc, m);
      set_sub_scales(out, u16(blk), sc, u16(blk + 2), m);
      const std::byte* qh = blk + 16;
      const std::byte* q = blk + (q5 ? 48 : 16) + 32 * (sub / 2);
      for (int l = 0; l < 32; ++l) {
        const int low = sub % 2 == 0 ? (u8(q, l) & 0xF) : (u8(q, l) >> 4);
        out.u[l] = static_cast<std::uint8_t>(q5 ? low | (((u8(qh, l) >> sub) & 1) << 4) : low);
      }
      return;
    }
    case GgmlType::kQ6_K: {
      const std::byte* blk = row + (b / 16) * 210;
      const int s = static_cast<int>(b % 16);  // elements 16 s .. 16 s + 15 of the super-block
      const int h = s / 8, k = (s % 8) / 2, l0 = (s % 2) * 16;
      const std::byte* ql = blk + 64 * h;
      const std::byte* qh = blk + 128 + 32 * h;
      set_sub_scales(out, u16(blk + 208), static_cast<std::int8_t>(u8(blk + 192, s)));
      for (int i = 0; i < 16; ++i) {
        const int l = l0 + i;
        const int lo = k % 2 == 0 ? u8(ql, l) : u8(ql, l + 32);
        const int nib = k < 2 ? (lo & 0xF) : (lo >> 4);
        out.u[i] = static_cast<std::uint8_t>(nib | (((u8(qh, l) >> (2 * k)) & 3) << 4));
      }
      return;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {  // 5-bit q (Q5_0: around zero point 16), 4 bits and a bit plane in the tile
      const bool q51 = type == GgmlType::kQ5_1;
      const std::byte* blk = row + b * (q51 ? 24 : 22);
      const std::byte* qh = blk + (q51 ? 4 : 2);
      const std::byte* qs = qh + 4;
      const auto high = [qh](int j) { return ((u8(qh, j / 8) >> (j % 8)) & 1) << 4; };
      for (int j = 0; j < 16; ++j) {
        out.u[j] = static_cast<std::uint8_t>((u8(qs, j) & 0xF) | high(j));
        out.u[j + 16] = static_cast<std::uint8_t>((u8(qs, j) >> 4) | high(j + 16));
      }
      out.d_half = u16(blk);
      if (q51) out.m_half = u16(blk + 2);
      return;
    }
    case GgmlType::kIQ4_NL: {  // u = the table's value + 128, zero point 128
      const std::byte* blk = row + b * 18;
      out.d_half = u16(blk);
      iq4_values(blk + 2, out);
      return;
    }
    case GgmlType::kIQ4_XS: {  // 32-value sub-blocks, d (scale - 32) exact in float, u = the table's value + 128
      const std::byte* blk = row + (b / 8) * 136;
      const int ib = static_cast<int>(b % 8);
      set_sub_scales(out, u16(blk), detail::iq4xs_scale(ib, blk) - 32);
      iq4_values(blk + 8 + 16 * ib, out);
      return;
    }
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: {  // 16-value sub-blocks s of 2-bit values, 2 bits a value in the tile (Q3_K: plus a high bit,
                             // u = value + 4 hbit around zero point 4, its third bits beside them)
      const bool q3 = type == GgmlType::kQ3_K;
      const std::byte* blk = row + (b / 16) * (q3 ? 110 : 84);
      const int s = static_cast<int>(b % 16);
      const std::byte* q = blk + (q3 ? 32 : 16) + 32 * (s / 8) + 16 * (s % 2);
      const int shift = 2 * ((s % 8) / 2);
      if (q3) {
        set_sub_scales(out, u16(blk + 108), detail::q3k_scale(s, blk + 96) - 32);
        const int hbit = 4 * (s / 8) + (s % 8) / 2;
        for (int l = 0; l < 16; ++l)
          out.u[l] = static_cast<std::uint8_t>(((u8(q, l) >> shift) & 3) + 4 * ((u8(blk, 16 * (s % 2) + l) >> hbit) & 1));
      } else {
        set_sub_scales(out, u16(blk + 80), u8(blk, s) & 0xF, u16(blk + 82), u8(blk, s) >> 4);
        for (int l = 0; l < 16; ++l) out.u[l] = static_cast<std::uint8_t>((u8(q, l) >> shift) & 3);
      }
      return;
    }
    default: return;
  }
}

}  // namespace

const char* packable_type_names() noexcept {
  return "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";
}

const char* to_string(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512Vnni: return "avx512-vnni";
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kAvxVnni: return "avx-vnni";
  }
  return "unknown";
}

bool cpu_supports(CpuIsa isa) noexcept {
  if (isa == CpuIsa::kPortable) return true;
  if (isa == CpuIsa::kAmx) return amx_supported();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (isa == CpuIsa::kAvx2) return avx2;
  if (isa == CpuIsa::kAvxVnni) return avx2 && __builtin_cpu_supports("avxvnni");
  if (isa == CpuIsa::kAvx512Vnni)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
  return false;
}

CpuIsa best_cpu_isa() noexcept {
  static const CpuIsa best = [] {
    if (const char* env = std::getenv("SPECDEC_CPU_ISA")) {  // for comparing paths from the command line
      for (CpuIsa i : kCpuIsas)
        if (std::string_view(env) == to_string(i) && cpu_supports(i)) return i;
    }
    for (auto i = std::size(kCpuIsas); i-- > 0;)
      if (cpu_supports(kCpuIsas[i])) return kCpuIsas[i];
    return CpuIsa::kPortable;
  }();
  return best;
}

std::vector<std::byte> quantize_q8_0(const float* x, std::int64_t n) {
  if (n < 0 || n % 32 != 0) fail(fmt::format("quantize_q8_0: n: expected a multiple of 32, got {}", n));
  std::vector<std::byte> out(static_cast<std::size_t>(n / 32 * 34));
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    std::byte* dst = out.data() + b * 34;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
    const std::uint16_t h = float_to_half(d);
    std::memcpy(dst, &h, 2);
    for (int i = 0; i < 32; ++i)
      dst[2 + i] = static_cast<std::byte>(static_cast<std::int8_t>(std::clamp(std::round(xb[i] * id), -127.f, 127.f)));
  }
  return out;
}

std::vector<std::byte> quantize_q4_0(const float* x, std::int64_t n) {
  if (n < 0 || n % 32 != 0) fail(fmt::format("quantize_q4_0: n: expected a multiple of 32, got {}", n));
  std::vector<std::byte> out(static_cast<std::size_t>(n / 32 * 18));
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    std::byte* dst = out.data() + b * 18;
    float amax = 0.f, max = 0.f;  // the value of largest magnitude, with its sign
    for (int i = 0; i < 32; ++i)
      if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
    const float d = max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
    const std::uint16_t h = float_to_half(d);
    std::memcpy(dst, &h, 2);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<std::int8_t>(xb[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<std::int8_t>(xb[j + 16] * id + 8.5f)));
      dst[2 + j] = static_cast<std::byte>(lo | (hi << 4));
    }
  }
  return out;
}

bool can_pack(GgmlType type) noexcept { return format_info(type).source_block_elements != 0; }

PackedMatrix PackedMatrix::pack(std::span<const Source> sources, WeightArena* arena) {
  if (sources.empty()) fail("PackedMatrix::pack: sources: expected at least one tensor, got none");
  const Source& first = sources.front();
  PackedMatrix m;
  m.type_ = first.type;
  m.cols_ = first.cols;
  for (const Source& s : sources) {
    if (!can_pack(s.type))
      fail(fmt::format("tensor {}: type {} has no quantised product (supported: {})", s.name, to_string(s.type),
                       packable_type_names()));
    if (s.type != first.type)
      fail(fmt::format("tensor {}: expected type {} (as {}, packed with it), got {}", s.name, to_string(first.type), first.name,
                       to_string(s.type)));
    const FormatInfo f = format_info(s.type);
    if (s.rows < 1 || s.cols < 1 || s.cols % f.source_block_elements != 0)
      fail(fmt::format("tensor {}: type {}: expected rows >= 1 and a row length that is a multiple of {}, got [{}, {}]", s.name,
                       to_string(s.type), f.source_block_elements, s.rows, s.cols));
    if (s.cols != first.cols)
      fail(fmt::format("tensor {}: expected {} columns (as {}), got {}", s.name, first.cols, first.name, s.cols));
    const auto need = static_cast<std::size_t>(s.rows * (s.cols / f.source_block_elements) * f.source_block_bytes);
    if (s.data.size() != need)
      fail(fmt::format("tensor {}: type {} [{}, {}]: expected {} bytes of block data, got {} (truncated or misaligned)", s.name,
                       to_string(s.type), s.rows, s.cols, need, s.data.size()));
    if (!s.row_order.empty()) {
      if (static_cast<std::int64_t>(s.row_order.size()) != s.rows)
        fail(fmt::format("tensor {}: row_order: expected {} entries, got {}", s.name, s.rows, s.row_order.size()));
      for (const auto r : s.row_order)
        if (r < 0 || r >= s.rows) fail(fmt::format("tensor {}: row_order: expected rows in [0, {}), got {}", s.name, s.rows, r));
    }
    m.rows_ += s.rows;
  }
  const FormatInfo f = format_info(m.type_);
  m.layout_ = f.layout;
  m.block_ = f.layout.block;
  const std::int64_t blocks = m.cols_ / m.block_;
  m.tile_bytes_ = m.layout_.tile_bytes(blocks);
  const auto total = static_cast<std::size_t>((m.tiles() * m.tile_bytes_ + 63) / 64 * 64);
  const std::size_t bytes = std::max<std::size_t>(total, 64);
  if (arena != nullptr) {
    m.data_ = arena->allocate(bytes);
  } else if (bytes >= kHugePageBytes) {
    m.data_ = allocate_huge_pages(bytes);
  } else {
    m.data_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(std::aligned_alloc(64, bytes)), [](std::byte* p) { std::free(p); });
    if (!m.data_) fail(fmt::format("tensor {}: cannot allocate {} bytes for the packed weights", first.name, total));
  }
  // The bytes after the last tile (to a 64-byte multiple); the tiles themselves are zeroed (where a byte may stay unwritten)
  // by the thread that packs them, so that the pages' first touch, the kernel's zeroing of fresh memory, is spread over
  // the packing threads too.
  const auto tiles_end = static_cast<std::size_t>(m.tiles() * m.tile_bytes_);
  std::memset(m.data_.get() + tiles_end, 0, total - tiles_end);

  const Layout& L = m.layout_;
  const std::int64_t src_row_bytes = m.cols_ / f.source_block_elements * f.source_block_bytes;
  // Each output row's source row (row_order applied).
  std::vector<const std::byte*> row_src(static_cast<std::size_t>(m.rows_));
  {
    std::int64_t r = 0;
    for (const Source& s : sources)
      for (std::int64_t i = 0; i < s.rows; ++i, ++r) {
        const std::int64_t src = s.row_order.empty() ? i : s.row_order[static_cast<std::size_t>(i)];
        row_src[static_cast<std::size_t>(r)] = s.data.data() + src * src_row_bytes;
      }
  }
  // Byte of element e of a block in its tile block: 4 values of a lane side by side, then the next 4 of every lane;
  // a 4-bit block puts elements e and e + block / 2 in one byte (low and high nibble).
  const bool nibbles = L.u4;
  const std::int64_t half = L.block / 2;
  // Q4_0 / Q4_1 / Q8_0 (the formats of most files) copy their bytes in groups of four: a Q4 block's 16 bytes are already
  // its tile bytes (element e low nibble, e + 16 high), a Q8_0 value is its byte with the sign bit flipped (u = q + 128).
  const bool q4_copy = m.type_ == GgmlType::kQ4_0 || m.type_ == GgmlType::kQ4_1;
  const bool q8_copy = m.type_ == GgmlType::kQ8_0;
  // Row r's blocks into its lane of tile `tile`; returns whether every 8-bit value is above the format's minimum.
  auto pack_row = [&](std::int64_t r, std::byte* tile) {
    const std::byte* row = row_src[static_cast<std::size_t>(r)];
    const std::int64_t lane = r % kTileRows;
    const std::int64_t tbb = L.tile_block_bytes();
    if (q4_copy) {
      const bool q41 = m.type_ == GgmlType::kQ4_1;
      const std::int64_t sb = q41 ? 20 : 18;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const std::byte* blk = row + b * sb;
        std::byte* tb = tile + b * tbb;
        const std::byte* qs = blk + (q41 ? 4 : 2);
        for (int g = 0; g < 4; ++g) std::memcpy(tb + g * 64 + lane * 4, qs + 4 * g, 4);
        std::byte* sc = tb + L.value_bytes();
        std::memcpy(sc + 2 * lane, blk, 2);
        if (q41) std::memcpy(sc + 32 + 2 * lane, blk + 2, 2);
      }
      return true;
    }
    if (q8_copy) {
      bool above = true;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const std::byte* blk = row + b * 34;
        std::byte* tb = tile + b * tbb;
        for (int g = 0; g < 8; ++g) {
          std::uint32_t w;
          std::memcpy(&w, blk + 2 + 4 * g, 4);
          w ^= 0x80808080u;
          // a byte u == 0 (q == -128): the classic has-zero-byte test
          above = above && ((w - 0x01010101u) & ~w & 0x80808080u) == 0;
          std::memcpy(tb + g * 64 + lane * 4, &w, 4);
        }
        std::memcpy(tb + L.value_bytes() + 2 * lane, blk, 2);
      }
      return above;
    }
    BlockValues bv;
    bool above = !L.u4 && L.zero == 128;
    std::int64_t at[32];
    // The byte and bit (high_bits 1) or the 2-bit field's shift (high_bits 2) of element e's higher bits in this lane
    // (Layout::value).
    std::int64_t plane_at[32];
    int plane_bit[32];
    for (std::int64_t e = 0; e < std::min<std::int64_t>(L.block, 32); ++e) {
      const std::int64_t g = L.u4 ? e % half : e;
      at[e] = (g / 4) * 64 + lane * 4 + g % 4;
      const std::int64_t i = lane * 4 + g % 4;
      if (L.high_bits == 2) {
        plane_at[e] = 32 * (g / 4) + i % 32;
        plane_bit[e] = (i < 32 ? 0 : 4) + (e < half ? 0 : 2);
      } else {
        plane_at[e] = 16 * (g / 4) + (e < half ? 0 : 8) + i / 8;
        plane_bit[e] = static_cast<int>(i % 8);
      }
    }
    for (std::int64_t b = 0; b < blocks; ++b) {
      read_block(m.type_, row, b, bv);
      auto* v = reinterpret_cast<std::uint8_t*>(const_cast<std::byte*>(L.values(tile, b)));
      if (L.u2) {  // 2-bit values: byte lane * 4 + j holds values j, 4 + j, 8 + j, 12 + j; Q3_K's third bits after them
        for (int j = 0; j < 4; ++j)
          v[lane * 4 + j] = static_cast<std::uint8_t>((bv.u[j] & 3) | ((bv.u[4 + j] & 3) << 2) | ((bv.u[8 + j] & 3) << 4) |
                                                      ((bv.u[12 + j] & 3) << 6));
        if (L.high_bits == 1)  // bit k (rows 8-15: 4 + k) of byte (lane * 4 + j) % 32: the third bit of value 4k + j
          for (int j = 0; j < 4; ++j) {
            const int nibble = ((bv.u[j] >> 2) & 1) | (((bv.u[4 + j] >> 2) & 1) << 1) | (((bv.u[8 + j] >> 2) & 1) << 2) |
                               (((bv.u[12 + j] >> 2) & 1) << 3);
            std::uint8_t& at = v[64 + (lane * 4 + j) % 32];
            at = static_cast<std::uint8_t>(at | (nibble << (lane < 8 ? 0 : 4)));
          }
      } else if (nibbles) {
        // A constant trip count: through a captured reference, the bound would be reloaded after every byte stored.
        const auto merge = [&]<int H>() {
          for (int e = 0; e < H; ++e) v[at[e]] = static_cast<std::uint8_t>((bv.u[e] & 0xF) | (bv.u[e + H] << 4));
        };
        if (half == 16) merge.template operator()<16>();
        else merge.template operator()<8>();
        // The higher bits: the fifth bit of byte i of chunk c is bit i of the chunk's low (then high) nibbles' 8 bytes;
        // or the fifth and sixth bits in 2-bit fields.
        if (L.high_bits == 1) {  // the 5-bit formats: blocks of 32
          std::uint8_t* plane = v + 8 * 32;
          for (int e = 0; e < 32; ++e)
            plane[plane_at[e]] = static_cast<std::uint8_t>(plane[plane_at[e]] | (((bv.u[e] >> 4) & 1) << plane_bit[e]));
        } else if (L.high_bits == 2) {  // Q6_K (blocks of 16): elements e and e + 8 fill one half byte
          std::uint8_t* fields = v + 8 * 16;
          for (int e = 0; e < 8; ++e)
            fields[plane_at[e]] = static_cast<std::uint8_t>(
                fields[plane_at[e]] | ((((bv.u[e] >> 4) & 3) | (((bv.u[e + 8] >> 4) & 3) << 2)) << plane_bit[e]));
        }
      } else {
        std::uint8_t any_zero = 0;
        for (std::int64_t e = 0; e < L.block; ++e) {
          v[at[e]] = bv.u[e];
          any_zero |= static_cast<std::uint8_t>(bv.u[e] == 0);
        }
        above = above && any_zero == 0;
      }
      auto* sc = const_cast<std::byte*>(L.scales(tile, b));
      if (L.half_scales) {
        std::memcpy(sc + 2 * lane, &bv.d_half, 2);
        if (L.has_min) std::memcpy(sc + 32 + 2 * lane, &bv.m_half, 2);
      } else {
        if (L.scale_nibbles) {  // both 0..15
          sc[lane] = static_cast<std::byte>(bv.s | (bv.s_min << 4));
        } else {
          sc[lane] = static_cast<std::byte>(bv.s);
          if (L.has_min) sc[16 + lane] = static_cast<std::byte>(bv.s_min);
        }
        if ((b & (L.super_blocks() - 1)) == 0) {
          auto* sup = const_cast<std::byte*>(L.supers(tile, b));
          std::memcpy(sup + 2 * lane, &bv.super_d, 2);
          if (L.has_min) std::memcpy(sup + 32 + 2 * lane, &bv.super_neg_min, 2);
        }
      }
    }
    return above;
  };
  // Tiles [t0, t1) (a tile's rows share its bytes, so a tile is one thread's); returns whether every 8-bit value of
  // them is above the format's minimum (only an 8-bit layout with zero point 128 can be).
  auto pack_tiles = [&](std::int64_t t0, std::int64_t t1) {
    bool above = !L.u4 && L.zero == 128;
    for (std::int64_t t = t0; t < t1; ++t) {
      std::byte* tile = m.data_.get() + t * m.tile_bytes_;
      const std::int64_t r_end = std::min((t + 1) * kTileRows, m.rows_);
      // Every byte of a full tile is written below, except a sub-scale group's padding to 64 bytes and the higher bits'
      // (whose bytes the rows set a bit or a field at a time); a partial tile's padding rows stay u = 0, d = 0, m = 0.
      if (r_end - t * kTileRows < kTileRows || !L.half_scales || L.high_bits > 0)
        std::memset(tile, 0, static_cast<std::size_t>(m.tile_bytes_));
      for (std::int64_t r = t * kTileRows; r < r_end; ++r) above = pack_row(r, tile) && above;
    }
    return above && !L.u4 && L.zero == 128;
  };
  // A large matrix (1M values or more) packs on several threads, each a contiguous range of tiles (every byte is written the same whatever
  // the split; a model's load was mostly this loop on one core).
  const std::int64_t tiles = m.tiles();
  const auto cpus = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const std::int64_t workers = m.rows_ * m.cols_ >= (std::int64_t{1} << 20) ? std::min<std::int64_t>({cpus, 8, tiles}) : 1;
  bool above_min = true;
  if (workers <= 1) {
    above_min = pack_tiles(0, tiles);
  } else {
    std::vector<char> above(static_cast<std::size_t>(workers), 1);
    auto range = [&](std::int64_t w) {
      above[static_cast<std::size_t>(w)] = pack_tiles(w * tiles / workers, (w + 1) * tiles / workers);
    };
    std::vector<std::thread> threads;
    std::int64_t started = 1;  // ranges 1 .. started - 1 have a thread
    try {
      for (; started < workers; ++started) threads.emplace_back(range, started);
    } catch (const std::system_error&) {  // no more threads: this one packs the rest
    }
    range(0);
    for (std::int64_t w = started; w < workers; ++w) range(w);
    for (auto& t : threads) t.join();
    for (const char a : above) above_min = above_min && a != 0;
  }
  m.values_above_min_ = above_min;
  return m;
}

void PackedMatrix::Layout::scale_min(const std::byte* tile, std::int64_t b, std::int64_t lane, float& d,
                                     float& m) const noexcept {
  const std::byte* sc = scales(tile, b);
  m = 0.f;
  if (half_scales) {
    d = half_to_float(u16(sc + 2 * lane));
    if (has_min) m = half_to_float(u16(sc + 32 + 2 * lane));
  } else {  // the products the vector paths compute: float(D) * float(s), float(-Dmin) * float(s_min)
    const std::byte* sup = supers(tile, b);
    const int s = scale_nibbles ? u8(sc, lane) & 0xF : static_cast<std::int8_t>(sc[lane]);
    const int s_min = scale_nibbles ? u8(sc, lane) >> 4 : has_min ? static_cast<std::int8_t>(sc[16 + lane]) : 0;
    d = half_to_float(u16(sup + 2 * lane)) * static_cast<float>(s);
    if (has_min) m = half_to_float(u16(sup + 32 + 2 * lane)) * static_cast<float>(s_min);
  }
}

void PackedMatrix::dequantize_row(std::int64_t r, float* out) const {
  if (r < 0 || r >= rows_) fail(fmt::format("PackedMatrix::dequantize_row: r: expected in [0, {}), got {}", rows_, r));
  const Layout& L = layout_;
  const std::int64_t lane = r % kTileRows;
  const std::byte* t = tile(r / kTileRows);
  const std::int64_t blocks = cols_ / block_;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::byte* vb = L.values(t, b);
    float d, m;
    L.scale_min(t, b, lane, d, m);
    for (std::int64_t e = 0; e < L.block; ++e) {
      const float w = d * static_cast<float>(L.value(vb, lane, e) - L.zero);
      out[b * L.block + e] = L.has_min ? w + m : w;
    }
  }
}

void prepare_rows(QuantizedRows& out, std::int64_t n, std::int64_t cols, std::int64_t block, std::int64_t planes) {
  if (block < 4 || block > 32 || n < 0 || cols % block != 0 || planes < 1 || planes > 2)
    fail(fmt::format("quantize_rows: expected cols ({}) a multiple of a block of 4-32 values in 1 or 2 planes, got block {}, "
                     "{} planes",
                     cols, block, planes));
  out.n = n;
  out.cols = cols;
  out.block = block;
  out.blocks = cols / block;
  out.planes = planes;
  out.stride = out.blocks * out.block_bytes();
  const auto need = static_cast<std::size_t>(n * out.stride);
  if (out.data.size() < need) out.data.resize(need);
}

namespace {

// round(v * id) clamped to +-127.
std::int8_t round_clamp(float v, float id) {
  return static_cast<std::int8_t>(std::clamp(std::nearbyint(v * id), -127.f, 127.f));
}

}  // namespace

void quantize_rows(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld, QuantizedRows& out,
                   CpuIsa isa) {
  const std::int64_t block = out.block;
  if ((isa == CpuIsa::kAvx512Vnni || isa == CpuIsa::kAmx) && block % 16 == 0 && cpu_supports(CpuIsa::kAvx512Vnni)) {
    quantize_rows_avx512(x, row_begin, row_end, ld, out);
    return;
  }
  if (isa != CpuIsa::kPortable && block % 8 == 0 && cpu_supports(CpuIsa::kAvx2)) {
    quantize_rows_avx2(x, row_begin, row_end, ld, out);
    return;
  }
  for (std::int64_t t = row_begin; t < row_end; ++t) {
    for (std::int64_t b = 0; b < out.blocks; ++b) {
      const float* xb = x + t * ld + b * block;
      std::byte* dst = out.data.data() + t * out.stride + b * out.block_bytes();
      float amax = 0.f;
      for (std::int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d1 = amax / 127.f;
      const float id1 = d1 > 0.f ? 1.f / d1 : 0.f;
      std::int32_t sum = 0;
      for (std::int64_t i = 0; i < block; ++i) {
        const std::int8_t q = round_clamp(xb[i], id1);
        dst[i] = static_cast<std::byte>(q);
        sum += q;
      }
      float dx = d1;
      if (out.planes == 2) {
        const float d2 = d1 / 256.f;
        const float id2 = d2 > 0.f ? 1.f / d2 : 0.f;
        std::int32_t sum2 = 0;
        for (std::int64_t i = 0; i < block; ++i) {
          const float residual = xb[i] - d1 * static_cast<float>(static_cast<std::int8_t>(dst[i]));
          const std::int8_t q = round_clamp(residual, id2);
          dst[block + i] = static_cast<std::byte>(q);
          sum2 += q;
        }
        sum = 256 * sum + sum2;
        dx = d2;
      }
      QuantizedRows::write_header(dst + out.planes * block, dx, sum);
    }
  }
}

void quantize_rows(const float* x, std::int64_t n, std::int64_t cols, std::int64_t ld, std::int64_t block, QuantizedRows& out,
                   std::int64_t planes) {
  prepare_rows(out, n, cols, block, planes);
  quantize_rows(x, 0, n, ld, out);
}

void PackedMatrix::linear(const QuantizedRows& x, std::int64_t tile_begin, std::int64_t tile_end, float* y, std::int64_t ldy,
                          bool accumulate, CpuIsa isa) const {
  if (x.block != block_ || x.cols != cols_)
    fail(fmt::format("PackedMatrix::linear: x: expected {} columns quantised in blocks of {}, got {} in blocks of {}", cols_,
                     block_, x.cols, x.block));
  if (tile_begin < 0 || tile_end > tiles() || tile_begin > tile_end)
    fail(fmt::format("PackedMatrix::linear: tiles: expected a range within [0, {}), got [{}, {})", tiles(), tile_begin,
                     tile_end));
  if (!cpu_supports(isa)) fail(fmt::format("PackedMatrix::linear: isa: {} is not supported by this CPU", to_string(isa)));
  if (x.n == 0 || tile_begin == tile_end) return;
  const PackedArgs args{this, &x, tile_begin, tile_end, y, ldy, accumulate};
  switch (isa) {
    case CpuIsa::kAmx:
      if (x.n >= amx_min_rows()) {
        packed_linear_amx(args);
        return;
      }
      packed_linear_avx512vnni(args);
      return;
    case CpuIsa::kAvx512Vnni: packed_linear_avx512vnni(args); return;
    case CpuIsa::kAvx2: packed_linear_avx2(args); return;
    case CpuIsa::kAvxVnni: packed_linear_avxvnni(args); return;
    case CpuIsa::kPortable: packed_linear_portable(args); return;
  }
}

}  // namespace specdec::models::detail
