// specdec — per-request sampling parameters.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "specdec/sampling/status.hpp"

namespace specdec {

/// How one request turns logits into the distribution it samples from. The same parameters are applied to the
/// draft and to the target before verification (that is what keeps speculation lossless for any of them).
///
/// Order of application (see logits_to_probs): temperature, softmax, top-k, top-p, min-p, renormalise.
struct SamplingParams {
  float temperature = 1.0f;  ///< 0 = greedy (argmax, lowest id on ties); otherwise logits / temperature
  std::int32_t top_k = 0;    ///< keep the k most likely tokens; 0 = off
  float top_p = 1.0f;        ///< keep the smallest most-likely set with mass >= top_p; 1 = off
  float min_p = 0.0f;        ///< drop tokens with prob < min_p * max prob; 0 = off
  std::uint64_t seed = 0;    ///< key of the request's counter-based random stream

  bool greedy() const { return temperature == 0.0f; }
};

/// Checks every field's domain; returns kSuccess or kInvalidArgument with a message naming the field.
inline Status validate(const SamplingParams& p, std::string* message = nullptr) {
  auto fail = [&](const std::string& m) {
    if (message) *message = m;
    return Status::kInvalidArgument;
  };
  if (!(std::isfinite(p.temperature) && p.temperature >= 0.0f))
    return fail("temperature: expected a finite value >= 0, got " + std::to_string(p.temperature));
  if (p.top_k < 0) return fail("top_k: expected >= 0 (0 = off), got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return fail("top_p: expected a value in (0, 1], got " + std::to_string(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return fail("min_p: expected a value in [0, 1], got " + std::to_string(p.min_p));
  return Status::kSuccess;
}

/// Throwing form for public entry points.
inline void check(const SamplingParams& p) {
  std::string m;
  if (validate(p, &m) != Status::kSuccess) throw error(Status::kInvalidArgument, "SamplingParams." + m);
}

}  // namespace specdec
