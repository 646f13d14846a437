// specdec — verification of logit rows already in host memory, without tensors and without libtorch: the engine-facing
// entry for CPU models (specdec::verify, a compiled library on the standard library alone). An engine passes its
// target's float32 logits, the ragged draft metadata, each request's sampling parameters and seeds/positions, and gets
// back the accepted tokens (or tree paths), counts and per-request statuses. Nothing is kept between calls.
//
// One call = logits processing of the target rows with each request's temperature / top-k / top-p / min-p
// (sampling/logits_core.hpp), then chain, block (method = kBlock) or tree verification (sampling/chain.hpp, block.hpp,
// tree.hpp): the same processing, verifiers and tokens as the torch entry torch::verify_logits on CPU tensors, which
// runs this same code.
//
// Shapes, B requests, N = sum_b K_b drafts, V vocabulary:
//   target_logits        [N + B, V] float32, rows target_logits_stride floats apart; request b's K_b + 1 rows start
//                        at row cu[b] + b
//   draft_token_ids      [N]; cu_num_draft_tokens [B + 1] prefix sums (cu[0] = 0)
//   parents              [N] for trees (draft j is node j + 1, parents[j] in [0, j]); empty: chains
//   draft_probs          [N, V] float32 processed draft distributions, or none (deterministic drafts)
//   has_draft_probs      [B] or empty: 1 = request b's rows of draft_probs are its draft distributions, 0 = its drafts
//                        are deterministic
//   temperature, top_p, min_p [B] float32, top_k [B] int32, each or empty (as absent: 1, off, off, off)
//   seeds, positions     [B]: each request's seed and its first draft token's sequence index (the Philox counter)
//   workspace            [N + B, V] floats of the caller's scratch, reused across steps
//   block                [B] or empty: per-request verification method of a chain batch (1 = block, 0 = token)
// Sizes are checked on entry and raise specdec::error naming the argument, what was expected and what was received;
// values are checked per request and land in HostVerifyResult::status (a specdec::Status each; a failed request's
// tokens are -1 and its count 0). Requests are independent.
//
// Threads: parallel_for runs fn(i) for every i in [0, n) on the caller's threads (its model's pool); empty = the
// calling thread alone. Which thread runs what changes no result.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "specdec/sampling/block.hpp"

namespace specdec {

/// Runs fn(i) for every i in [0, n) and returns when all are done (a caller's thread pool); the first exception a call
/// throws comes back to the caller.
using ParallelFor = std::function<void(std::int64_t n, const std::function<void(std::int64_t)>& fn)>;

struct HostVerifyArgs {
  const float* target_logits = nullptr;  ///< [N + B, V] float32, rows target_logits_stride floats apart
  std::int64_t target_logits_stride = 0;
  std::int64_t vocab_size = 0;
  std::span<const std::int64_t> draft_token_ids;      ///< [N]
  std::span<const std::int64_t> cu_num_draft_tokens;  ///< [B + 1]
  std::span<const std::int64_t> parents;              ///< trees: [N]; empty: chains
  const float* draft_probs = nullptr;                 ///< [N, V] float32, processed; or none
  std::span<const std::uint8_t> has_draft_probs;      ///< [B] or empty
  std::span<const float> temperature, top_p, min_p;   ///< [B] each, or empty
  std::span<const std::int32_t> top_k;                ///< [B] or empty
  std::span<const std::int64_t> seeds, positions;     ///< [B] each
  /// A bound on every K_b: the output width is max_num_draft_tokens + 1; -1 = max K_b.
  std::int64_t max_num_draft_tokens = -1;
  VerifyMethod method = VerifyMethod::kToken;
  /// Chains only: [B] per-request methods (1 = block, 0 = token) that override `method`, or empty (all `method`).
  std::span<const std::uint8_t> block;
  /// false (token-verified chains): a request's rows after its first rejected draft are only checked (the same
  /// statuses), not turned into probabilities. The tokens, counts, flags and statuses are the same either way.
  bool all_target_probs = true;
  /// [N + B, V] floats of scratch for the processed target rows (contents unspecified after the call: a greedy
  /// request's rows are not written, its argmaxes come from the logits scan, the same tokens)
  float* workspace = nullptr;
  ParallelFor parallel_for;
};

struct HostVerifyResult {
  std::int64_t stride = 0;                      ///< output width: max K + 1
  std::vector<std::int64_t> output_token_ids;   ///< [B, stride]: accepted drafts, then the recovered or bonus token; -1 padded
  std::vector<std::int32_t> num_accepted;       ///< [B]
  std::vector<std::uint8_t> accepted;           ///< chains: [N] per-draft flags
  std::vector<std::int64_t> accepted_nodes;     ///< trees: [B, stride] accepted node indices, -1 padded
  std::vector<std::int32_t> status;             ///< [B] specdec::Status values
};

/// Logits processing then verification (see above). Throws specdec::error for sizes that do not fit.
HostVerifyResult verify_logits_host(const HostVerifyArgs& args);

}  // namespace specdec
