// specdec — tensor front of the verifiers on processed probabilities: validation in one place, CPU/CUDA dispatch.
// Deprecated, the library's one deprecated path: specdec::torch::verify_logits (verify_logits.hpp) takes logits, or
// processed rows (draft_probs; target rows as logits at temperature 1 give the same law), and is the entry to use.
//
// Shapes (docs/design.md, "Shapes"), B requests, N = sum_b K_b drafts, V vocabulary:
//   draft_token_ids     [N]        int32 or int64
//   cu_num_draft_tokens [B + 1]    int32 or int64, cu[0] = 0, non-decreasing, cu[B] = N
//   draft_probs         [N, V]     float32, or absent (deterministic drafts)
//   target_probs        [N + B, V] float32 (CPU); float32, float16 or bfloat16 (CUDA)
//   seeds               [B]        int64 (bits reinterpreted as uint64)
//   positions           [B]        int64, sequence index of each request's first draft token (>= 0)
//   greedy              [B]        bool or uint8, or absent (every row sampled); 1 = temperature 0
//   parents (trees)     [N]        same dtype as draft_token_ids; draft j is node j + 1, parents[j] in [0, j]
//   has_draft_probs     [B]        bool or uint8, or absent: the per-request draft kind. 1 = request b's drafts come
//                                  with probabilities (its rows of draft_probs are used), 0 = deterministic drafts
//                                  (n-gram, argmax heads: accepted with probability p(x); its rows of draft_probs are
//                                  never read or scanned, so they may hold anything). Absent: every request is as
//                                  the presence of draft_probs says. draft_probs stays [N, V] (row j = draft j), so
//                                  n-gram and draft-model requests share a batch without repacking.
// Results (fresh tensors, on the inputs' device):
//   output_token_ids    [B, max_K + 1]  dtype of draft_token_ids, accepted drafts then one token, -1 padded
//   num_accepted        [B]             int32
//   accepted            [N]             bool, per-draft acceptance flags (chains)
//   accepted_nodes      [B, max_K + 1]  node indices of the accepted path (trees), -1 padded
// Every failure raises c10::Error whose message names the argument, what was expected and what was received;
// no result is produced, and no input is modified. On CPU every value is checked before anything is verified
// (dtypes, devices, contiguity, shapes, cu[0] == 0, cu non-decreasing with cu[B] == N, ids in [0, V), positions
// >= 0, parents in [0, j], draft kinds against draft_probs, and with validate_probs every probability row read);
// on CUDA the shapes, dtypes, devices and contiguity are checked on the host and the values on the device, per
// request, then reported naming the first failed request.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "specdec/sampling/block.hpp"

namespace specdec::torch {

struct RejectionSampleOptions {
  double lenience = 1.0;        ///< in (0, 1]; < 1 is lossy (chain only; see sampling/chain.hpp)
  bool validate_probs = true;   ///< scan every probability row for NaN/inf/negative values and zero mass;
                                ///< off, only the values the verifier reads are checked
  /// kBlock: block verification of every chain (sampling/block.hpp; vLLM's rejection_sample_method = "block"):
  /// lossless, never fewer accepted drafts in expectation; greedy rows and deterministic drafts keep the token rule.
  /// Needs lenience 1; chains only (tree_rejection_sample refuses it). CPU core or the CUDA block kernel.
  VerifyMethod method = VerifyMethod::kToken;
};

struct RejectionSampleResult {
  at::Tensor output_token_ids;
  at::Tensor num_accepted;
  at::Tensor accepted;
};

struct TreeRejectionSampleResult {
  at::Tensor output_token_ids;
  at::Tensor num_accepted;
  at::Tensor accepted_nodes;
};

/// Chain verification of a ragged batch (see sampling/chain.hpp for the rule).
[[deprecated("specdec::torch::rejection_sample: use specdec::torch::verify_logits (verify_logits.hpp)")]]
RejectionSampleResult rejection_sample(const at::Tensor& draft_token_ids, const at::Tensor& cu_num_draft_tokens,
                                       const std::optional<at::Tensor>& draft_probs, const at::Tensor& target_probs,
                                       const at::Tensor& seeds, const at::Tensor& positions,
                                       const std::optional<at::Tensor>& greedy = std::nullopt,
                                       const RejectionSampleOptions& options = {},
                                       const std::optional<at::Tensor>& has_draft_probs = std::nullopt);

/// Tree verification of a ragged batch (see sampling/tree.hpp for the rule).
[[deprecated("specdec::torch::tree_rejection_sample: use specdec::torch::verify_logits (verify_logits.hpp)")]]
TreeRejectionSampleResult tree_rejection_sample(const at::Tensor& draft_token_ids, const at::Tensor& parents,
                                                const at::Tensor& cu_num_draft_tokens,
                                                const std::optional<at::Tensor>& draft_probs,
                                                const at::Tensor& target_probs, const at::Tensor& seeds,
                                                const at::Tensor& positions,
                                                const std::optional<at::Tensor>& greedy = std::nullopt,
                                                const RejectionSampleOptions& options = {},
                                                const std::optional<at::Tensor>& has_draft_probs = std::nullopt);

}  // namespace specdec::torch
