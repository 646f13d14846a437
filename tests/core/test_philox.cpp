#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/residual.hpp"
#include "stats.hpp"

namespace specdec {
namespace {

// Known-answer vectors of Philox4x32-10 published with Random123 (kat_vectors).
TEST(Philox, KnownAnswerVectors) {
  struct Kat {
    Philox4x32 ctr;
    std::uint32_t k0, k1;
    Philox4x32 expected;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const auto& k : kats) {
    const auto out = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], k.expected.v[i]) << "word " << i;
  }
}

TEST(Philox, UniformNeverZeroOrOne) {
  EXPECT_GT(bits_to_uniform(0u), 0.0f);
  EXPECT_LT(bits_to_uniform(0xffffffffu), 1.0f);
  EXPECT_EQ(bits_to_uniform(0u), 5.9604644775390625e-8f);
  EXPECT_EQ(bits_to_uniform(0xffffffffu), 1.0f - 5.9604644775390625e-8f);
}

TEST(Philox, CounterLayoutSeparatesPurposesPositionsAndSeeds) {
  std::set<float> seen;
  for (std::uint64_t seed : {0ull, 1ull, 1ull << 32})
    for (std::int64_t pos : {0ll, 1ll, 1ll << 32})
      for (auto purpose : {Purpose::kAccept, Purpose::kResidual, Purpose::kBonus})
        for (std::uint32_t idx = 0; idx < 8; ++idx) seen.insert(uniform(seed, pos, purpose, idx));
  EXPECT_EQ(seen.size(), 3u * 3u * 3u * 8u);
  // index i is word i % 4 of block i / 4.
  const auto block = random_block(7, 11, Purpose::kResidual, 2);
  for (std::uint32_t w = 0; w < 4; ++w)
    EXPECT_EQ(uniform(7, 11, Purpose::kResidual, 8 + w), bits_to_uniform(block.v[w]));
}

TEST(Philox, UniformIsUniform) {
  constexpr int kBins = 16, kN = 200000;
  std::vector<std::int64_t> counts(kBins);
  for (int i = 0; i < kN; ++i) {
    const float u = uniform(42, i / 4, Purpose::kAccept, static_cast<std::uint32_t>(i % 4));
    ++counts[static_cast<int>(u * kBins)];
  }
  EXPECT_TRUE(test::matches_distribution(counts, std::vector<double>(kBins, 1.0 / kBins)));
}

// log_positive against the libm logarithm in double, over every uniform specdec can draw.
TEST(Philox, LogPositiveWithinOnePointTwoUlpOnAllUniforms) {
  double worst = 0.0;
  for (std::uint32_t b = 0; b < (1u << 23); ++b) {
    const float u = static_cast<float>(b * 2u + 1u) * 5.9604644775390625e-8f;
    const double exact = std::log(static_cast<double>(u));
    const float ref = static_cast<float>(exact);
    const double ulp = std::abs(static_cast<double>(std::nextafter(ref, 0.0f)) - ref);
    worst = std::max(worst, std::abs(log_positive(u) - exact) / ulp);
  }
  EXPECT_LT(worst, 1.2);
}

TEST(Philox, LogPositiveOnWideRange) {
  for (float x : {1e-30f, 1e-10f, 0.5f, 1.0f, 2.0f, 10.0f, 12345.678f, 1e30f}) {
    EXPECT_NEAR(log_positive(x), std::log(x), 2e-7 * std::max(1.0, std::abs(std::log(static_cast<double>(x)))))
        << x;
  }
  EXPECT_EQ(log_positive(1.0f), 0.0f);
}

TEST(Philox, ExponentialHasUnitMean) {
  constexpr int kN = 400000;
  double sum = 0.0;
  for (int i = 0; i < kN; ++i) sum += exponential(3, i, Purpose::kResidual, 0);
  // Var = 1: the mean's standard error is 1/sqrt(n).
  EXPECT_NEAR(sum / kN, 1.0, 6.0 / std::sqrt(static_cast<double>(kN)));
}

TEST(Residual, TileMassOrderIsTheLaneButterfly) {
  // Weights chosen so that float addition order matters; compare with an explicit emulation of 32 lanes.
  const std::int64_t v = 1500;
  std::vector<float> w(v);
  for (std::int64_t i = 0; i < v; ++i) w[i] = (i % 7 == 0) ? 1e8f : 1.0f / static_cast<float>(i + 1);
  for (std::int64_t t = 0; t < num_tiles(v); ++t) {
    float lanes[32] = {};
    for (int j = 0; j < 32; ++j)
      for (int l = 0; l < 32; ++l) {
        const std::int64_t x = t * 1024 + j * 32 + l;
        if (x < v) lanes[l] = lanes[l] + w[x];
      }
    for (int off = 16; off > 0; off /= 2)
      for (int l = 0; l < off; ++l) lanes[l] = lanes[l] + lanes[l + off];
    EXPECT_EQ(tile_mass([&](std::int64_t x) { return w[x]; }, t, v), lanes[0]);
  }
}

}  // namespace
}  // namespace specdec
