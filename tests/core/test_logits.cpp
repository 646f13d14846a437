#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "specdec/sampling/logits.hpp"

namespace specdec {
namespace {

std::vector<double> softmax_ref(const std::vector<float>& logits, double t) {
  double m = -1e300;
  for (float l : logits) m = std::max<double>(m, l);
  std::vector<double> p(logits.size());
  double s = 0;
  for (std::size_t i = 0; i < p.size(); ++i) s += p[i] = std::exp((logits[i] - m) / t);
  for (auto& x : p) x /= s;
  return p;
}

const std::vector<float> kLogits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f, -std::numeric_limits<float>::infinity()};

TEST(Logits, TemperatureSoftmaxMatchesFp64) {
  for (float t : {0.05f, 0.7f, 1.0f, 2.5f}) {
    SamplingParams sp;
    sp.temperature = t;
    const auto p = logits_to_probs(kLogits, sp);
    const auto ref = softmax_ref(kLogits, t);
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], ref[i], 1e-6 * std::max(1.0, ref[i])) << t << " " << i;
    EXPECT_EQ(p.back(), 0.0f);
  }
}

TEST(Logits, GreedyIsOneHotOnLowestArgmax) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  const auto p = logits_to_probs(kLogits, sp);
  EXPECT_EQ(p, (std::vector<float>{0, 1, 0, 0, 0, 0, 0}));
}

TEST(Logits, TopKKeepsKLargestWithIdTieBreak) {
  SamplingParams sp;
  sp.top_k = 2;
  const auto p = logits_to_probs(kLogits, sp);
  EXPECT_NEAR(p[1], 0.5f, 1e-7);
  EXPECT_NEAR(p[3], 0.5f, 1e-7);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-6);
  for (int i : {0, 2, 4, 5, 6}) EXPECT_EQ(p[i], 0.0f);
  sp.top_k = 1;  // tie between ids 1 and 3: the lower id wins
  EXPECT_EQ(logits_to_probs(kLogits, sp), (std::vector<float>{0, 1, 0, 0, 0, 0, 0}));
}

TEST(Logits, TopPKeepsSmallestPrefixReachingMass) {
  const auto full = softmax_ref(kLogits, 1.0);  // order: 1, 3, 5, 0, 4, 2
  SamplingParams sp;
  sp.top_p = static_cast<float>(full[1] + full[3] + 0.5 * full[5]);  // crosses inside token 5
  const auto p = logits_to_probs(kLogits, sp);
  const double kept = full[1] + full[3] + full[5];
  for (int i : {1, 3, 5}) EXPECT_NEAR(p[i], full[i] / kept, 1e-6);
  for (int i : {0, 2, 4, 6}) EXPECT_EQ(p[i], 0.0f);
}

TEST(Logits, MinPDropsBelowFractionOfMax) {
  const auto full = softmax_ref(kLogits, 1.0);
  SamplingParams sp;
  sp.min_p = 0.3f;  // keeps p >= 0.3 * p_max: ids 1, 3 (= max) and 5 (e^-1 = 0.37)
  const auto p = logits_to_probs(kLogits, sp);
  const double kept = full[1] + full[3] + full[5];
  for (int i : {1, 3, 5}) EXPECT_NEAR(p[i], full[i] / kept, 1e-6);
  for (int i : {0, 2, 4, 6}) EXPECT_EQ(p[i], 0.0f);
}

TEST(Logits, BadInputIsReported) {
  std::vector<float> out(3);
  SamplingParams sp;
  const std::vector<float> nan_logits = {0.0f, std::nanf(""), 1.0f};
  EXPECT_EQ(logits_to_probs(std::span<const float>(nan_logits), sp, std::span<float>(out)),
            Status::kInvalidProbability);
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> all_banned = {ninf, ninf, ninf};
  EXPECT_EQ(logits_to_probs(std::span<const float>(all_banned), sp, std::span<float>(out)), Status::kZeroMass);
  sp.temperature = -1.0f;
  try {
    logits_to_probs(kLogits, sp);
    FAIL() << "expected specdec::error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "SamplingParams.temperature: expected a finite value >= 0, got -1.000000");
  }
  sp = {};
  sp.top_p = 0.0f;
  std::string msg;
  EXPECT_EQ(validate(sp, &msg), Status::kInvalidArgument);
  EXPECT_EQ(msg, "top_p: expected a value in (0, 1], got 0.000000");
  sp = {};
  sp.top_k = -3;
  EXPECT_EQ(validate(sp, &msg), Status::kInvalidArgument);
  EXPECT_EQ(msg, "top_k: expected >= 0 (0 = off), got -3");
  sp = {};
  sp.min_p = 1.5f;
  EXPECT_EQ(validate(sp, &msg), Status::kInvalidArgument);
  EXPECT_EQ(msg, "min_p: expected a value in [0, 1], got 1.500000");
}

}  // namespace
}  // namespace specdec
