// CausalLM: what a target or draft model must offer to the speculative decoder.
//
// A model owns a KV cache with numbered sequence slots. One forward call takes, for each of B sequences, the new tokens that
// follow what its slot already caches (a chain, or a tree given as a parent-index array), writes their keys/values into the
// slot, and returns the logits of every new token (optionally hidden states, e.g. the features EAGLE-1/EAGLE-3 heads read).
// After verification the decoder rolls each slot back to the accepted prefix (truncate, O(1)) or, after a tree forward,
// keeps only the accepted root-to-leaf path (keep_path, of models with the TreeCausalLM capability).
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "specdec/rows.hpp"

namespace specdec::models {

/// One forward over a ragged batch. N = cu_num_tokens[B] new tokens in total; sequence b owns rows
/// [cu_num_tokens[b], cu_num_tokens[b+1]) of every [N, ...] tensor in the result.
struct ForwardBatch {
  /// [B] KV-cache slots (from allocate_sequence), pairwise distinct.
  std::vector<std::int64_t> slots;
  /// [N] new token ids, flattened in sequence order.
  std::vector<std::int64_t> token_ids;
  /// [B + 1] prefix sums of new tokens per sequence: cu_num_tokens[0] == 0, non-decreasing, back() == N. Every sequence has
  /// at least one new token.
  std::vector<std::int64_t> cu_num_tokens;
  /// Empty: every sequence is a chain (causal). Otherwise [B] arrays; entry b is empty (chain) or holds n_b parent indices
  /// local to sequence b: parents[b][0] == -1 (node 0, the root, is the last accepted token) and 0 <= parents[b][i] < i for i > 0.
  /// Node i is written to cache position L_b + i (L_b = the slot's length before the call), sits at rotary position
  /// L_b + depth(i) and attends to the cached positions [0, L_b) and to its ancestors and itself.
  /// A chain is the tree with parents[i] == i - 1.
  std::vector<std::vector<std::int32_t>> parents;
  /// false: logits for all N rows. true: only for the last new token of each sequence ([B, V]; e.g. for prompt prefill).
  bool last_logits_only = false;
  /// Also return the final hidden state before and after the final norm ([N, hidden] each).
  bool return_final_hidden = false;
  /// Return the output of these decoder layers (0-based block index; the residual stream after block l), [N, hidden] each.
  std::vector<std::int64_t> hidden_layers;
};

/// Rows on the model's device (specdec/rows.hpp; a torch model wraps its tensors with specdec::torch::rows_of), each
/// owned by the result (not a view of buffers the model reuses).
struct ForwardOutput {
  /// [N, V] float32, float16 or bfloat16 (or [B, V] when last_logits_only).
  Rows logits;
  /// [N, hidden] float32 when return_final_hidden: the residual stream after the last block, before the final RMSNorm.
  Rows hidden_pre_norm;
  /// [N, hidden] float32 when return_final_hidden: after the final RMSNorm (the input of the output projection).
  Rows hidden_post_norm;
  /// One [N, hidden] float32 row set per entry of ForwardBatch::hidden_layers, in the same order.
  std::vector<Rows> layer_hidden;
};

/// The model interface the speculative decoder drives: what every target needs. Every operation throws specdec::error (or
/// c10::Error) on bad input without changing the model's state. Trees, hidden states and a context window are optional
/// capabilities below, detected at compile time.
template <class M>
concept CausalLM = requires(M& m, const M& cm, const ForwardBatch& batch, std::int64_t slot, std::int64_t length) {
  /// Number of logits per token (V).
  { cm.vocab_size() } -> std::convertible_to<std::int64_t>;
  /// Runs the new tokens of every sequence in the batch through the model, appending them to the slots' caches. A model
  /// without TreeCausalLM receives chains only (ForwardBatch::parents empty).
  { m.forward(batch) } -> std::same_as<ForwardOutput>;
  /// Takes a fresh cache slot (length 0).
  { m.allocate_sequence() } -> std::convertible_to<std::int64_t>;
  /// Releases a slot.
  { m.free_sequence(slot) };
  /// Rolls a slot back to `length` cached tokens, O(1).
  { m.truncate(slot, length) };
};

/// Optional capability: tree forwards. After a tree forward at prefix length `length`, keep_path keeps nodes `path`
/// (strictly increasing node indices of one root-to-leaf path prefix) at positions length, length + 1, ...; the slot's
/// length becomes length + path.size(). Without it the decoder refuses tree drafts with an error.
template <class M>
concept TreeCausalLM = CausalLM<M> && requires(M& m, std::int64_t slot, std::int64_t length,
                                               std::span<const std::int64_t> path) {
  { m.keep_path(slot, length, path) };
};

/// Optional capability: the number of cached tokens of a slot (DraftModelProposer, which keeps a draft's cache in step
/// with the context, needs it).
template <class M>
concept HasSequenceLength = requires(const M& cm, std::int64_t slot) {
  { cm.sequence_length(slot) } -> std::convertible_to<std::int64_t>;
};

/// Optional capability: the model's own worker threads, lent to the decoder for its host work between forwards (a CPU
/// step's logits processing and verification), so that work does not need a second pool beside the model's.
/// parallel_for(n, fn) calls fn(i) for every i in [0, n), in any order and on any of the threads, and returns when all
/// are done.
template <class M>
concept HasParallelFor = requires(M& m, std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  { m.parallel_for(n, fn) };
};

/// Optional capability: the hidden width (the size of the hidden-state rows a forward returns when asked for them, which
/// EAGLE proposers read).
template <class M>
concept HasHiddenStates = requires(const M& cm) {
  { cm.hidden_size() } -> std::convertible_to<std::int64_t>;
};

/// Optional capability: the most tokens a sequence may hold (the model's trained context window). A model that has it lets the
/// decoder stop a request there (FinishReason::kLength) instead of running past the positions it was trained on; a forward
/// that would write past it is an error.
template <class M>
concept HasMaxSequenceLength = requires(const M& cm) {
  { cm.max_sequence_length() } -> std::convertible_to<std::int64_t>;
};

/// Optional capability: a forward timed on the model's own device, in seconds. A model that runs asynchronously (on a
/// GPU) times it with device events, where a host clock around forward() would measure the enqueueing only; the cost
/// profile (decoder/cost_profile.hpp) uses it where present.
template <class M>
concept HasTimedForward = requires(M& m, const ForwardBatch& b) {
  { m.timed_forward(b) } -> std::convertible_to<double>;
};

namespace detail {
/// Checks a ragged batch's layout for `who` ("forward", "EagleHead::forward"): at least one sequence, cu_num_tokens
/// with num_sequences + 1 entries starting at 0 and strictly increasing (>= 1 `unit` per sequence), token_ids of
/// length cu_num_tokens.back() with every id in [0, vocab_size). Throws specdec::error naming the field. Returns N.
std::int64_t check_ragged_tokens(const char* who, const char* unit, std::int64_t num_sequences,
                                 std::span<const std::int64_t> cu_num_tokens, std::span<const std::int64_t> token_ids,
                                 std::int64_t vocab_size);
}  // namespace detail

/// Convenience: a single-sequence chain batch.
inline ForwardBatch make_chain_batch(std::int64_t slot, std::vector<std::int64_t> tokens) {
  ForwardBatch b;
  b.slots = {slot};
  b.cu_num_tokens = {0, static_cast<std::int64_t>(tokens.size())};
  b.token_ids = std::move(tokens);
  return b;
}

}  // namespace specdec::models
