// Test helpers: docs/design.md's 6-sigma per-category bound for sampled distributions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace specdec::test {

/// Asserts |count_i - n pi_i| <= 6 sqrt(n pi_i (1 - pi_i)) + 5 [pi_i > 0] for every category, and that categories
/// with pi_i == 0 never occur.
inline ::testing::AssertionResult matches_distribution(const std::vector<std::int64_t>& counts,
                                                       const std::vector<double>& probs) {
  if (counts.size() != probs.size())
    return ::testing::AssertionFailure() << "counts has " << counts.size() << " categories, probs " << probs.size();
  std::int64_t n = 0;
  for (auto c : counts) n += c;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double pi = probs[i];
    const double expected = static_cast<double>(n) * pi;
    if (pi <= 0.0) {
      if (counts[i] != 0)
        return ::testing::AssertionFailure() << "category " << i << " has probability 0 but occurred " << counts[i]
                                             << " times in " << n;
      continue;
    }
    const double bound = 6.0 * std::sqrt(static_cast<double>(n) * pi * (1.0 - pi)) + 5.0;
    if (std::abs(static_cast<double>(counts[i]) - expected) > bound)
      return ::testing::AssertionFailure() << "category " << i << ": count " << counts[i] << ", expected " << expected
                                           << " +- " << bound << " (p = " << pi << ", n = " << n << ")";
  }
  return ::testing::AssertionSuccess();
}

/// A random probability row of size v: Dirichlet-like from exponentials, with `zeros` entries forced to 0.
inline std::vector<float> random_row(std::mt19937_64& rng, std::int64_t v, double zero_fraction = 0.0,
                                     double concentration = 1.0) {
  std::gamma_distribution<double> gamma(concentration, 1.0);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<double> w(static_cast<std::size_t>(v));
  double sum = 0.0;
  for (auto& x : w) {
    x = coin(rng) < zero_fraction ? 0.0 : gamma(rng) + 1e-12;
    sum += x;
  }
  if (sum == 0.0) {
    w[0] = 1.0;
    sum = 1.0;
  }
  std::vector<float> row(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) row[i] = static_cast<float>(w[i] / sum);
  return row;
}

/// Exact (double) probabilities of a float row, normalised.
inline std::vector<double> as_double(const std::vector<float>& row) {
  double s = 0.0;
  for (float x : row) s += x;
  std::vector<double> out(row.size());
  for (std::size_t i = 0; i < row.size(); ++i) out[i] = row[i] / s;
  return out;
}

/// Draws an index from `row` with an RNG independent of specdec's.
inline std::int64_t draw_from(std::mt19937_64& rng, const std::vector<float>& row) {
  std::discrete_distribution<std::int64_t> d(row.begin(), row.end());
  return d(rng);
}

/// sum_x min(p, q) in double.
inline double overlap(const std::vector<float>& p, const std::vector<float>& q) {
  double a = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) a += std::min<double>(p[i], q[i]);
  return a;
}

}  // namespace specdec::test
