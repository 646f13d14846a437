// specdec — the engine-facing stateless verification entry (the vLLM RejectionSampler / FlashInfer shape): an engine
// that owns its scheduler and KV cache passes its target logits, the ragged draft metadata, each request's sampling
// parameters and seeds/positions, and gets back the accepted tokens (or tree paths) and counts as tensors on the
// logits' device, which it applies to its own KV. Nothing is kept between calls.
//
// One call = logits processing of every target row (and of the draft rows when draft logits are given) with the
// request's temperature / top-k / top-p / min-p (sampling/logits_core.hpp: CPU and CUDA write the same bits), then
// chain, block (method = kBlock) or tree verification (sampling/chain.hpp, block.hpp, tree.hpp; the CUDA kernels on
// CUDA tensors). The same tokens on CPU and CUDA.
//
// Shapes, B requests, N = sum_b K_b drafts, V vocabulary (every tensor on the device of target_logits):
//   target_logits        [N + B, V]  float32, float16 or bfloat16; rows K_b + 1 per request (cu[b] + b ..), last dim
//                                    contiguous, rows may be strided
//   draft_token_ids      [N]         int32 or int64
//   cu_num_draft_tokens  [B + 1]     same dtype as draft_token_ids
//   draft_probs          [N, V]      any float dtype, already processed with the request's parameters; or
//   draft_logits         [N, V]      any float dtype, processed here with the request's parameters; or neither
//                                    (deterministic drafts: n-gram, argmax heads)
//   parents              [N]         trees: same dtype as the ids; draft j is node j + 1, parents[j] in [0, j]
//   has_draft_probs      [B]         bool or uint8, optional per-request draft kind (sampling/chain.hpp)
//   temperature          [B]         float32, 0 = greedy (absent: 1); top_k [B] int32 (absent/0: off);
//   top_p, min_p         [B]         float32 (absent: off)
//   seeds                [B]         int64 (bits used as uint64); positions [B] int64: each request's first draft
//                                    token's sequence index (the Philox counter)
//   max_num_draft_tokens             a bound on every K_b: the output width is max_num_draft_tokens + 1. Required on
//                                    CUDA (reading it from cu would synchronise); on CPU -1 = max K_b.
//   workspace            [bytes]     optional uint8 tensor on the device of at least verify_logits_workspace_bytes(..)
//                                    bytes, reused across steps (target_probs and the draft rows live in it); absent,
//                                    one buffer is taken from the caching allocator on CUDA, fresh tensors on the CPU
//                                    (a fresh 4 MB tensor per call costs page faults: engines should keep one).
// Results (on the logits' device):
//   output_token_ids [B, max_K + 1] ids dtype: the accepted drafts, then one recovered or bonus token, -1 padded
//   num_accepted     [B] int32
//   accepted         chains: [N] bool per-draft flags; trees: [B, max_K + 1] ids dtype, accepted node indices
//   status           [B] int32, each request's specdec::Status: kInvalidArgument (cu/positions/width/parameters/
//                    draft kinds), kInvalidTokenId, kInvalidTree, kInvalidProbability (a NaN or +inf logit, a bad
//                    probability), kZeroMass (a row of -inf logits); a failed request's tokens are -1, its count 0,
//                    its flags 0. Requests are independent. check_verify_status() raises for the first failed one.
//   target_probs     [N + B, V] float32, the processed target distribution (a view into the workspace when one is
//                    given, always on CUDA)
// Shapes, dtypes and devices are checked on the host and raise c10::Error naming the argument, expected and got;
// values are checked per request (on the device on CUDA) and land in `status`.
//
// Host synchronisations per call on CUDA: none. The call launches the logits kernel once for the target rows (and once
// for draft logits), the chain or tree verification kernels, and one small kernel that folds the rows' statuses into
// the requests' statuses; nothing is copied to the host and no tensor of data-dependent size is made, so the call can
// be captured in a CUDA graph (pass `workspace`, or capture with PyTorch's graph-safe caching allocator).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/verify/host.hpp"

namespace specdec::torch {

struct VerifyLogitsArgs {
  at::Tensor target_logits;
  at::Tensor draft_token_ids;
  at::Tensor cu_num_draft_tokens;
  std::optional<at::Tensor> draft_probs;
  std::optional<at::Tensor> draft_logits;
  std::optional<at::Tensor> parents;          ///< present: tree verification
  std::optional<at::Tensor> has_draft_probs;
  std::optional<at::Tensor> temperature;
  std::optional<at::Tensor> top_k;
  std::optional<at::Tensor> top_p;
  std::optional<at::Tensor> min_p;
  at::Tensor seeds;
  at::Tensor positions;
  std::int64_t max_num_draft_tokens = -1;
  std::optional<at::Tensor> workspace;
  /// kBlock: every chain is verified by block verification (sampling/block.hpp; greedy rows and deterministic drafts
  /// keep the token rule); chains only (trees are refused). CPU core or the CUDA block kernel, the same bits.
  VerifyMethod method = VerifyMethod::kToken;
  /// false (CPU, token-verified chains without draft logits): the target rows are processed one at a time as the
  /// chain rule reaches them, so a request's rows after its first rejected draft are only checked (the same statuses),
  /// not turned into probabilities; those rows of target_probs are then unspecified. The tokens, counts, flags and
  /// statuses are the same. Ignored on CUDA (every row is processed in parallel there) and for trees and blocks.
  bool all_target_probs = true;
  /// CPU: runs fn(i) for every i in [0, n) and returns when all are done, on the caller's threads (e.g. its model's pool:
  /// models::HasParallelFor) instead of ATen's; the rows and the requests are shared out by it. Which thread runs what
  /// changes no result. Empty: at::parallel_for.
  ParallelFor parallel_for;
};

struct VerifyLogitsResult {
  at::Tensor output_token_ids;
  at::Tensor num_accepted;
  at::Tensor accepted;
  at::Tensor status;
  at::Tensor target_probs;
};

/// Bytes of workspace for B requests, N drafts, V tokens, enough on either device (trees or chains; draft logits or
/// draft probs to convert to float32 need N * V floats more: pass draft_rows = true).
std::int64_t verify_logits_workspace_bytes(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                           std::int64_t vocab_size, bool tree, bool draft_rows);

/// Logits processing then verification (see above).
VerifyLogitsResult verify_logits(const VerifyLogitsArgs& args);

/// Rows already in host memory as float32 (a CPU model's logits) go to the torch-free host entry
/// specdec::verify_logits_host (specdec/verify/host.hpp): the same processing, verifiers and results as verify_logits on
/// CPU tensors, on plain arrays, without a tensor made.

/// Raises c10::Error naming the first request whose status is not kSuccess (one copy of `status` to the host: call it
/// when the engine wants to look).
void check_verify_status(const VerifyLogitsResult& result, const char* op = "verify_logits");

}  // namespace specdec::torch
