#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/theory.hpp"

namespace specdec {
namespace {

// Leviathan et al. 2023, Table 1 (c = 0): (a, g) -> (arithmetic operations factor, speed).
TEST(Theory, ReproducesLeviathanTable1) {
  struct Row {
    double a;
    int g;
    double ops, speed;
  };
  for (const Row& r : {Row{0.6, 2, 1.53, 1.96}, Row{0.8, 5, 1.63, 3.69}, Row{0.9, 10, 1.60, 6.86}}) {
    EXPECT_NEAR(theory::arithmetic_factor(r.a, r.g, 0.0), r.ops, 0.005) << r.a;
    EXPECT_NEAR(theory::walltime_improvement(r.a, r.g, 0.0), r.speed, 0.005) << r.a;
    EXPECT_NEAR(theory::expected_tokens_per_step(r.a, r.g), r.speed, 0.005) << r.a;
  }
}

TEST(Theory, FormulasAndEdgeCases) {
  EXPECT_DOUBLE_EQ(theory::expected_tokens_per_step(0.0, 5), 1.0);
  EXPECT_DOUBLE_EQ(theory::expected_tokens_per_step(1.0, 5), 6.0);
  // r scales the denominator: (1 - a^(g+1)) / ((1 - a)(g c + r)).
  EXPECT_NEAR(theory::walltime_improvement(0.8, 4, 0.1, 1.5), (1 - std::pow(0.8, 5)) / (0.2 * (0.4 + 1.5)), 1e-12);
  const std::vector<float> p = {0.5f, 0.5f, 0.0f}, q = {0.25f, 0.25f, 0.5f};
  EXPECT_NEAR(theory::acceptance_rate(p, q), 0.5, 1e-7);
}

TEST(Theory, OptimalGammaMaximisesImprovement) {
  for (double a : {0.5, 0.7, 0.9})
    for (double c : {0.01, 0.05, 0.2})
      for (double r : {1.0, 1.5}) {
        const int g = theory::optimal_gamma(a, c, r);
        ASSERT_GE(g, 0);
        const double best = g == 0 ? 1.0 : theory::walltime_improvement(a, g, c, r);
        for (int h = 1; h <= 64; ++h) EXPECT_LE(theory::walltime_improvement(a, h, c, r), best);
      }
  EXPECT_EQ(theory::optimal_gamma(0.1, 0.9, 1.0), 0);  // a weak, expensive draft never pays
  EXPECT_EQ(theory::optimal_gamma(0.5, 0.2, 1.5), 0);  // nor does a costly verify forward at low acceptance
  EXPECT_GE(theory::optimal_gamma(0.9, 0.01, 1.0), 10);
}

// Monte-Carlo of the chain through the verifier: p, q chosen with sum min(p, q) = a at every position; the mean
// number of emitted tokens per step matches (1 - a^(g+1)) / (1 - a) within 6 standard errors.
TEST(Theory, MonteCarloChainMatchesExpectedTokens) {
  for (double a : {0.3, 0.6, 0.85}) {
    const int g = 4;
    const std::int64_t V = 4;
    // p = (a, 1 - a, 0, 0), q = (a, 0, 1 - a, 0): overlap a.
    std::vector<float> p, q;
    for (int i = 0; i <= g; ++i) p.insert(p.end(), {float(a), float(1 - a), 0.0f, 0.0f});
    for (int i = 0; i < g; ++i) q.insert(q.end(), {float(a), 0.0f, float(1 - a), 0.0f});
    std::mt19937_64 rng(5);
    std::bernoulli_distribution from_q(a);
    std::vector<std::int32_t> drafts(g), out(g + 1);
    std::vector<float> scratch(1);
    const int n = 100000;
    double sum = 0, sum2 = 0;
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < g; ++i) drafts[i] = from_q(rng) ? 0 : 2;
      std::int32_t acc = -1;
      ASSERT_EQ(verify_chain_request<std::int32_t>(V, g, drafts.data(), q.data(), p.data(), t, 0, false, 1.0f,
                                                   out.data(), &acc, nullptr, scratch.data()),
                Status::kSuccess);
      sum += acc + 1;
      sum2 += double(acc + 1) * (acc + 1);
    }
    const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
    EXPECT_NEAR(mean, theory::expected_tokens_per_step(a, g), 6 * sd / std::sqrt(double(n))) << a;
  }
}

}  // namespace
}  // namespace specdec
