// The non-template parts of SpeculativeDecoder's step: draft validation, forward batches, verification, stop strings,
// metrics.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "specdec/decoder/detail.hpp"
#include "specdec/decoder/types.hpp"
#include "specdec/models/float16.hpp"
#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/theory.hpp"
#include "specdec/verify/host.hpp"
#include "specdec/verify/status_rule.hpp"

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
    const bool tree = d.request_is_tree(b);
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
  const bool tree = d.request_is_tree(b);
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

std::vector<std::int64_t> best_tree_nodes(const proposers::DraftBatch& d, std::int64_t b, std::vector<double>* path_out) {
  const auto s = d.cu_num_drafts[static_cast<std::size_t>(b)];
  const std::int64_t k = d.num_drafts(b);
  const auto& parents = d.parents[static_cast<std::size_t>(b)];
  std::vector<double> local;
  std::vector<double>& path = path_out ? *path_out : local;  // by node (0: the root)
  path.assign(static_cast<std::size_t>(k) + 1, 1.0);
  for (std::int64_t j = 0; j < k; ++j)
    path[static_cast<std::size_t>(j) + 1] =
        path[static_cast<std::size_t>(parents[static_cast<std::size_t>(j)])] *
        static_cast<double>(d.confidence.at(static_cast<std::size_t>(s + j)));
  std::vector<std::int64_t> order(static_cast<std::size_t>(k));
  for (std::int64_t j = 0; j < k; ++j) order[static_cast<std::size_t>(j)] = j;
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
    return path[static_cast<std::size_t>(x) + 1] > path[static_cast<std::size_t>(y) + 1];
  });
  return order;
}

proposers::DraftBatch cut_drafts(const proposers::DraftBatch& d, std::span<const std::int32_t> limit,
                                 std::span<const std::uint8_t> best_nodes) {
  proposers::DraftBatch out;
  out.cu_num_drafts.push_back(0);
  std::vector<std::int64_t> tokens, parents, renumber, kept;
  std::vector<std::uint8_t> keep;
  for (std::int64_t b = 0; b < d.num_requests(); ++b) {
    const auto s = d.cu_num_drafts[static_cast<std::size_t>(b)];
    const auto depth = draft_depths(d, b);
    const bool tree = d.request_is_tree(b);
    const std::int32_t lim = limit[static_cast<std::size_t>(b)];
    keep.assign(depth.size(), 0);
    if (tree && !best_nodes.empty() && best_nodes[static_cast<std::size_t>(b)]) {
      const auto order = best_tree_nodes(d, b);
      for (std::size_t i = 0; i < order.size() && static_cast<std::int64_t>(i) < lim; ++i)
        keep[static_cast<std::size_t>(order[i])] = 1;
    } else {
      for (std::size_t j = 0; j < depth.size(); ++j) keep[j] = depth[j] <= lim ? 1 : 0;
    }
    const bool cuts = std::find(keep.begin(), keep.end(), 0) != keep.end();
    if (cuts && d.request_has_probs(b))  // a sampled request's drafts are verified as drawn: only deterministic ones are cut
      throw error(Status::kInvalidArgument, "cut_drafts: request " + std::to_string(b) + ": drafts with draft probabilities");
    tokens.clear();
    parents.clear();
    renumber.assign(depth.size() + 1, 0);  // old node index -> new (node 0, the root, stays 0)
    for (std::size_t j = 0; j < depth.size(); ++j) {
      if (!keep[j]) continue;
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
  const bool tree = d.request_is_tree(b);
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

[[noreturn]] void no_backend(const char* what, const Rows& rows) {
  throw error(Status::kInvalidArgument,
              std::string(what) + ": rows on device " + (rows.device().type == DeviceType::kCuda ? "cuda:" : "?:") +
                  std::to_string(rows.device().index) +
                  " need DecoderOptions::device_backend (e.g. specdec::torch::make_device_backend)");
}

/// Host rows of any dtype as float32 rows (float32 ones as they are; float16 / bfloat16 converted exactly).
Rows host_float32_rows(const Rows& r) {
  if (r.dtype() == DType::kFloat32) return r;
  Rows out = Rows::host_float32(r.rows(), r.cols());
  float* dst = out.mutable_host_float32_data("verify: target_logits");
  const auto* src = static_cast<const std::uint16_t*>(r.view().data);
  const bool half = r.dtype() == DType::kFloat16;
  for (std::int64_t i = 0; i < r.rows(); ++i)
    for (std::int64_t j = 0; j < r.cols(); ++j) {
      const std::uint16_t x = src[i * r.row_stride() + j];
      dst[i * r.cols() + j] = half ? models::half_to_float(x) : models::bf16_to_float(x);
    }
  return out;
}

/// Host float32 rows: specdec::verify_logits_host on the step's own vectors, so a step makes no tensor (staging, views,
/// outputs and conversions of a tensor path cost ~0.25 ms a step on a 2-vCPU host: bench_decoder). `block`: per-request
/// methods of a chain batch, or empty (`method` for all). With `expected_acceptance` every row is processed and the
/// processed rows give Verified::expected.
Verified verify_host_rows(const proposers::DraftBatch& d, const Rows& logits, std::span<const SamplingParams* const> params,
                          std::span<const std::int64_t> positions, VerifyMethod method, std::span<const std::uint8_t> block,
                          bool expected_acceptance, std::vector<float>* workspace, const HostParallelFor& parallel_for) {
  const auto B = static_cast<std::int64_t>(params.size());
  const auto N = static_cast<std::int64_t>(d.token_ids.size());
  const std::int64_t V = logits.cols();
  const bool tree = !d.parents.empty();
  if (logits.rows() != N + B)
    throw error(Status::kInvalidArgument, "verify: target_logits: expected N + B = " + std::to_string(N + B) +
                                              " rows, got " + std::to_string(logits.rows()));
  if (d.probs.defined() && (d.probs.rows() != N || d.probs.cols() != V))
    throw error(Status::kInvalidArgument, "verify: draft probs: expected [N, V] = [" + std::to_string(N) + ", " +
                                              std::to_string(V) + "], got [" + std::to_string(d.probs.rows()) + ", " +
                                              std::to_string(d.probs.cols()) + "]");
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
  std::vector<float> local;
  std::vector<float>& rows = workspace ? *workspace : local;
  const auto need = static_cast<std::size_t>((N + B) * V);
  if (rows.size() < need) rows.resize(need + need / 2);  // room to grow
  const Rows lg = host_float32_rows(logits);
  HostVerifyArgs a;
  a.target_logits = lg.host_float32_data("verify: target_logits");
  a.target_logits_stride = lg.row_stride();
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
  a.block = block;
  // Only the expected-acceptance measure reads the rows past a rejection.
  a.all_target_probs = expected_acceptance;
  a.workspace = rows.data();
  a.parallel_for = parallel_for;
  const HostVerifyResult r = verify_logits_host(a);
  std::vector<std::int64_t> nacc(r.num_accepted.begin(), r.num_accepted.end()), status(r.status.begin(), r.status.end());
  Verified v = verified_from(B, r.stride, r.output_token_ids.data(), nacc.data(), status.data(),
                             tree ? r.accepted_nodes.data() : nullptr);
  if (expected_acceptance) add_expected(v, d, rows.data(), V, params);
  return v;
}

}  // namespace

std::vector<std::int64_t> flat_parents(const proposers::DraftBatch& d) {
  std::vector<std::int64_t> par(d.token_ids.size());
  for (std::int64_t b = 0; b < d.num_requests(); ++b) {
    const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], e = d.cu_num_drafts[static_cast<std::size_t>(b + 1)];
    const auto& pb = d.parents[static_cast<std::size_t>(b)];
    for (std::int64_t j = s; j < e; ++j) par[static_cast<std::size_t>(j)] = pb.empty() ? j - s : pb[static_cast<std::size_t>(j - s)];
  }
  return par;
}

Verified verified_from(std::int64_t B, std::int64_t stride, const std::int64_t* out, const std::int64_t* nacc,
                       const std::int64_t* status, const std::int64_t* nodes) {
  for (std::int64_t b = 0; b < B; ++b)
    if (status[b] != 0) {
      const auto st = static_cast<Status>(status[b]);
      throw error(st, "verify: request " + std::to_string(b) + " of the step failed: " + to_string(st) + ": " +
                          ::specdec::detail::blame(st));
    }
  Verified v;
  v.tokens.resize(static_cast<std::size_t>(B));
  v.nodes.resize(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const auto n = nacc[b];
    v.tokens[static_cast<std::size_t>(b)].assign(out + b * stride, out + b * stride + n + 1);
    auto& nd = v.nodes[static_cast<std::size_t>(b)];
    nd.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) nd[static_cast<std::size_t>(i)] = nodes ? nodes[b * stride + i] : i + 1;
  }
  return v;
}

void add_expected(Verified& v, const proposers::DraftBatch& d, const float* p, std::int64_t V,
                  std::span<const SamplingParams* const> params) {
  if (!d.parents.empty() || !d.probs.defined()) return;
  const float* q = d.probs.host_float32_data("verify: draft probs");
  const auto B = static_cast<std::int64_t>(params.size());
  const double nan = std::nan("");
  v.expected.assign(static_cast<std::size_t>(B), ExpectedAccepted{nan, nan});
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], k = d.num_drafts(b);
    if (k == 0 || params[static_cast<std::size_t>(b)]->greedy() || !d.request_has_probs(b)) continue;
    ExpectedAccepted e;
    if (expected_accepted_drafts<std::int64_t>(V, k, d.token_ids.data() + s, q + s * V, p + (s + b) * V, e) ==
        Status::kSuccess)
      v.expected[static_cast<std::size_t>(b)] = e;
  }
}

Verified verify(const proposers::DraftBatch& d, const Rows& target_logits,
                std::span<const SamplingParams* const> params, std::span<const std::int64_t> positions,
                std::span<const std::uint8_t> block, bool expected_acceptance, std::vector<float>* workspace,
                DeviceBackend* device, const HostParallelFor& parallel_for) {
  const auto B = static_cast<std::int64_t>(params.size());
  if (d.num_requests() != B || static_cast<std::int64_t>(positions.size()) != B)
    throw error(Status::kInvalidArgument, "verify: expected " + std::to_string(d.num_requests()) +
                                              " per-request params and positions, got " + std::to_string(B) + " and " +
                                              std::to_string(positions.size()));
  if (!target_logits.defined())
    throw error(Status::kInvalidArgument, "verify: target_logits: expected rows [N + B, V], got none");
  if (target_logits.cols() < 1)
    throw error(Status::kInvalidArgument, "verify: target_logits: expected rows of V >= 1 columns, got 0");
  VerifyMethod method = VerifyMethod::kToken;
  std::span<const std::uint8_t> per_request;  // a chain batch that mixes block- and token-verified requests
  if (d.parents.empty() && std::any_of(block.begin(), block.end(), [](std::uint8_t m) { return m != 0; })) {
    if (static_cast<std::int64_t>(block.size()) != B)
      throw error(Status::kInvalidArgument, "verify: block: expected " + std::to_string(B) +
                                                " per-request flags, got " + std::to_string(block.size()));
    if (std::all_of(block.begin(), block.end(), [](std::uint8_t m) { return m != 0; })) method = VerifyMethod::kBlock;
    else per_request = block;
  }
  const bool host_drafts = !d.probs.defined() || (d.probs.is_host_float32() && d.probs.contiguous());
  if (!host_drafts && !device) no_backend("verify: draft probs", d.probs);
  if (target_logits.device().is_cpu() && host_drafts)
    return verify_host_rows(d, target_logits, params, positions, method, per_request, expected_acceptance, workspace,
                            parallel_for);
  if (!device) no_backend("verify: target_logits", target_logits);
  if (per_request.empty()) return device->verify(d, target_logits, params, positions, method, expected_acceptance);
  // The device entry takes one method a batch: a mix is verified on the host, request by request.
  proposers::DraftBatch host = d;
  if (d.probs.defined() && !host_drafts) host.probs = device->to_host_float32(d.probs);
  const Rows rows = target_logits.device().is_cpu() ? target_logits : device->to_host_float32(target_logits);
  return verify_host_rows(host, rows, params, positions, method, per_request, expected_acceptance, workspace, parallel_for);
}

namespace {
/// Rows `index` of host rows, in that order (the same dtype).
Rows select_host_rows(const Rows& r, std::span<const std::int64_t> index) {
  const std::size_t width = static_cast<std::size_t>(r.cols()) * dtype_size(r.dtype());
  auto buf = std::make_shared<std::vector<unsigned char>>(index.size() * width);
  const auto* src = static_cast<const unsigned char*>(r.view().data);
  for (std::size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= r.rows())
      throw error(Status::kInvalidArgument, "gather_features: row " + std::to_string(index[i]) + " of " +
                                                std::to_string(r.rows()));
    std::memcpy(buf->data() + i * width, src + static_cast<std::size_t>(index[i] * r.row_stride()) * dtype_size(r.dtype()),
                width);
  }
  RowsView v = r.view();
  v.data = buf->data();
  v.rows = static_cast<std::int64_t>(index.size());
  v.row_stride = r.cols();
  return Rows(v, std::shared_ptr<const void>(buf, buf->data()));
}
}  // namespace

proposers::TargetFeatures gather_features(const models::ForwardOutput& out, std::int64_t row_begin,
                                          std::span<const std::int64_t> accepted_nodes, std::int64_t start,
                                          const proposers::TargetFeatureSpec& spec, DeviceBackend* device) {
  std::vector<std::int64_t> index(accepted_nodes.size() + 1);
  index[0] = row_begin;
  for (std::size_t i = 0; i < accepted_nodes.size(); ++i) index[i + 1] = row_begin + accepted_nodes[i];
  auto select = [&](const Rows& r) {
    if (r.device().is_cpu()) return select_host_rows(r, index);
    if (!device) no_backend("gather_features", r);
    return device->select_rows(r, index);
  };
  proposers::TargetFeatures f;
  f.start = start;
  f.rows = static_cast<std::int64_t>(index.size());
  if (spec.final_hidden) {
    f.hidden_pre_norm = select(out.hidden_pre_norm);
    f.hidden_post_norm = select(out.hidden_post_norm);
  }
  for (const auto& r : out.layer_hidden) f.layer_hidden.push_back(select(r));
  return f;
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
