// A float16 KV cache (LlamaOptions::kv_cache_half): the conversions and the attention kernel over half keys and values.
// The reference for the kernel is the same kernel over float keys and values that hold the same numbers: a half cache
// must change only what is stored, so the outputs must match bit for bit (on the instruction-set path this process runs;
// ctest runs this file again with SPECDEC_CPU_ISA=avx2 for the 8-lane kernel).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/models/float16.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/sampling/status.hpp"

namespace sm = specdec::models;
namespace d = specdec::models::detail;

namespace {
std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Half bit patterns spread over every finite exponent (normals and subnormals, both signs).
std::vector<std::uint16_t> random_halves(std::size_t n, std::mt19937& rng, int max_exponent = 30) {
  std::uniform_int_distribution<int> exponent(0, max_exponent), mantissa(0, 1023), sign(0, 1);
  std::vector<std::uint16_t> h(n);
  for (auto& e : h) e = static_cast<std::uint16_t>(sign(rng) << 15 | exponent(rng) << 10 | mantissa(rng));
  return h;
}
}  // namespace

TEST(FloatsToHalves, MatchesFloatToHalfBitForBit) {
  std::mt19937 rng(3);
  std::vector<float> x;
  // Every float exponent from below the half subnormals to past the half maximum, random mantissas; exact ties (the
  // 13 dropped bits = 0x1000) and the values next to them; zeros and infinities.
  std::uniform_int_distribution<std::uint32_t> mant(0, (1u << 23) - 1);
  for (std::uint32_t e = 90; e <= 150; ++e)
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t m = mant(rng);
      for (std::uint32_t s : {0u, 1u}) {
        x.push_back(from_bits(s << 31 | e << 23 | m));
        x.push_back(from_bits(s << 31 | e << 23 | ((m & ~0x1FFFu) | 0x1000u)));
        x.push_back(from_bits(s << 31 | e << 23 | ((m & ~0x1FFFu) | 0x0FFFu)));
      }
    }
  for (float v : {0.f, -0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 65504.f,
                  65519.f, 65520.f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f})
    x.push_back(v);
  // Odd lengths: the 8-wide body and the scalar tail.
  for (std::size_t len : {x.size(), x.size() - 3, std::size_t{7}, std::size_t{1}}) {
    std::vector<std::uint16_t> out(len, 0xFFFF);
    d::floats_to_halves(x.data(), out.data(), static_cast<std::int64_t>(len));
    for (std::size_t i = 0; i < len; ++i)
      ASSERT_EQ(out[i], sm::float_to_half(x[i])) << "x = " << x[i] << " (bits " << std::hex << bits_of(x[i]) << ")";
  }
}

// Query rows (scaled as the model scales them), float16 keys of moderate size (scores stay finite) and values over
// `value_exponents` half exponents, their exact float copies, and a chain's visibility (token i sees new tokens 0..i).
struct ChainInputs {
  std::vector<float> q, kf, vf;
  std::vector<std::uint16_t> kh, vh;
  std::vector<std::int32_t> visible, count;
};
ChainInputs chain_inputs(std::mt19937& rng, std::int64_t hd, std::int64_t n, std::int64_t rows, std::int64_t total,
                         int value_exponents) {
  std::normal_distribution<float> normal(0.f, 1.f);
  ChainInputs c;
  c.q.resize(static_cast<std::size_t>(rows * hd));
  for (auto& e : c.q) e = normal(rng) * 0.3f;
  c.kh = random_halves(static_cast<std::size_t>(total * hd), rng, 16);
  c.vh = random_halves(static_cast<std::size_t>(total * hd), rng, value_exponents);
  c.kf.resize(c.kh.size());
  c.vf.resize(c.vh.size());
  for (std::size_t i = 0; i < c.kh.size(); ++i) c.kf[i] = sm::half_to_float(c.kh[i]);
  for (std::size_t i = 0; i < c.vh.size(); ++i) c.vf[i] = sm::half_to_float(c.vh[i]);
  c.visible.assign(static_cast<std::size_t>(n * n), 0);
  c.count.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    c.count[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i + 1);
    for (std::int64_t a = 0; a <= i; ++a) c.visible[static_cast<std::size_t>(i * n + a)] = static_cast<std::int32_t>(a);
  }
  return c;
}

TEST(AttentionRows, HalfKeysAndValuesGiveTheBitsOfTheirFloatValues) {
  std::mt19937 rng(11);
  // hd 64 (the AVX-512 kernel where the CPU has it), 40 (the 8-lane one: not a multiple of 16), 10 (a partial
  // 8-lane block) and 256 (Gemma's, on the 8-lane kernel); chains of 1 to 6 new tokens over 0 to 300 cached positions;
  // all three parts of a split call.
  for (const std::int64_t hd : {64, 40, 10, 256})
    for (const std::int64_t n : {1, 2, 6})
      for (const std::int64_t cached : {0, 17, 300}) {
        SCOPED_TRACE(testing::Message() << "hd " << hd << ", n " << n << ", cached " << cached);
        const std::int64_t group = 3, rows = n * group, total = cached + n, ld = (total + 15) / 16 * 16;
        // Values over every half exponent, subnormals included.
        const ChainInputs in = chain_inputs(rng, hd, n, rows, total, 30);
        const auto &q = in.q, &kf = in.kf, &vf = in.vf;
        const auto &kh = in.kh, &vh = in.vh;
        const auto &visible = in.visible, &count = in.count;
        auto run = [&](auto k, auto v, bool split) {
          std::vector<float> scores(static_cast<std::size_t>(rows * ld)), out(static_cast<std::size_t>(n * group * hd));
          if (!split) {
            d::attention_rows(q.data(), 0, rows, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                              scores.data(), ld, out.data(), group * hd, hd);
          } else {
            for (std::int64_t k0 = 0; k0 < total; k0 += 32)
              d::attention_rows(q.data(), 0, rows, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                                scores.data(), ld, out.data(), group * hd, hd,
                                {d::AttentionPart::kScores, k0, k0 + 32});
            d::attention_rows(q.data(), 0, rows, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                              scores.data(), ld, out.data(), group * hd, hd, {d::AttentionPart::kFinish, 0, 0});
          }
          return out;
        };
        for (const bool split : {false, true}) {
          const std::vector<float> from_half = run(kh.data(), vh.data(), split), from_float = run(kf.data(), vf.data(), split);
          for (std::size_t i = 0; i < from_half.size(); ++i) {
            ASSERT_FALSE(std::isnan(from_float[i])) << "the test's values must keep the output finite";
            ASSERT_EQ(bits_of(from_half[i]), bits_of(from_float[i])) << "output " << i << (split ? " (split call)" : "");
          }
        }
      }
}

// A kFinish part from key_begin on (a sliding window's first visible block): when every key before it is masked to -inf
// in every row, the softmax and the weighted sum that skip those keys give the bits of the ones that read them as 0,
// and the scores before key_begin are never read (NaN there changes nothing). Both kernels (hd 64 on AVX-512 where the
// CPU has it, 40 and 256 on the 8-lane one, 10 on its scalar tail), float16 and float32 caches.
TEST(AttentionRows, AFinishPartFromAMaskedPrefixGivesTheBitsOfTheWholeRow) {
  std::mt19937 rng(23);
  for (const std::int64_t hd : {64, 40, 256, 10})
    for (const std::int64_t n : {1, 3})
      for (const std::int64_t cached : {40, 300})
        for (const std::int64_t key_begin : {std::int64_t{16}, std::int64_t{32}}) {
          SCOPED_TRACE(testing::Message() << "hd " << hd << ", n " << n << ", cached " << cached << ", key_begin " << key_begin);
          const std::int64_t group = 2, rows = n * group, total = cached + n, ld = (total + 15) / 16 * 16;
          const ChainInputs in = chain_inputs(rng, hd, n, rows, total, 20);
          const auto &q = in.q, &kf = in.kf, &vf = in.vf;
          const auto &kh = in.kh, &vh = in.vh;
          const auto &visible = in.visible, &count = in.count;
          // Row r masks keys [0, mask_end(r)), key_begin <= mask_end(r) < cached (rows may mask more, as a window does,
          // and each still sees a cached key and its own).
          auto mask_end = [&](std::int64_t r) { return std::min(key_begin + (r % 3) * 5, cached - 1); };
          auto run = [&](auto k, auto v, std::int64_t begin) {
            std::vector<float> scores(static_cast<std::size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
            std::vector<float> out(static_cast<std::size_t>(n * group * hd));
            d::attention_rows(q.data(), 0, rows, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                              scores.data(), ld, out.data(), group * hd, hd, {d::AttentionPart::kScores, begin, ld});
            for (std::int64_t r = 0; r < rows; ++r)
              std::fill(scores.begin() + r * ld + begin, scores.begin() + r * ld + mask_end(r),
                        -std::numeric_limits<float>::infinity());
            d::attention_rows(q.data(), 0, rows, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                              scores.data(), ld, out.data(), group * hd, hd, {d::AttentionPart::kFinish, begin, 0});
            return out;
          };
          auto masked_all = [&](auto k, auto v) {  // the whole row: scores from key 0, keys before key_begin at -inf too
            std::vector<float> scores(static_cast<std::size_t>(rows * ld));
            std::vector<float> out(static_cast<std::size_t>(n * group * hd));
            d::attention_rows(q.data(), 0, rows, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                              scores.data(), ld, out.data(), group * hd, hd, {d::AttentionPart::kScores, 0, ld});
            for (std::int64_t r = 0; r < rows; ++r)
              std::fill(scores.begin() + r * ld, scores.begin() + r * ld + mask_end(r),
                        -std::numeric_limits<float>::infinity());
            d::attention_rows(q.data(), 0, rows, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                              scores.data(), ld, out.data(), group * hd, hd, {d::AttentionPart::kFinish, 0, 0});
            return out;
          };
          for (const bool half : {true, false}) {
            const std::vector<float> whole = half ? masked_all(kh.data(), vh.data()) : masked_all(kf.data(), vf.data());
            const std::vector<float> part = half ? run(kh.data(), vh.data(), key_begin) : run(kf.data(), vf.data(), key_begin);
            for (std::size_t i = 0; i < whole.size(); ++i) {
              ASSERT_FALSE(std::isnan(whole[i]));
              ASSERT_EQ(bits_of(part[i]), bits_of(whole[i])) << "output " << i << (half ? " (half cache)" : "");
            }
          }
        }
}

// Batch invariance at the kernel: a query row's output is the same bits whether the call computes it alone or beside
// every other row of the call (whose count decides how the kernel groups rows, and whether a float16 cache's values are
// converted once per chunk for all of them), for float16 and float32 caches.
TEST(AttentionRows, EachRowGetsTheBitsItGetsAlone) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const std::int64_t hd : {64, 40, 256})
    for (const std::int64_t group : {1, 3, 4})
      for (const std::int64_t n : {1, 2, 5, 9})
        for (const std::int64_t cached : {0, 70, 300}) {
          SCOPED_TRACE(testing::Message() << "hd " << hd << ", group " << group << ", n " << n << ", cached " << cached);
          const std::int64_t rows = n * group, total = cached + n, ld = (total + 15) / 16 * 16;
          std::vector<float> q(static_cast<std::size_t>(rows * hd));
          for (auto& e : q) e = normal(rng) * 0.3f;
          std::vector<std::uint16_t> kh = random_halves(static_cast<std::size_t>(total * hd), rng, 16);
          std::vector<std::uint16_t> vh = random_halves(static_cast<std::size_t>(total * hd), rng, 20);
          std::vector<float> kf(kh.size()), vf(vh.size());
          for (std::size_t i = 0; i < kh.size(); ++i) kf[i] = sm::half_to_float(kh[i]);
          for (std::size_t i = 0; i < vh.size(); ++i) vf[i] = normal(rng);
          std::vector<std::int32_t> visible(static_cast<std::size_t>(n * n)), count(static_cast<std::size_t>(n));
          for (std::int64_t i = 0; i < n; ++i) {  // a tree: token i sees itself and every even token before it
            std::int32_t c = 0;
            for (std::int64_t a = 0; a < i; a += 2) visible[static_cast<std::size_t>(i * n + c++)] = static_cast<std::int32_t>(a);
            visible[static_cast<std::size_t>(i * n + c++)] = static_cast<std::int32_t>(i);
            count[static_cast<std::size_t>(i)] = c;
          }
          auto run = [&](auto k, auto v, std::int64_t r0, std::int64_t r1) {
            std::vector<float> scores(static_cast<std::size_t>(rows * ld)), out(static_cast<std::size_t>(n * group * hd), -7.f);
            d::attention_rows(q.data(), r0, r1, n, group, hd, k, v, total, cached, visible.data(), count.data(),
                              scores.data(), ld, out.data(), group * hd, hd);
            return out;
          };
          auto check = [&](auto k, auto v, const char* cache) {
            const std::vector<float> all = run(k, v, 0, rows);
            for (std::int64_t r = 0; r < rows; ++r) {
              const std::vector<float> alone = run(k, v, r, r + 1);
              const std::size_t at = static_cast<std::size_t>((r / group) * group * hd + (r % group) * hd);
              for (std::size_t e = 0; e < static_cast<std::size_t>(hd); ++e) {
                ASSERT_FALSE(std::isnan(all[at + e]));
                ASSERT_EQ(bits_of(alone[at + e]), bits_of(all[at + e])) << cache << " cache, row " << r << ", element " << e;
              }
            }
          };
          check(kh.data(), vh.data(), "float16");
          check(kf.data(), vf.data(), "float32");
        }
}

TEST(KvCache, HalfStorageHoldsHalfTheBytesAndSurvivesGrowth) {
  sm::KvCacheShape shape;
  shape.num_layers = 2;
  shape.num_kv_heads = 3;
  shape.head_dim = 8;
  shape.initial_capacity = 4;
  sm::KvCacheShape float_shape = shape;
  shape.half = true;
  sm::KvCache c(shape), f(float_shape);
  EXPECT_TRUE(c.half());
  EXPECT_EQ(c.bytes() * 2, f.bytes());
  EXPECT_NE(c.key_data_half(1), nullptr);
  EXPECT_EQ(c.key_data(0), nullptr);
  EXPECT_EQ(f.key_data_half(0), nullptr);
  const std::int64_t s = c.allocate();
  // Position p of layer l, kv head h, element e holds the half of l + 0.25 h + 0.001 p (distinct, exactly stored bits).
  auto value = [](std::int64_t l, std::int64_t h, std::int64_t p) {
    return sm::float_to_half(static_cast<float>(l) + 0.25f * static_cast<float>(h) + 0.001f * static_cast<float>(p));
  };
  for (std::int64_t p = 0; p < 20; ++p) {
    c.reserve(p + 1);
    for (std::int64_t l = 0; l < 2; ++l)
      for (std::int64_t h = 0; h < 3; ++h)
        for (std::int64_t e = 0; e < 8; ++e) {
          c.key_data_half(l)[(h * c.capacity() + p) * 8 + e] = value(l, h, p);
          c.value_data_half(l)[(h * c.capacity() + p) * 8 + e] = static_cast<std::uint16_t>(value(l, h, p) ^ 0x8000);
        }
    c.set_length(s, p + 1);
  }
  EXPECT_EQ(c.capacity(), 32);
  for (std::int64_t p = 0; p < 20; ++p)
    for (std::int64_t l = 0; l < 2; ++l)
      for (std::int64_t h = 0; h < 3; ++h) {
        ASSERT_EQ(c.key_data_half(l)[(h * c.capacity() + p) * 8 + 5], value(l, h, p));
        ASSERT_EQ(c.value_data_half(l)[(h * c.capacity() + p) * 8 + 7], value(l, h, p) ^ 0x8000);
      }
}

TEST(KvCache, TypeNamesParseOrNameTheBadValue) {
  EXPECT_TRUE(sm::parse_kv_cache_type("f16"));
  EXPECT_FALSE(sm::parse_kv_cache_type("f32"));
  try {
    sm::parse_kv_cache_type("bf16");
    FAIL() << "bf16 must be refused";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("'bf16'"), std::string::npos) << e.what();
  }
}
