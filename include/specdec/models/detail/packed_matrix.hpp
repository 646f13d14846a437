// Internal: weight matrices kept in their GGUF block formats, and the integer products over them (src/models/cpu/packed_*.cpp).
// Not a stable API. Torch-free.
//
// A PackedMatrix holds a [rows, cols] matrix of one of the block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_NL, IQ4_XS, copied once from the file into a layout built for products over a few to hundreds of token rows: the rows are interleaved in tiles of 16 (4
// bytes of each row side by side, the operand shape of an AVX-512 VNNI dot product), every quantisation block reduced to
// integers u (2 or 4 bits, with higher bits or a table for some formats, or 8 bits), a scale d, an optional minimum m and a
// zero point z of the format:
//
//   weight = d * (u - z) + m
//
// The conversion is exact (no value changes). Q4_0 (u4, z 8), Q4_1 (u4, m), Q8_0 (u8, z 128), IQ4_NL (u = its table
// value + 128, z 128, the 4-bit index stored: Layout::table), Q5_0 (u5, z 16) and Q5_1 (u5, m) keep their
// half-precision d and m per block; u5 is 4-bit values and a plane of fifth bits (Layout::high_bits 1). The K-quants and
// IQ4_XS keep their two-level scales as sub-scales (Layout): d = D * s with D the super-block's half and s the
// sub-block's small integer, m = -Dmin * s_min, products exact in float32. Q4_K's 32-value sub-blocks are u4 with (s,
// s_min); Q5_K's u5 with (s, s_min); Q6_K's 16-value sub-blocks u6 (4-bit values and 2-bit fields of the fifth and
// sixth bits: Layout::high_bits 2), z 32, s; Q3_K's 16-value sub-blocks u3 = value + 4 hbit (2-bit values and their
// third bits beside them: Layout::u2), z 4, s = scale - 32; Q2_K's 16-value sub-blocks u2 = q with (s, s_min); IQ4_XS's
// 32-value sub-blocks IQ4_NL's indices, z 128, s = scale - 32. Bits
// a weight against the file's (docs/models.md, "Quant types"): Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, Q2_K (its s and
// s_min in one byte: Layout::scale_nibbles) the file's; Q4_K 1.03 times, Q5_K 1.02, Q6_K 1.01, IQ4_XS 1.03, Q3_K 1.05.
//
// Activations are quantised per block of the same size to int8 planes. One plane is llama.cpp's Q8 activation: a scale
// d1 = max|x| / 127 and q1 = round(x / d1). Two planes (the default of the Llama forward) add the rounding residual at a
// 256 times finer scale, d2 = d1 / 256 and q2 = round((x - d1 q1) / d2), so x ~ d2 (256 q1 + q2) to about 15 bits; the
// integer sums of both planes share each weight block's unpacking and combine exactly, s = 256 s1 + s2. A block stores its
// planes, dx (d1 for one plane, d2 for two), S = the sum of its combined integers, and S again as a float (exact, so
// float(S) below is read, not converted). For output row o and token row t the
// product is, for every block b in ascending order, with s = the exact integer sum of u * q over the block:
//
//   e   = d * float(s - z * S) + m * float(S)      (one fused multiply-add; without a minimum, d * float(s - z * S))
//   acc = e * dx + acc                             (one fused multiply-add, acc starting at 0)
//
// and y[t, o] = acc (or y[t, o] + acc). Every path (AVX-512 VNNI, AVX2, portable) computes exactly these operations, so a
// token row's outputs are bit-identical whatever the path, the number of rows in the call, or the tiles a thread takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/models/detail/ggml_blocks.hpp"
#include "specdec/models/detail/weight_arena.hpp"
#include "specdec/models/gguf.hpp"

namespace specdec::models::detail {

/// The instruction sets the packed products run on. kAmx: AMX-INT8 tiles for calls of at least amx_min_rows() token rows
/// (prompts), AVX-512 VNNI for fewer.
enum class CpuIsa { kPortable = 0, kAvx2 = 1, kAvx512Vnni = 2, kAmx = 3, kAvxVnni = 4 };
/// Every CpuIsa, from the plainest to the fastest (the order best_cpu_isa prefers them in reverse).
inline constexpr CpuIsa kCpuIsas[] = {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512Vnni, CpuIsa::kAmx};
/// Token rows from which kAmx uses the tiles (bench_model BM_PackedLinear: with fewer, storing each block's tile of
/// integer sums for its float stage costs more than the VNNI product).
inline constexpr std::int64_t amx_min_rows() noexcept { return 16; }
const char* to_string(CpuIsa isa) noexcept;
/// Whether this machine can run `isa` (kPortable always).
bool cpu_supports(CpuIsa isa) noexcept;
/// The fastest instruction set this machine runs (the one packed_linear uses by default).
CpuIsa best_cpu_isa() noexcept;

/// llama.cpp's Q8_0 blocks of n floats (n a multiple of 32): per block d = max|x| / 127 stored as half, q = round(x / d).
/// For weights a caller chooses to quantise (draft models); the result packs as a GgmlType::kQ8_0 source.
std::vector<std::byte> quantize_q8_0(const float* x, std::int64_t n);
/// llama.cpp's Q4_0 blocks of n floats (n a multiple of 32; its reference quantiser): per block d = -m / 8 for the value m
/// of largest magnitude, stored as half, q = min(15, trunc(x / d + 8.5)). Packs as a GgmlType::kQ4_0 source.
std::vector<std::byte> quantize_q4_0(const float* x, std::int64_t n);

/// True for the ggml types a PackedMatrix holds.
bool can_pack(GgmlType type) noexcept;
/// Those types, as a comma-separated list (for error messages).
const char* packable_type_names() noexcept;

/// Rows per interleaved tile.
inline constexpr std::int64_t kTileRows = 16;

/// int8 activations of n token rows quantised in blocks of `block` values, in 1 or 2 planes (see the file comment).
struct QuantizedRows {
  std::int64_t n = 0, cols = 0, block = 0, blocks = 0, planes = 1;
  /// Per row, per block: int8 q1[block], (int8 q2[block],) float dx, int32 S, float S; `stride` bytes per row.
  std::vector<std::byte> data;
  std::int64_t stride = 0;
  // dx, S and float(S) (exact: |S| < 2^24) follow the block's planes; the float copy saves the products a conversion and
  // a broadcast per block and token row.
  static constexpr std::int64_t header = 12;
  /// Writes a block's header at `at` (just past its planes): dx, S and float(S).
  static void write_header(std::byte* at, float dx, std::int32_t sum) noexcept {
    const float sum_f = static_cast<float>(sum);
    std::memcpy(at, &dx, 4);
    std::memcpy(at + 4, &sum, 4);
    std::memcpy(at + 8, &sum_f, 4);
  }
  std::int64_t block_bytes() const noexcept { return planes * block + header; }
  const std::byte* block_ptr(std::int64_t row, std::int64_t b) const noexcept {
    return data.data() + row * stride + b * block_bytes();
  }
};

/// Sizes `out` for n rows of `cols` values in blocks of `block` (cols a multiple of block, block 4-32) and 1 or 2 planes;
/// keeps its storage.
void prepare_rows(QuantizedRows& out, std::int64_t n, std::int64_t cols, std::int64_t block, std::int64_t planes = 1);
/// Quantises rows [row_begin, row_end) of x (row r at x + r * ld) into the prepared `out`. Each row alone, and only with
/// exactly rounded operations (max |x|, d1 = max / 127, 1 / d1, x * (1 / d1), round half to even, clamp to +-127; for the
/// second plane x - d1 * q1, d2 = d1 / 256, 1 / d2, the same rounding), so the int8 values are the same whatever the split
/// or the instruction set (AVX-512 for blocks of 16 or 32 under kAvx512Vnni and kAmx, AVX2, or portable).
void quantize_rows(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld, QuantizedRows& out,
                   CpuIsa isa = best_cpu_isa());
/// prepare_rows, then every row.
void quantize_rows(const float* x, std::int64_t n, std::int64_t cols, std::int64_t ld, std::int64_t block, QuantizedRows& out,
                   std::int64_t planes = 1);

class PackedMatrix {
 public:
  /// One source of rows: a GGUF tensor's raw block data ([rows, cols] row-major, as GgufFile::tensor_data gives it).
  /// `row_order` (empty or `rows` entries): packed row r takes source row row_order[r].
  struct Source {
    std::string name;
    GgmlType type = GgmlType::kF32;
    std::span<const std::byte> data;
    std::int64_t rows = 0, cols = 0;
    std::vector<std::int64_t> row_order;
  };

  PackedMatrix() = default;
  /// Stacks the sources' rows (in order) into one matrix. Every source must have a packable type (can_pack), the same type
  /// and the same cols, cols a multiple of the type's block, and data of exactly the size the shape needs; otherwise throws
  /// specdec::error naming the source, its type and what was expected.
  /// The packed tiles go into `arena` when given (a model's matrices one after another in huge-page slabs), otherwise into
  /// memory of their own (huge pages from 2 MiB up).
  static PackedMatrix pack(std::span<const Source> sources, WeightArena* arena = nullptr);

  bool empty() const noexcept { return rows_ == 0; }
  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }
  std::int64_t tiles() const noexcept { return (rows_ + kTileRows - 1) / kTileRows; }
  GgmlType type() const noexcept { return type_; }
  /// Values per quantisation block (the activation block size a product needs).
  std::int64_t block() const noexcept { return block_; }
  /// Bytes of packed data (what a product over every row reads).
  std::int64_t bytes() const noexcept { return static_cast<std::int64_t>(tiles()) * tile_bytes_; }
  /// Dequantises row r (exactly the values the GGUF reader's dequantize gives) into out[0, cols).
  void dequantize_row(std::int64_t r, float* out) const;

  /// Columns [tile_begin * 16, min(tile_end * 16, rows)) of y = x w^T (+ y when `accumulate`): x quantised with block(),
  /// y [x.n, ldy]. Throws specdec::error if x does not fit (block or cols) or `isa` is not supported here.
  void linear(const QuantizedRows& x, std::int64_t tile_begin, std::int64_t tile_end, float* y, std::int64_t ldy,
              bool accumulate, CpuIsa isa) const;
  void linear(const QuantizedRows& x, std::int64_t tile_begin, std::int64_t tile_end, float* y, std::int64_t ldy,
              bool accumulate) const {
    linear(x, tile_begin, tile_end, y, ldy, accumulate, best_cpu_isa());
  }

  /// The layout of one format (see the file comment); public for the kernels.
  ///
  /// Block scales come in two forms. Half scales (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL): a tile block is its values, then
  /// the 16 rows' d as IEEE half, then their m, so block b starts at b * tile_block_bytes(). Sub-scales (the K-quants
  /// and IQ4_XS, whose files scale each sub-block by a small integer times a half per 256-value super-block): d is
  /// float(D) * float(s), D the super-block's half and s the block's int8 (and m = float(-Dmin) * float(s_min), which is
  /// -(Dmin * s_min) exactly), as the file has them, so d and m are the exact float products a reader computes. Such a
  /// tile is one group per super-block, read in order: its blocks' values (value_bytes() each), their 16 int8 s (and
  /// 16 s_min) each, the 16 halves D (and 16 halves -Dmin), padded to 64 bytes. That keeps each block's values 64-byte
  /// aligned, the tile one stream, and reads 1 + 1/super bytes of scale per 16 weights instead of a float's 4.
  struct Layout {
    bool u4 = true;            // 4-bit values (two per byte) or one per byte
    bool half_scales = true;   // d and m per block as IEEE half, or sub-scales (above)
    bool has_min = false;
    std::int32_t zero = 0;     // z
    std::int64_t block = 32;   // values per block
    // The bits above the 4-bit values (u4 only) after the block's value bytes, for each 64-byte chunk c of them:
    // high_bits 1 (5-bit values): a plane of their fifth bits, 16 bytes: the bits of its low nibbles (8 bytes, bit i for
    // byte i), then of its high nibbles. high_bits 2 (Q6_K's 6-bit values): 32 bytes of 2-bit fields, byte j holding the
    // fifth and sixth bits of byte j's low nibble (bits 0-1), its high nibble (2-3), byte j + 32's low nibble (4-5) and
    // high nibble (6-7), so that shifts and a mask put them in place for a row half (AVX2) or a whole chunk.
    std::int32_t high_bits = 0;
    // A 4-bit index into a table (u4 only; IQ4_NL, IQ4_XS): the value is kIq4Values[index] + 128.
    bool table = false;
    // 2-bit values (with u4; blocks of 16: Q2_K, and Q3_K with high_bits 1): a 64-byte chunk whose byte lane * 4 + j
    // holds the lane's values j, 4 + j, 8 + j, 12 + j in its bits 0-1, 2-3, 4-5, 6-7; with high_bits 1, their third
    // bits in the 32 bytes after it: bit k of byte i holds that of crumb k of chunk byte i, bit 4 + k that of chunk
    // byte i + 32 (so a shift and a mask put a row half's in place).
    bool u2 = false;
    // Sub-scales whose s and s_min both fit 4 bits (Q2_K): one byte a row, s in its low nibble, s_min in its high one.
    bool scale_nibbles = false;
    constexpr std::int64_t value_bytes() const noexcept {
      return u4 ? (u2 ? 4 : 8) * block + 2 * high_bits * block : 16 * block;
    }
    /// Bytes of one block's scales (d, or d and m) for the 16 rows.
    constexpr std::int64_t scale_bytes() const noexcept {
      return (half_scales ? 32 : 16) * (has_min && !scale_nibbles ? 2 : 1);
    }
    /// Half scales: bytes of one tile block (values, then scales).
    constexpr std::int64_t tile_block_bytes() const noexcept { return value_bytes() + scale_bytes(); }
    /// Sub-scales: blocks per super-block (256 values: 16 or 8, so a shift), and bytes of a super-block's halves for the
    /// 16 rows.
    constexpr int super_shift() const noexcept { return half_scales ? 0 : block == 16 ? 4 : 3; }
    constexpr std::int64_t super_blocks() const noexcept { return std::int64_t{1} << super_shift(); }
    constexpr std::int64_t super_bytes() const noexcept { return half_scales ? 0 : 32 * (has_min ? 2 : 1); }
    /// Sub-scales: bytes of one super-block's group in a tile (a multiple of 64).
    constexpr std::int64_t group_bytes() const noexcept {
      return (super_blocks() * (value_bytes() + scale_bytes()) + super_bytes() + 63) / 64 * 64;
    }
    /// Bytes of one tile of `blocks` blocks (a multiple of 64; sub-scales: blocks a multiple of super_blocks()).
    constexpr std::int64_t tile_bytes(std::int64_t blocks) const noexcept {
      return half_scales ? (blocks * tile_block_bytes() + 63) / 64 * 64 : (blocks >> super_shift()) * group_bytes();
    }
    /// Block b's values in a tile.
    constexpr const std::byte* values(const std::byte* tile, std::int64_t b) const noexcept {
      if (half_scales) return tile + b * tile_block_bytes();
      return tile + (b >> super_shift()) * group_bytes() + (b & (super_blocks() - 1)) * value_bytes();
    }
    /// Block b's scales: half d (and m) of the 16 rows, or int8 s (and s_min).
    constexpr const std::byte* scales(const std::byte* tile, std::int64_t b) const noexcept {
      if (half_scales) return tile + b * tile_block_bytes() + value_bytes();
      return tile + (b >> super_shift()) * group_bytes() + super_blocks() * value_bytes() +
             (b & (super_blocks() - 1)) * scale_bytes();
    }
    /// Sub-scales: the halves D (and -Dmin) of block b's super-block.
    constexpr const std::byte* supers(const std::byte* tile, std::int64_t b) const noexcept {
      return tile + (b >> super_shift()) * group_bytes() + super_blocks() * (value_bytes() + scale_bytes());
    }
    /// Value e of row `lane` in a block (vb: the block's values). 4-bit values: element e of the block's first half in
    /// the low nibble, e + block / 2 in the high nibble of the same byte.
    int value(const std::byte* vb, std::int64_t lane, std::int64_t e) const noexcept {
      const auto* v = reinterpret_cast<const std::uint8_t*>(vb);
      if (!u4) return v[(e / 4) * 64 + lane * 4 + e % 4];
      if (u2) {
        const std::int64_t i = lane * 4 + e % 4;
        int u = (v[i] >> (2 * (e / 4))) & 3;
        if (high_bits == 1) u |= ((v[64 + i % 32] >> (e / 4 + (i < 32 ? 0 : 4))) & 1) << 2;
        return u;
      }
      const std::int64_t half = block / 2, g = e & (half - 1);  // block: 16 or 32
      const std::int64_t i = lane * 4 + g % 4;  // the byte in its chunk
      const std::uint8_t byte = v[(g / 4) * 64 + i];
      int u = e < half ? (byte & 0xF) : (byte >> 4);
      if (table) return kIq4Values[u] + 128;
      if (high_bits == 1) {
        const std::uint8_t bits = v[8 * block + 16 * (g / 4) + (e < half ? 0 : 8) + i / 8];
        u |= ((bits >> (i % 8)) & 1) << 4;
      } else if (high_bits == 2) {
        const std::uint8_t bits = v[8 * block + 32 * (g / 4) + i % 32];
        u |= ((bits >> ((i < 32 ? 0 : 4) + (e < half ? 0 : 2))) & 3) << 4;
      }
      return u;
    }
    /// Scale d and minimum m (0 without one) of row `lane` in block b of a tile.
    void scale_min(const std::byte* tile, std::int64_t b, std::int64_t lane, float& d, float& m) const noexcept;
  };
  const Layout& layout() const noexcept { return layout_; }
  const std::byte* tile(std::int64_t t) const noexcept { return data_.get() + t * tile_bytes_; }
  /// An 8-bit matrix (zero point 128: Q8_0) none of whose values is -128, so the AVX2 products may take its bytes whole
  /// as signed values (vpsignb), which -128 would overflow.
  bool values_above_min() const noexcept { return values_above_min_; }

 private:
  GgmlType type_ = GgmlType::kF32;
  Layout layout_;
  std::int64_t rows_ = 0, cols_ = 0, block_ = 32, tile_bytes_ = 0;
  bool values_above_min_ = false;
  std::shared_ptr<std::byte> data_;  // the tiles (shares its slab's ownership when carved from a WeightArena)
};

}  // namespace specdec::models::detail
