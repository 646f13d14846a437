// specdec — reference transform from logits to the distribution a request samples from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "specdec/sampling/params.hpp"

namespace specdec {

/// Writes the processed distribution for `logits` into `probs` (same length V).
///  - temperature 0: one-hot on the argmax (lowest id on ties);
///  - otherwise: softmax(logits / temperature) (max-subtracted, float exp, double accumulation), then top-k
///    (the k largest; ties broken by lower id), top-p (the smallest prefix of the descending order whose mass
///    reaches top_p, the crossing token included), min-p (drop p < min_p * p_max), and renormalisation.
/// Masked tokens get exactly 0. Logits may contain -inf (a banned token); NaN or +inf is an error.
/// Returns kInvalidArgument for bad params or mismatched sizes, kInvalidProbability for NaN/+inf logits,
/// kZeroMass when every logit is -inf.
inline Status logits_to_probs(std::span<const float> logits, const SamplingParams& params, std::span<float> probs) {
  if (validate(params) != Status::kSuccess || logits.size() != probs.size() || logits.empty())
    return Status::kInvalidArgument;
  const std::size_t n = logits.size();
  std::size_t argmax = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) return Status::kInvalidProbability;
    if (v > logits[argmax]) argmax = i;
  }
  const float max_logit = logits[argmax];
  if (max_logit == -std::numeric_limits<float>::infinity()) return Status::kZeroMass;
  if (params.greedy()) {
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[argmax] = 1.0f;
    return Status::kSuccess;
  }
  const float inv_t = 1.0f / params.temperature;
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const float e = std::exp((logits[i] - max_logit) * inv_t);
    probs[i] = e;
    sum += e;
  }
  const bool truncate = (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < n) || params.top_p < 1.0f ||
                        params.min_p > 0.0f;
  if (truncate) {
    // Descending order, ties by lower id, over the tokens that still have mass.
    std::vector<std::int32_t> order;
    order.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      if (probs[i] > 0.0f) order.push_back(static_cast<std::int32_t>(i));
    auto before = [&](std::int32_t a, std::int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); };
    std::size_t keep = order.size();
    if (params.top_k > 0) keep = std::min<std::size_t>(keep, static_cast<std::size_t>(params.top_k));
    if (keep < order.size()) {
      std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), before);
      order.resize(keep);
    }
    std::sort(order.begin(), order.end(), before);
    if (params.top_p < 1.0f) {
      double kept_mass = 0.0;
      for (auto id : order) kept_mass += probs[id];
      const double target = static_cast<double>(params.top_p) * kept_mass;
      double cum = 0.0;
      std::size_t k = 0;
      while (k < order.size()) {
        cum += probs[order[k]];
        ++k;
        if (cum >= target) break;
      }
      order.resize(k);
    }
    if (params.min_p > 0.0f && !order.empty()) {
      const float threshold = params.min_p * probs[order.front()];
      std::size_t k = 1;
      while (k < order.size() && probs[order[k]] >= threshold) ++k;
      order.resize(k);
    }
    std::vector<float> kept(order.size());
    sum = 0.0;
    for (std::size_t j = 0; j < order.size(); ++j) {
      kept[j] = probs[order[j]];
      sum += kept[j];
    }
    std::fill(probs.begin(), probs.end(), 0.0f);
    for (std::size_t j = 0; j < order.size(); ++j) probs[order[j]] = kept[j];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (std::size_t i = 0; i < n; ++i) probs[i] *= inv_sum;
  return Status::kSuccess;
}

/// Convenience form returning a vector; throws specdec::error on bad input.
inline std::vector<float> logits_to_probs(std::span<const float> logits, const SamplingParams& params) {
  check(params);
  std::vector<float> probs(logits.size());
  const Status s = logits_to_probs(logits, params, std::span<float>(probs));
  if (s != Status::kSuccess) throw error(s, std::string("logits_to_probs: ") + to_string(s));
  return probs;
}

}  // namespace specdec
