// specdec — the expected-speedup formulas of Leviathan et al. 2023 (Section 3), generalised with a verify cost.
//
//  a  acceptance rate: the probability a draft token is accepted, E[sum_x min(p(x), q(x))]
//  g  speculation length (gamma): drafts per step
//  c  cost ratio: time of one draft forward / time of one target forward
//  r  verify cost ratio: time of the target's (g+1)-token forward / its 1-token forward (Leviathan: r = 1)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace specdec::theory {

/// Acceptance rate of a draft q against a target p: sum_x min(p(x), q(x)).
inline double acceptance_rate(std::span<const float> p, std::span<const float> q) {
  double a = 0.0;
  const std::size_t n = std::min(p.size(), q.size());
  for (std::size_t i = 0; i < n; ++i) a += std::min(static_cast<double>(p[i]), static_cast<double>(q[i]));
  return a;
}

/// Expected tokens emitted per step (per target forward): (1 - a^(g+1)) / (1 - a); g + 1 when a = 1.
inline double expected_tokens_per_step(double a, int g) {
  if (a >= 1.0) return g + 1.0;
  return (1.0 - std::pow(a, g + 1)) / (1.0 - a);
}

/// Expected walltime improvement with verify cost ratio r: (1 - a^(g+1)) / ((1 - a)(g c + r)).
/// r = 1 is Leviathan's Theorem 3.8.
inline double walltime_improvement(double a, int g, double c, double r = 1.0) {
  return expected_tokens_per_step(a, g) / (g * c + r);
}

/// Expected factor of arithmetic operations: (1 - a)(g c_hat + g + 1) / (1 - a^(g+1)) (Theorem 3.11), where
/// c_hat is the draft's arithmetic operations per token over the target's.
inline double arithmetic_factor(double a, int g, double c_hat) {
  return (g * c_hat + g + 1.0) / expected_tokens_per_step(a, g);
}

/// The g in [1, max_g] that maximises walltime_improvement(a, g, c, r) (smallest g on ties); 0 if no g beats
/// plain decoding (improvement <= 1 for every g), i.e. speculation does not pay.
inline int optimal_gamma(double a, double c, double r = 1.0, int max_g = 64) {
  int best_g = 0;
  double best = 1.0;
  for (int g = 1; g <= max_g; ++g) {
    const double w = walltime_improvement(a, g, c, r);
    if (w > best) {
      best = w;
      best_g = g;
    }
  }
  return best_g;
}

}  // namespace specdec::theory
