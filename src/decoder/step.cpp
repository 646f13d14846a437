// The non-template parts of SpeculativeDecoder's step: draft validation, forward batches, verification, stop strings,
// metrics.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "specdec/decoder/detail.hpp"
#include "specdec/decoder/types.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/sampling/block.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/theory.hpp"
#include "specdec/torch/device_copy.hpp"
#include "specdec/proposers/process_logits.hpp"
#include "specdec/torch/rows.hpp"
#include "specdec/torch/verify_logits.hpp"
#include "specdec/torch/verify_logits_detail.hpp"

namespace specdec {


namespace decoder {

const char* to_string(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kLength: return "length";
    case FinishReason::kStopToken: return "stop token";
    case FinishReason::kStopString: return "stop string";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

std::vector<double> RequestMetrics::acceptance_by_position() const {
  std::vector<double> a(proposed_at.size(), 0.0);
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] = proposed_at[i] ? static_cast<double>(accepted_at[i]) / static_cast<double>(proposed_at[i]) : 0.0;
  return a;
}

void RequestMetrics::add(const RequestMetrics& o) {
  target_forwards += o.target_forwards;
  drafted += o.drafted;
  accepted += o.accepted;
  emitted += o.emitted;
  steps_with_drafts += o.steps_with_drafts;
  if (proposed_at.size() < o.proposed_at.size()) {
    proposed_at.resize(o.proposed_at.size(), 0);
    accepted_at.resize(o.proposed_at.size(), 0);
  }
  for (std::size_t i = 0; i < o.proposed_at.size(); ++i) {
    proposed_at[i] += o.proposed_at[i];
    accepted_at[i] += o.accepted_at[i];
  }
  expected_accepted_token += o.expected_accepted_token;
  expected_accepted_block += o.expected_accepted_block;
  expected_steps += o.expected_steps;
  shadow_probes += o.shadow_probes;
  shadow_accepted += o.shadow_accepted;
}

double DecoderMetrics::tokens_per_second() const {
  const double s = step_seconds();
  return s > 0 ? static_cast<double>(total.emitted) / s : 0.0;
}
double DecoderMetrics::one_token_forward_seconds() const {
  return one_token_forwards ? one_token_seconds / static_cast<double>(one_token_forwards) : 0.0;
}
double DecoderMetrics::cost_ratio() const { return cost_ratio(one_token_forward_seconds()); }
double DecoderMetrics::cost_ratio(double t1) const {
  if (t1 <= 0 || draft_positions == 0) return 0.0;
  return draft_seconds / static_cast<double>(draft_positions) / t1;
}
double DecoderMetrics::verify_cost_ratio() const { return verify_cost_ratio(one_token_forward_seconds()); }
double DecoderMetrics::verify_cost_ratio(double t1) const {
  if (t1 <= 0 || verify_forwards == 0) return 1.0;
  return verify_seconds / static_cast<double>(verify_forwards) / t1;
}
double DecoderMetrics::mean_gamma() const {
  return total.steps_with_drafts ? static_cast<double>(total.drafted) / static_cast<double>(total.steps_with_drafts) : 0.0;
}
double DecoderMetrics::overhead_fraction() const {
  const double s = step_seconds();
  return s > 0 ? overhead_seconds / s : 0.0;
}
double DecoderMetrics::theoretical_speedup() const { return theoretical_speedup(one_token_forward_seconds()); }
double DecoderMetrics::theoretical_speedup(double t1) const {
  const int g = static_cast<int>(std::lround(mean_gamma()));
  if (g == 0) return 1.0;
  return theory::walltime_improvement(std::min(total.acceptance_rate(), 1.0), g, cost_ratio(t1), verify_cost_ratio(t1));
}

Detokenizer make_detokenizer(const models::Tokenizer& tokenizer) {
  const models::Tokenizer* t = &tokenizer;
  return [t](std::int64_t token) { return t->token_to_piece(static_cast<std::int32_t>(token)); };
}

namespace detail {

namespace {
[[noreturn]] void fail(const std::string& m) { throw error(Status::kInvalidArgument, m); }
}  // namespace

void check_draft_batch(const proposers::DraftBatch& d, std::span<const std::int32_t> max_drafts, std::int64_t V,
                       bool trees_allowed, std::int64_t max_tree_nodes) {
  const auto B = static_cast<std::int64_t>(max_drafts.size());
  const std::string who = "Proposer::propose returned a DraftBatch with ";
  if (static_cast<std::int64_t>(d.cu_num_drafts.size()) != B + 1)
    fail(who + "cu_num_drafts of " + std::to_string(d.cu_num_drafts.size()) + " entries; expected B + 1 = " +
         std::to_string(B + 1));
  if (d.cu_num_drafts[0] != 0) fail(who + "cu_num_drafts[0] = " + std::to_string(d.cu_num_drafts[0]) + "; expected 0");
  const std::int64_t N = d.cu_num_drafts[static_cast<std::size_t>(B)];
  if (static_cast<std::int64_t>(d.token_ids.size()) != N)
    fail(who + std::to_string(d.token_ids.size()) + " token ids; expected cu_num_drafts[B] = " + std::to_string(N));
  if (!d.parents.empty()) {
    if (!trees_allowed)
      fail(who + "a tree (parents), but the proposer does not declare supports_trees or the target has no keep_path "
                 "(models::TreeCausalLM)");
    if (static_cast<std::int64_t>(d.parents.size()) != B)
      fail(who + std::to_string(d.parents.size()) + " parent arrays; expected B = " + std::to_string(B));
  }
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t k = d.cu_num_drafts[static_cast<std::size_t>(b + 1)] - d.cu_num_drafts[static_cast<std::size_t>(b)];
    const std::string req = "request " + std::to_string(b) + ": ";
    if (k < 0) fail(who + "decreasing cu_num_drafts at " + req);
    const bool tree = !d.parents.empty() && !d.parents[static_cast<std::size_t>(b)].empty();
    if (tree) {
      const auto& par = d.parents[static_cast<std::size_t>(b)];
      if (static_cast<std::int64_t>(par.size()) != k)
        fail(who + req + std::to_string(par.size()) + " parents for " + std::to_string(k) + " drafts");
      if (k > max_tree_nodes) fail(who + req + std::to_string(k) + " tree nodes; at most " + std::to_string(max_tree_nodes));
      std::vector<std::int32_t> depth(static_cast<std::size_t>(k + 1), 0);
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t p = par[static_cast<std::size_t>(j)];
        if (p < 0 || p > j)
          fail(who + req + "parents[" + std::to_string(j) + "] = " + std::to_string(p) + "; expected a value in [0, " +
               std::to_string(j) + "]");
        depth[static_cast<std::size_t>(j + 1)] = depth[static_cast<std::size_t>(p)] + 1;
        if (depth[static_cast<std::size_t>(j + 1)] > max_drafts[static_cast<std::size_t>(b)])
          fail(who + req + "tree depth above max_drafts = " + std::to_string(max_drafts[static_cast<std::size_t>(b)]));
      }
    } else if (k > max_drafts[static_cast<std::size_t>(b)]) {
      fail(who + req + std::to_string(k) + " drafts; expected at most max_drafts = " +
           std::to_string(max_drafts[static_cast<std::size_t>(b)]));
    }
  }
  if (!d.confidence.empty()) {
    if (static_cast<std::int64_t>(d.confidence.size()) != N)
      fail(who + std::to_string(d.confidence.size()) + " confidences; expected none or one per draft (" + std::to_string(N) + ")");
    for (std::int64_t j = 0; j < N; ++j) {
      const float c = d.confidence[static_cast<std::size_t>(j)];
      if (!(c == -1.f || (c >= 0.f && c <= 1.f)))
        fail(who + "confidence[" + std::to_string(j) + "] = " + std::to_string(c) + "; expected a value in [0, 1], or -1 for none");
    }
  }
  for (std::int64_t j = 0; j < N; ++j) {
    const std::int64_t x = d.token_ids[static_cast<std::size_t>(j)];
    if (x < 0 || x >= V)
      fail(who + "token_ids[" + std::to_string(j) + "] = " + std::to_string(x) + "; expected ids in [0, " +
           std::to_string(V) + ")");
  }
  if (d.probs.defined()) {
    if (!d.probs.is_host_float32() || d.probs.rows() != N || d.probs.cols() != V || !d.probs.contiguous())
      fail(who + "probs of " + std::to_string(d.probs.rows()) + " x " + std::to_string(d.probs.cols()) + " " +
           to_string(d.probs.dtype()) + (d.probs.device().is_cpu() ? " host" : " device") +
           (d.probs.contiguous() ? " rows" : " strided rows") + "; expected contiguous float32 rows in host memory [N, V] = [" +
           std::to_string(N) + ", " + std::to_string(V) + "]");
  }
  if (!d.has_probs.empty()) {
    if (static_cast<std::int64_t>(d.has_probs.size()) != B)
      fail(who + "has_probs of " + std::to_string(d.has_probs.size()) + " entries; expected one per request (" +
           std::to_string(B) + ") or none");
    for (std::int64_t b = 0; b < B; ++b)
      if (d.has_probs[static_cast<std::size_t>(b)] > 1 || (d.has_probs[static_cast<std::size_t>(b)] && !d.probs.defined()))
        fail(who + "request " + std::to_string(b) + ": has_probs = " +
             std::to_string(d.has_probs[static_cast<std::size_t>(b)]) + "; expected 0 or 1, and 0 when probs is undefined");
  }
}

models::ForwardBatch build_forward(const proposers::DraftBatch& d, std::span<const std::int64_t> roots,
                                   std::span<const std::int64_t> slots, const proposers::TargetFeatureSpec* features) {
  const auto B = static_cast<std::int64_t>(roots.size());
  models::ForwardBatch fb;
  fb.slots.assign(slots.begin(), slots.end());
  fb.token_ids.reserve(d.token_ids.size() + roots.size());
  fb.cu_num_tokens.reserve(static_cast<std::size_t>(B + 1));
  fb.cu_num_tokens.push_back(0);
  const bool any_tree = !d.parents.empty();
  if (any_tree) fb.parents.resize(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], e = d.cu_num_drafts[static_cast<std::size_t>(b + 1)];
    fb.token_ids.push_back(roots[static_cast<std::size_t>(b)]);
    fb.token_ids.insert(fb.token_ids.end(), d.token_ids.begin() + s, d.token_ids.begin() + e);
    fb.cu_num_tokens.push_back(fb.cu_num_tokens.back() + 1 + (e - s));
    if (any_tree && !d.parents[static_cast<std::size_t>(b)].empty()) {
      auto& p = fb.parents[static_cast<std::size_t>(b)];
      p.reserve(static_cast<std::size_t>(e - s + 1));
      p.push_back(-1);
      for (auto q : d.parents[static_cast<std::size_t>(b)]) p.push_back(static_cast<std::int32_t>(q));
    }
  }
  if (features) {
    fb.return_final_hidden = features->final_hidden;
    fb.hidden_layers = features->layers;
  }
  return fb;
}

std::vector<std::int32_t> draft_depths(const proposers::DraftBatch& d, std::int64_t b) {
  const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], k = d.cu_num_drafts[static_cast<std::size_t>(b + 1)] - s;
  std::vector<std::int32_t> depth(static_cast<std::size_t>(k));
  const bool tree = !d.parents.empty() && !d.parents[static_cast<std::size_t>(b)].empty();
  for (std::int64_t j = 0; j < k; ++j) {
    if (!tree) {
      depth[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(j + 1);
    } else {
      const std::int64_t p = d.parents[static_cast<std::size_t>(b)][static_cast<std::size_t>(j)];
      depth[static_cast<std::size_t>(j)] = p == 0 ? 1 : depth[static_cast<std::size_t>(p - 1)] + 1;
    }
  }
  return depth;
}

proposers::DraftBatch cut_drafts(const proposers::DraftBatch& d, std::span<const std::int32_t> limit) {
  proposers::DraftBatch out;
  out.cu_num_drafts.push_back(0);
  std::vector<std::int64_t> tokens, parents, renumber, kept;
  for (std::int64_t b = 0; b < d.num_requests(); ++b) {
    const auto s = d.cu_num_drafts[static_cast<std::size_t>(b)];
    const auto depth = draft_depths(d, b);
    const bool tree = !d.parents.empty() && !d.parents[static_cast<std::size_t>(b)].empty();
    const bool cuts = std::any_of(depth.begin(), depth.end(), [&](std::int32_t x) { return x > limit[static_cast<std::size_t>(b)]; });
    if (cuts && d.request_has_probs(b))  // a sampled request's drafts are verified as drawn: only deterministic ones are cut
      throw error(Status::kInvalidArgument, "cut_drafts: request " + std::to_string(b) + ": drafts with draft probabilities");
    tokens.clear();
    parents.clear();
    renumber.assign(depth.size() + 1, 0);  // old node index -> new (node 0, the root, stays 0)
    for (std::size_t j = 0; j < depth.size(); ++j) {
      if (depth[j] > limit[static_cast<std::size_t>(b)]) continue;
      kept.push_back(s + static_cast<std::int64_t>(j));
      tokens.push_back(d.token_ids[static_cast<std::size_t>(s) + j]);
      if (tree) parents.push_back(renumber[static_cast<std::size_t>(d.parents[static_cast<std::size_t>(b)][j])]);
      renumber[j + 1] = static_cast<std::int64_t>(tokens.size());
    }
    out.append(tokens, parents);
  }
  const bool all_kept = static_cast<std::int64_t>(kept.size()) == static_cast<std::int64_t>(d.token_ids.size());
  // The rows of the drafts kept (those of a cut request are never read: its drafts are deterministic).
  if (d.probs.defined() && all_kept) out.probs = d.probs;
  if (d.probs.defined() && !all_kept) {
    const std::int64_t V = d.probs.cols();
    out.probs = Rows::host_float32(static_cast<std::int64_t>(kept.size()), V);
    float* dst = out.probs.mutable_host_float32_data("cut_drafts");
    for (std::size_t i = 0; i < kept.size(); ++i) std::copy_n(d.probs.host_row(kept[i]), V, dst + static_cast<std::int64_t>(i) * V);
  }
  out.has_probs = d.has_probs;
  if (!d.confidence.empty())
    for (const auto j : kept) out.confidence.push_back(d.confidence[static_cast<std::size_t>(j)]);
  return out;
}

std::int64_t matched_depth(const proposers::DraftBatch& d, std::int64_t b, std::span<const std::int64_t> emitted) {
  const auto s = d.cu_num_drafts[static_cast<std::size_t>(b)];
  const std::int64_t k = d.num_drafts(b);
  const bool tree = !d.parents.empty() && !d.parents[static_cast<std::size_t>(b)].empty();
  std::int64_t node = 0, depth = 0;  // the matched path ends at `node` (0: the root)
  for (std::int64_t j = 0; j < k && depth < static_cast<std::int64_t>(emitted.size()); ++j) {
    const std::int64_t parent = tree ? d.parents[static_cast<std::size_t>(b)][static_cast<std::size_t>(j)] : j;
    if (parent != node) {
      if (!tree) break;  // a chain's next draft follows a rejected one
      continue;
    }
    if (d.token_ids[static_cast<std::size_t>(s + j)] == emitted[static_cast<std::size_t>(depth)]) {
      node = j + 1;
      ++depth;
    } else if (!tree) {
      break;
    }
  }
  return depth;
}

namespace {

/// A chain batch with some block-verified requests, on the CPU core: block[b] picks verify_block_one or
/// verify_chain_one for request b after one check of the whole batch (sampling/chain.hpp, block.hpp).
Verified verify_chains_on_core(const proposers::DraftBatch& d, const at::Tensor& target_probs,
                               std::span<const std::uint64_t> seeds, std::span<const std::int64_t> positions,
                               std::span<const std::uint8_t> greedy, std::span<const std::uint8_t> block) {
  const auto B = static_cast<std::int64_t>(seeds.size());
  if (target_probs.dim() != 2 || target_probs.scalar_type() != at::kFloat)
    throw error(Status::kInvalidArgument, "verify: target_probs: expected a float32 [N + B, V] tensor");
  const at::Tensor p = target_probs.is_cpu() ? target_probs.contiguous() : target_probs.cpu().contiguous();
  const float* q = d.probs.defined() ? d.probs.host_float32_data("verify: draft probs") : nullptr;
  const std::int64_t N = static_cast<std::int64_t>(d.token_ids.size()), V = p.size(1);
  ChainVerifyArgs<std::int64_t, std::int64_t> a;
  a.batch_size = B;
  a.vocab_size = V;
  a.cu_num_draft_tokens = d.cu_num_drafts.data();
  a.draft_token_ids = d.token_ids.data();
  a.draft_probs = q;
  a.target_probs = p.data_ptr<float>();
  a.seeds = seeds.data();
  a.positions = positions.data();
  a.greedy = greedy.data();
  a.has_draft_probs = d.has_probs.empty() ? nullptr : d.has_probs.data();
  a.draft_token_ids_size = N;
  a.draft_probs_size = q ? d.probs.rows() * d.probs.cols() : -1;
  a.target_probs_size = p.numel();
  std::int64_t max_k = 0;
  for (std::int64_t b = 0; b < B; ++b) max_k = std::max(max_k, d.num_drafts(b));
  const std::int64_t stride = max_k + 1;
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(B * stride), -1);
  std::vector<std::int32_t> counts(static_cast<std::size_t>(B));
  const ChainVerifyOutputs<std::int64_t> out{tokens.data(), stride, counts.data(), nullptr};
  VerifyResult r = ::specdec::detail::check_chain(a, out, max_k);
  std::vector<float> tile_masses(static_cast<std::size_t>(num_tiles(V)));
  for (std::int64_t b = 0; b < B && r.ok(); ++b)
    r = block[static_cast<std::size_t>(b)]
            ? verify_block_one(a, b, tokens.data() + b * stride, &counts[static_cast<std::size_t>(b)], nullptr,
                               tile_masses.data())
            : verify_chain_one(a, b, tokens.data() + b * stride, &counts[static_cast<std::size_t>(b)], nullptr,
                               tile_masses.data());
  if (!r.ok()) throw error(r.status, "verify: " + to_string(r));
  Verified v;
  v.tokens.resize(static_cast<std::size_t>(B));
  v.nodes.resize(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t n = counts[static_cast<std::size_t>(b)];
    v.tokens[static_cast<std::size_t>(b)].assign(tokens.begin() + b * stride, tokens.begin() + b * stride + n + 1);
    auto& nd = v.nodes[static_cast<std::size_t>(b)];
    for (std::int64_t i = 0; i < n; ++i) nd.push_back(i + 1);
  }
  return v;
}

/// Verified::expected: expected accepted drafts of every sampled chain request with draft probs, from the processed
/// target rows [N + B, V] (copied to the host when they are elsewhere; only measure_expected_acceptance asks).
void add_expected(Verified& v, const proposers::DraftBatch& d, const at::Tensor& target_probs,
                  std::span<const SamplingParams* const> params) {
  if (!d.parents.empty() || !d.probs.defined()) return;
  const at::Tensor p = target_probs.is_cpu() ? target_probs.contiguous() : target_probs.cpu().contiguous();
  const float* q = d.probs.host_float32_data("verify: draft probs");
  const std::int64_t V = p.size(1);
  const auto B = static_cast<std::int64_t>(params.size());
  const double nan = std::nan("");
  v.expected.assign(static_cast<std::size_t>(B), ExpectedAccepted{nan, nan});
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], k = d.num_drafts(b);
    if (k == 0 || params[static_cast<std::size_t>(b)]->greedy() || !d.request_has_probs(b)) continue;
    ExpectedAccepted e;
    if (expected_accepted_drafts<std::int64_t>(V, k, d.token_ids.data() + s, q + s * V,
                                               p.data_ptr<float>() + (s + b) * V, e) == Status::kSuccess)
      v.expected[static_cast<std::size_t>(b)] = e;
  }
}

/// A chain batch that mixes block- and token-verified requests: the logits processed on the host (process_logits) and
/// each chain verified on the CPU core by its own method (the device entry takes one method per batch).
Verified verify_on_host(const proposers::DraftBatch& d, const at::Tensor& logits,
                        std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                        std::span<const std::uint8_t> block, bool expected_acceptance) {
  const auto B = static_cast<std::int64_t>(params.size());
  std::vector<const SamplingParams*> row_params;
  row_params.reserve(static_cast<std::size_t>(static_cast<std::int64_t>(d.token_ids.size()) + B));
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(B));
  std::vector<std::uint8_t> greedy(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const SamplingParams* p = params[static_cast<std::size_t>(b)];
    row_params.insert(row_params.end(), static_cast<std::size_t>(d.num_drafts(b) + 1), p);
    seeds[static_cast<std::size_t>(b)] = p->seed;
    greedy[static_cast<std::size_t>(b)] = p->greedy() ? 1 : 0;
  }
  const at::Tensor probs =
      proposers::process_logits(logits.scalar_type() == at::kFloat ? logits : logits.to(at::kFloat), row_params);
  Verified v = verify_chains_on_core(d, probs, seeds, positions, greedy, block);
  if (expected_acceptance) add_expected(v, d, probs, params);
  return v;
}

/// A tree batch's parents as one [N] array in verify_logits' layout (a request without its own parents: a chain).
std::vector<std::int64_t> flat_parents(const proposers::DraftBatch& d) {
  std::vector<std::int64_t> par(d.token_ids.size());
  for (std::int64_t b = 0; b < d.num_requests(); ++b) {
    const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], e = d.cu_num_drafts[static_cast<std::size_t>(b + 1)];
    const auto& pb = d.parents[static_cast<std::size_t>(b)];
    for (std::int64_t j = s; j < e; ++j) par[static_cast<std::size_t>(j)] = pb.empty() ? j - s : pb[static_cast<std::size_t>(j - s)];
  }
  return par;
}

/// The step's Verified from verify_logits' results on the host (tokens [B, stride], counts, statuses, tree nodes or
/// none); raises for the first failed request.
template <class Count>
Verified verified_from(std::int64_t B, std::int64_t stride, const std::int64_t* out, const Count* nacc, const Count* status,
                       const std::int64_t* nodes) {
  for (std::int64_t b = 0; b < B; ++b)
    if (status[b] != 0) {
      const auto st = static_cast<Status>(status[b]);
      throw error(st, "verify: request " + std::to_string(b) + " of the step failed: " + to_string(st) + ": " +
                          torch::detail::blame(st));
    }
  Verified v;
  v.tokens.resize(static_cast<std::size_t>(B));
  v.nodes.resize(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const auto n = static_cast<std::int64_t>(nacc[b]);
    v.tokens[static_cast<std::size_t>(b)].assign(out + b * stride, out + b * stride + n + 1);
    auto& nd = v.nodes[static_cast<std::size_t>(b)];
    nd.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) nd[static_cast<std::size_t>(i)] = nodes ? nodes[b * stride + i] : i + 1;
  }
  return v;
}

/// A CPU target's float32 rows: specdec::verify_logits_host on the step's own vectors, so a step makes no tensor (the
/// ATen path's staging, views, outputs and conversions cost ~0.25 ms a step on a 2-vCPU host: bench_decoder).
Verified verify_on_host_rows(const proposers::DraftBatch& d, const Rows& logits,
                             std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                             VerifyMethod method, at::Tensor* workspace, const HostParallelFor& parallel_for) {
  const auto B = static_cast<std::int64_t>(params.size());
  const auto N = static_cast<std::int64_t>(d.token_ids.size());
  const std::int64_t V = logits.cols();
  const bool tree = !d.parents.empty();
  const std::vector<std::int64_t> par = tree ? flat_parents(d) : std::vector<std::int64_t>();
  std::vector<std::int64_t> seeds(static_cast<std::size_t>(B));
  std::vector<float> temperature(static_cast<std::size_t>(B)), top_p(static_cast<std::size_t>(B)),
      min_p(static_cast<std::size_t>(B));
  std::vector<std::int32_t> top_k(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const SamplingParams& p = *params[static_cast<std::size_t>(b)];
    const auto i = static_cast<std::size_t>(b);
    seeds[i] = static_cast<std::int64_t>(p.seed);
    temperature[i] = p.temperature;
    top_k[i] = p.top_k;
    top_p[i] = p.top_p;
    min_p[i] = p.min_p;
  }
  const std::int64_t need = (N + B) * V;
  std::vector<float> local;
  float* rows = nullptr;
  if (workspace) {
    const std::int64_t bytes = need * static_cast<std::int64_t>(sizeof(float));
    if (!workspace->defined() || !workspace->is_cpu() || workspace->numel() < bytes)
      *workspace = at::empty({bytes + bytes / 2}, at::TensorOptions().dtype(at::kByte));  // room to grow
    rows = reinterpret_cast<float*>(workspace->data_ptr<std::uint8_t>());
  } else {
    local.resize(static_cast<std::size_t>(need));
    rows = local.data();
  }
  HostVerifyArgs a;
  a.target_logits = logits.host_float32_data("verify: target_logits");
  a.target_logits_stride = logits.row_stride();
  a.vocab_size = V;
  a.draft_token_ids = d.token_ids;
  a.cu_num_draft_tokens = d.cu_num_drafts;
  a.parents = par;
  a.draft_probs = d.probs.defined() ? d.probs.host_float32_data("verify: draft probs") : nullptr;
  a.has_draft_probs = d.has_probs;
  a.temperature = temperature;
  a.top_k = top_k;
  a.top_p = top_p;
  a.min_p = min_p;
  a.seeds = seeds;
  a.positions = positions;
  a.method = method;
  a.all_target_probs = false;  // only the expected-acceptance measure reads rows past a rejection (not on this path)
  a.workspace = rows;
  a.parallel_for = parallel_for;
  const HostVerifyResult r = verify_logits_host(a);
  return verified_from(B, r.stride, r.output_token_ids.data(), r.num_accepted.data(), r.status.data(),
                       tree ? r.accepted_nodes.data() : nullptr);
}

/// Every other batch: specdec::torch::verify_logits on the logits' device. The step's small inputs (ids, cu, parents,
/// seeds, positions, sampling parameters, draft kinds) are staged in one host buffer and uploaded in one copy; the
/// results (tokens, counts, statuses, tree nodes) come back in one copy. The [N + B, V] rows stay on the device.
Verified verify_on_device(const proposers::DraftBatch& d, const at::Tensor& logits,
                          std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                          bool expected_acceptance, VerifyMethod method, at::Tensor* workspace,
                          const HostParallelFor& parallel_for) {
  const auto B = static_cast<std::int64_t>(params.size());
  const auto N = static_cast<std::int64_t>(d.token_ids.size());
  const bool tree = !d.parents.empty(), kinds = !d.has_probs.empty();
  std::int64_t max_k = 0;
  for (std::int64_t b = 0; b < B; ++b) max_k = std::max(max_k, d.num_drafts(b));
  // Staging layout: 8-byte aligned sections, so each is a view of its own dtype.
  auto up8 = [](std::int64_t n) { return (n + 7) / 8 * 8; };
  const std::int64_t o_ids = 0, o_cu = o_ids + 8 * N, o_par = o_cu + 8 * (B + 1), o_seed = o_par + (tree ? 8 * N : 0),
                     o_pos = o_seed + 8 * B, o_temp = o_pos + 8 * B, o_topk = o_temp + up8(4 * B),
                     o_topp = o_topk + up8(4 * B), o_minp = o_topp + up8(4 * B), o_kind = o_minp + up8(4 * B),
                     total = o_kind + up8(kinds ? B : 0);
  const at::Device dev = logits.device();
  // Page-locked on a device, so the upload is asynchronous (the host allocator's cached blocks: no allocation per step).
  at::Tensor host = at::empty({total}, at::TensorOptions().dtype(at::kByte).pinned_memory(!logits.is_cpu()));
  std::uint8_t* h = host.data_ptr<std::uint8_t>();
  // An empty section (no drafts this step) may come from an empty vector whose data() is null: copy nothing then.
  auto put = [h](std::int64_t off, const void* src, std::int64_t bytes) {
    if (bytes > 0) std::memcpy(h + off, src, static_cast<std::size_t>(bytes));
  };
  put(o_ids, d.token_ids.data(), 8 * N);
  put(o_cu, d.cu_num_drafts.data(), 8 * (B + 1));
  if (tree) {
    const std::vector<std::int64_t> par = flat_parents(d);
    put(o_par, par.data(), 8 * N);
  }
  put(o_pos, positions.data(), 8 * B);
  for (std::int64_t b = 0; b < B; ++b) {
    const SamplingParams& p = *params[static_cast<std::size_t>(b)];
    const auto seed = static_cast<std::int64_t>(p.seed);
    std::memcpy(h + o_seed + 8 * b, &seed, 8);
    std::memcpy(h + o_temp + 4 * b, &p.temperature, 4);
    std::memcpy(h + o_topk + 4 * b, &p.top_k, 4);
    std::memcpy(h + o_topp + 4 * b, &p.top_p, 4);
    std::memcpy(h + o_minp + 4 * b, &p.min_p, 4);
  }
  if (kinds) put(o_kind, d.has_probs.data(), B);
  const at::Tensor staged = logits.is_cpu() ? host : host.to(dev, /*non_blocking=*/true);  // host -> device, no sync
  auto view = [&](std::int64_t off, std::int64_t n, at::ScalarType t, std::int64_t size) {
    return staged.slice(0, off, off + n * size).view(t);
  };
  torch::VerifyLogitsArgs a;
  a.target_logits = logits;
  a.draft_token_ids = view(o_ids, N, at::kLong, 8);
  a.cu_num_draft_tokens = view(o_cu, B + 1, at::kLong, 8);
  if (d.probs.defined())  // draft rows (host memory): moved to the target's device
    a.draft_probs = torch::to_device_async(torch::tensor_of(d.probs), dev);
  if (tree) a.parents = view(o_par, N, at::kLong, 8);
  if (kinds) a.has_draft_probs = view(o_kind, B, at::kByte, 1);
  a.temperature = view(o_temp, B, at::kFloat, 4);
  a.top_k = view(o_topk, B, at::kInt, 4);
  a.top_p = view(o_topp, B, at::kFloat, 4);
  a.min_p = view(o_minp, B, at::kFloat, 4);
  a.seeds = view(o_seed, B, at::kLong, 8);
  a.positions = view(o_pos, B, at::kLong, 8);
  a.max_num_draft_tokens = max_k;
  a.method = method;
  a.all_target_probs = expected_acceptance;  // the only reader of the rows past a rejection
  if (logits.is_cpu()) a.parallel_for = parallel_for;
  if (workspace) {
    const bool draft_rows = false;  // draft probs are float32 rows (check_draft_batch)
    const std::int64_t need = torch::verify_logits_workspace_bytes(B, N, logits.size(1), tree, draft_rows);
    if (!workspace->defined() || workspace->device() != dev || workspace->numel() < need)
      *workspace = at::empty({need + need / 2}, at::TensorOptions().device(dev).dtype(at::kByte));  // room to grow
    a.workspace = *workspace;
  }
  const torch::VerifyLogitsResult r = torch::verify_logits(a);
  std::vector<at::Tensor> parts{r.output_token_ids.reshape({-1}).to(at::kLong), r.num_accepted.to(at::kLong),
                                r.status.to(at::kLong)};
  if (tree) parts.push_back(r.accepted.reshape({-1}).to(at::kLong));
  const at::Tensor packed = at::cat(parts);
  // device -> host: the step's one host synchronisation (none on CPU).
  const at::Tensor back = packed.is_cpu() ? packed : packed.cpu();
  const std::int64_t stride = r.output_token_ids.size(1);
  const std::int64_t* out = back.data_ptr<std::int64_t>();
  const std::int64_t* nacc = out + B * stride;
  const std::int64_t* status = nacc + B;
  const std::int64_t* nodes = tree ? status + B : nullptr;
  Verified v = verified_from(B, stride, out, nacc, status, nodes);
  if (expected_acceptance) add_expected(v, d, r.target_probs, params);
  return v;
}

/// float32 rows in host memory (a CPU target) without the expected-acceptance measure: verify_on_host_rows; the rest
/// (a GPU target, other dtypes, the measure, which reads every processed row): verify_on_device.
Verified verify_rows(const proposers::DraftBatch& d, const Rows& logits, std::span<const SamplingParams* const> params,
                     std::span<const std::int64_t> positions, bool expected_acceptance, VerifyMethod method,
                     at::Tensor* workspace, const HostParallelFor& parallel_for) {
  // Rows keep row_stride >= cols and a contiguous last dimension by construction.
  const bool host_rows = logits.is_host_float32() && logits.cols() >= 1;
  const bool host_drafts = !d.probs.defined() || (d.probs.is_host_float32() && d.probs.contiguous() &&
                                                  d.probs.rows() == static_cast<std::int64_t>(d.token_ids.size()) &&
                                                  d.probs.cols() == logits.cols());
  const auto rows = static_cast<std::int64_t>(d.token_ids.size() + params.size());
  if (host_rows && host_drafts && !expected_acceptance && logits.rows() == rows)
    return verify_on_host_rows(d, logits, params, positions, method, workspace, parallel_for);
  return verify_on_device(d, torch::tensor_of(logits), params, positions, expected_acceptance, method, workspace,
                          parallel_for);
}

}  // namespace

Verified verify(const proposers::DraftBatch& d, const Rows& target_logits,
                std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                std::span<const std::uint8_t> block, bool expected_acceptance, at::Tensor* workspace,
                const HostParallelFor& parallel_for) {
  // Every tensor made here stays here (the results are plain vectors): inference mode skips autograd's dispatch on the
  // step's few dozen small ATen calls. The workspace is made in it too, and only ever written by verify_logits.
  c10::InferenceMode inference;
  const auto B = static_cast<std::int64_t>(params.size());
  if (d.num_requests() != B || static_cast<std::int64_t>(positions.size()) != B)
    throw error(Status::kInvalidArgument, "verify: expected " + std::to_string(d.num_requests()) +
                                              " per-request params and positions, got " + std::to_string(B) + " and " +
                                              std::to_string(positions.size()));
  if (!target_logits.defined())
    throw error(Status::kInvalidArgument, "verify: target_logits: expected rows [N + B, V], got none");
  if (d.parents.empty() && std::any_of(block.begin(), block.end(), [](std::uint8_t m) { return m != 0; })) {
    if (static_cast<std::int64_t>(block.size()) != B)
      throw error(Status::kInvalidArgument, "verify: block: expected " + std::to_string(B) +
                                                " per-request flags, got " + std::to_string(block.size()));
    // Every request block-verified: the device entry's block mode; a mix of methods: the CPU core, request by request.
    if (std::all_of(block.begin(), block.end(), [](std::uint8_t m) { return m != 0; }))
      return verify_rows(d, target_logits, params, positions, expected_acceptance, VerifyMethod::kBlock, workspace,
                         parallel_for);
    return verify_on_host(d, torch::tensor_of(target_logits), params, positions, block, expected_acceptance);
  }
  return verify_rows(d, target_logits, params, positions, expected_acceptance, VerifyMethod::kToken, workspace,
                     parallel_for);
}

namespace {
proposers::TargetFeatures select_rows(const models::ForwardOutput& out, const at::Tensor& rows, std::int64_t start,
                                      const proposers::TargetFeatureSpec& spec) {
  proposers::TargetFeatures f;
  f.start = start;
  f.rows = rows.numel();
  auto select = [&](const Rows& r) { return torch::rows_of(torch::tensor_of(r).index_select(0, rows)); };
  if (spec.final_hidden) {
    f.hidden_pre_norm = select(out.hidden_pre_norm);
    f.hidden_post_norm = select(out.hidden_post_norm);
  }
  for (const auto& r : out.layer_hidden) f.layer_hidden.push_back(select(r));
  return f;
}
}  // namespace

proposers::TargetFeatures gather_features(const models::ForwardOutput& out, std::int64_t row_begin,
                                          std::span<const std::int64_t> accepted_nodes, std::int64_t start,
                                          const proposers::TargetFeatureSpec& spec) {
  const bool on_device = out.logits.defined() && !out.logits.device().is_cpu();
  at::Tensor rows = at::empty({static_cast<std::int64_t>(accepted_nodes.size()) + 1},
                              at::TensorOptions().dtype(at::kLong).pinned_memory(on_device));
  auto* r = rows.data_ptr<std::int64_t>();
  r[0] = row_begin;
  for (std::size_t i = 0; i < accepted_nodes.size(); ++i) r[i + 1] = row_begin + accepted_nodes[i];
  at::Tensor dev_rows = on_device ? rows.to(torch::device_of(out.logits), /*non_blocking=*/true) : rows;
  return select_rows(out, dev_rows, start, spec);
}

proposers::TargetFeatures prefill_features(const models::ForwardOutput& out, const proposers::TargetFeatureSpec& spec) {
  proposers::TargetFeatures f;
  f.start = 0;
  if (spec.final_hidden) {
    f.hidden_pre_norm = out.hidden_pre_norm;
    f.hidden_post_norm = out.hidden_post_norm;
    f.rows = out.hidden_pre_norm.rows();
  }
  f.layer_hidden = out.layer_hidden;
  if (!f.layer_hidden.empty()) f.rows = f.layer_hidden.front().rows();
  return f;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

int StopMatcher::push(const std::string& piece) {
  const std::size_t old = tail_.size();
  tail_ += piece;
  int hit = -1;
  std::size_t best_end = std::string::npos;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const auto& s = stops_[i];
    const std::size_t from = old >= s.size() - 1 ? old - (s.size() - 1) : 0;
    const std::size_t at = tail_.find(s, from);
    if (at != std::string::npos && (best_end == std::string::npos || at + s.size() < best_end)) {
      best_end = at + s.size();
      hit = static_cast<int>(i);
    }
  }
  if (tail_.size() > 4 * longest_ + 64) tail_.erase(0, tail_.size() - longest_);
  return hit;
}

void check_options(const DecoderOptions& o) {
  if (o.num_speculative_tokens < 0)
    fail("DecoderOptions.num_speculative_tokens: expected >= 0, got " + std::to_string(o.num_speculative_tokens));
  const AdaptiveSpeculation& a = o.adaptive;
  if (!(a.acceptance_decay > 0 && a.acceptance_decay <= 1))
    fail("DecoderOptions.adaptive.acceptance_decay: expected a value in (0, 1], got " + std::to_string(a.acceptance_decay));
  if (!(a.cost_decay > 0 && a.cost_decay <= 1))
    fail("DecoderOptions.adaptive.cost_decay: expected a value in (0, 1], got " + std::to_string(a.cost_decay));
  if (a.probe_interval < 1)
    fail("DecoderOptions.adaptive.probe_interval: expected >= 1, got " + std::to_string(a.probe_interval));
  if (a.first_probe_interval < 1)
    fail("DecoderOptions.adaptive.first_probe_interval: expected >= 1, got " + std::to_string(a.first_probe_interval));
  if (a.probe_backoff < 1)
    fail("DecoderOptions.adaptive.probe_backoff: expected >= 1, got " + std::to_string(a.probe_backoff));
  if (std::isnan(a.draft_seconds_per_position))
    fail("DecoderOptions.adaptive.draft_seconds_per_position: expected seconds (or < 0 = measured), got nan");
  if (!(a.sampled_draft_cost >= 0.0) || std::isinf(a.sampled_draft_cost))
    fail("DecoderOptions.adaptive.sampled_draft_cost: expected a finite value >= 0, got " +
         std::to_string(a.sampled_draft_cost));
  if (o.calibration_forwards < 1)
    fail("DecoderOptions.calibration_forwards: expected >= 1, got " + std::to_string(o.calibration_forwards));
}

void check_request(const GenerationRequest& r, std::int64_t V, const DecoderOptions& o) {
  if (r.prompt.empty()) fail("GenerationRequest.prompt: expected at least one token, got an empty prompt");
  for (std::size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= V)
      fail("GenerationRequest.prompt[" + std::to_string(i) + "]: expected a token id in [0, " + std::to_string(V) +
           "), got " + std::to_string(r.prompt[i]));
  std::string m;
  if (validate(r.params, &m) != Status::kSuccess) fail("GenerationRequest.params." + m);
  if (r.max_new_tokens < 1) fail("GenerationRequest.max_new_tokens: expected >= 1, got " + std::to_string(r.max_new_tokens));
  for (auto t : r.stop_token_ids)
    if (t < 0 || t >= V)
      fail("GenerationRequest.stop_token_ids: expected ids in [0, " + std::to_string(V) + "), got " + std::to_string(t));
  for (const auto& s : r.stop_strings)
    if (s.empty()) fail("GenerationRequest.stop_strings: expected non-empty strings, got an empty one");
  if (!r.stop_strings.empty() && !o.detokenize)
    fail("GenerationRequest.stop_strings: stop strings need DecoderOptions.detokenize (e.g. make_detokenizer(tokenizer))");
  if (r.num_speculative_tokens < -1)
    fail("GenerationRequest.num_speculative_tokens: expected >= 0 (or -1 = the decoder's default), got " +
         std::to_string(r.num_speculative_tokens));
}

}  // namespace detail
}  // namespace decoder
}  // namespace specdec
