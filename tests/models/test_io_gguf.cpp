// GGUF reader tests: files are written by a small writer below (every metadata value type, every dequantised dtype, every
// error path), plus the real SmolLM2 model when it has been downloaded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "fixture_file.hpp"
#include "gguf_writer.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama_config.hpp"

namespace sm = specdec::models;
using sm::GgmlType;
using sm::GgufType;

namespace {

using specdec_test::Bytes;
using specdec_test::Tensor;
using specdec_test::Writer;

sm::GgufFile parse(const std::vector<std::byte>& b) { return sm::GgufFile::from_bytes(b); }

std::string error_of(const std::vector<std::byte>& b) {
  try {
    (void)parse(b);
  } catch (const specdec::error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(expr_string, needle) EXPECT_NE((expr_string).find(needle), std::string::npos) << (expr_string)

template <class F>
std::string error_of_call(F&& f) {
  try {
    f();
  } catch (const specdec::error& e) {
    return e.what();
  }
  return "(no error)";
}

// Reference conversions written from the format definitions, in double.
double ref_half(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}
std::vector<std::byte> random_bytes(std::mt19937& rng, std::size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xFF);
  return v;
}
void put_half(std::vector<std::byte>& v, std::size_t at, std::uint16_t h) { std::memcpy(v.data() + at, &h, 2); }
std::uint8_t at(const std::vector<std::byte>& v, std::size_t i) { return static_cast<std::uint8_t>(v[i]); }
std::uint16_t half_at(const std::vector<std::byte>& v, std::size_t i) {
  std::uint16_t h;
  std::memcpy(&h, v.data() + i, 2);
  return h;
}

/// A random finite half in roughly [-2, 2] (avoids inf/NaN scales).
std::uint16_t random_scale(std::mt19937& rng) {
  const std::uint16_t exp = static_cast<std::uint16_t>(5 + rng() % 11);  // 2^-10 .. 2^0
  return static_cast<std::uint16_t>(((rng() & 1) << 15) | (exp << 10) | (rng() & 1023));
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------------------------
// metadata

TEST(GgufMetadata, EveryValueTypeRoundTrips) {
  Writer w;
  w.scalar<std::uint8_t>("u8", GgufType::kUint8, 200);
  w.scalar<std::int8_t>("i8", GgufType::kInt8, -100);
  w.scalar<std::uint16_t>("u16", GgufType::kUint16, 60000);
  w.scalar<std::int16_t>("i16", GgufType::kInt16, -30000);
  w.scalar<std::uint32_t>("u32", GgufType::kUint32, 4000000000u);
  w.scalar<std::int32_t>("i32", GgufType::kInt32, -2000000000);
  w.scalar<float>("f32", GgufType::kFloat32, 1.5f);
  w.scalar<std::uint8_t>("bool", GgufType::kBool, 1);
  w.string("str", "héllo");
  w.scalar<std::uint64_t>("u64", GgufType::kUint64, 18000000000000000000ull);
  w.scalar<std::int64_t>("i64", GgufType::kInt64, -9000000000000000000ll);
  w.scalar<double>("f64", GgufType::kFloat64, -2.25);
  w.array<std::int32_t>("arr.i32", GgufType::kInt32, {1, -2, 3});
  w.array<float>("arr.f32", GgufType::kFloat32, {0.5f, -1.0f});
  w.array<std::uint8_t>("arr.bool", GgufType::kBool, {1, 0});
  w.string_array("arr.str", {"a", "", "ccc"});
  {  // array of arrays of uint16
    Bytes x;
    x.put<std::uint32_t>(9);
    x.put<std::uint32_t>(9);
    x.put<std::uint64_t>(2);
    for (int i = 0; i < 2; ++i) {
      x.put<std::uint32_t>(2);
      x.put<std::uint64_t>(1);
      x.put<std::uint16_t>(static_cast<std::uint16_t>(7 + i));
    }
    w.raw_kv("arr.nested", std::move(x));
  }
  const auto f = parse(w.build());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get<std::uint8_t>("u8"), 200);
  EXPECT_EQ(f.get<std::int8_t>("i8"), -100);
  EXPECT_EQ(f.get<std::uint16_t>("u16"), 60000);
  EXPECT_EQ(f.get<std::int16_t>("i16"), -30000);
  EXPECT_EQ(f.get<std::uint32_t>("u32"), 4000000000u);
  EXPECT_EQ(f.get<std::int32_t>("i32"), -2000000000);
  EXPECT_EQ(f.get<float>("f32"), 1.5f);
  EXPECT_TRUE(f.get<bool>("bool"));
  EXPECT_EQ(f.get_string("str"), "héllo");
  EXPECT_EQ(f.get<std::uint64_t>("u64"), 18000000000000000000ull);
  EXPECT_EQ(f.get<std::int64_t>("i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get<double>("f64"), -2.25);
  EXPECT_EQ(f.get_integer("u32"), 4000000000ll);
  EXPECT_EQ(f.get_integer("i8"), -100);
  EXPECT_EQ(f.get_double("f32"), 1.5);
  EXPECT_EQ(f.get_double("u16"), 60000.0);
  EXPECT_EQ(f.get_integer_array("arr.i32"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_integer_array("arr.bool"), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(f.get_double_array("arr.f32"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(f.get_string_array("arr.str"), (std::vector<std::string>{"a", "", "ccc"}));
  const auto& nested = f.get_array("arr.nested");
  ASSERT_EQ(nested.element_type, GgufType::kArray);
  ASSERT_EQ(nested.elements.size(), 2u);
  EXPECT_EQ(std::get<sm::GgufArray>(nested.elements[1].data).elements[0].as_integer("x"), 8);
  EXPECT_EQ(f.metadata_keys().front(), "u8");
  EXPECT_EQ(f.metadata_keys().size(), 17u);
  EXPECT_FALSE(f.get_optional<std::uint32_t>("absent").has_value());
  EXPECT_EQ(f.get_integer_optional("u8").value(), 200);
}

TEST(GgufMetadata, Version2IsAccepted) {
  Writer w;
  w.version = 2;
  w.scalar<std::uint32_t>("x", GgufType::kUint32, 7);
  EXPECT_EQ(parse(w.build()).get<std::uint32_t>("x"), 7u);
}

TEST(GgufMetadata, AccessorErrorsNameKeyAndTypes) {
  Writer w;
  w.string("s", "text");
  w.scalar<std::uint64_t>("big", GgufType::kUint64, ~0ull);
  w.array<std::int32_t>("ints", GgufType::kInt32, {1});
  const auto f = parse(w.build());
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.get<std::uint32_t>("s"); }),
                   "metadata key 's' has type string, expected uint32");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.get<std::uint32_t>("missing"); }), "metadata key 'missing' is missing");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.get_integer("s"); }), "has type string, expected an integer");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.get_integer("big"); }), "does not fit in int64");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.get_double("s"); }), "expected a number");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.get_string_array("ints"); }),
                   "is an array of int32, expected an array of string");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.get_array("s"); }), "has type string, expected array");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.tensor("nope"); }), "tensor 'nope' is missing");
}

// ------------------------------------------------------------------------------------------------------------------------------
// tensors and dequantisation

TEST(GgufTensors, ShapesAreOutermostFirstAndOffsetsAligned) {
  Writer w;
  w.alignment = 64;
  w.scalar<std::uint32_t>("general.alignment", GgufType::kUint32, 64);
  std::vector<std::byte> a(3 * 5 * 4), b(7 * 4);
  for (std::size_t i = 0; i < a.size() / 4; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(a.data() + 4 * i, &v, 4);
  }
  w.tensor("a", {5, 3}, GgmlType::kF32, a);
  w.tensor("b", {7}, GgmlType::kF32, b);
  const auto f = parse(w.build());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  const auto& ta = f.tensor("a");
  EXPECT_EQ(ta.shape, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(ta.ne(), (std::vector<std::int64_t>{5, 3}));
  EXPECT_EQ(ta.num_elements, 15);
  EXPECT_EQ(ta.size_bytes, 60u);
  EXPECT_EQ(f.tensor("b").offset, 64u);
  const auto v = f.dequantize(ta);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(v[i], static_cast<float>(i));  // row-major: row r holds ne[0] contiguous values
  std::vector<float> wrong(14);
  EXPECT_ERROR_HAS(error_of_call([&] { f.dequantize(ta, wrong); }), "output has 14 floats, expected 15");
}

namespace {
struct DequantCase {
  GgmlType type;
  std::size_t block_elems, block_bytes;
};

// fp64 reference of one element, written per element index from the block definitions in ggml-common.h.
double reference_element(GgmlType type, const std::vector<std::byte>& blk, std::size_t i) {
  switch (type) {
    case GgmlType::kQ4_0: {
      const int q = i < 16 ? (at(blk, 2 + i) & 15) : (at(blk, 2 + i - 16) >> 4);
      return ref_half(half_at(blk, 0)) * (q - 8);
    }
    case GgmlType::kQ4_1: {
      const int q = i < 16 ? (at(blk, 4 + i) & 15) : (at(blk, 4 + i - 16) >> 4);
      return ref_half(half_at(blk, 0)) * q + ref_half(half_at(blk, 2));
    }
    case GgmlType::kQ8_0: return ref_half(half_at(blk, 0)) * static_cast<std::int8_t>(at(blk, 2 + i));
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      // 8 sub-blocks of 32; sub-block j uses 6-bit scale/min j; pairs of sub-blocks share 32 bytes (low nibble, high nibble).
      // Q5_K: the values at 48 (after qh[32] at 16), and the 5th bit of element i of sub-block j is bit j of qh[i % 32].
      const bool q5 = type == GgmlType::kQ5_K;
      const std::size_t j = i / 32;
      const auto sc_byte = [&](std::size_t k) { return at(blk, 4 + k); };
      int sc, mn;
      if (j < 4) {
        sc = sc_byte(j) & 63;
        mn = sc_byte(j + 4) & 63;
      } else {
        sc = (sc_byte(j + 4) & 15) | ((sc_byte(j - 4) >> 6) << 4);
        mn = (sc_byte(j + 4) >> 4) | ((sc_byte(j) >> 6) << 4);
      }
      const std::uint8_t byte = at(blk, (q5 ? 48 : 16) + (j / 2) * 32 + i % 32);
      const int q = ((j % 2 == 0) ? (byte & 15) : (byte >> 4)) | (q5 ? ((at(blk, 16 + i % 32) >> j) & 1) << 4 : 0);
      return ref_half(half_at(blk, 0)) * sc * q - ref_half(half_at(blk, 2)) * mn;
    }
    case GgmlType::kQ6_K: {
      // Halves of 128; within a half, 4 quarters of 32; quarter k takes low (k<2) or high (k>=2) nibbles of ql[l + 32*(k%2)]
      // and bits 2k..2k+1 of qh[l]; scale index 8*half + l/16 + 2k.
      const std::size_t h = i / 128, r = i % 128, k = r / 32, l = r % 32;
      const std::uint8_t qlb = at(blk, h * 64 + l + 32 * (k % 2));
      const int low = k < 2 ? (qlb & 15) : (qlb >> 4);
      const int high = (at(blk, 128 + h * 32 + l) >> (2 * k)) & 3;
      const int q = (low | (high << 4)) - 32;
      const int sc = static_cast<std::int8_t>(at(blk, 192 + h * 8 + l / 16 + 2 * k));
      return ref_half(half_at(blk, 208)) * sc * q;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      // qh: 32 bits after the half(s); element i's 5th bit is bit i; its low 4 bits: nibble i % 16 of qs, low for i < 16.
      const bool q51 = type == GgmlType::kQ5_1;
      const std::size_t qh = q51 ? 4 : 2, qs = qh + 4;
      const int low = i < 16 ? (at(blk, qs + i) & 15) : (at(blk, qs + i - 16) >> 4);
      const int q = low | (((at(blk, qh + i / 8) >> (i % 8)) & 1) << 4);
      return q51 ? ref_half(half_at(blk, 0)) * q + ref_half(half_at(blk, 2)) : ref_half(half_at(blk, 0)) * (q - 16);
    }
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K: {
      // Halves of 128 (h); in a half, 4 shifts k of 2 bits over 32 bytes of qs (h * 32 + l, l = r % 32); each 16-value
      // group g = i / 16 has scale g. Q3_K: the high bit of element i is bit 4 h + k of hmask[l]; value - 4 without it.
      const bool q3 = type == GgmlType::kQ3_K;
      const std::size_t h = i / 128, r = i % 128, k = r / 32, l = r % 32, g = i / 16;
      const int two = (at(blk, (q3 ? 32 : 16) + h * 32 + l) >> (2 * k)) & 3;
      if (!q3) {
        const int sc = at(blk, g) & 15, mn = at(blk, g) >> 4;
        return ref_half(half_at(blk, 80)) * sc * two - ref_half(half_at(blk, 82)) * mn;
      }
      const int high = (at(blk, l) >> (4 * h + k)) & 1;
      // 16 six-bit scales in 12 bytes: low 4 bits from bytes 0-7 (low nibbles for g < 8, high for g >= 8), top 2 bits from
      // bytes 8-11 (byte 8 + g % 4, bits 2 (g / 4)).
      const int low4 = g < 8 ? (at(blk, 96 + g) & 15) : (at(blk, 96 + g - 8) >> 4);
      const int sc = low4 | (((at(blk, 96 + 8 + g % 4) >> (2 * (g / 4))) & 3) << 4);
      return ref_half(half_at(blk, 108)) * (sc - 32) * (two - (high ? 0 : 4));
    }
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS: {
      static const int values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      if (type == GgmlType::kIQ4_NL) {
        const int q = i < 16 ? (at(blk, 2 + i) & 15) : (at(blk, 2 + i - 16) >> 4);
        return ref_half(half_at(blk, 0)) * values[q];
      }
      // 8 sub-blocks of 32 (ib), 16 bytes each from offset 8; scale: 4 bits of scales_l[ib / 2] (low for even ib), 2 bits
      // (2 ib) of the little-endian u16 scales_h at 2.
      const std::size_t ib = i / 32, e = i % 32;
      const int q = e < 16 ? (at(blk, 8 + 16 * ib + e) & 15) : (at(blk, 8 + 16 * ib + e - 16) >> 4);
      const int scales_h = at(blk, 2) | (at(blk, 3) << 8);
      const int sc = ((at(blk, 4 + ib / 2) >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
      return ref_half(half_at(blk, 0)) * (sc - 32) * values[q];
    }
    default: return NAN;
  }
}
}  // namespace

TEST(GgufDequantize, BlockTypesMatchFp64Reference) {
  const DequantCase cases[] = {{GgmlType::kQ4_0, 32, 18},   {GgmlType::kQ4_1, 32, 20},   {GgmlType::kQ8_0, 32, 34},
                               {GgmlType::kQ4_K, 256, 144}, {GgmlType::kQ6_K, 256, 210}, {GgmlType::kQ5_0, 32, 22},
                               {GgmlType::kQ5_1, 32, 24},   {GgmlType::kQ5_K, 256, 176}, {GgmlType::kQ2_K, 256, 84},
                               {GgmlType::kQ3_K, 256, 110}, {GgmlType::kIQ4_NL, 32, 18}, {GgmlType::kIQ4_XS, 256, 136}};
  std::mt19937 rng(1234);
  for (const auto& c : cases) {
    SCOPED_TRACE(sm::to_string(c.type));
    const std::size_t rows = 3, blocks_per_row = 2;
    std::vector<std::byte> data;
    for (std::size_t b = 0; b < rows * blocks_per_row; ++b) {
      auto blk = random_bytes(rng, c.block_bytes);
      switch (c.type) {
        case GgmlType::kQ4_1:
        case GgmlType::kQ5_1:
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K: put_half(blk, 0, random_scale(rng)), put_half(blk, 2, random_scale(rng)); break;
        case GgmlType::kQ6_K: put_half(blk, 208, random_scale(rng)); break;
        case GgmlType::kQ3_K: put_half(blk, 108, random_scale(rng)); break;
        case GgmlType::kQ2_K: put_half(blk, 80, random_scale(rng)), put_half(blk, 82, random_scale(rng)); break;
        default: put_half(blk, 0, random_scale(rng)); break;
      }
      data.insert(data.end(), blk.begin(), blk.end());
    }
    Writer w;
    w.tensor("t", {c.block_elems * blocks_per_row, rows}, c.type, data);
    const auto f = parse(w.build());
    const auto& t = f.tensor("t");
    EXPECT_EQ(t.shape, (std::vector<std::int64_t>{3, static_cast<std::int64_t>(c.block_elems * blocks_per_row)}));
    EXPECT_EQ(t.size_bytes, data.size());
    const auto got = f.dequantize(t);
    ASSERT_EQ(got.size(), rows * blocks_per_row * c.block_elems);
    for (std::size_t b = 0; b < rows * blocks_per_row; ++b) {
      const std::vector<std::byte> blk(data.begin() + b * c.block_bytes, data.begin() + (b + 1) * c.block_bytes);
      for (std::size_t i = 0; i < c.block_elems; ++i) {
        const double want = reference_element(c.type, blk, i);
        ASSERT_NEAR(got[b * c.block_elems + i], want, 1e-6 * (1.0 + 64.0 * 64.0 * std::fabs(want) / (1.0 + std::fabs(want))))
            << "block " << b << " element " << i;
      }
    }
  }
}

// An independent implementation of every format: llama.cpp's own Python package (PyPI gguf's gguf.quants.dequantize) gave
// the values of random blocks of each type (tests/models/write_dequant_fixture.py wrote the file); dequantize() must give
// the same bits.
TEST(GgufDequantize, MatchesGgufPyBitForBit) {
  specdec_test::FixtureFile file(std::filesystem::path(SPECDEC_IO_TEST_DATA) / "ggml-dequant-gguf-py.bin");
  ASSERT_TRUE(file.opened());
  ASSERT_EQ(file.magic(), "SDQF");
  const std::uint32_t count = file.u32();
  std::vector<std::string> seen;
  for (std::uint32_t e = 0; e < count; ++e) {
    const auto type = static_cast<GgmlType>(file.u32());
    const std::uint32_t n_bytes = file.u32(), n_values = file.u32();
    const std::vector<std::byte> blocks = file.take(n_bytes);
    const std::vector<float> want = file.floats(n_values);
    ASSERT_TRUE(file.ok()) << "entry " << e << " runs past the end of the file";
    SCOPED_TRACE(sm::to_string(type));
    std::vector<float> got(n_values);
    sm::dequantize(type, blocks, got);
    for (std::uint32_t i = 0; i < n_values; ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "value " << i << ": got " << got[i] << ", gguf-py " << want[i];
    seen.emplace_back(sm::to_string(type));
  }
  EXPECT_TRUE(file.at_end());
  // Every type dequantize() supports is covered (F32 is a copy).
  for (const char* t : {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
                        "IQ4_XS"})
    EXPECT_NE(std::find(seen.begin(), seen.end(), t), seen.end()) << t;
}

TEST(GgufDequantize, FloatTypesMatchReference) {
  std::mt19937 rng(99);
  const std::size_t n = 4096;
  // F16: every finite and infinite bit pattern class, random.
  std::vector<std::byte> h(2 * n), bf(2 * n), f32(4 * n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t bits = static_cast<std::uint16_t>(rng());
    if (((bits >> 10) & 31) == 31) bits &= 0xFBFF;  // keep finite (exponent 30 at most)
    put_half(h, 2 * i, i < 2 ? static_cast<std::uint16_t>(i ? 0x0001 : 0x8000) : bits);  // -0 and the smallest subnormal
    const std::uint16_t b16 = static_cast<std::uint16_t>(rng());
    std::memcpy(bf.data() + 2 * i, &b16, 2);
    const float x = std::uniform_real_distribution<float>(-10, 10)(rng);
    std::memcpy(f32.data() + 4 * i, &x, 4);
  }
  Writer w;
  w.tensor("h", {n}, GgmlType::kF16, h);
  w.tensor("bf", {n}, GgmlType::kBF16, bf);
  w.tensor("f", {64, n / 64}, GgmlType::kF32, f32);
  const auto f = parse(w.build());
  const auto gh = f.dequantize(f.tensor("h"));
  const auto gb = f.dequantize(f.tensor("bf"));
  const auto gf = f.dequantize(f.tensor("f"));
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(static_cast<double>(gh[i]), ref_half(half_at(h, 2 * i))) << i;
    std::uint16_t b16;
    std::memcpy(&b16, bf.data() + 2 * i, 2);
    const int s = b16 >> 15, e = (b16 >> 7) & 255, m = b16 & 127;
    if (e == 255) {
      EXPECT_TRUE(m ? std::isnan(gb[i]) : std::isinf(gb[i])) << i;
    } else {
      const double v = e == 0 ? std::ldexp(m, -133) : std::ldexp(1.0 + m / 128.0, e - 127);
      EXPECT_EQ(static_cast<double>(gb[i]), s ? -v : v) << i;
    }
    float x;
    std::memcpy(&x, f32.data() + 4 * i, 4);
    EXPECT_EQ(gf[i], x);
  }
  EXPECT_TRUE(std::signbit(gh[0]));
}

TEST(GgufDequantize, UnsupportedTypeAndSizeMismatch) {
  Writer w;
  w.tensor("q5", {256}, GgmlType::kIQ2_XXS, std::vector<std::byte>(66));
  const auto f = parse(w.build());
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.dequantize(f.tensor("q5")); }), "ggml type IQ2_XXS is not supported");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)f.dequantize(f.tensor("q5")); }), "tensor 'q5'");
  std::vector<float> out(32);
  std::vector<std::byte> in(17);
  EXPECT_ERROR_HAS(error_of_call([&] { sm::dequantize(GgmlType::kQ4_0, in, out); }), "32 values of type Q4_0 need 18 bytes, got 17");
  std::vector<float> out2(31);
  EXPECT_ERROR_HAS(error_of_call([&] { sm::dequantize(GgmlType::kQ4_0, in, out2); }), "not a multiple of the block size 32");
}

// ------------------------------------------------------------------------------------------------------------------------------
// malformed files

namespace {
std::vector<std::byte> one_tensor_file() {
  Writer w;
  w.scalar<std::uint32_t>("k", GgufType::kUint32, 1);
  w.tensor("blk.0.attn_q.weight", {32, 2}, GgmlType::kQ8_0, std::vector<std::byte>(68));
  return w.build();
}
template <class T>
void poke(std::vector<std::byte>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}
// Offsets in the header written by Writer: magic 0, version 4, n_tensors 8, n_kv 16, first key length 24.
}  // namespace

TEST(GgufErrors, HeaderProblems) {
  EXPECT_ERROR_HAS(error_of({}), "expected at least the 4-byte magic 'GGUF', the file has 0 bytes");
  auto b = one_tensor_file();
  auto bad = b;
  std::memcpy(bad.data(), "GGML", 4);
  EXPECT_ERROR_HAS(error_of(bad), "bad magic: expected 'GGUF', got 'GGML'");
  bad = b;
  poke<std::uint32_t>(bad, 4, 1);
  EXPECT_ERROR_HAS(error_of(bad), "unsupported version 1 (expected 2 or 3");
  poke<std::uint32_t>(bad, 4, 4);
  EXPECT_ERROR_HAS(error_of(bad), "unsupported version 4 (expected 2 or 3)");
  poke<std::uint32_t>(bad, 4, 3u << 24);
  EXPECT_ERROR_HAS(error_of(bad), "looks big-endian");
  bad = b;
  poke<std::uint64_t>(bad, 8, 1ull << 60);
  EXPECT_ERROR_HAS(error_of(bad), "tensor count 1152921504606846976 is impossible");
  bad = b;
  poke<std::uint64_t>(bad, 16, 1ull << 40);
  EXPECT_ERROR_HAS(error_of(bad), "metadata count 1099511627776 is impossible");
  bad.assign(b.begin(), b.begin() + 20);
  EXPECT_ERROR_HAS(error_of(bad), "file truncated: reading metadata count needs 8 bytes at offset 16");
}

TEST(GgufErrors, MetadataProblems) {
  {
    auto b = one_tensor_file();
    poke<std::uint64_t>(b, 24, 1ull << 50);  // key length
    EXPECT_ERROR_HAS(error_of(b), "key of metadata entry 0 has length 1125899906842624");
  }
  {
    Writer w;
    Bytes x;
    x.put<std::uint32_t>(13);
    x.put<std::uint32_t>(0);
    w.raw_kv("weird", x);
    EXPECT_ERROR_HAS(error_of(w.build()), "metadata key 'weird' has unknown value type 13 (expected 0..12)");
  }
  {
    Writer w;
    Bytes x;
    x.put<std::uint32_t>(9);
    x.put<std::uint32_t>(77);
    x.put<std::uint64_t>(1);
    w.raw_kv("arr", x);
    EXPECT_ERROR_HAS(error_of(w.build()), "metadata key 'arr' is an array of unknown element type 77");
  }
  {
    Writer w;
    Bytes x;
    x.put<std::uint32_t>(9);
    x.put<std::uint32_t>(8);
    x.put<std::uint64_t>(1ull << 61);
    w.raw_kv("tokens", x);
    EXPECT_ERROR_HAS(error_of(w.build()), "metadata key 'tokens' is an array of 2305843009213693952 string values, but only");
  }
  {
    Writer w;
    w.scalar<std::uint8_t>("flag", GgufType::kBool, 2);
    EXPECT_ERROR_HAS(error_of(w.build()), "metadata key 'flag' is a bool with byte value 2, expected 0 or 1");
  }
  {
    Writer w;
    w.scalar<std::uint32_t>("dup", GgufType::kUint32, 1);
    w.scalar<std::uint32_t>("dup", GgufType::kUint32, 2);
    EXPECT_ERROR_HAS(error_of(w.build()), "metadata key 'dup' appears twice");
  }
  {
    Writer w;
    w.scalar<std::uint64_t>("general.alignment", GgufType::kUint64, 32);
    EXPECT_ERROR_HAS(error_of(w.build()), "'general.alignment' has type uint64, expected uint32");
  }
  {
    Writer w;
    w.scalar<std::uint32_t>("general.alignment", GgufType::kUint32, 48);
    EXPECT_ERROR_HAS(error_of(w.build()), "general.alignment must be a non-zero power of two, got 48");
  }
  {
    Writer w;
    Bytes x;
    x.put<std::uint32_t>(9);
    for (int i = 0; i < 20; ++i) {
      x.put<std::uint32_t>(9);
      x.put<std::uint64_t>(1);
    }
    x.put<std::uint32_t>(0);
    w.raw_kv("deep", x);
    EXPECT_ERROR_HAS(error_of(w.build()), "metadata key 'deep' nests arrays deeper than 8 levels");
  }
  {
    Writer w;
    w.string("s", "abcdef");
    auto b = w.build();
    b.resize(24 + 8 + 1 + 4 + 8 + 3);  // header, key "s", type, length, then only 3 of the 6 string bytes
    EXPECT_ERROR_HAS(error_of(b), "string value of metadata key 's' has length 6");
  }
}

TEST(GgufErrors, TensorInfoProblems) {
  {
    Writer w;
    w.tensor("t", {1, 1, 1, 1, 1}, GgmlType::kF32, std::vector<std::byte>(4));
    EXPECT_ERROR_HAS(error_of(w.build()), "tensor 't' has 5 dimensions, expected at most 4");
  }
  {
    Writer w;
    w.tensor("t", {1ull << 32, 1ull << 32}, GgmlType::kF32, {});
    EXPECT_ERROR_HAS(error_of(w.build()), "tensor 't' dimensions overflow");
  }
  {
    Writer w;
    w.tensor("t", {1ull << 63}, GgmlType::kF32, {});
    EXPECT_ERROR_HAS(error_of(w.build()), "tensor 't' dimensions overflow");
  }
  {
    Writer w;
    w.tensors.push_back({"t", {4}, 5, std::vector<std::byte>(4)});  // type 5 was removed from ggml
    EXPECT_ERROR_HAS(error_of(w.build()), "tensor 't' has unknown ggml type 5");
  }
  {
    Writer w;
    w.tensor("t", {30}, GgmlType::kQ4_0, std::vector<std::byte>(18));
    EXPECT_ERROR_HAS(error_of(w.build()), "innermost dimension 30, expected a multiple of the block size 32");
  }
  {
    Writer w;
    w.tensor("t", {4}, GgmlType::kF32, std::vector<std::byte>(16));
    w.tensor("t", {4}, GgmlType::kF32, std::vector<std::byte>(16));
    EXPECT_ERROR_HAS(error_of(w.build()), "tensor 't' appears twice");
  }
  {
    auto b = one_tensor_file();
    // The tensor's offset field is the last 8 bytes before the padding; find it by parsing once.
    const auto f = parse(b);
    const std::size_t info_end = 24 + 8 + 1 + 4 + 4 + 8 + 19 + 4 + 16 + 4 + 8;
    ASSERT_LE(info_end, f.data_offset());
    poke<std::uint64_t>(b, info_end - 8, 8);
    EXPECT_ERROR_HAS(error_of(b), "data offset 8 is not a multiple of the alignment 32");
    poke<std::uint64_t>(b, info_end - 8, 1ull << 40);
    EXPECT_ERROR_HAS(error_of(b), "tensor 'blk.0.attn_q.weight' data [offset");
    EXPECT_ERROR_HAS(error_of(b), "lies past the end of the file");
  }
  {
    auto b = one_tensor_file();
    b.resize(b.size() - 40);  // cut into the data
    EXPECT_ERROR_HAS(error_of(b), "tensor 'blk.0.attn_q.weight' data [offset");
  }
}

TEST(GgufErrors, OpeningPaths) {
  EXPECT_ERROR_HAS(error_of_call([] { sm::GgufFile f("/nonexistent/x.gguf"); }), "gguf: cannot open '/nonexistent/x.gguf'");
  const auto dir = std::filesystem::temp_directory_path();
  EXPECT_ERROR_HAS(error_of_call([&] { sm::GgufFile f(dir); }), "is not a regular file");
  const auto path = dir / ("specdec_io_test_" + std::to_string(::getpid()) + ".gguf");
  {
    std::ofstream o(path, std::ios::binary);
    o << "GGUF";
  }
  const auto msg = error_of_call([&] { sm::GgufFile f(path); });
  EXPECT_ERROR_HAS(msg, "file truncated");
  EXPECT_ERROR_HAS(msg, path.string());
  std::filesystem::remove(path);
}

// ------------------------------------------------------------------------------------------------------------------------------
// The real model

namespace {
std::filesystem::path model_path() {
  if (const char* p = std::getenv("SPECDEC_GGUF")) return p;
  return std::filesystem::path(SPECDEC_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}
}  // namespace

TEST(GgufModel, SmolLM2MetadataAndShapes) {
  const auto path = model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/setup.sh downloads it)";
  const sm::GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get<std::uint32_t>("llama.block_count"), 30u);
  EXPECT_EQ(f.get<std::uint32_t>("llama.embedding_length"), 576u);
  EXPECT_EQ(f.get<std::uint32_t>("llama.feed_forward_length"), 1536u);
  EXPECT_EQ(f.get<std::uint32_t>("llama.attention.head_count"), 9u);
  EXPECT_EQ(f.get<std::uint32_t>("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f.get<std::uint32_t>("llama.vocab_size"), 49152u);
  EXPECT_EQ(f.get<std::uint32_t>("llama.context_length"), 8192u);
  EXPECT_EQ(f.get<float>("llama.rope.freq_base"), 100000.0f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").elements.size(), 49152u);
  EXPECT_EQ(f.tensors().size(), 272u);  // 30 blocks x 9 + token_embd + output_norm (no output.weight: tied)

  const auto& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.shape, (std::vector<std::int64_t>{49152, 576}));
  EXPECT_EQ(emb.type, GgmlType::kQ8_0);
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight").shape, (std::vector<std::int64_t>{576, 576}));
  EXPECT_EQ(f.tensor("blk.0.attn_k.weight").shape, (std::vector<std::int64_t>{192, 576}));
  EXPECT_EQ(f.tensor("blk.0.attn_v.weight").shape, (std::vector<std::int64_t>{192, 576}));
  EXPECT_EQ(f.tensor("blk.29.ffn_gate.weight").shape, (std::vector<std::int64_t>{1536, 576}));
  EXPECT_EQ(f.tensor("blk.29.ffn_down.weight").shape, (std::vector<std::int64_t>{576, 1536}));
  EXPECT_EQ(f.tensor("blk.29.ffn_down.weight").type, GgmlType::kQ4_1);
  EXPECT_EQ(f.tensor("output_norm.weight").shape, (std::vector<std::int64_t>{576}));
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);

  const auto norm = f.dequantize(f.tensor("blk.0.attn_norm.weight"));
  double sum = 0;
  for (float v : norm) {
    ASSERT_TRUE(std::isfinite(v));
    sum += std::fabs(v);
  }
  EXPECT_GT(sum, 0.1);
  const auto q = f.dequantize(f.tensor("blk.0.attn_q.weight"));
  double sq = 0;
  for (float v : q) {
    ASSERT_TRUE(std::isfinite(v));
    sq += double(v) * v;
  }
  EXPECT_GT(sq, 1.0);

  const auto c = sm::llama_config_from_gguf(f);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_NEAR(c.rms_norm_eps, 1e-5, 1e-9);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rope_scaling.type, sm::RopeScalingType::kNone);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{2}));
}

TEST(LlamaConfigGguf, RejectsOtherArchitecturesAndMissingKeys) {
  Writer w;
  w.string("general.architecture", "gpt2");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)sm::llama_config_from_gguf(parse(w.build())); }),
                   "general.architecture is 'gpt2', which specdec does not run (supported: 'llama', 'qwen2', 'qwen3', "
                   "'gemma3')");
  Writer w2;
  w2.string("general.architecture", "llama");
  w2.scalar<std::uint32_t>("llama.embedding_length", GgufType::kUint32, 64);
  EXPECT_ERROR_HAS(error_of_call([&] { (void)sm::llama_config_from_gguf(parse(w2.build())); }),
                   "metadata key 'llama.feed_forward_length' is missing");
}

// ------------------------------------------------------------------------------------------------------------------------------
// Architectures other than llama: options from the metadata and the tensor names

namespace {

std::vector<std::byte> f32_bytes(std::size_t n, float v = 1.0f) {
  std::vector<std::byte> out(n * 4);
  for (std::size_t i = 0; i < n; ++i) std::memcpy(out.data() + 4 * i, &v, 4);
  return out;
}

/// A small model of `arch` (hidden 64, 4 heads of 16, 2 kv heads, 12 layers) with the metadata llama.cpp's converter
/// writes and layer 0's tensors named in `tensors` (F32, contents irrelevant to the config).
Writer arch_file(const std::string& arch, const std::vector<std::string>& tensors, bool with_key_length = true) {
  Writer w;
  w.string("general.architecture", arch);
  const std::string p = arch + ".";
  w.scalar<std::uint32_t>(p + "embedding_length", GgufType::kUint32, 64);
  w.scalar<std::uint32_t>(p + "feed_forward_length", GgufType::kUint32, 128);
  w.scalar<std::uint32_t>(p + "block_count", GgufType::kUint32, 12);
  w.scalar<std::uint32_t>(p + "attention.head_count", GgufType::kUint32, 4);
  w.scalar<std::uint32_t>(p + "attention.head_count_kv", GgufType::kUint32, 2);
  if (with_key_length) {
    w.scalar<std::uint32_t>(p + "attention.key_length", GgufType::kUint32, 16);
    w.scalar<std::uint32_t>(p + "attention.value_length", GgufType::kUint32, 16);
  }
  w.scalar<float>(p + "attention.layer_norm_rms_epsilon", GgufType::kFloat32, 1e-6f);
  w.scalar<float>(p + "rope.freq_base", GgufType::kFloat32, 1e6f);
  w.scalar<std::uint32_t>(p + "context_length", GgufType::kUint32, 4096);
  w.scalar<std::uint32_t>(p + "vocab_size", GgufType::kUint32, 100);
  w.tensor("token_embd.weight", {64, 100}, GgmlType::kF32, f32_bytes(6400));
  for (const auto& t : tensors) w.tensor("blk.0." + t, {16}, GgmlType::kF32, f32_bytes(16));
  return w;
}

const std::vector<std::string> kLlamaTensors = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                                "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
                                                "ffn_up.weight", "ffn_down.weight"};
std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

sm::LlamaConfig config_of(const Writer& w) { return sm::llama_config_from_gguf(parse(w.build())); }

}  // namespace

TEST(LlamaConfigGguf, LlamaHasNoExtraOptionsAndRunsOnTheBlock) {
  const auto c = config_of(arch_file("llama", kLlamaTensors));
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_FALSE(c.attention_bias || c.qk_norm || c.post_attention_norm || c.post_ffn_norm || c.norm_weight_plus_one);
  EXPECT_EQ(c.ffn_activation, sm::FfnActivation::kSilu);
  EXPECT_EQ(c.embedding_scale, 1.0);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.sliding_layers.empty());
  EXPECT_FALSE(c.is_sliding_layer(0));
  EXPECT_EQ(c.final_logit_softcap, 0.0);
  EXPECT_EQ(c.attention_scale, 0.0);
  EXPECT_TRUE(c.rope_freq_factors.empty());
  EXPECT_TRUE(c.gguf_qk_permuted);
  EXPECT_TRUE(sm::unsupported_block_options(c).empty());
  EXPECT_TRUE(sm::block_options_beyond_llama(c).empty());
  EXPECT_NO_THROW(sm::require_block_support(c, "loader"));
  // Llama with q/k/v biases (llama.cpp loads them where present): read, and run by the block.
  const auto b = config_of(arch_file("llama", with(kLlamaTensors, {"attn_q.bias", "attn_k.bias", "attn_v.bias"})));
  EXPECT_TRUE(b.attention_bias);
  EXPECT_TRUE(sm::unsupported_block_options(b).empty());
  // What the block still refuses: Gemma's own (1 + w) norm weights, which no loader gives (a GGUF holds 1 + w).
  auto plus_one = c;
  plus_one.norm_weight_plus_one = true;
  EXPECT_EQ(sm::unsupported_block_options(plus_one), (std::vector<std::string>{"(1 + w) RMSNorm"}));
  EXPECT_ERROR_HAS(error_of_call([&] { sm::require_block_support(plus_one, "load_llama_gguf"); }),
                   "load_llama_gguf: 'llama' needs (1 + w) RMSNorm, which the Llama block does not support yet");
}

TEST(LlamaConfigGguf, Qwen2HasQkvBiases) {
  const auto c = config_of(arch_file("qwen2", with(kLlamaTensors, {"attn_q.bias", "attn_k.bias", "attn_v.bias"})));
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm || c.post_attention_norm || c.post_ffn_norm);
  EXPECT_FALSE(c.gguf_qk_permuted);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_NO_THROW(sm::require_block_support(c, "load_llama_gguf"));
  EXPECT_EQ(sm::block_options_beyond_llama(c), (std::vector<std::string>{"q/k/v biases"}));  // specdec-train refuses it
  // The architecture implies the biases: a file without them is refused, and so is one with only some.
  EXPECT_ERROR_HAS(error_of_call([&] { (void)config_of(arch_file("qwen2", kLlamaTensors)); }),
                   "architecture 'qwen2' has q/k/v biases, but the file has no tensor blk.0.attn_q.bias");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)config_of(arch_file("qwen2", with(kLlamaTensors, {"attn_q.bias"}))); }),
                   "'qwen2' has only some of the tensors of q/k/v biases: blk.0.attn_q.bias, blk.0.attn_k.bias (missing), "
                   "blk.0.attn_v.bias (missing)");
  // Tensors no option accounts for are refused, never ignored.
  EXPECT_ERROR_HAS(error_of_call([&] {
                     (void)config_of(arch_file("qwen2", with(kLlamaTensors, {"attn_q.bias", "attn_k.bias", "attn_v.bias",
                                                                             "attn_output.bias"})));
                   }),
                   "tensor blk.0.attn_output.bias ('qwen2') is not supported");
}

TEST(LlamaConfigGguf, Qwen3HasQkNorm) {
  const auto c = config_of(arch_file("qwen3", with(kLlamaTensors, {"attn_q_norm.weight", "attn_k_norm.weight"})));
  EXPECT_EQ(c.architecture, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias || c.post_attention_norm || c.post_ffn_norm);
  EXPECT_EQ(c.ffn_activation, sm::FfnActivation::kSilu);
  EXPECT_TRUE(sm::unsupported_block_options(c).empty());
  EXPECT_ERROR_HAS(error_of_call([&] { (void)config_of(arch_file("qwen3", kLlamaTensors)); }),
                   "architecture 'qwen3' has QK-norm, but the file has no tensor blk.0.attn_q_norm.weight");
}

TEST(LlamaConfigGguf, Gemma3OptionsSlidingLayersAndSoftCap) {
  const auto gemma_tensors = with(kLlamaTensors, {"attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
                                                  "post_ffw_norm.weight"});
  Writer w = arch_file("gemma3", gemma_tensors);
  w.scalar<std::uint32_t>("gemma3.attention.sliding_window", GgufType::kUint32, 512);
  const auto c = config_of(w);
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_TRUE(c.qk_norm && c.post_attention_norm && c.post_ffn_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.norm_weight_plus_one);  // the converter stored 1 + w
  EXPECT_EQ(c.ffn_activation, sm::FfnActivation::kGeluTanh);
  EXPECT_EQ(c.embedding_scale, static_cast<double>(std::sqrt(64.0f)));
  EXPECT_EQ(c.sliding_window, 512);
  // Every sixth layer attends globally: 5 and 11 of 12.
  std::vector<bool> expect(12, true);
  expect[5] = expect[11] = false;
  EXPECT_EQ(c.sliding_layers, expect);
  EXPECT_TRUE(c.is_sliding_layer(0));
  EXPECT_FALSE(c.is_sliding_layer(5));
  EXPECT_FALSE(c.is_sliding_layer(12));
  EXPECT_EQ(c.sliding_rope_theta, 10000.0);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.final_logit_softcap, 0.0);
  EXPECT_EQ(c.attention_scale, 0.0);
  EXPECT_FALSE(c.gguf_qk_permuted);
  EXPECT_NO_THROW(sm::require_block_support(c, "load_llama_gguf"));
  EXPECT_EQ(sm::block_options_beyond_llama(c),
            (std::vector<std::string>{"QK-norm", "a post-attention norm", "a post-FFN norm", "gelu_tanh gating",
                                      "embeddings scaled by 8", "a 512-token sliding window"}));
  EXPECT_EQ(sm::pre_ffn_norm_name(c), "pre_feedforward_layernorm.weight");  // Gemma's names: post_attention_layernorm
  EXPECT_EQ(sm::pre_ffn_norm_name(config_of(arch_file("llama", kLlamaTensors))), "post_attention_layernorm.weight");

  // The pattern and the sliding RoPE base from their keys; a soft-cap where the metadata has one.
  Writer w2 = arch_file("gemma3", gemma_tensors);
  w2.scalar<std::uint32_t>("gemma3.attention.sliding_window", GgufType::kUint32, 4);
  w2.scalar<std::uint32_t>("gemma3.attention.sliding_window_pattern", GgufType::kUint32, 4);
  w2.scalar<float>("gemma3.rope.freq_base_swa", GgufType::kFloat32, 5000.0f);
  w2.scalar<float>("gemma3.final_logit_softcapping", GgufType::kFloat32, 30.0f);
  const auto c2 = config_of(w2);
  std::vector<bool> every4(12, true);
  every4[3] = every4[7] = every4[11] = false;
  EXPECT_EQ(c2.sliding_layers, every4);
  EXPECT_EQ(c2.sliding_rope_theta, 5000.0);
  EXPECT_EQ(c2.final_logit_softcap, 30.0);
  Writer w3 = arch_file("gemma3", gemma_tensors);
  w3.scalar<std::uint32_t>("gemma3.attention.sliding_window", GgufType::kUint32, 8);
  std::vector<std::uint8_t> flags(12, 0);
  flags[2] = flags[9] = 1;
  w3.array<std::uint8_t>("gemma3.attention.sliding_window_pattern", GgufType::kBool, flags);
  std::vector<bool> two(12, false);
  two[2] = two[9] = true;
  EXPECT_EQ(config_of(w3).sliding_layers, two);
  Writer w4 = arch_file("gemma3", gemma_tensors);
  w4.scalar<std::uint32_t>("gemma3.attention.sliding_window", GgufType::kUint32, 8);
  w4.array<std::uint8_t>("gemma3.attention.sliding_window_pattern", GgufType::kBool, std::vector<std::uint8_t>(3, 1));
  EXPECT_ERROR_HAS(error_of_call([&] { (void)config_of(w4); }),
                   "gemma3.attention.sliding_window_pattern must be 12 bools (one per layer), got 3 of type bool");
  // No window: no sliding layers.
  EXPECT_EQ(config_of(arch_file("gemma3", gemma_tensors)).sliding_window, 0);
  EXPECT_TRUE(config_of(arch_file("gemma3", gemma_tensors)).sliding_layers.empty());
  // Gemma's norms are implied.
  EXPECT_ERROR_HAS(error_of_call([&] {
                     (void)config_of(arch_file("gemma3", with(kLlamaTensors, {"attn_q_norm.weight", "attn_k_norm.weight"})));
                   }),
                   "architecture 'gemma3' has a post-attention norm, but the file has no tensor "
                   "blk.0.post_attention_norm.weight");
  // A file of metadata alone takes the architecture's options as implied.
  Writer meta;
  for (const auto& kv : arch_file("gemma3", {}).kvs) meta.kvs.push_back(kv);
  const auto m = config_of(meta);
  EXPECT_TRUE(m.qk_norm && m.post_attention_norm && m.post_ffn_norm);
}

TEST(LlamaConfigGguf, ValueLengthMustEqualKeyLength) {
  Writer w = arch_file("llama", kLlamaTensors, /*with_key_length=*/false);
  w.scalar<std::uint32_t>("llama.attention.key_length", GgufType::kUint32, 16);
  w.scalar<std::uint32_t>("llama.attention.value_length", GgufType::kUint32, 32);
  EXPECT_ERROR_HAS(error_of_call([&] { (void)config_of(w); }),
                   "llama.attention.value_length 32 differs from key_length 16 (not supported)");
}

TEST(LlamaConfigGguf, Llama3RopeFactorsFromTheTensorMatchTheFormula) {
  // rope_freqs.weight as llama.cpp's converter computes it from Llama 3.1's rope_scaling.
  const double theta = 500000.0, factor = 8.0, low = 1.0, high = 4.0, old_ctx = 64.0;
  const int hd = 16;
  std::vector<float> factors;
  for (int j = 0; j < hd / 2; ++j) {
    const double freq = static_cast<double>(static_cast<float>(1.0 / std::pow(theta, 2.0 * j / hd)));
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < old_ctx / high) factors.push_back(1.0f);
    else if (wavelen > old_ctx / low) factors.push_back(static_cast<float>(factor));
    else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  ASSERT_EQ(factors.front(), 1.0f);
  ASSERT_EQ(factors.back(), 8.0f);
  Writer w = arch_file("llama", kLlamaTensors);
  std::vector<std::byte> bytes(factors.size() * 4);
  std::memcpy(bytes.data(), factors.data(), bytes.size());
  w.tensor("rope_freqs.weight", {factors.size()}, GgmlType::kF32, bytes);
  auto c = config_of(w);
  ASSERT_EQ(c.rope_freq_factors, factors);
  EXPECT_TRUE(sm::unsupported_block_options(c).empty());  // rope_inverse_frequencies applies them
  c.rope_theta = theta;
  sm::LlamaConfig ref = c;
  ref.rope_freq_factors.clear();
  ref.rope_scaling = {sm::RopeScalingType::kLlama3, factor, low, high, static_cast<std::int64_t>(old_ctx)};
  const auto a = sm::rope_inverse_frequencies(c, hd);
  const auto b = sm::rope_inverse_frequencies(ref, hd);
  ASSERT_EQ(a.size(), b.size());
  bool some_scaled = false;
  for (std::size_t j = 0; j < a.size(); ++j) {
    EXPECT_NEAR(a[j], b[j], 1e-6 * b[j]) << j;
    some_scaled = some_scaled || factors[j] != 1.0f;
  }
  EXPECT_TRUE(some_scaled);
  // The wrong length is refused.
  Writer bad = arch_file("llama", kLlamaTensors);
  bad.tensor("rope_freqs.weight", {3}, GgmlType::kF32, f32_bytes(3));
  EXPECT_ERROR_HAS(error_of_call([&] { (void)config_of(bad); }), "rope_freqs.weight has 3 elements, expected head_dim / 2 = 8");
}

TEST(LlamaConfigGguf, ValidateChecksTheNewOptions) {
  auto c = config_of(arch_file("llama", kLlamaTensors));
  auto bad = c;
  bad.sliding_window = 16;
  EXPECT_ERROR_HAS(error_of_call([&] { bad.validate(); }), "sliding_layers has 0 entries for 12 layers");
  bad.sliding_layers.assign(12, true);
  EXPECT_ERROR_HAS(error_of_call([&] { bad.validate(); }), "sliding_rope_theta must be positive with a sliding window");
  bad = c;
  bad.sliding_layers.assign(12, true);
  EXPECT_ERROR_HAS(error_of_call([&] { bad.validate(); }), "sliding_layers is set without a sliding_window");
  bad = c;
  bad.embedding_scale = 0.0;
  EXPECT_ERROR_HAS(error_of_call([&] { bad.validate(); }), "embedding_scale must be finite and positive, got 0");
  bad = c;
  bad.final_logit_softcap = -1.0;
  EXPECT_ERROR_HAS(error_of_call([&] { bad.validate(); }), "final_logit_softcap must be finite and >= 0, got -1");
  bad = c;
  bad.rope_freq_factors = {1.0f, 2.0f};
  EXPECT_ERROR_HAS(error_of_call([&] { bad.validate(); }), "rope_freq_factors has 2 entries, expected head_dim / 2 = 8");
}

TEST(GgufModel, Gemma3ConfigFromTheRealFile) {
  const char* env = std::getenv("SPECDEC_GEMMA_GGUF");
  const std::filesystem::path path =
      env ? std::filesystem::path(env) : std::filesystem::path(SPECDEC_SOURCE_DIR) / "models" / "gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch-gemma.sh downloads it)";
  const sm::GgufFile f(path);
  const auto c = sm::llama_config_from_gguf(f);
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.hidden_size, 640);
  EXPECT_EQ(c.intermediate_size, 2048);
  EXPECT_EQ(c.num_layers, 18);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm && c.post_attention_norm && c.post_ffn_norm);
  EXPECT_EQ(c.ffn_activation, sm::FfnActivation::kGeluTanh);
  EXPECT_EQ(c.embedding_scale, static_cast<double>(std::sqrt(640.0f)));
  EXPECT_EQ(c.sliding_window, 512);
  for (int il = 0; il < 18; ++il) EXPECT_EQ(c.is_sliding_layer(il), il % 6 != 5) << il;
  EXPECT_EQ(c.sliding_rope_theta, 10000.0);
  EXPECT_EQ(c.final_logit_softcap, 0.0);
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{1}));
  EXPECT_TRUE(sm::unsupported_block_options(c).empty());
}

// Files written by PyPI's gguf (llama.cpp's own writer: its key and tensor names, the calls its converter makes), by
// tests/models/write_gguf_fixtures.py into the build directory; ctest runs it first where the package is installed and
// names the directory in SPECDEC_GGUF_PY_FIXTURES (skipped otherwise).
TEST(LlamaConfigGguf, FilesWrittenByGgufPy) {
  const char* dir = std::getenv("SPECDEC_GGUF_PY_FIXTURES");
  if (dir == nullptr || !std::filesystem::exists(std::filesystem::path(dir) / "expected.json"))
    GTEST_SKIP() << "no fixtures written by PyPI gguf (SPECDEC_GGUF_PY_FIXTURES)";
  std::ifstream in(std::filesystem::path(dir) / "expected.json");
  const auto expected = nlohmann::json::parse(in);
  ASSERT_EQ(expected.size(), 4u);
  for (const auto& [arch, e] : expected.items()) {
    SCOPED_TRACE(arch);
    const sm::GgufFile f(std::filesystem::path(dir) / (arch + ".gguf"));
    const auto c = sm::llama_config_from_gguf(f);
    EXPECT_EQ(c.architecture, arch);
    EXPECT_EQ(c.hidden_size, e["hidden_size"].get<std::int64_t>());
    EXPECT_EQ(c.num_layers, e["num_layers"].get<std::int64_t>());
    EXPECT_EQ(c.num_heads, e["num_heads"].get<std::int64_t>());
    EXPECT_EQ(c.num_kv_heads, e["num_kv_heads"].get<std::int64_t>());
    EXPECT_EQ(c.head_dim, e["head_dim"].get<std::int64_t>());
    EXPECT_EQ(c.vocab_size, e["vocab_size"].get<std::int64_t>());
    EXPECT_EQ(c.rope_theta, e["rope_theta"].get<double>());
    EXPECT_EQ(c.attention_bias, e["attention_bias"].get<bool>());
    EXPECT_EQ(c.qk_norm, e["qk_norm"].get<bool>());
    EXPECT_EQ(c.post_attention_norm, e["post_attention_norm"].get<bool>());
    EXPECT_EQ(c.post_ffn_norm, e["post_ffn_norm"].get<bool>());
    EXPECT_EQ(c.ffn_activation == sm::FfnActivation::kGeluTanh, e["gelu"].get<bool>());
    EXPECT_EQ(c.embedding_scale, e["embedding_scale"].get<double>());
    EXPECT_EQ(c.sliding_window, e["sliding_window"].get<std::int64_t>());
    EXPECT_EQ(c.sliding_rope_theta, e["sliding_rope_theta"].get<double>());
    EXPECT_EQ(c.final_logit_softcap, e["final_logit_softcap"].get<double>());
    EXPECT_EQ(c.rope_freq_factors, e["rope_freq_factors"].get<std::vector<float>>());
    EXPECT_EQ(c.gguf_qk_permuted, e["gguf_qk_permuted"].get<bool>());
    if (e.contains("sliding_layers")) {
      EXPECT_EQ(c.sliding_layers, e["sliding_layers"].get<std::vector<bool>>());
    }
    EXPECT_TRUE(sm::unsupported_block_options(c).empty());
  }
}
