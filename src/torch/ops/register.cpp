// specdec — torch custom ops: torch.ops.specdec.verify_logits (the engine-facing entry: logits in, tokens out, no host
// synchronisation on CUDA) with verify_logits_workspace_bytes; and the one deprecated path, the probabilities-in ops
// rejection_sample, block_rejection_sample (block verification of chains) and tree_rejection_sample, kept for callers
// that process logits themselves (verify_logits takes processed rows too: draft_probs, and target rows at temperature 1).
// Every op has one schema; the per-request draft kind is its last argument, `Tensor? has_draft_probs=None`.
// Built as the loadable module libspecdec_ops.so, for `torch.ops.load_library(path)` in Python engines.
#include <torch/library.h>

#include <cstdint>
#include <tuple>

#include "specdec/torch/verify_logits.hpp"

// The deprecated ops call the deprecated entries.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "specdec/torch/rejection_sample.hpp"

namespace {

template <class T>
std::optional<T> to_std(const c10::optional<T>& v) {
  return v.has_value() ? std::optional<T>(*v) : std::nullopt;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rejection_sample_op(
    const at::Tensor& draft_token_ids, const at::Tensor& cu_num_draft_tokens,
    const c10::optional<at::Tensor>& draft_probs, const at::Tensor& target_probs, const at::Tensor& seeds,
    const at::Tensor& positions, const c10::optional<at::Tensor>& greedy, double lenience, bool validate_probs,
    const c10::optional<at::Tensor>& has_draft_probs) {
  auto r = specdec::torch::rejection_sample(draft_token_ids, cu_num_draft_tokens, to_std(draft_probs), target_probs,
                                            seeds, positions, to_std(greedy), {lenience, validate_probs},
                                            to_std(has_draft_probs));
  return {r.output_token_ids, r.num_accepted, r.accepted};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> block_rejection_sample_op(
    const at::Tensor& draft_token_ids, const at::Tensor& cu_num_draft_tokens,
    const c10::optional<at::Tensor>& draft_probs, const at::Tensor& target_probs, const at::Tensor& seeds,
    const at::Tensor& positions, const c10::optional<at::Tensor>& greedy, bool validate_probs,
    const c10::optional<at::Tensor>& has_draft_probs) {
  specdec::torch::RejectionSampleOptions o;
  o.validate_probs = validate_probs;
  o.method = specdec::VerifyMethod::kBlock;
  auto r = specdec::torch::rejection_sample(draft_token_ids, cu_num_draft_tokens, to_std(draft_probs), target_probs,
                                            seeds, positions, to_std(greedy), o, to_std(has_draft_probs));
  return {r.output_token_ids, r.num_accepted, r.accepted};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> tree_rejection_sample_op(
    const at::Tensor& draft_token_ids, const at::Tensor& parents, const at::Tensor& cu_num_draft_tokens,
    const c10::optional<at::Tensor>& draft_probs, const at::Tensor& target_probs, const at::Tensor& seeds,
    const at::Tensor& positions, const c10::optional<at::Tensor>& greedy, bool validate_probs,
    const c10::optional<at::Tensor>& has_draft_probs) {
  auto r = specdec::torch::tree_rejection_sample(draft_token_ids, parents, cu_num_draft_tokens, to_std(draft_probs),
                                                 target_probs, seeds, positions, to_std(greedy),
                                                 {1.0, validate_probs}, to_std(has_draft_probs));
  return {r.output_token_ids, r.num_accepted, r.accepted_nodes};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> verify_logits_op(
    const at::Tensor& target_logits, const at::Tensor& draft_token_ids, const at::Tensor& cu_num_draft_tokens,
    const at::Tensor& seeds, const at::Tensor& positions, const c10::optional<at::Tensor>& temperature,
    const c10::optional<at::Tensor>& top_k, const c10::optional<at::Tensor>& top_p,
    const c10::optional<at::Tensor>& min_p, const c10::optional<at::Tensor>& draft_probs,
    const c10::optional<at::Tensor>& draft_logits, const c10::optional<at::Tensor>& parents,
    const c10::optional<at::Tensor>& has_draft_probs, std::int64_t max_num_draft_tokens,
    const c10::optional<at::Tensor>& workspace, bool block) {
  specdec::torch::VerifyLogitsArgs a;
  a.target_logits = target_logits;
  a.draft_token_ids = draft_token_ids;
  a.cu_num_draft_tokens = cu_num_draft_tokens;
  a.seeds = seeds;
  a.positions = positions;
  a.temperature = to_std(temperature);
  a.top_k = to_std(top_k);
  a.top_p = to_std(top_p);
  a.min_p = to_std(min_p);
  a.draft_probs = to_std(draft_probs);
  a.draft_logits = to_std(draft_logits);
  a.parents = to_std(parents);
  a.has_draft_probs = to_std(has_draft_probs);
  a.max_num_draft_tokens = max_num_draft_tokens;
  a.workspace = to_std(workspace);
  a.method = block ? specdec::VerifyMethod::kBlock : specdec::VerifyMethod::kToken;
  auto r = specdec::torch::verify_logits(a);
  return {r.output_token_ids, r.num_accepted, r.accepted, r.status, r.target_probs};
}

std::int64_t verify_logits_workspace_bytes_op(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                              std::int64_t vocab_size, bool tree, bool draft_rows) {
  return specdec::torch::verify_logits_workspace_bytes(batch_size, num_draft_tokens, vocab_size, tree, draft_rows);
}

}  // namespace

TORCH_LIBRARY(specdec, m) {
  // The engine-facing stateless entry (include/specdec/torch/verify_logits.hpp): logits in, tokens, counts and
  // per-request statuses out, on the logits' device; no host synchronisation on CUDA.
  m.def(
      "verify_logits(Tensor target_logits, Tensor draft_token_ids, Tensor cu_num_draft_tokens, Tensor seeds, "
      "Tensor positions, Tensor? temperature=None, Tensor? top_k=None, Tensor? top_p=None, Tensor? min_p=None, "
      "Tensor? draft_probs=None, Tensor? draft_logits=None, Tensor? parents=None, Tensor? has_draft_probs=None, "
      "int max_num_draft_tokens=-1, Tensor? workspace=None, bool block=False) -> (Tensor output_token_ids, "
      "Tensor num_accepted, "
      "Tensor accepted, Tensor status, Tensor target_probs)",
      &verify_logits_op);
  m.def(
      "verify_logits_workspace_bytes(int batch_size, int num_draft_tokens, int vocab_size, bool tree, "
      "bool draft_rows) -> int",
      &verify_logits_workspace_bytes_op);
  // Deprecated: probabilities in (verify_logits above is the entry to use).
  m.def(
      "rejection_sample(Tensor draft_token_ids, Tensor cu_num_draft_tokens, Tensor? draft_probs, "
      "Tensor target_probs, Tensor seeds, Tensor positions, Tensor? greedy=None, float lenience=1.0, "
      "bool validate_probs=True, Tensor? has_draft_probs=None) -> (Tensor output_token_ids, Tensor num_accepted, "
      "Tensor accepted)",
      &rejection_sample_op);
  m.def(
      "block_rejection_sample(Tensor draft_token_ids, Tensor cu_num_draft_tokens, Tensor? draft_probs, "
      "Tensor target_probs, Tensor seeds, Tensor positions, Tensor? greedy=None, bool validate_probs=True, "
      "Tensor? has_draft_probs=None) -> (Tensor output_token_ids, Tensor num_accepted, Tensor accepted)",
      &block_rejection_sample_op);
  m.def(
      "tree_rejection_sample(Tensor draft_token_ids, Tensor parents, Tensor cu_num_draft_tokens, "
      "Tensor? draft_probs, Tensor target_probs, Tensor seeds, Tensor positions, Tensor? greedy=None, "
      "bool validate_probs=True, Tensor? has_draft_probs=None) -> (Tensor output_token_ids, Tensor num_accepted, "
      "Tensor accepted_nodes)",
      &tree_rejection_sample_op);
}
