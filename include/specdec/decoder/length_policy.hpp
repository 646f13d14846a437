// specdec — the adaptive draft-length policy: how many drafts (g, possibly 0) each request proposes in a step.
//
// Each step the policy picks g_b per request to maximise the batch's expected tokens per second,
//
//     sum_b E_b(g_b)  /  ( F(B, B + sum_b w_b g_b) + d * max_b g_b )
//
//   E_b(g)  expected tokens request b emits with g drafts: 1 + sum_{i<=g} h_1 ... h_i, where h_i is the request's
//           decayed estimate of P(draft i accepted | drafts 1..i-1 accepted) (AcceptanceEstimate). Per position rather
//           than one rate a, because copied drafts are accepted in runs (a copy continues or stops): h_1 may be 0.5 while
//           h_5 is 0.9, and a single a would cut such drafts short.
//   F(B, T) seconds of a verification (target forward + logits processing + verification) of T token rows over B
//           requests (ForwardCostModel: per B a linear fit and the mean of each step size seen, with forgetting, learned
//           from the run's own steps, plain ones included; or a fixed function an engine profiled).
//   w_b     token rows per draft depth (1 for chains; trees: nodes per level, from the request's last drafts).
//   d       seconds of one sequential draft position (measured from Proposer::propose, or fixed).
//
// With these estimates, one request with a constant h = a is Leviathan's walltime_improvement(a, g, c, r(g)) with
// c = d / F(1, 1) and r(g) = F(1, 1 + g) / F(1, 1) (theory.hpp). A request whose best g is 0 decodes plainly and, after
// probe_interval such steps, drafts one token to refresh its estimate, so it returns to drafting when the text starts
// to repeat (the first probe comes sooner, after first_probe_interval steps); each rejected probe doubles the wait (up
// to probe_backoff intervals), an accepted draft resets it, and an accepted probe is followed by another on the next
// plain step, so the estimate climbs back in a few steps. Where the proposer's drafts are lookups, shadow probes replace
// those probes: every plain step compares one unverified lookup draft with the token it emits (shadow_probes); and by
// default each step proposes at the bound, the policy chooses g over the depths proposed and cuts the rest, and the
// whole proposal is compared with the emitted tokens (cut_lookups).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

namespace specdec::decoder {

/// Seconds of a target verification over `requests` requests with `tokens` token rows in all (each request's root plus
/// its drafts): the cost model the adaptive policy uses.
using ForwardCostFn = std::function<double(std::int64_t requests, std::int64_t tokens)>;

/// Options of the adaptive draft-length policy (DecoderOptions::adaptive).
struct AdaptiveSpeculation {
  /// Choose g per request and step in [0, num_speculative_tokens] (the request's or the decoder's) for greedy requests
  /// (temperature 0), whose tokens equal plain decoding whatever g is. Off: every step proposes num_speculative_tokens
  /// drafts. A request can override this and `sampled` (GenerationRequest::adaptive). Off in the library, so a
  /// decoder's drafting never depends on timings unless asked for (specdec-generate turns it on: it is the best measured
  /// setting for the bundled model).
  bool enabled = false;
  /// Also for requests that sample. Their tokens keep the target's distribution, but which tokens a seed gives then
  /// depends on the g chosen each step, so on the run's timings and on the batch: the seed-for-seed reproducibility of
  /// the promise "a request's tokens do not depend on its batch" is given up. Off by default for that reason.
  bool sampled = false;
  /// Sampled requests when `sampled` is off: each decides alone whether to draft, from its own drafting steps against a
  /// verification cost fixed in advance instead of timed. sampled_cost(x) is the cost of a step with x draft rows
  /// relative to a plain step (sampled_cost(0) = 1), sampled_draft_cost the cost of one draft position on that scale. A
  /// request drafts its full g while its drafting steps (DraftingYield: decayed means of the tokens each emitted and the
  /// rows it verified) emitted more than they cost, tokens / (sampled_cost(rows) + sampled_draft_cost * rows) > 1, and
  /// otherwise steps plainly with the probes of the greedy policy. All or nothing, because a lookup proposer already
  /// drafts per step only as far as its match goes (long where copying goes on): what is left to decide is whether a
  /// request's drafting pays at all. Its g, and so its tokens, are then a function of its own tokens: reproducible for
  /// a seed, independent of the batch and of timings. Empty: sampled requests draft their full g every step.
  std::function<double(std::int64_t draft_rows)> sampled_cost;
  double sampled_draft_cost = 0.0;
  /// Per-position acceptance estimates keep this weight of their past each time the position is tested.
  double acceptance_decay = 0.9;
  /// The cost model's linear fits keep this weight of their past per observed step.
  double cost_decay = 0.98;
  /// A request at g = 0 that has drafted with accepted drafts probes (drafts one token, to learn whether drafting pays
  /// again) after this many plain steps.
  std::int32_t probe_interval = 16;
  /// The plain steps before a request's first probe, and the least wait after a rejected probe: a request that went
  /// plain on its first few drafts (an answer's opening words, before it starts copying) looks again soon, since it has
  /// little evidence yet.
  std::int32_t first_probe_interval = 4;
  /// Each rejected probe doubles the plain steps before the next one (at least first_probe_interval), up to
  /// probe_backoff * probe_interval; any accepted draft that was not a probe brings the wait back to probe_interval, and
  /// an accepted probe makes the next plain step probe again. A probe for which the proposer finds nothing to draft
  /// costs a plain step and is tried again the next step. (On text that never repeats, e.g. chat, each probe costs about
  /// r(2) - 1 of a plain step, 0.30 on the bundled model: probes 4, 12, 28, 60, 124, 252, ... plain steps in, plus
  /// those re-tried until the proposer drafts, put 5-9% of chat's 128 steps in drafting, about 1.5-2.7% of the plain
  /// speed, in bench/compare-adaptive.sh and specdec-generate runs.)
  std::int32_t probe_backoff = 8;
  /// Shadow probes instead of probes, where the proposer's drafts are lookups (proposers::has_lookup_drafts: n-gram,
  /// suffix, a chain of them): each plain step of a request under the joint policy asks the proposer for one draft (a
  /// tree's first level: every child of the root) and does not verify it, but compares it with the token the step
  /// emits. A deterministic draft is accepted exactly when the target's token equals it (greedy: the argmax; sampled:
  /// a token drawn from p equals x with probability p(x), the acceptance probability), so the comparison is a probe's
  /// observation for the price of a lookup, and the request needs no drafting step to learn that drafting pays again.
  /// Only steps where the proposer finds a draft count, as only those would draft.
  bool shadow_probes = true;
  /// With shadow probes: every step of such a request proposes at its bound (g drafts, or as many as the lookup finds),
  /// the policy then chooses g for the depths proposed and the drafts below it are cut, and the whole proposal is
  /// compared with the tokens the step emits: a proposal's first min(depth, emitted) positions are observed whether or
  /// not they were verified (what was verified, plus the emitted token against the first draft cut; a plain step's
  /// comparison is the shadow probe). Off: g is chosen before proposing and plain steps ask for one draft to compare.
  bool cut_lookups = true;
  /// Where the proposer reports how sure it is of each draft (proposers::has_draft_confidence: EAGLE chains, a chain with
  /// an EAGLE member): joint-policy requests propose at their bound (the proposer may stop sooner, as EAGLE does below
  /// its min_draft_prob), and each deterministic chain is cut where its expected tokens per second peak, with
  /// E(g) = 1 + sum_{i<=g} c_1 ... c_i from the drafts' own confidences c_i instead of the request's history (EAGLE-2's
  /// observation: a head's probability is close to its acceptance rate; docs/adaptive-policy.md). Drafts without a
  /// confidence (a lookup member's) are cut by the history estimate, as cut_lookups does. A sampled request choosing
  /// alone (sampled_cost) whose chain is deterministic with confidences (EAGLE's argmax drafts, whose confidence is the
  /// head's top probability at the request's temperature) is cut the same way, alone, against sampled_cost: a function
  /// of its own drafts, so its tokens stay reproducible for a seed. Sampled drafts are never cut (a cut that looked at
  /// later drafts would change the law of the ones kept). Output stays lossless either way.
  bool confidence_cut = true;
  /// A fixed cost model (e.g. profiled by an engine before serving). Empty: learned from the run's own timed steps.
  ForwardCostFn forward_seconds;
  /// Fixed seconds per sequential draft position; < 0: measured from Proposer::propose.
  double draft_seconds_per_position = -1.0;
};

/// A request's acceptance by draft position, decayed: h(i) = P(draft i accepted | drafts 1..i-1 accepted).
class AcceptanceEstimate {
 public:
  explicit AcceptanceEstimate(double decay = 0.9, double prior = 0.5) : decay_(decay), prior_(prior) {}
  /// One verified chain (or a tree's deepest path): `drafted` draft positions tested in order, the first `accepted` kept.
  void observe(std::int64_t drafted, std::int64_t accepted);
  /// Estimate at position i (1-based) from decayed accepted / tested counts (every position decays at every observation,
  /// tested or not). Position 1 starts from one pseudo-observation of the prior, which fades like the data, so a request
  /// whose drafts always fail goes to 0; position i > 1 leans on h(i - 1) with the weight of one observation, so a depth
  /// little or long not tried drifts back to the one before it. Depths never tried inherit the deepest estimate.
  double h(std::int64_t i) const;
  /// 1 + sum_{i<=g} h(1) ... h(i): expected tokens of a step with g drafts (the bonus token included).
  double expected_tokens(std::int64_t g) const;
  /// Fills out[g] = expected_tokens(g) for g in [0, out.size()).
  void expected_tokens(std::span<double> out) const;

 private:
  double decay_, prior_;
  std::vector<double> tested_, accepted_;  // decayed counts per position (0-based)
};

/// What a request's drafting steps yielded, decayed: the mean tokens a drafting step emitted and the mean draft rows it
/// verified (sums of the observations, each decaying by `decay` per observation, with one pseudo-observation of the
/// prior that fades like the data). The sampled requests' all-or-nothing rule (AdaptiveSpeculation::sampled_cost).
class DraftingYield {
 public:
  explicit DraftingYield(double decay = 0.9, double prior_tokens = 1.5, double prior_rows = 1.0)
      : decay_(decay), weight_(1.0), tokens_(prior_tokens), rows_(prior_rows), positions_(prior_rows) {}
  /// One drafting step: `rows` draft rows verified, `tokens` emitted (accepted drafts + 1), drafted in `positions`
  /// sequential draft positions (a tree's depth; -1: as many as rows, a chain).
  void observe(std::int64_t rows, std::int64_t tokens, std::int64_t positions = -1);
  double tokens() const { return tokens_ / weight_; }
  double rows() const { return rows_ / weight_; }
  double positions() const { return positions_ / weight_; }
  /// tokens() > cost(rows()) + draft_cost * positions(), with cost interpolated linearly between whole rows: a tree's
  /// rows cost verification each, its drafting one draft position per level.
  bool pays(const std::function<double(std::int64_t)>& cost, double draft_cost) const;

 private:
  double decay_, weight_, tokens_, rows_, positions_;
};

/// F(B, T) learned from timed verification steps: per batch size B, a weighted least-squares line
/// seconds = a_B + b_B (T - B) with exponential forgetting, and per step size T the decayed mean of its own steps, shrunk
/// towards the line by two pseudo-observations (costs need not be linear in the rows; sizes never seen follow the line).
/// The slope leans on a prior (prior_slope * a_B per token) until the run has steps of different sizes; a B never seen
/// uses the nearest B seen; before any step, a = 1 (a unit).
class ForwardCostModel {
 public:
  explicit ForwardCostModel(double decay = 0.98, double prior_slope = 0.1) : decay_(decay), prior_slope_(prior_slope) {}
  void observe(std::int64_t requests, std::int64_t tokens, double seconds);
  double predict(std::int64_t requests, std::int64_t tokens) const;
  /// predict(B, B + x) / predict(B, B): the verify cost ratio r of x extra token rows.
  double ratio(std::int64_t requests, std::int64_t extra_tokens) const;
  bool empty() const { return fits_.empty(); }

 private:
  struct Cell {
    double w = 0, y = 0;  // decayed count and sum of seconds of the steps with this many extra rows
  };
  struct Fit {
    double w = 0, x = 0, y = 0, xx = 0, xy = 0;  // decayed sums over (x = T - B, y = seconds)
    std::vector<Cell> cells;                      // by x
  };
  double decay_, prior_slope_;
  std::map<std::int64_t, Fit> fits_;
};

/// One request's inputs to choose_draft_lengths.
struct LengthChoice {
  std::int32_t max_g = 0;          ///< upper bound (room left, the request's or decoder's g)
  bool fixed = false;              ///< g = max_g, not chosen (opted out of the policy)
  double rows_per_depth = 1.0;     ///< token rows a draft depth adds (chains 1)
  std::span<const double> tokens;  ///< expected tokens per step for g = 0 .. max_g (tokens[0] = 1); size >= max_g + 1
};

/// The g per request maximising sum_b tokens_b[g_b] / (forward(B, B + sum_b rows_b g_b) + draft_seconds * max_b g_b), by
/// coordinate ascent from g = 0 (fixed requests at their max_g): each round moves the one request whose best jump up
/// raises the objective most. Exact for one request; ties keep the smaller g.
std::vector<std::int32_t> choose_draft_lengths(std::span<const LengthChoice> requests, const ForwardCostFn& forward,
                                               double draft_seconds);

}  // namespace specdec::decoder
