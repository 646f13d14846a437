// specdec — the target's verification cost profiled once, before serving (as vLLM profiles its draft-length cost model at
// startup), for the adaptive draft-length policy (AdaptiveSpeculation::forward_seconds).
//
// The policy learns F(B, T) from the run's own steps when no profile is given (ForwardCostModel), but a run's steps see
// the sizes the policy already chose, a few times each, on a host whose other work moves single steps by 10-30%: sizes
// tried rarely keep noisy means (a 4-row step costing 2x a 1-row one), and the policy then stays at the sizes it knows.
// A profile times every size 1 .. max_rows in rounds, each between 1-row forwards, and keeps medians.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "specdec/decoder/length_policy.hpp"
#include "specdec/models/causal_lm.hpp"

namespace specdec::decoder {

/// Seconds a step of t = 1 .. max_rows new token rows (a chain) of one sequence costs a decode after `context` cached
/// tokens, as the steps of a mostly plain decode see it: index 0 is a 1-row forward among 1-row forwards (what plain
/// decoding pays a token), index t - 1 for t >= 2 is a t-row forward that follows 1-row forwards plus what it adds to
/// the 1-row forward after it. On this project's host a forward of many rows slows the next 1-row forward by 10-25%
/// (the time spreads over every product of that forward; neither the page-fault count nor the core's clock changes, and
/// a 3 ms pause between two 1-row forwards slows the second as much: the weights' share of the shared L3 decays while a
/// longer forward runs), and a 1-row forward timed right after one costs about 1.2 plain ones, so a profile that timed
/// sizes 1, 2, .. back to back priced its 1-row forward high and every verification low (2 rows at 1.08 one-row
/// forwards where a decode pays 1.17-1.22). Each of `rounds` rounds (after a warm-up round that times nothing) goes
/// through every size t: a 1-row forward to settle, a timed 1-row forward (the plain cost), the timed t-row forward,
/// and the timed 1-row forward after it, each rolled back. Each kind keeps its median; the result is made
/// non-decreasing in t. Index t - 1 holds t rows (fewer than max_rows only where the model's context window is shorter
/// than max_rows + 1). Uses one fresh cache slot of `target`, released before returning (also when a forward throws).
/// Clock: where the times come from (tests pass a clock their model advances); a model with timed_forward
/// (models::HasTimedForward) times its own forwards instead, with device events on a GPU. `progress`, when given, is
/// called with (rounds done, rounds + 1) after the warm-up round and after each timed round, so a caller can show how
/// far it is.
template <class Clock = std::chrono::steady_clock, models::CausalLM M>
std::vector<double> profile_forward_seconds(M& target, std::int64_t max_rows, std::int64_t context = 128,
                                            int rounds = 3, const std::function<void(int, int)>& progress = {}) {
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
  auto timed = [&](std::int64_t t) {  // one t-row forward after the context, rolled back; returns its seconds
    models::ForwardBatch step;
    step.slots = {slot};
    for (std::int64_t i = 0; i < t; ++i) step.token_ids.push_back(token(context + i));
    step.cu_num_tokens = {0, t};
    double s = 0;
    if constexpr (models::HasTimedForward<M>) {  // on the model's device (events on a GPU)
      s = target.timed_forward(step);
    } else {
      const auto start = Clock::now();
      (void)target.forward(step);
      s = std::chrono::duration<double>(Clock::now() - start).count();
    }
    target.truncate(slot, context);
    return s;
  };
  const auto sizes = static_cast<std::size_t>(max_rows);
  std::vector<double> plain;                                   // 1-row forwards after 1-row forwards
  std::vector<std::vector<double>> rows(sizes), after(sizes);  // t-row forwards, and the 1-row forward after each
  for (std::int64_t t = 1; t <= max_rows; ++t) (void)timed(t);  // warm-up: every size's buffers and code once
  if (progress) progress(1, rounds + 1);
  for (int round = 0; round < rounds; ++round) {
    for (std::int64_t t = 1; t <= max_rows; ++t) {
      (void)timed(1);
      plain.push_back(timed(1));
      rows[static_cast<std::size_t>(t - 1)].push_back(timed(t));
      after[static_cast<std::size_t>(t - 1)].push_back(timed(1));
    }
    if (progress) progress(round + 2, rounds + 1);
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double one = median(plain);
  std::vector<double> out(sizes);
  out[0] = one;
  for (std::size_t i = 1; i < sizes; ++i)
    out[i] = std::max(median(rows[i]) + std::max(median(after[i]) - one, 0.0), out[i - 1]);
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
