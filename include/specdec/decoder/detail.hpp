// specdec — the non-template parts of a decoding step (compiled in src/decoder/step.cpp): draft validation, the target's
// ragged forward batch, batched verification and stop-string matching. Internal to SpeculativeDecoder.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "specdec/decoder/device_backend.hpp"
#include "specdec/decoder/types.hpp"
#include "specdec/models/causal_lm.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/verify/host.hpp"

namespace specdec::decoder::detail {

/// Checks a proposer's DraftBatch against the step's requests: B + 1 offsets, at most max_drafts[b] drafts per chain (tree depth
/// at most max_drafts[b], at most max_tree_nodes nodes), ids in [0, V), probs [N, V] float32 when present, well-formed parents.
/// Throws specdec::error naming the request and what was wrong.
void check_draft_batch(const proposers::DraftBatch& drafts, std::span<const std::int32_t> max_drafts,
                       std::int64_t vocab_size, bool trees_allowed, std::int64_t max_tree_nodes);

/// The target forward of a step: request b feeds [roots[b], drafts of b...] into slot slots[b]; trees through parents.
models::ForwardBatch build_forward(const proposers::DraftBatch& drafts, std::span<const std::int64_t> roots,
                                   std::span<const std::int64_t> slots, const proposers::TargetFeatureSpec* features);

/// Depth (1-based) of every draft node of request b (chains: 1, 2, ...).
std::vector<std::int32_t> draft_depths(const proposers::DraftBatch& drafts, std::int64_t b);
/// The drafts of each request b down to depth[b] (a chain's first depth[b] drafts; a tree's nodes at depth <= depth[b],
/// in their order, parents renumbered), with their rows of probs and their confidences. Deterministic drafts only: throws
/// rather than cut a request whose drafts come with probabilities (request_has_probs). A tree request b with
/// best_nodes[b] set keeps instead its depth[b] best nodes by path confidence (best_tree_nodes).
proposers::DraftBatch cut_drafts(const proposers::DraftBatch& drafts, std::span<const std::int32_t> depth,
                                 std::span<const std::uint8_t> best_nodes = {});
/// Request b's tree nodes (0-based draft indices) best first by path confidence, the product of the confidences from the
/// root (EAGLE-2's value of a node; ties: the lower index). A node's path confidence is at most its parent's, so every
/// prefix of the order holds its nodes' ancestors: a tree. Needs DraftBatch::confidence for every node of b. With
/// `path`, also each node's path confidence (index 0: the root, 1; index j + 1: draft j).
std::vector<std::int64_t> best_tree_nodes(const proposers::DraftBatch& drafts, std::int64_t b,
                                          std::vector<double>* path = nullptr);
/// How many of `emitted` (the tokens a step emitted, in order) follow one root path of request b's drafts: a chain's
/// matching prefix, a tree's deepest matching path (so many of its drafts would have been accepted, and when that is
/// fewer than both the drafts' depth and emitted.size(), the next one would have been rejected).
std::int64_t matched_depth(const proposers::DraftBatch& drafts, std::int64_t b, std::span<const std::int64_t> emitted);

using decoder::Verified;

/// Processes the target's logits ([N + B, V], the K_b + 1 rows of each request) with each request's SamplingParams and
/// verifies every request's drafts (chains or trees, per-request draft kinds). Rows in host memory are verified here
/// (specdec::verify_logits_host; float16 / bfloat16 rows converted first), rows on a device by `device` (the decoder's
/// DeviceBackend; none: specdec::error naming DecoderOptions::device_backend). positions[b] = sequence index of request
/// b's first draft token. block[b] = 1 verifies request b's chain by block verification (sampling/block.hpp), 0 token by
/// token; a batch with a tree is verified token by token whatever `block` says. `block` may be empty (none). With
/// `expected_acceptance`, Verified::expected gets expected_accepted_drafts for every sampled chain with draft probs. A
/// failed request (a NaN logit, ...) throws specdec::error. `workspace`: the caller's host rows kept across steps (grown
/// when too small). `parallel_for` (host rows): the threads the work is shared on (the target's pool when it has one),
/// empty: the calling thread.
using HostParallelFor = ParallelFor;
Verified verify(const proposers::DraftBatch& drafts, const Rows& target_logits,
                std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                std::span<const std::uint8_t> block = {}, bool expected_acceptance = false,
                std::vector<float>* workspace = nullptr, DeviceBackend* device = nullptr,
                const HostParallelFor& parallel_for = {});

/// Rows of the forward output for [root, accepted nodes...] of request b (row offsets from the batch's cu_num_tokens).
/// Host rows are copied; rows on a device are gathered there by `device` (none: specdec::error).
proposers::TargetFeatures gather_features(const models::ForwardOutput& out, std::int64_t row_begin,
                                          std::span<const std::int64_t> accepted_nodes, std::int64_t start,
                                          const proposers::TargetFeatureSpec& spec, DeviceBackend* device = nullptr);
/// All rows of a prefill output as features (start 0).
proposers::TargetFeatures prefill_features(const models::ForwardOutput& out, const proposers::TargetFeatureSpec& spec);

/// Stop-string matching over the bytes of emitted tokens, keeping only the tail it needs.
class StopMatcher {
 public:
  StopMatcher() = default;
  explicit StopMatcher(std::vector<std::string> stops);
  bool active() const { return !stops_.empty(); }
  /// Appends the piece of one token; returns the index of a stop string now present (ending in this piece), or -1.
  int push(const std::string& piece);
  const std::string& stop(int i) const { return stops_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<std::string> stops_;
  std::size_t longest_ = 0;
  std::string tail_;
};

/// Validates a request against the target vocabulary and the decoder options; throws specdec::error naming the field.
void check_request(const GenerationRequest& request, std::int64_t vocab_size, const DecoderOptions& options);
/// Validates decoder options.
void check_options(const DecoderOptions& options);

}  // namespace specdec::decoder::detail
