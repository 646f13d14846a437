// specdec — the target's verification cost profiled once, before serving (as vLLM profiles its draft-length cost model at
// startup), for the adaptive draft-length policy (AdaptiveSpeculation::forward_seconds).
//
// The policy learns F(B, T) from the run's own steps when no profile is given (ForwardCostModel), but a run's steps see
// the sizes the policy already chose, a few times each, on a host whose other work moves single steps by 10-30%: sizes
// tried rarely keep noisy means (a 4-row step costing 2x a 1-row one), and the policy then stays at the sizes it knows.
// A profile times every size 1 .. max_rows in interleaved rounds and keeps each size's median.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "specdec/decoder/length_policy.hpp"
#include "specdec/models/causal_lm.hpp"

namespace specdec::decoder {

/// Seconds of one forward of t = 1 .. max_rows new token rows (a chain) of one sequence after `context` cached tokens,
/// median over `rounds` rounds that each time every size once (sizes interleaved, so a slow stretch of the host spreads
/// over all of them), then made non-decreasing in t. Index t - 1 holds t rows (fewer than max_rows only where the
/// model's context window is shorter than max_rows + 1). Uses one fresh cache slot of `target`, released before
/// returning (also when a forward throws).
template <models::CausalLM M>
std::vector<double> profile_forward_seconds(M& target, std::int64_t max_rows, std::int64_t context = 128,
                                            int rounds = 5) {
  max_rows = std::max<std::int64_t>(max_rows, 1);
  if constexpr (models::HasMaxSequenceLength<M>)  // a short context window: fewer cached tokens, and fewer rows if need be
    if (const std::int64_t room = static_cast<std::int64_t>(target.max_sequence_length()); room > 0) {
      max_rows = std::min(max_rows, std::max<std::int64_t>(room - 1, 1));
      context = std::min(context, room - max_rows);
    }
  context = std::max<std::int64_t>(context, 1);
  rounds = std::max(rounds, 1);
  const std::int64_t vocab = target.vocab_size();
  auto token = [vocab](std::int64_t i) { return (i * 7919 + 13) % vocab; };  // any ids: the cost does not depend on them
  const std::int64_t slot = target.allocate_sequence();
  struct Release {
    M& m;
    std::int64_t slot;
    ~Release() { m.free_sequence(slot); }
  } release{target, slot};
  models::ForwardBatch prompt;
  prompt.slots = {slot};
  for (std::int64_t i = 0; i < context; ++i) prompt.token_ids.push_back(token(i));
  prompt.cu_num_tokens = {0, context};
  prompt.last_logits_only = true;
  (void)target.forward(prompt);
  std::vector<std::vector<double>> seconds(static_cast<std::size_t>(max_rows));
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms every size up and is not kept
    for (std::int64_t t = 1; t <= max_rows; ++t) {
      models::ForwardBatch step;
      step.slots = {slot};
      for (std::int64_t i = 0; i < t; ++i) step.token_ids.push_back(token(context + i));
      step.cu_num_tokens = {0, t};
      const auto start = std::chrono::steady_clock::now();
      (void)target.forward(step);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      target.truncate(slot, context);
      if (round > 0) seconds[static_cast<std::size_t>(t - 1)].push_back(s);
    }
  }
  std::vector<double> out(static_cast<std::size_t>(max_rows));
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto& v = seconds[i];
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    out[i] = v[v.size() / 2];
    if (i > 0) out[i] = std::max(out[i], out[i - 1]);
  }
  return out;
}

/// A ForwardCostFn from a profile (profile_forward_seconds): F(B, T) = the profiled cost of T rows (the products, which
/// dominate, scale with the rows of the whole batch), extended past the profile by its last step's slope.
inline ForwardCostFn forward_cost_from_profile(std::vector<double> profile) {
  auto p = std::make_shared<const std::vector<double>>(std::move(profile));
  return [p](std::int64_t /*requests*/, std::int64_t tokens) {
    const auto& v = *p;
    if (v.empty()) return 1.0;
    const auto n = static_cast<std::int64_t>(v.size());
    const std::int64_t t = std::max<std::int64_t>(tokens, 1);
    if (t <= n) return v[static_cast<std::size_t>(t - 1)];
    const double slope = n >= 2 ? v[static_cast<std::size_t>(n - 1)] - v[static_cast<std::size_t>(n - 2)] : v[0];
    return v.back() + slope * static_cast<double>(t - n);
  };
}

}  // namespace specdec::decoder
