// specdec — requests, results, options and metrics of the speculative decoder (plain data; no torch).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "specdec/decoder/length_policy.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/block.hpp"
#include "specdec/sampling/params.hpp"

namespace specdec::models {
class Tokenizer;
}

namespace specdec::decoder {

using proposers::RequestId;

/// One generation request.
struct GenerationRequest {
  std::vector<std::int64_t> prompt;             ///< token ids, at least one
  SamplingParams params{};                      ///< temperature 0 = greedy; seed keys the request's random stream
  std::int64_t max_new_tokens = 128;            ///< >= 1
  std::vector<std::int64_t> stop_token_ids;     ///< e.g. EOS; the stop token is emitted and ends the request
  std::vector<std::string> stop_strings;        ///< needs DecoderOptions::detokenize; the token completing one is emitted last
  std::int32_t num_speculative_tokens = -1;     ///< g for this request; -1 = DecoderOptions::num_speculative_tokens
  /// Whether the adaptive policy chooses this request's g each step (in [0, g]). Unset: DecoderOptions::adaptive decides
  /// (enabled, and for a sampling request also sampled). false opts the request out: every step drafts g (up to the
  /// proposer and the room left); true opts a sampling request in (its tokens for a seed then depend on the g chosen).
  std::optional<bool> adaptive;
  /// How the request's drafts are verified: token by token (default) or jointly (block verification, Sun et al. 2024;
  /// lossless, never fewer accepted drafts in expectation). Applies to chains; a step whose batch holds a draft tree is
  /// verified token by token (tree verification).
  VerifyMethod verify_method = VerifyMethod::kToken;
  /// With a proposer of named members (a ProposerChain): the members this request drafts with, by the names they were
  /// added under, in the request's own priority order (e.g. {"suffix"} to leave a draft model out, or {"draft",
  /// "suffix"} to reverse the chain). Empty: every member in the chain's order. add_request refuses an unknown or
  /// repeated name, and any name when the decoder's proposer has no named members.
  std::vector<std::string> proposers;
};

enum class FinishReason : std::uint8_t {
  kNone,        ///< still running
  kLength,      ///< max_new_tokens reached, or the target's context length (prompt + generated tokens)
  kStopToken,   ///< a stop token id was emitted
  kStopString,  ///< a stop string appeared in the generated text
  kCancelled,   ///< cancel() was called
};
const char* to_string(FinishReason reason) noexcept;

/// Counters of one request (or of everything, in DecoderMetrics::total).
struct RequestMetrics {
  std::int64_t target_forwards = 0;      ///< decoding steps the request took part in (= verification forwards)
  std::int64_t drafted = 0;              ///< draft tokens proposed (tree: nodes)
  std::int64_t accepted = 0;             ///< draft tokens accepted
  std::int64_t emitted = 0;              ///< tokens emitted (accepted + recovered/bonus, after stop truncation)
  std::int64_t steps_with_drafts = 0;    ///< steps where at least one draft was proposed
  /// proposed_at[i] / accepted_at[i]: drafts proposed / accepted at depth i of a step (chains: draft position i).
  std::vector<std::int64_t> proposed_at, accepted_at;
  /// With DecoderOptions::measure_expected_acceptance: over the steps of sampled chains with draft probabilities, the sums
  /// of the expected number of accepted drafts given the drafted block under token-level and under block verification
  /// (specdec::expected_accepted_drafts), whichever method the request used: a paired comparison of the two methods on
  /// the same drafts, free of the accept draws' noise.
  double expected_accepted_token = 0, expected_accepted_block = 0;
  std::int64_t expected_steps = 0;  ///< steps in those sums
  /// Shadow probes (AdaptiveSpeculation::shadow_probes): plain steps whose one unverified lookup draft was compared with
  /// the token the step emitted, and how many of those drafts equalled it.
  std::int64_t shadow_probes = 0, shadow_accepted = 0;

  /// accepted / drafted (0 when nothing was drafted).
  double acceptance_rate() const { return drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
  /// Spec-Bench's tau: tokens emitted per target forward, counting the recovered/bonus token.
  double mean_accepted_length() const {
    return target_forwards ? static_cast<double>(emitted) / static_cast<double>(target_forwards) : 0.0;
  }
  /// accepted_at[i] / proposed_at[i].
  std::vector<double> acceptance_by_position() const;
  void add(const RequestMetrics& other);
};

/// Decoder-wide timings and counters.
struct DecoderMetrics {
  RequestMetrics total;                    ///< summed over every request
  std::int64_t steps = 0;                  ///< step() calls that did work (each is one batched target forward)
  std::int64_t draft_positions = 0;        ///< sum over steps of the largest g proposed (sequential draft depth)
  double draft_seconds = 0;                ///< inside Proposer::propose / observe
  double target_seconds = 0;               ///< inside the target's verification forwards
  double overhead_seconds = 0;             ///< the rest of step(): batching, logits processing, verification, caches, callbacks
  double prefill_seconds = 0;              ///< target prefill + Proposer::begin_request (not part of steps)
  std::int64_t one_token_forwards = 0;     ///< target forwards with one token per request (plain steps + calibration)
  double one_token_seconds = 0;            ///< their total time
  std::int64_t verify_forwards = 0;        ///< target forwards with drafts
  double verify_seconds = 0;               ///< their total time
  double verify_tokens_per_request = 0;    ///< mean (K + 1) of those forwards, per request

  double step_seconds() const { return draft_seconds + target_seconds + overhead_seconds; }
  /// Emitted tokens per second of step time (prefill excluded).
  double tokens_per_second() const;
  /// Mean time of a 1-token target forward (0 when never measured).
  double one_token_forward_seconds() const;
  /// c: mean draft time per sequential draft position / the 1-token target forward time.
  double cost_ratio() const;
  /// c against an external 1-token forward time (e.g. the mean of a baseline run over the same prompts).
  double cost_ratio(double one_token_seconds) const;
  /// r: mean verification forward time / the 1-token target forward time (1 when not measured).
  double verify_cost_ratio() const;
  /// r against an external 1-token forward time.
  double verify_cost_ratio(double one_token_seconds) const;
  /// Mean drafts per request and step over the steps that drafted.
  double mean_gamma() const;
  /// Overhead as a fraction of step time.
  double overhead_fraction() const;
  /// theory::walltime_improvement(a, g, c, r) for the measured a, mean g, c and r: E[tokens per step] / (r + g c).
  double theoretical_speedup() const;
  /// The same with c and r taken against an external 1-token forward time.
  double theoretical_speedup(double one_token_seconds) const;
};

/// Result of one request.
struct GenerationResult {
  RequestId id = -1;
  std::vector<std::int64_t> tokens;    ///< generated tokens (prompt excluded)
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_string;             ///< the stop string that matched (kStopString)
  RequestMetrics metrics;
};

/// Streams emitted tokens: called after each step with the tokens a request emitted in it (in order), and finished = true on
/// its last call.
using TokenCallback = std::function<void(RequestId id, std::span<const std::int64_t> tokens, bool finished)>;

/// One request's part of a decoding step, for a step observer (SpeculativeDecoder::set_step_observer): what the
/// proposer drafted, how many of those drafts the policy verified and how many the target accepted. Offline analyses of
/// drafters and draft-length policies read these (bench/policy_ceiling.py). The spans are valid during the call only.
struct StepTrace {
  RequestId id = -1;
  std::int64_t step = 0;       ///< the decoder's step() calls that did work before this one (DecoderMetrics::steps)
  std::int64_t position = 0;   ///< sequence index of the request's first draft (its context length before the step)
  std::int32_t proposed = 0;   ///< drafts the proposer returned (a tree: its nodes), before any cut by the policy
  std::int32_t verified = 0;   ///< drafts verified (a chain: the first `verified` of the proposal)
  std::int32_t accepted = 0;   ///< verified drafts the target accepted
  std::int32_t emitted = 0;    ///< tokens the step emitted (accepted + the recovered or bonus token, less a stop's cut)
  bool tree = false;           ///< the proposal is a tree (confidence is then per node, in the proposal's node order)
  /// Per proposed draft, the proposer's chance that it is accepted given the drafts before it on its path (a chain:
  /// conditional per position); empty when the proposer reports none.
  std::span<const float> confidence;
  /// A tree's parent node per proposed draft (0 = the root, j = draft j - 1; DraftBatch::parents); empty for a chain.
  std::span<const std::int64_t> parents;
  /// The accepted path's node indices (1-based, in the verified drafts: the proposal's when nothing was cut).
  std::span<const std::int64_t> accepted_nodes;
};
using StepObserver = std::function<void(const StepTrace&)>;

/// Turns one token id into its bytes (for stop strings). Keep the decoder tokenizer-agnostic: any function will do.
using Detokenizer = std::function<std::string(std::int64_t token)>;
/// A Detokenizer over a tokenizer with token_to_piece(int32) (models::Tokenizer, or an engine's own). The tokenizer must
/// outlive the function.
template <class Tokenizer>
Detokenizer make_detokenizer(const Tokenizer& tokenizer) {
  return [t = &tokenizer](std::int64_t token) { return std::string(t->token_to_piece(static_cast<std::int32_t>(token))); };
}

class DeviceBackend;  // device_backend.hpp
/// Makes a decoder's DeviceBackend (one per decoder instance).
using DeviceBackendFactory = std::function<std::unique_ptr<DeviceBackend>()>;

struct DecoderOptions {
  /// g (>= 0): drafts per step, or with the adaptive policy the most a step may draft; 0 = autoregressive decoding.
  std::int32_t num_speculative_tokens = 4;
  /// The draft-length policy (length_policy.hpp; adaptive.enabled, off by default, on in specdec-generate): each step
  /// picks every request's g in [0, num_speculative_tokens] to maximise expected tokens per second, from the request's
  /// recent acceptance by position and the target's cost of (g + 1)-token verifications learned from this run's own
  /// steps.
  AdaptiveSpeculation adaptive;
  Detokenizer detokenize;                   ///< needed by requests with stop strings
  /// Time a 1-token target forward of the running batch once (rolled back; not counted as a step) when no plain step has
  /// measured it yet: needed for the cost ratios c and r of the metrics (the adaptive policy learns its costs from the
  /// run's steps and does not need it). Off: c and r stay unmeasured in speculative runs without plain steps.
  bool calibrate = true;
  /// Timed forwards of the calibration (after one untimed warm-up forward); their mean is the reference.
  std::int32_t calibration_forwards = 3;
  /// Fill RequestMetrics::expected_accepted_token/_block (reads every draft and target row of each chain step once more).
  bool measure_expected_acceptance = false;
  /// For a target whose rows live on a GPU: verification, feature rows and copies there (device_backend.hpp), e.g.
  /// specdec::torch::make_device_backend. Empty: a step whose rows are on a device throws specdec::error naming this.
  DeviceBackendFactory device_backend;
};

}  // namespace specdec::decoder
