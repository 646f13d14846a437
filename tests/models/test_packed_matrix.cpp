// PackedMatrix: exact repacking of every GGUF block format it holds, the integer products against an fp64 reference (with a stated NMSE
// bound, sentinels around the outputs), bit-identical results across instruction sets, token-row counts and tile splits,
// and named errors for tensors the products cannot take.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "fixture_file.hpp"
#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/models/detail/packed_matrix.hpp"
#include "specdec/models/float16.hpp"
#include "specdec/models/gguf.hpp"

namespace specdec::models::detail {
namespace {

struct Format {
  GgmlType type;
  std::int64_t block_elements, block_bytes;
};
const Format kFormats[] = {{GgmlType::kQ4_0, 32, 18},   {GgmlType::kQ4_1, 32, 20},   {GgmlType::kQ8_0, 32, 34},
                           {GgmlType::kQ4_K, 256, 144}, {GgmlType::kQ6_K, 256, 210}, {GgmlType::kQ5_0, 32, 22},
                           {GgmlType::kQ5_1, 32, 24},   {GgmlType::kQ5_K, 256, 176}, {GgmlType::kQ2_K, 256, 84},
                           {GgmlType::kQ3_K, 256, 110}, {GgmlType::kIQ4_NL, 32, 18}, {GgmlType::kIQ4_XS, 256, 136}};

// A random half in [2^-10, 2^-1) (either sign when `sign`).
std::uint16_t random_half(std::mt19937& rng, bool sign) {
  std::uniform_int_distribution<int> exp(5, 13), mant(0, 1023), s(0, 1);
  return static_cast<std::uint16_t>((sign && s(rng) ? 0x8000 : 0) | (exp(rng) << 10) | mant(rng));
}

// Random but well-formed block data of `rows` x `cols` values of format f.
std::vector<std::byte> random_blocks(const Format& f, std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  const std::int64_t nb = rows * cols / f.block_elements;
  std::vector<std::byte> out(static_cast<std::size_t>(nb * f.block_bytes));
  for (auto& b : out) b = static_cast<std::byte>(byte(rng));
  auto put_half = [&](std::byte* p, std::uint16_t h) { std::memcpy(p, &h, 2); };
  for (std::int64_t i = 0; i < nb; ++i) {
    std::byte* blk = out.data() + i * f.block_bytes;
    switch (f.type) {
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ8_0:
      case GgmlType::kIQ4_NL:
      case GgmlType::kIQ4_XS: put_half(blk, random_half(rng, true)); break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
        put_half(blk, random_half(rng, false));
        put_half(blk + 2, random_half(rng, true));
        break;
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        put_half(blk, random_half(rng, false));
        put_half(blk + 2, random_half(rng, false));
        break;
      case GgmlType::kQ6_K: put_half(blk + 208, random_half(rng, true)); break;
      case GgmlType::kQ3_K: put_half(blk + 108, random_half(rng, true)); break;
      case GgmlType::kQ2_K:
        put_half(blk + 80, random_half(rng, false));
        put_half(blk + 82, random_half(rng, false));
        break;
      default: break;
    }
  }
  return out;
}

std::vector<float> random_activations(std::int64_t n, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(n * cols));
  for (auto& v : x) v = normal(rng);
  // A few large outliers, as real activations have.
  for (std::int64_t t = 0; t < n; ++t) x[static_cast<std::size_t>(t * cols + (t * 7) % cols)] = 20.f;
  return x;
}

std::vector<float> dequantized(const Format& f, std::span<const std::byte> data, std::int64_t rows, std::int64_t cols) {
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  dequantize(f.type, data, w);
  return w;
}

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa i : kCpuIsas)
    if (cpu_supports(i)) out.push_back(i);
  return out;
}

// y = x w^T through the packed product, with sentinel columns on both sides of the output and a wider row stride.
constexpr float kSentinel = -12345.f;
std::vector<float> product(const PackedMatrix& m, const std::vector<float>& x, std::int64_t n, CpuIsa isa, bool accumulate,
                           float start = 0.f, std::int64_t planes = 1) {
  QuantizedRows q;
  quantize_rows(x.data(), n, m.cols(), m.cols(), m.block(), q, planes);
  const std::int64_t pad = 5, ldy = m.rows() + 2 * pad;
  std::vector<float> y(static_cast<std::size_t>(n * ldy + pad), kSentinel);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t o = 0; o < m.rows(); ++o) y[static_cast<std::size_t>(t * ldy + pad + o)] = start;
  m.linear(q, 0, m.tiles(), y.data() + pad, ldy, accumulate, isa);
  std::vector<float> out(static_cast<std::size_t>(n * m.rows()));
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t i = 0; i < ldy; ++i) {
      const float v = y[static_cast<std::size_t>(t * ldy + i)];
      if (i < pad || i >= pad + m.rows()) {
        EXPECT_EQ(v, kSentinel) << "sentinel overwritten at token " << t << " column " << i - pad;
      } else {
        out[static_cast<std::size_t>(t * m.rows() + i - pad)] = v;
      }
    }
  }
  EXPECT_EQ(y.back(), kSentinel);
  return out;
}

void PrintTo(const Format& f, std::ostream* os) { *os << to_string(f.type); }

class PackedFormat : public ::testing::TestWithParam<Format> {};
// The products with 1 and 2 activation planes.
class PackedProduct : public ::testing::TestWithParam<std::tuple<Format, std::int64_t>> {};

TEST_P(PackedFormat, RowsDequantiseExactlyAsTheReaderDoes) {
  const Format f = GetParam();
  const std::int64_t rows = 37, cols = 512;  // a partial last tile
  const auto data = random_blocks(f, rows, cols, 1);
  std::vector<std::int64_t> order(rows);
  for (std::int64_t r = 0; r < rows; ++r) order[static_cast<std::size_t>(r)] = (r * 11) % rows;
  const PackedMatrix::Source src{"blk.0.test.weight", f.type, data, rows, cols, order};
  const PackedMatrix m = PackedMatrix::pack(std::span(&src, 1));
  const auto ref = dequantized(f, data, rows, cols);
  std::vector<float> row(cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    m.dequantize_row(r, row.data());
    const std::int64_t s = order[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < cols; ++i)
      ASSERT_EQ(std::memcmp(&row[i], &ref[s * cols + i], 4), 0) << "row " << r << " col " << i;
  }
  EXPECT_THROW(m.dequantize_row(rows, row.data()), specdec::error);
}

// What a product reads: the layout's bits a weight (docs/models.md, "Quant types"): 2-bit values for Q2_K and Q3_K (and
// Q3_K's third bits), 4 bits and a plane of fifth bits for the 5-bit formats, 4 bits and 2-bit fields for Q6_K, 4-bit
// indices for IQ4, and the K-quants' scales as int8 sub-scales beside a half per super-block, not float d and m per
// block. 32 rows of 1024 columns (whole tiles, whole super-blocks), so the tiles hold no padding beyond a sub-scale
// group's to 64 bytes.
TEST_P(PackedFormat, TilesHoldTheLayoutsBitsAWeight) {
  const Format f = GetParam();
  double bits = 0;
  switch (f.type) {
    case GgmlType::kQ4_0: bits = 4.5; break;
    case GgmlType::kQ4_1: bits = 5.0; break;
    case GgmlType::kQ8_0: bits = 8.5; break;
    case GgmlType::kIQ4_NL: bits = 4.5; break;  // indices into the table
    case GgmlType::kQ5_0: bits = 5.5; break;  // 4 bits and a bit plane
    case GgmlType::kQ5_1: bits = 6.0; break;
    case GgmlType::kQ4_K: bits = 4.625; break;
    case GgmlType::kQ5_K: bits = 5.625; break;
    case GgmlType::kQ6_K: bits = 6.625; break;  // 4 bits and 2-bit fields, 32 bytes of padding a super-block group
    case GgmlType::kQ3_K: bits = 3.625; break;   // 2 bits and the third bits, 32 bytes of padding
    case GgmlType::kQ2_K: bits = 2.625; break;  // 2 bits, s and s_min in a byte: the file's
    case GgmlType::kIQ4_XS: bits = 4.375; break;  // indices into the table, 32 bytes of padding
    default: FAIL() << "no figure for " << to_string(f.type);
  }
  const std::int64_t rows = 32, cols = 1024;
  const auto data = random_blocks(f, rows, cols, 3);
  const PackedMatrix::Source src{"w", f.type, data, rows, cols, {}};
  const PackedMatrix m = PackedMatrix::pack(std::span(&src, 1));
  EXPECT_EQ(m.bytes(), static_cast<std::int64_t>(bits * rows * cols / 8)) << to_string(f.type);
}

TEST_P(PackedProduct, MatchesTheFp64Reference) {
  const auto [f, planes] = GetParam();
  const std::int64_t rows = 53, cols = 768, n = 7;
  const auto data = random_blocks(f, rows, cols, 2);
  const PackedMatrix::Source src{"w", f.type, data, rows, cols, {}};
  const PackedMatrix m = PackedMatrix::pack(std::span(&src, 1));
  const auto w = dequantized(f, data, rows, cols);
  const auto x = random_activations(n, cols, 3);
  // The activations as the product sees them (int8 per block), to separate the kernel's arithmetic from quantisation.
  QuantizedRows q;
  quantize_rows(x.data(), n, cols, cols, m.block(), q, planes);
  for (CpuIsa isa : isas()) {
    const auto y = product(m, x, n, isa, false, 0.f, planes);
    // predicted: the error energy of rounding each activation to its block's step dx (uniform, variance dx^2 / 12).
    double err_exact = 0, err_q = 0, norm = 0, predicted = 0;
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t o = 0; o < rows; ++o) {
        double exact = 0, with_q = 0;
        for (std::int64_t i = 0; i < cols; ++i) {
          const std::byte* xb = q.block_ptr(t, i / m.block());
          float dx;
          std::memcpy(&dx, xb + planes * m.block(), 4);
          // dx (256 q1 + q2) with two planes, dx q1 with one.
          double qi = static_cast<std::int8_t>(xb[i % m.block()]);
          if (planes == 2) qi = 256 * qi + static_cast<std::int8_t>(xb[m.block() + i % m.block()]);
          const double xq = static_cast<double>(dx) * qi;
          exact += static_cast<double>(w[o * cols + i]) * x[t * cols + i];
          predicted += static_cast<double>(w[o * cols + i]) * w[o * cols + i] * dx * dx / 12.0;
          with_q += static_cast<double>(w[o * cols + i]) * xq;
        }
        const double got = y[static_cast<std::size_t>(t * rows + o)];
        err_exact += (got - exact) * (got - exact);
        err_q += (got - with_q) * (got - with_q);
        norm += exact * exact;
      }
    // Against the exact product: the error of the activations' rounding, within 2x of the rounding-noise prediction, and
    // small (one plane: int8 activations; two: about 15 bits, so 256^2 times less error energy).
    EXPECT_LT(err_exact, 2.0 * predicted) << to_string(isa) << " " << to_string(f.type);
    EXPECT_LT(err_exact / norm, planes == 1 ? 1e-3 : 1e-7) << to_string(isa) << " " << to_string(f.type);
    // Against the product of the quantised activations: float32 rounding alone.
    EXPECT_LT(err_q / norm, 1e-10) << to_string(isa) << " " << to_string(f.type);
  }
}

TEST_P(PackedProduct, EveryPathRowCountAndTileSplitGivesTheSameBits) {
  const auto [f, planes] = GetParam();
  const std::int64_t rows = 70, cols = 256;
  const auto data = random_blocks(f, rows, cols, 4);
  const PackedMatrix::Source src{"w", f.type, data, rows, cols, {}};
  const PackedMatrix m = PackedMatrix::pack(std::span(&src, 1));
  const std::int64_t n_max = 40;
  const auto x = random_activations(n_max, cols, 5);
  const auto reference = product(m, x, n_max, CpuIsa::kPortable, true, 0.25f, planes);
  for (CpuIsa isa : isas()) {
    SCOPED_TRACE(to_string(isa));
    // Every row count: rows 0..n-1 of a call equal the reference's.
    // (AMX: one tile group up to 16 rows, then groups that overlap: 17, 33 and 40 rows.)
    for (std::int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17, 33, 40}) {
      const auto y = product(m, x, n, isa, true, 0.25f, planes);
      ASSERT_EQ(std::memcmp(y.data(), reference.data(), y.size() * 4), 0) << "n = " << n;
    }
    // A token alone at a later row of x (its own call) equals its row in the 40-row call.
    const std::vector<float> row(x.begin() + 17 * cols, x.begin() + 18 * cols);
    const auto alone = product(m, row, 1, isa, true, 0.25f, planes);
    ASSERT_EQ(std::memcmp(alone.data(), reference.data() + 17 * rows, rows * 4), 0);
    // Tiles split between two calls.
    QuantizedRows q;
    quantize_rows(x.data(), 6, cols, cols, m.block(), q, planes);
    std::vector<float> whole(6 * rows), split(6 * rows);
    m.linear(q, 0, m.tiles(), whole.data(), rows, false, isa);
    m.linear(q, 0, 2, split.data(), rows, false, isa);
    m.linear(q, 2, m.tiles(), split.data(), rows, false, isa);
    ASSERT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0);
  }
}

// Q8_0 without the value -128 (as llama.cpp's quantiser writes it): the AVX2 products take its bytes whole as signed
// values (PackedMatrix::values_above_min), and must give the portable path's bits; with one -128 the matrix keeps the
// nibble path.
TEST(PackedMatrix, Q8_0WithoutMinus128GivesTheSameBitsOnEveryPath) {
  const Format f{GgmlType::kQ8_0, 32, 34};
  const std::int64_t rows = 70, cols = 256;
  auto data = random_blocks(f, rows, cols, 8);
  for (std::size_t i = 0; i < data.size(); i += 34)
    for (std::size_t j = 2; j < 34; ++j)
      if (data[i + j] == std::byte{0x80}) data[i + j] = std::byte{0x81};  // -128 -> -127
  for (const bool with_min : {false, true}) {
    SCOPED_TRACE(with_min ? "one -128" : "no -128");
    auto d = data;
    if (with_min) d[2 + 34 * 17 + 5] = std::byte{0x80};
    const PackedMatrix::Source src{"w", f.type, d, rows, cols, {}};
    const PackedMatrix m = PackedMatrix::pack(std::span(&src, 1));
    EXPECT_EQ(m.values_above_min(), !with_min);
    const auto x = random_activations(9, cols, 9);
    for (const std::int64_t planes : {1, 2}) {
      const auto reference = product(m, x, 9, CpuIsa::kPortable, false, 0.f, planes);
      for (CpuIsa isa : isas())
        for (std::int64_t n : {1, 2, 3, 4, 5, 6, 9}) {
          const auto y = product(m, x, n, isa, false, 0.f, planes);
          ASSERT_EQ(std::memcmp(y.data(), reference.data(), y.size() * 4), 0)
              << to_string(isa) << ", " << planes << " plane(s), n = " << n;
        }
    }
  }
}

// Rows of 96, 576 and 1536 values: blocks fewer than, and more than, the AVX2 quantiser's groups of 8 and the AVX-512
// one's groups of 16 (with partial groups, and whole ones only: 1536 in blocks of 32).
TEST(PackedMatrix, ActivationQuantisationIsTheSameOnEveryPath) {
  for (const std::int64_t cols : {96, 576, 1536}) {
  SCOPED_TRACE("cols " + std::to_string(cols));
  const std::int64_t n = 9;
  auto x = random_activations(n, cols, 10);
  x[5] = 0.f;  // a block with an exact zero, ties at .5 after scaling, and an all-zero block
  for (std::int64_t i = 0; i < 16; ++i) x[static_cast<std::size_t>(cols + 32 + i)] = 0.f;
  for (std::int64_t i = 0; i < 8; ++i) x[static_cast<std::size_t>(2 * cols + i)] = 127.f * static_cast<float>(i) / 2.f / 7.f;
  for (std::int64_t block : {16, 32})
  for (std::int64_t planes : {1, 2}) {
    QuantizedRows ref, got;
    prepare_rows(ref, n, cols, block, planes);
    quantize_rows(x.data(), 0, n, cols, ref, CpuIsa::kPortable);
    for (CpuIsa isa : isas()) {
      prepare_rows(got, n, cols, block, planes);
      quantize_rows(x.data(), 0, n, cols, got, isa);
      ASSERT_EQ(std::memcmp(ref.data.data(), got.data.data(), static_cast<std::size_t>(n * ref.stride)), 0)
          << to_string(isa) << " block " << block << " planes " << planes;
    }
    // The values themselves: dx (256 q1 + q2) (two planes) or dx q1 within half a step (a little more where the residual
    // reaches the +-127 clamp) of x, S their sum.
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t b = 0; b < cols / block; ++b) {
        const std::byte* blk = ref.block_ptr(t, b);
        float dx;
        std::int32_t sum, expect_sum = 0;
        std::memcpy(&dx, blk + planes * block, 4);
        std::memcpy(&sum, blk + planes * block + 4, 4);
        for (std::int64_t i = 0; i < block; ++i) {
          int q = static_cast<std::int8_t>(blk[i]);
          EXPECT_LE(std::abs(q), 127);
          if (planes == 2) q = 256 * q + static_cast<std::int8_t>(blk[block + i]);
          expect_sum += q;
          EXPECT_NEAR(static_cast<double>(q) * dx, x[static_cast<std::size_t>(t * cols + b * block + i)],
                      (planes == 2 ? 1.51 : 0.5001) * dx + 1e-30);
        }
        EXPECT_EQ(sum, expect_sum);
      }
  }
  }
}

TEST(PackedMatrix, FloatToHalfRoundsToNearestEven) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    if (f != f) continue;  // NaN
    ASSERT_EQ(float_to_half(f), h) << "half " << h;
  }
  EXPECT_EQ(float_to_half(1.f + std::ldexp(1.f, -11)), 0x3C00);        // halfway, to even (down)
  EXPECT_EQ(float_to_half(1.f + 3 * std::ldexp(1.f, -11)), 0x3C02);    // halfway, to even (up)
  EXPECT_EQ(float_to_half(1.f + std::ldexp(1.f, -11) + std::ldexp(1.f, -20)), 0x3C01);
  EXPECT_EQ(float_to_half(65519.f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.f), 0x7C00);  // rounds past the largest half: infinity
  EXPECT_EQ(float_to_half(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.f, -25)), 0x0000);  // halfway to the smallest subnormal, to even
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.f, -25)), 0x0002);
  EXPECT_EQ(float_to_half(-2.f), 0xC000);
}

TEST(PackedMatrix, Q8_0QuantisationIsLlamaCpps) {
  const auto x = random_activations(3, 64, 13);
  const auto blocks = quantize_q8_0(x.data(), static_cast<std::int64_t>(x.size()));
  ASSERT_EQ(blocks.size(), x.size() / 32 * 34);
  std::vector<float> back(x.size());
  dequantize(GgmlType::kQ8_0, blocks, back);
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.f;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    std::uint16_t dh;
    std::memcpy(&dh, blocks.data() + b * 34, 2);
    EXPECT_EQ(dh, float_to_half(amax / 127.f));
    const float d = half_to_float(dh);
    for (std::size_t i = 0; i < 32; ++i) EXPECT_NEAR(back[b * 32 + i], x[b * 32 + i], 0.5f * d + amax * 1e-3f);
  }
  EXPECT_THROW((void)quantize_q8_0(x.data(), 33), specdec::error);
}

// The quantisers drafts use (quantize_q8_0, quantize_q4_0) give llama.cpp's reference quantisers' bytes: PyPI gguf's
// gguf.quants.quantize on random floats with outliers and a zero block (tests/models/write_dequant_fixture.py wrote
// tests/models/data/ggml-quantize-gguf-py.bin).
TEST(PackedMatrix, QuantisersMatchGgufPyBitForBit) {
  specdec_test::FixtureFile file(std::string(SPECDEC_IO_TEST_DATA) + "/ggml-quantize-gguf-py.bin");
  ASSERT_TRUE(file.opened());
  ASSERT_EQ(file.magic(), "SDQQ");
  const std::uint32_t count = file.u32();
  int checked = 0;
  for (std::uint32_t e = 0; e < count; ++e) {
    const auto type = static_cast<GgmlType>(file.u32());
    const std::uint32_t n = file.u32(), n_bytes = file.u32();
    const std::vector<float> x = file.floats(n);
    const std::vector<std::byte> want = file.take(n_bytes);
    ASSERT_TRUE(file.ok()) << "entry " << e << " runs past the end of the file";
    ASSERT_TRUE(type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) << to_string(type);
    const auto got = type == GgmlType::kQ8_0 ? quantize_q8_0(x.data(), n) : quantize_q4_0(x.data(), n);
    ASSERT_EQ(got.size(), want.size()) << to_string(type);
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << to_string(type) << " byte " << i << " (block " << i / (want.size() / (n / 32)) << ")";
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  EXPECT_TRUE(file.at_end());
  const std::vector<float> x33(33, 1.f);
  EXPECT_THROW((void)quantize_q4_0(x33.data(), 33), specdec::error);
}

INSTANTIATE_TEST_SUITE_P(Formats, PackedFormat, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(to_string(info.param.type)); });
INSTANTIATE_TEST_SUITE_P(Formats, PackedProduct, ::testing::Combine(::testing::ValuesIn(kFormats), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param).type)) + "_planes" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(PackedMatrix, StacksSourcesInOrder) {
  const Format f = kFormats[1];
  const auto a = random_blocks(f, 20, 64, 6), b = random_blocks(f, 9, 64, 7);
  const PackedMatrix::Source src[] = {{"a", f.type, a, 20, 64, {}}, {"b", f.type, b, 9, 64, {}}};
  const PackedMatrix m = PackedMatrix::pack(src);
  ASSERT_EQ(m.rows(), 29);
  const auto wa = dequantized(f, a, 20, 64), wb = dequantized(f, b, 9, 64);
  std::vector<float> row(64);
  m.dequantize_row(3, row.data());
  EXPECT_EQ(std::vector<float>(wa.begin() + 3 * 64, wa.begin() + 4 * 64), row);
  m.dequantize_row(22, row.data());
  EXPECT_EQ(std::vector<float>(wb.begin() + 2 * 64, wb.begin() + 3 * 64), row);
}

void expect_error(std::span<const PackedMatrix::Source> src, const std::string& needle) {
  try {
    (void)PackedMatrix::pack(src);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PackedMatrix, RejectsWhatTheProductsCannotTake) {
  const Format f = kFormats[1];
  const auto data = random_blocks(f, 4, 64, 8);
  PackedMatrix::Source s{"blk.3.attn_q.weight", GgmlType::kIQ2_XXS, data, 4, 64, {}};
  expect_error(std::span(&s, 1), "blk.3.attn_q.weight: type IQ2_XXS has no quantised product");
  s.type = GgmlType::kF32;
  expect_error(std::span(&s, 1), "type F32");
  s.type = f.type;
  s.data = std::span(data).first(data.size() - 1);
  expect_error(std::span(&s, 1), "expected 160 bytes of block data, got 159");
  s.data = data;
  s.cols = 48;
  expect_error(std::span(&s, 1), "multiple of 32");
  s.cols = 64;
  s.row_order = {0, 1, 2, 4};
  expect_error(std::span(&s, 1), "row_order");
  s.row_order.clear();
  const auto q8 = random_blocks(kFormats[2], 4, 64, 9);
  const PackedMatrix::Source two[] = {s, {"blk.3.attn_k.weight", GgmlType::kQ8_0, q8, 4, 64, {}}};
  expect_error(two, "blk.3.attn_k.weight: expected type Q4_1");
  const PackedMatrix m = PackedMatrix::pack(std::span(&s, 1));
  QuantizedRows q;
  std::vector<float> x(64, 1.f), y(4);
  quantize_rows(x.data(), 1, 64, 64, 16, q);
  EXPECT_THROW(m.linear(q, 0, 1, y.data(), 4, false), specdec::error);
  quantize_rows(x.data(), 1, 64, 64, 32, q);
  EXPECT_THROW(m.linear(q, 0, 2, y.data(), 4, false), specdec::error);
}

// silu_mul's 16-lane (AVX-512) and 8-lane (AVX2) paths give every value the same bits, whole vectors and a last partial
// one alike, and both stay within the exp approximation's error of silu(g) * u in double precision.
TEST(SiluMul, EveryVectorPathGivesTheSameBits) {
  if (!silu_mul_has_avx2() || !silu_mul_has_avx512()) GTEST_SKIP() << "needs AVX2 and AVX-512F";
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (const std::int64_t f : {1536, 37, 16, 5}) {
    const std::int64_t rows = 3;
    std::vector<float> gu(static_cast<std::size_t>(rows * 2 * f));
    for (auto& v : gu) v = nd(rng);
    const float specials[] = {0.f, -0.f, 100.f, -100.f, -90.f, 88.5f, 1e-30f, -1e-30f};
    for (std::size_t i = 0; i < std::size(specials) && i < static_cast<std::size_t>(f); ++i) gu[i] = specials[i];
    std::vector<float> a(static_cast<std::size_t>(rows * f), -1.f), b(a.size(), -2.f);
    silu_mul_avx2(gu.data(), a.data(), rows, f);
    silu_mul_avx512(gu.data(), b.data(), rows, f);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "f = " << f;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < f; ++i) {
        const double g = gu[static_cast<std::size_t>(r * 2 * f + i)], u = gu[static_cast<std::size_t>(r * 2 * f + f + i)];
        const double want = g / (1.0 + std::exp(-g)) * u;
        EXPECT_NEAR(b[static_cast<std::size_t>(r * f + i)], want, 1e-6 * std::abs(want) + 1e-30) << "f = " << f << ", i = " << i;
      }
  }
}

// gelu_tanh_mul: the same for Gemma's GELU (tanh approximation), against 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3)))
// u in double precision, and the dispatched path gives one of the two.
TEST(GeluTanhMul, EveryVectorPathGivesTheSameBits) {
  if (!silu_mul_has_avx2() || !silu_mul_has_avx512()) GTEST_SKIP() << "needs AVX2 and AVX-512F";
  std::mt19937 rng(22);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (const std::int64_t f : {2048, 37, 16, 5}) {
    const std::int64_t rows = 3;
    std::vector<float> gu(static_cast<std::size_t>(rows * 2 * f));
    for (auto& v : gu) v = nd(rng);
    const float specials[] = {0.f, -0.f, 30.f, -30.f, -9.f, 12.f, 1e-30f, -1e-30f};
    for (std::size_t i = 0; i < std::size(specials) && i < static_cast<std::size_t>(f); ++i) gu[i] = specials[i];
    std::vector<float> a(static_cast<std::size_t>(rows * f), -1.f), b(a.size(), -2.f), c(a.size(), -3.f);
    gelu_tanh_mul_avx2(gu.data(), a.data(), rows, f);
    gelu_tanh_mul_avx512(gu.data(), b.data(), rows, f);
    gelu_tanh_mul(gu.data(), c.data(), rows, f);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "f = " << f;
    ASSERT_TRUE(std::memcmp(c.data(), a.data(), a.size() * 4) == 0) << "f = " << f;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < f; ++i) {
        const double g = gu[static_cast<std::size_t>(r * 2 * f + i)], u = gu[static_cast<std::size_t>(r * 2 * f + f + i)];
        const double want = 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
        // exp's ~2e-7 relative error, through 1 / (1 + e): relative 1e-6 of the value, and 1e-7 of |g u| where the
        // value is tiny (large negative g).
        EXPECT_NEAR(b[static_cast<std::size_t>(r * f + i)], want, 1e-6 * std::abs(want) + 1e-7 * std::abs(g * u) + 1e-30)
            << "f = " << f << ", i = " << i << ", g = " << g;
      }
  }
}

}  // namespace
}  // namespace specdec::models::detail
