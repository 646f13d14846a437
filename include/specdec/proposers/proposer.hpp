// Proposer: what the speculative decoder asks of a draft source (a small draft model, n-gram lookup, EAGLE heads, ...).
//
// The decoder drives a batch of requests. Each request has a stable RequestId; its context is the token sequence so far
// (prompt + emitted tokens). The target's KV cache always holds context[0 .. n-1) — every token except the LAST one, which
// was emitted by the previous step (or is the last prompt token) and is fed to the target as the root of the next step.
//
// One decoding step, as the proposer sees it:
//   1. propose(requests)   one ProposeRequest per active request (context, params, max_drafts = g for this step,
//                          position = context.size() = sequence index of the first draft token). Returns a DraftBatch:
//                          up to g drafts per request as a chain, or a tree (depth <= g) given by parent indices.
//   2. the decoder runs ONE target forward over [last token, drafts...] of every request and verifies the drafts.
//   3. observe(feedback)   one StepFeedback per request that is still running: how many drafts were accepted (which tree
//                          nodes), the emitted token (recovered or bonus; it is in no cache yet and is fed next step) and the
//                          new context. A stateful proposer rolls its own caches back to the accepted prefix here.
// Requests enter with begin_request (after the target's prefill of context[0 .. n-1)) and leave with end_request (finished,
// stopped or cancelled; observe is not called for a request's final step).
//
// Drafts may be deterministic (DraftBatch::probs undefined: accepted with probability p(x); n-gram, argmax heads) or sampled
// (probs [N, V] float32 rows in host memory, specdec::Rows: row j is the distribution draft j was drawn from, processed
// with the request's SamplingParams — temperature, top-k, top-p, min-p — exactly as the target's rows are; see
// specdec::logits_to_probs). For trees with probs,
// row j is the distribution of node j + 1's parent that draft j was drawn from (siblings drawn i.i.d. from it). A sampling
// proposer must draw with its own deterministic random stream, distinct from the verifier's (same seed, different key).
//
// Optional capabilities, detected at compile time:
//   - target features (wants_target_features<P>): P has `TargetFeatureSpec target_feature_spec() const`. The decoder then asks
//     its target forwards for those hidden states and hands the proposer the rows of every token that enters the target cache,
//     in order, exactly once: context[0 .. n-1) at begin_request (RequestContext::features; 0 rows when the prompt has one
//     token) and [root, accepted drafts...] at observe (StepFeedback::features; num_accepted + 1 rows).
//   - trees (supports_trees<P>): `static constexpr bool supports_trees = true;`. Without it a DraftBatch with parents is an error.
//   - vocabulary (has_vocab_size<P>): `std::int64_t vocab_size() const`; the decoder refuses a proposer whose vocabulary differs
//     from the target's.
//   - named members (has_member_names<P>): `std::int32_t member_index(std::string_view) const`; a request may then name the
//     members it drafts with, in its own order (GenerationRequest::proposers -> ProposeRequest::members).
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "specdec/rows.hpp"
#include "specdec/sampling/params.hpp"

namespace specdec::proposers {

/// Stable identifier of a request for its whole life (begin_request .. end_request). Not a slot index; never reused while live.
using RequestId = std::int64_t;

/// Which target hidden states a proposer wants (mirrors models::ForwardBatch::return_final_hidden / hidden_layers).
struct TargetFeatureSpec {
  bool final_hidden = false;              ///< hidden state before and after the target's final norm
  std::vector<std::int64_t> layers;       ///< residual stream after these decoder blocks (0-based), in this order
};

/// Target hidden states for consecutive tokens of one request: [rows, hidden] float32 each, on the target's device
/// (undefined when not asked).
struct TargetFeatures {
  std::int64_t start = 0;                  ///< sequence index of the first row's token
  std::int64_t rows = 0;
  Rows hidden_pre_norm;                    ///< when final_hidden
  Rows hidden_post_norm;                   ///< when final_hidden
  std::vector<Rows> layer_hidden;          ///< one per TargetFeatureSpec::layers entry
};

/// A request entering the proposer. The target cache holds context[0 .. n-1) at this point.
struct RequestContext {
  RequestId id = 0;
  std::span<const std::int64_t> context;   ///< the prompt (valid only during the call)
  const SamplingParams* params = nullptr;  ///< the request's params (valid until end_request)
  const TargetFeatures* features = nullptr;///< rows for context[0 .. n-1) when the proposer wants target features, else null
};

/// One request's part of a propose() call.
struct ProposeRequest {
  RequestId id = 0;
  std::span<const std::int64_t> context;   ///< prompt + emitted tokens; the last one is not yet in the target cache
  const SamplingParams* params = nullptr;
  std::int32_t max_drafts = 0;             ///< g for this step (>= 0): chain length, or tree depth, at most this
  std::int64_t position = 0;               ///< context.size(): sequence index of the first draft token
  /// For a proposer with named members (has_member_names: a ProposerChain): the members this request drafts with, in its
  /// own priority order (indices from member_index); empty = every member in the proposer's order. Others ignore it.
  std::span<const std::int32_t> members;
};

/// Drafts of a whole propose() call, in the verifier's ragged layout, requests in the order they were given.
struct DraftBatch {
  std::vector<std::int64_t> token_ids;      ///< [N] drafts of request 0, then request 1, ...
  std::vector<std::int64_t> cu_num_drafts;  ///< [B + 1] prefix sums, cu[0] = 0 (B = number of ProposeRequests)
  Rows probs;                               ///< [N, V] float32 in host memory, or undefined for deterministic drafts
  /// Per-request draft kind, for batches that mix them (a ProposerChain whose members differ): empty = every request is as
  /// `probs` says; otherwise [B] entries, 1 = request b's rows of `probs` are its draft distributions, 0 = its drafts are
  /// deterministic (its rows of `probs` are never read). A 1 needs `probs` defined.
  std::vector<std::uint8_t> has_probs;
  /// Empty = every request's drafts form a chain. Otherwise [B] entries, each empty (chain) or one parent node per draft of
  /// that request: draft j is node j + 1 and parents[j] is in [0, j] (node 0 = the root, the last context token).
  std::vector<std::vector<std::int64_t>> parents;
  /// Empty, or [N]: the proposer's estimate, for each draft, of the chance that it is accepted once the drafts before it
  /// (a tree node's ancestors) were (EAGLE: the head's largest probability at that step; a tree node: the head's
  /// probability of its token after its parent's path), or -1 where it has none (a ProposerChain's
  /// lookup members). A proposer that fills it says so with reports_confidence() (has_draft_confidence); the adaptive
  /// policy then cuts deterministic chains (and greedy requests' trees) where their expected tokens per second peak
  /// (AdaptiveSpeculation::confidence_cut). A value must be a function of the drafts before it (and of the draft
  /// distribution at its step), not of the draft itself.
  std::vector<float> confidence;

  std::int64_t num_requests() const { return cu_num_drafts.empty() ? 0 : static_cast<std::int64_t>(cu_num_drafts.size()) - 1; }
  std::int64_t num_drafts(std::int64_t b) const { return cu_num_drafts[b + 1] - cu_num_drafts[b]; }
  /// Whether request b's drafts come with probabilities (has_probs[b], or probs.defined() when has_probs is empty).
  bool request_has_probs(std::int64_t b) const {
    return has_probs.empty() ? probs.defined() : has_probs[static_cast<std::size_t>(b)] != 0;
  }
  /// Whether request b's drafts form a tree (parents[b] given and non-empty), not a chain.
  bool request_is_tree(std::int64_t b) const {
    return !parents.empty() && !parents[static_cast<std::size_t>(b)].empty();
  }
  /// Empty batch for `num_requests` requests (every request gets 0 drafts).
  static DraftBatch empty(std::int64_t num_requests) {
    DraftBatch d;
    d.cu_num_drafts.assign(static_cast<std::size_t>(num_requests + 1), 0);
    return d;
  }
  /// Appends the next request's chain (or tree, when `tree_parents` is non-empty) of drafts.
  void append(std::span<const std::int64_t> drafts, std::span<const std::int64_t> tree_parents = {}) {
    if (cu_num_drafts.empty()) cu_num_drafts.push_back(0);
    const std::size_t b = cu_num_drafts.size() - 1;
    token_ids.insert(token_ids.end(), drafts.begin(), drafts.end());
    cu_num_drafts.push_back(cu_num_drafts.back() + static_cast<std::int64_t>(drafts.size()));
    if (!tree_parents.empty() || !parents.empty()) {
      parents.resize(b + 1);
      parents[b].assign(tree_parents.begin(), tree_parents.end());
    }
  }
};

/// What verification made of one request's drafts (only for requests that keep running).
struct StepFeedback {
  RequestId id = 0;
  std::int32_t num_drafts = 0;                    ///< drafts proposed for this request this step
  std::int32_t num_accepted = 0;                  ///< accepted drafts (chain prefix length / tree path length)
  std::span<const std::int64_t> accepted_nodes;   ///< tree node indices (1-based) of the accepted path; chains: 1..num_accepted
  std::int64_t emitted_token = -1;                ///< recovered/bonus token: last element of `context`, in no cache yet
  std::span<const std::int64_t> context;          ///< the new context (old context + accepted drafts + emitted token)
  const TargetFeatures* features = nullptr;       ///< rows for [root, accepted drafts] when wanted, else null
};

/// The interface every proposer satisfies. See the file comment for the protocol.
template <class P>
concept Proposer = requires(P& p, const RequestContext& ctx, RequestId id, std::span<const ProposeRequest> requests,
                            std::span<const StepFeedback> feedback) {
  { p.begin_request(ctx) };
  { p.end_request(id) };
  { p.propose(requests) } -> std::same_as<DraftBatch>;
  { p.observe(feedback) };
};

/// Capability: the proposer reads target hidden states.
template <class P>
concept wants_target_features = requires(const P& p) {
  { p.target_feature_spec() } -> std::convertible_to<TargetFeatureSpec>;
};

/// Capability: the proposer may return trees.
template <class P>
concept supports_trees = requires { requires static_cast<bool>(P::supports_trees); };

/// Capability: whether the proposer's drafts are lookups (deterministic drafts from the context, cheap, and a proposal
/// that is never verified changes nothing but the proposer catching up with the context), so the decoder may ask for a
/// draft it does not verify: a shadow probe (AdaptiveSpeculation::shadow_probes). A run-time answer, so a chain can say
/// whether all its members are lookups.
template <class P>
concept has_lookup_drafts = requires(const P& p) {
  { p.drafts_are_lookups() } -> std::convertible_to<bool>;
};

/// Capability: the proposer fills DraftBatch::confidence when reports_confidence() says so (a run-time answer, so a chain
/// can say whether any member does).
template <class P>
concept has_draft_confidence = requires(const P& p) {
  { p.reports_confidence() } -> std::convertible_to<bool>;
};

/// Capability: the proposer has a vocabulary the decoder can check against the target's.
template <class P>
concept has_vocab_size = requires(const P& p) {
  { p.vocab_size() } -> std::convertible_to<std::int64_t>;
};

/// Capability: the proposer is made of named members a request can choose and order (GenerationRequest::proposers):
/// member_index(name) is the member's index for ProposeRequest::members, or throws specdec::error for a name it does not
/// have (or has twice).
template <class P>
concept has_member_names = requires(const P& p, std::string_view name) {
  { p.member_index(name) } -> std::convertible_to<std::int32_t>;
};

/// No drafts at all: the decoder then runs plain autoregressive decoding through the same loop and the same RNG contract
/// (the baseline every speedup is measured against).
struct NoProposer {
  void begin_request(const RequestContext&) {}
  void end_request(RequestId) {}
  DraftBatch propose(std::span<const ProposeRequest> requests) {
    return DraftBatch::empty(static_cast<std::int64_t>(requests.size()));
  }
  void observe(std::span<const StepFeedback>) {}
};

static_assert(Proposer<NoProposer>);

}  // namespace specdec::proposers
