// SpeculativeDecoder<Draft, Target>: the generation loop over a batch of requests.
//
// Each step: the proposer drafts up to g tokens per request (a chain or a tree); ONE target forward runs every request's
// [last token, drafts...]; the verifier processes the logits with each request's SamplingParams and verifies the chains
// or trees where the rows are (host rows: specdec::verify_logits_host; rows on a GPU: the DeviceBackend of
// DecoderOptions::device_backend, e.g. the torch layer's, which returns only the accepted tokens, counts and statuses),
// keeping the accepted drafts and drawing one recovered/bonus token per request (seed = the request's seed, position =
// sequence index of its first draft token, greedy rows at temperature 0); the target cache is rolled back to
// the accepted prefix (trees: keep_path); the tokens are streamed; the proposer learns what was accepted. A request that
// finishes (stop token, stop string, max_new_tokens, or the target's context length when it has one) leaves at once and
// frees its slots; the others continue.
//
// With NoProposer (or g = 0) every step is a plain autoregressive step through the same code: the token is the verifier's
// bonus token with 0 drafts (argmax at temperature 0, otherwise the race over p at the token's position), so a speculative
// and a plain run with the same seed draw from the same random stream and agree token for token at temperature 0.
//
// The target's cache for a running request holds every context token except the last (which the next step feeds as root).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/decoder/detail.hpp"
#include "specdec/decoder/length_policy.hpp"
#include "specdec/decoder/types.hpp"
#include "specdec/models/causal_lm.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::decoder {

template <class Draft, class Target>
class SpeculativeDecoder {
  static_assert(proposers::Proposer<Draft>,
                "SpeculativeDecoder<Draft, Target>: Draft does not satisfy specdec::proposers::Proposer. It needs "
                "begin_request(const RequestContext&), end_request(RequestId), "
                "propose(std::span<const ProposeRequest>) -> DraftBatch and observe(std::span<const StepFeedback>) "
                "(see specdec/proposers/proposer.hpp).");
  static_assert(models::CausalLM<Target>,
                "SpeculativeDecoder<Draft, Target>: Target does not satisfy specdec::models::CausalLM (see "
                "specdec/models/causal_lm.hpp).");

 public:
  /// Most tree nodes a proposer may return for one request in one step.
  static constexpr std::int64_t kMaxTreeNodes = 256;

  /// Both the proposer and the target must outlive the decoder. Throws specdec::error for bad options or a proposer whose
  /// vocabulary differs from the target's.
  SpeculativeDecoder(Draft& proposer, Target& target, DecoderOptions options = {})
      : proposer_(&proposer), target_(&target), options_(std::move(options)) {
    detail::check_options(options_);
    cost_model_ = ForwardCostModel(options_.adaptive.cost_decay);
    vocab_size_ = static_cast<std::int64_t>(target_->vocab_size());
    if constexpr (proposers::has_vocab_size<Draft>) {
      const auto dv = static_cast<std::int64_t>(proposer_->vocab_size());
      if (dv != vocab_size_)
        throw error(Status::kInvalidArgument,
                    "SpeculativeDecoder: the proposer's vocabulary has " + std::to_string(dv) +
                        " tokens but the target's has " + std::to_string(vocab_size_) +
                        "; a draft model must share the target's vocabulary (tokenizer)");
    }
    if constexpr (proposers::wants_target_features<Draft>) {
      // An empty spec (a ProposerChain without a feature member) asks for nothing.
      auto spec = proposer_->target_feature_spec();
      if (spec.final_hidden || !spec.layers.empty()) feature_spec_ = std::move(spec);
    }
    if constexpr (models::HasMaxSequenceLength<Target>)
      max_sequence_length_ = static_cast<std::int64_t>(target_->max_sequence_length());
    if (options_.device_backend) device_backend_ = options_.device_backend();
  }

  ~SpeculativeDecoder() {
    for (auto& [id, r] : running_) release(r, /*to_proposer=*/true);
  }
  SpeculativeDecoder(const SpeculativeDecoder&) = delete;
  SpeculativeDecoder& operator=(const SpeculativeDecoder&) = delete;

  /// Validates the request, prefills the target with prompt[0 .. n-1) and registers it with the proposer. On any error nothing
  /// is left behind (no slot, no proposer state). Returns the request's id.
  RequestId add_request(GenerationRequest request) {
    detail::check_request(request, vocab_size_, options_);
    if (static_cast<std::int64_t>(request.prompt.size()) >= max_sequence_length_)
      throw error(Status::kInvalidArgument,
                  "add_request: prompt: expected fewer tokens than the target's context length " +
                      std::to_string(max_sequence_length_) + " (room for at least one new token), got " +
                      std::to_string(request.prompt.size()));
    std::vector<std::int32_t> members = member_order(request);
    const auto t0 = Clock::now();
    Request r;
    r.id = next_id_;
    r.members = std::move(members);
    r.acceptance = AcceptanceEstimate(options_.adaptive.acceptance_decay);
    r.yield = DraftingYield(options_.adaptive.acceptance_decay);
    r.probe_wait = options_.adaptive.first_probe_interval;
    r.context = request.prompt;
    r.req = std::move(request);
    if (!r.req.stop_strings.empty()) r.stops = detail::StopMatcher(r.req.stop_strings);
    const auto slot = static_cast<std::int64_t>(target_->allocate_sequence());
    r.slot = slot;
    try {
      std::optional<proposers::TargetFeatures> features;
      const auto n = static_cast<std::int64_t>(r.context.size());
      if (n > 1) {
        models::ForwardBatch fb = models::make_chain_batch(r.slot, {r.context.begin(), r.context.end() - 1});
        fb.last_logits_only = true;
        if (feature_spec_) {
          fb.return_final_hidden = feature_spec_->final_hidden;
          fb.hidden_layers = feature_spec_->layers;
        }
        models::ForwardOutput out = target_->forward(fb);
        if (feature_spec_) features = detail::prefill_features(out, *feature_spec_);
      } else if (feature_spec_) {
        features = proposers::TargetFeatures{};
      }
      proposers::RequestContext ctx;
      ctx.id = r.id;
      ctx.context = r.context;
      ctx.params = &r.req.params;
      ctx.features = features ? &*features : nullptr;
      auto [it, inserted] = running_.emplace(r.id, std::move(r));
      try {
        ctx.params = &it->second.req.params;
        proposer_->begin_request(ctx);
      } catch (...) {
        running_.erase(it);
        throw;
      }
    } catch (...) {
      target_->free_sequence(slot);
      throw;
    }
    ++next_id_;
    metrics_.prefill_seconds += seconds_since(t0);
    return next_id_ - 1;
  }

  /// Ends a running request now (its result gets FinishReason::kCancelled). Unknown or finished ids are ignored.
  void cancel(RequestId id) {
    auto it = running_.find(id);
    if (it == running_.end()) return;
    finish(it->second, FinishReason::kCancelled);
    release(it->second, true);
    store_result(it->second);
    running_.erase(it);
  }

  /// One decoding step over every running request. Returns the ids that finished in it.
  std::vector<RequestId> step() {
    std::vector<RequestId> done;
    if (running_.empty()) return done;
    const auto t_step = Clock::now();
    double draft_s = 0, target_s = 0, excluded_s = 0;

    std::vector<Request*> reqs;
    reqs.reserve(running_.size());
    for (auto& [id, r] : running_) reqs.push_back(&r);
    const auto B = static_cast<std::int64_t>(reqs.size());

    // Proposals cut after proposing (cut_after_proposing(): lookups, or drafts with confidences): joint-policy requests
    // propose at their bound, and the policy chooses their g from what was proposed; `proposed` keeps the whole proposal,
    // compared with what the step emits.
    const bool cut = cut_after_proposing();
    std::vector<std::int32_t> g = draft_lengths(reqs, cut);
    const std::int32_t max_g = g.empty() ? 0 : *std::max_element(g.begin(), g.end());
    if (!cut) draft_s += shadow_propose(reqs, g);
    if (max_g > 0 && options_.calibrate && metrics_.one_token_forwards == 0) excluded_s += calibrate(reqs);

    // 1. drafts
    proposers::DraftBatch drafts, proposed;
    if (max_g > 0) {
      std::vector<proposers::ProposeRequest> pr(static_cast<std::size_t>(B));
      for (std::int64_t b = 0; b < B; ++b) {
        Request& r = *reqs[static_cast<std::size_t>(b)];
        auto& p = pr[static_cast<std::size_t>(b)];
        p.id = r.id;
        p.context = r.context;
        p.params = &r.req.params;
        p.max_drafts = g[static_cast<std::size_t>(b)];
        p.position = static_cast<std::int64_t>(r.context.size());
        p.members = r.members;
      }
      const auto t = Clock::now();
      drafts = proposer_->propose(std::span<const proposers::ProposeRequest>(pr));
      const double propose_s = seconds_since(t);
      draft_s += propose_s;
      const double per_position = propose_s / max_g;
      draft_position_seconds_ = draft_position_seconds_ < 0 ? per_position
                                                            : 0.9 * draft_position_seconds_ + 0.1 * per_position;
      detail::check_draft_batch(drafts, g, vocab_size_, proposers::supports_trees<Draft> && models::TreeCausalLM<Target>,
                                kMaxTreeNodes);
      if (cut) {
        proposed = std::move(drafts);
        std::vector<std::uint8_t> best_nodes;
        g = lengths_after_proposing(reqs, proposed, best_nodes);
        drafts = detail::cut_drafts(proposed, g, best_nodes);
      }
    } else {
      drafts = proposers::DraftBatch::empty(B);
    }
    const std::int64_t N = static_cast<std::int64_t>(drafts.token_ids.size());

    // 2. one target forward over every request's [root, drafts...]
    std::vector<std::int64_t> roots(static_cast<std::size_t>(B)), slots(static_cast<std::size_t>(B)),
        positions(static_cast<std::size_t>(B)), base(static_cast<std::size_t>(B));
    std::vector<std::uint8_t> block(static_cast<std::size_t>(B));
    std::vector<const SamplingParams*> params(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      Request& r = *reqs[static_cast<std::size_t>(b)];
      roots[static_cast<std::size_t>(b)] = r.context.back();
      slots[static_cast<std::size_t>(b)] = r.slot;
      positions[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(r.context.size());
      base[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(r.context.size()) - 1;
      params[static_cast<std::size_t>(b)] = &r.req.params;
      block[static_cast<std::size_t>(b)] = r.req.verify_method == VerifyMethod::kBlock ? 1 : 0;
    }
    const models::ForwardBatch fb = detail::build_forward(drafts, roots, slots, feature_spec_ ? &*feature_spec_ : nullptr);
    const auto t_target = Clock::now();
    models::ForwardOutput out = target_->forward(fb);
    target_s += seconds_since(t_target);
    if (N == 0) {
      ++metrics_.one_token_forwards;
      metrics_.one_token_seconds += target_s;
    } else {
      metrics_.verify_seconds += target_s;
      metrics_.verify_tokens_per_request =
          (metrics_.verify_tokens_per_request * static_cast<double>(metrics_.verify_forwards) +
           static_cast<double>(N + B) / static_cast<double>(B)) /
          static_cast<double>(metrics_.verify_forwards + 1);
      ++metrics_.verify_forwards;
    }

    // 3. logits processing and verification where the rows are (a device's: only the accepted tokens come back)
    const detail::Verified v = detail::verify(drafts, out.logits, params, positions, block,
                                              options_.measure_expected_acceptance, &verify_workspace_,
                                              device_backend_.get(), host_parallel_for());
    cost_model_.observe(B, N + B, seconds_since(t_target));  // what a step of N + B rows costs beyond its drafting

    // 4. emit, stop, roll caches back, tell the proposer
    std::vector<proposers::StepFeedback> feedback;
    std::vector<proposers::TargetFeatures> features;
    feedback.reserve(static_cast<std::size_t>(B));
    if (feature_spec_) features.reserve(static_cast<std::size_t>(B));
    std::vector<Request*> finished;
    for (std::int64_t b = 0; b < B; ++b) {
      Request& r = *reqs[static_cast<std::size_t>(b)];
      const auto& toks = v.tokens[static_cast<std::size_t>(b)];
      const auto& nodes = v.nodes[static_cast<std::size_t>(b)];
      const std::int64_t k = drafts.num_drafts(b);
      const auto n_acc = static_cast<std::int64_t>(nodes.size());
      record(r, drafts, b, k, nodes);
      if (!v.expected.empty() && !std::isnan(v.expected[static_cast<std::size_t>(b)].token)) {
        r.metrics.expected_accepted_token += v.expected[static_cast<std::size_t>(b)].token;
        r.metrics.expected_accepted_block += v.expected[static_cast<std::size_t>(b)].block;
        ++r.metrics.expected_steps;
      }
      const std::size_t before = r.context.size();
      for (std::size_t i = 0; i < toks.size() && r.finish == FinishReason::kNone; ++i) emit(r, toks[i]);
      r.metrics.emitted += static_cast<std::int64_t>(r.context.size() - before);
      if (step_observer_) observe_step(r, cut && proposed.num_requests() == B ? proposed : drafts, drafts, b,
                                       positions[static_cast<std::size_t>(b)], nodes,
                                       static_cast<std::int64_t>(r.context.size() - before));
      ++r.metrics.target_forwards;
      if (k > 0) ++r.metrics.steps_with_drafts;
      if (cut && lengths_of(r.req) == Lengths::kJoint && proposed.num_requests() == B && !proposed.request_has_probs(b)) {
        observe_proposal(r, proposed, b, k, toks);  // the whole proposal against what the step emitted
      } else {
        if (!r.shadow_drafts.empty() && k == 0 && !toks.empty()) {  // the shadow probe's observation
          const bool hit = std::find(r.shadow_drafts.begin(), r.shadow_drafts.end(), toks[0]) != r.shadow_drafts.end();
          r.acceptance.observe(1, hit ? 1 : 0);
          ++r.metrics.shadow_probes;
          r.metrics.shadow_accepted += hit ? 1 : 0;
        }
        update_estimate(r, drafts, b, k, n_acc);
      }
      r.shadow_drafts.clear();
      if (callback_)
        callback_(r.id, std::span<const std::int64_t>(r.context).subspan(before), r.finish != FinishReason::kNone);
      if (r.finish != FinishReason::kNone) {
        finished.push_back(&r);
        continue;
      }
      const std::int64_t L = base[static_cast<std::size_t>(b)];
      const bool tree = drafts.request_is_tree(b);
      if (tree) {
        std::vector<std::int64_t> path;
        path.reserve(nodes.size() + 1);
        path.push_back(0);
        path.insert(path.end(), nodes.begin(), nodes.end());
        if constexpr (models::TreeCausalLM<Target>) target_->keep_path(r.slot, L, path);  // else refused above
      } else {
        target_->truncate(r.slot, L + 1 + n_acc);
      }
      proposers::StepFeedback f;
      f.id = r.id;
      f.num_drafts = static_cast<std::int32_t>(k);
      f.num_accepted = static_cast<std::int32_t>(n_acc);
      f.accepted_nodes = nodes;
      f.emitted_token = r.context.back();
      f.context = r.context;
      if (feature_spec_) {
        features.push_back(detail::gather_features(out, fb.cu_num_tokens[static_cast<std::size_t>(b)], nodes, L, *feature_spec_,
                                                   device_backend_.get()));
        f.features = &features.back();
      }
      feedback.push_back(f);
    }
    {
      const auto t = Clock::now();
      for (Request* r : finished) release(*r, true);
      if (!feedback.empty()) proposer_->observe(std::span<const proposers::StepFeedback>(feedback));
      draft_s += seconds_since(t);
    }
    for (Request* r : finished) {
      done.push_back(r->id);
      store_result(*r);
      running_.erase(r->id);
    }
    ++metrics_.steps;
    metrics_.draft_positions += max_g > 0 ? (N > 0 ? max_depth(drafts) : 0) : 0;
    metrics_.draft_seconds += draft_s;
    metrics_.target_seconds += target_s;
    metrics_.overhead_seconds += std::max(0.0, seconds_since(t_step) - draft_s - target_s - excluded_s);
    return done;
  }

  /// Runs every request to completion (together with any already running) and returns their results in order.
  std::vector<GenerationResult> generate(std::span<const GenerationRequest> requests, const TokenCallback& callback = {}) {
    for (std::size_t i = 0; i < requests.size(); ++i) detail::check_request(requests[i], vocab_size_, options_);
    std::vector<RequestId> ids;
    ids.reserve(requests.size());
    try {
      for (const auto& rq : requests) ids.push_back(add_request(rq));
    } catch (...) {
      for (auto id : ids) cancel(id), results_.erase(id);
      throw;
    }
    TokenCallback saved = std::move(callback_);
    callback_ = callback;
    try {
      while (!running_.empty()) step();
    } catch (...) {
      callback_ = std::move(saved);
      throw;
    }
    callback_ = std::move(saved);
    std::vector<GenerationResult> res;
    res.reserve(ids.size());
    for (auto id : ids) res.push_back(take_result(id));
    return res;
  }

  /// The callback step() streams tokens through.
  void set_callback(TokenCallback callback) { callback_ = std::move(callback); }
  /// Called in step() for every request of the step, after its tokens are emitted (StepTrace); empty to stop.
  void set_step_observer(StepObserver observer) { step_observer_ = std::move(observer); }
  /// The result of a finished request (removed from the decoder). Throws specdec::error for an id that has none.
  GenerationResult take_result(RequestId id) {
    auto it = results_.find(id);
    if (it == results_.end())
      throw error(Status::kInvalidArgument, "take_result: request " + std::to_string(id) + " has no result (unknown or running)");
    GenerationResult r = std::move(it->second);
    results_.erase(it);
    return r;
  }
  std::size_t num_running() const { return running_.size(); }
  bool idle() const { return running_.empty(); }
  /// Tokens of a running request so far (prompt + generated).
  std::span<const std::int64_t> context(RequestId id) const {
    auto it = running_.find(id);
    if (it == running_.end()) throw error(Status::kInvalidArgument, "context: request " + std::to_string(id) + " is not running");
    return it->second.context;
  }
  /// The target slot of a running request (its cache holds context[0 .. n-1)).
  std::int64_t target_slot(RequestId id) const {
    auto it = running_.find(id);
    if (it == running_.end()) throw error(Status::kInvalidArgument, "target_slot: request " + std::to_string(id) + " is not running");
    return it->second.slot;
  }
  const DecoderMetrics& metrics() const { return metrics_; }
  void reset_metrics() { metrics_ = {}; }
  const DecoderOptions& options() const { return options_; }
  Draft& proposer() { return *proposer_; }
  Target& target() { return *target_; }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

  struct Request {
    RequestId id = -1;
    GenerationRequest req;
    std::vector<std::int64_t> context;
    std::int64_t slot = -1;
    detail::StopMatcher stops;
    RequestMetrics metrics;
    FinishReason finish = FinishReason::kNone;
    std::string stop_string;
    std::vector<std::int32_t> members;  // GenerationRequest::proposers as the proposer's member indices (empty: all)
    AcceptanceEstimate acceptance;  // by draft position, decayed (the adaptive policy's E[tokens])
    DraftingYield yield;            // what its drafting steps emitted and verified (sampled requests choosing alone)
    double rows_per_depth = 1.0;    // token rows per draft depth of the request's last drafts (trees > 1)
    std::int32_t plain_steps = 0;   // consecutive steps the adaptive policy chose g = 0
    std::int32_t probe_wait = 0;    // plain steps before the next probe (from AdaptiveSpeculation::probe_interval)
    bool probing = false;           // this step's g = 1 is a probe (until a probe's draft is tested)
    bool probe_accepted = false;    // the last probe was accepted: the next plain step probes again (probe_wait 1)
    // this step's shadow drafts (a chain's first draft, or a tree's first-level siblings), one of which the emitted
    // token equals exactly when a verification would have accepted the first level (greedy; sampled: in law)
    std::vector<std::int64_t> shadow_drafts;
  };

  /// Whether plain steps of joint-policy requests take shadow probes instead of probes: asked for, and the proposer's
  /// drafts are lookups.
  bool shadow_probes() const {
    if constexpr (proposers::has_lookup_drafts<Draft>) {
      return options_.adaptive.shadow_probes && proposer_->drafts_are_lookups();
    } else {
      return false;
    }
  }

  /// Whether joint-policy requests propose at their bound and have their drafts cut after proposing
  /// (AdaptiveSpeculation::cut_lookups): shadow probes asked for, the proposer's drafts are lookups, and cutting asked for.
  bool cut_after_proposing() const { return (shadow_probes() && options_.adaptive.cut_lookups) || confidence_cut(); }

  /// Whether the proposer's drafts come with confidences the policy cuts by (AdaptiveSpeculation::confidence_cut).
  bool confidence_cut() const {
    if constexpr (proposers::has_draft_confidence<Draft>) {
      return options_.adaptive.confidence_cut && proposer_->reports_confidence();
    } else {
      return false;
    }
  }

  /// After a proposal at the bound (cut_after_proposing()): each joint-policy request's g, chosen by the policy over the
  /// depths it was proposed (expected tokens for g = 0 .. its proposal's depth: from the drafts' confidences when a
  /// deterministic chain or tree has them, else the request's estimate; the verification cost of each; the drafting is
  /// paid already, so it costs nothing more); a sampled request choosing alone (Lengths::kAlone) whose chain is
  /// deterministic with confidences, alone against the fixed sampled cost; other requests, requests whose drafts were
  /// sampled, and sampled requests' trees keep what they were proposed.
  /// Each request's drafts to verify after proposing: a depth (cut_drafts), or for a deterministic tree with confidences
  /// (best_nodes[b] = 1) a number of its best nodes by path confidence, EAGLE-2's rerank, the tree's value of n nodes
  /// being 1 + the sum of the n best path confidences. Replaying traced EAGLE trees of 48 nodes at temperature 0 on
  /// this host (bench/policy_ceiling.py) put the best n a step at 1.52x / 1.58x and the best depth at 1.28x / 1.29x;
  /// end to end, trees of 16 nodes 1.51x against the depth cut's 1.47x (five alternated rounds, docs/adaptive-policy.md).
  std::vector<std::int32_t> lengths_after_proposing(const std::vector<Request*>& reqs, const proposers::DraftBatch& d,
                                                    std::vector<std::uint8_t>& best_nodes) {
    const std::size_t B = reqs.size();
    std::vector<std::vector<double>> tokens(B);
    std::vector<LengthChoice> choices(B);
    std::vector<bool> from_confidences(B);  // tokens[b] from the chain's own confidences, not the request's history
    best_nodes.assign(B, 0);
    for (std::size_t b = 0; b < B; ++b) {
      const Request& r = *reqs[b];
      const auto depths = detail::draft_depths(d, static_cast<std::int64_t>(b));
      const std::int32_t depth = depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end());
      if (d.request_is_tree(static_cast<std::int64_t>(b)) && best_tree_node_tokens(d, static_cast<std::int64_t>(b), tokens[b])) {
        best_nodes[b] = 1;
        from_confidences[b] = true;
        const auto k = static_cast<std::int32_t>(depths.size());
        choices[b].max_g = k;
        choices[b].fixed = lengths_of(r.req) != Lengths::kJoint || d.request_has_probs(static_cast<std::int64_t>(b));
        choices[b].rows_per_depth = 1.0;
        choices[b].tokens = tokens[b];
        continue;
      }
      tokens[b].resize(static_cast<std::size_t>(depth) + 1);
      from_confidences[b] = draft_confidence_tokens(d, static_cast<std::int64_t>(b), tokens[b]);
      if (!from_confidences[b]) r.acceptance.expected_tokens(tokens[b]);
      choices[b].max_g = depth;
      choices[b].fixed = depth == 0 || lengths_of(r.req) != Lengths::kJoint || d.request_has_probs(static_cast<std::int64_t>(b));
      choices[b].rows_per_depth = depth > 0 ? static_cast<double>(depths.size()) / depth : 1.0;
      choices[b].tokens = tokens[b];
    }
    std::vector<std::int32_t> g = choose_lengths(choices, 0.0);
    // A sampled request choosing alone whose chain is deterministic and carries confidences (the chance each draft is
    // accepted, e.g. EAGLE's argmax drafts): cut where its expected tokens per plain-step cost peak under the fixed
    // sampled cost. The cut is a function of its own drafts, so its tokens stay reproducible for a seed, and drafts that
    // are not sampled can be cut without changing the law of the ones kept.
    const AdaptiveSpeculation& a = options_.adaptive;
    if (!a.sampled_cost) return g;
    const ForwardCostFn alone_cost = [&a](std::int64_t, std::int64_t rows) { return a.sampled_cost(rows - 1); };
    for (std::size_t b = 0; b < B; ++b) {
      // A tree is not cut here: its proposer sized it by its own confidences (EagleProposerOptions::min_path_prob), and
      // cut by depth against the sampled cost its later levels went (tau 1.32 against 1.59 at temperature 0.7).
      if (choices[b].max_g == 0 || !from_confidences[b] || lengths_of(reqs[b]->req) != Lengths::kAlone ||
          d.request_has_probs(static_cast<std::int64_t>(b)) || d.request_is_tree(static_cast<std::int64_t>(b)))
        continue;
      LengthChoice alone = choices[b];
      alone.fixed = false;
      g[b] = choose_draft_lengths(std::span<const LengthChoice>(&alone, 1), alone_cost, 0.0)[0];
    }
    return g;
  }

  /// Tells the step observer what request b's step drafted (`proposed`: the proposal before any cut), verified
  /// (`verified`) and accepted.
  void observe_step(const Request& r, const proposers::DraftBatch& proposed, const proposers::DraftBatch& verified,
                    std::int64_t b, std::int64_t position, std::span<const std::int64_t> accepted_nodes,
                    std::int64_t emitted) const {
    StepTrace t;
    t.id = r.id;
    t.step = metrics_.steps;
    t.position = position;
    t.proposed = static_cast<std::int32_t>(proposed.num_drafts(b));
    t.verified = static_cast<std::int32_t>(verified.num_drafts(b));
    t.accepted = static_cast<std::int32_t>(accepted_nodes.size());
    t.emitted = static_cast<std::int32_t>(emitted);
    t.tree = proposed.request_is_tree(b);
    t.accepted_nodes = accepted_nodes;
    if (t.tree) t.parents = proposed.parents[static_cast<std::size_t>(b)];
    if (!proposed.confidence.empty() && t.proposed > 0)
      t.confidence = std::span<const float>(proposed.confidence)
                         .subspan(static_cast<std::size_t>(proposed.cu_num_drafts[static_cast<std::size_t>(b)]),
                                  static_cast<std::size_t>(t.proposed));
    step_observer_(t);
  }

  /// out[n] = 1 + the sum of the n largest path confidences of request b's tree nodes (n = 0 .. its nodes), when every
  /// node has a confidence; false (out untouched) otherwise.
  static bool best_tree_node_tokens(const proposers::DraftBatch& d, std::int64_t b, std::vector<double>& out) {
    if (d.confidence.empty()) return false;
    const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], k = d.num_drafts(b);
    if (k == 0) return false;
    for (std::int64_t j = 0; j < k; ++j)
      if (d.confidence[static_cast<std::size_t>(s + j)] < 0.f) return false;
    std::vector<double> path;
    const auto order = detail::best_tree_nodes(d, b, &path);
    out.assign(static_cast<std::size_t>(k) + 1, 1.0);
    for (std::size_t i = 0; i < order.size(); ++i) out[i + 1] = out[i] + path[static_cast<std::size_t>(order[i]) + 1];
    return true;
  }

  /// out[g] = 1 + c_1 + c_1 c_2 + ... + c_1 ... c_g over request b's chain of drafts, when every draft has a confidence
  /// (DraftBatch::confidence); false (out untouched) otherwise. (A tree's value is best_tree_node_tokens'.)
  static bool draft_confidence_tokens(const proposers::DraftBatch& d, std::int64_t b, std::span<double> out) {
    if (d.confidence.empty()) return false;
    const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(b)], k = d.num_drafts(b);
    for (std::int64_t j = 0; j < k; ++j)
      if (d.confidence[static_cast<std::size_t>(s + j)] < 0.f) return false;
    double path = 1.0;
    out[0] = 1.0;
    for (std::size_t g = 1; g < out.size(); ++g) {
      path *= static_cast<std::int64_t>(g) <= k ? d.confidence[static_cast<std::size_t>(s) + g - 1] : 0.0;
      out[g] = out[g - 1] + path;
    }
    return true;
  }

  /// choose_draft_lengths with the policy's cost model: the fixed one (AdaptiveSpeculation::forward_seconds) or the one
  /// learned from this run's steps.
  std::vector<std::int32_t> choose_lengths(std::span<const LengthChoice> choices, double draft_seconds) const {
    const AdaptiveSpeculation& a = options_.adaptive;
    if (a.forward_seconds) return choose_draft_lengths(choices, a.forward_seconds, draft_seconds);
    return choose_draft_lengths(
        choices, [this](std::int64_t rq, std::int64_t t) { return cost_model_.predict(rq, t); }, draft_seconds);
  }

  /// A cut request's estimate after its step: how far its whole proposal (request b of `proposed`) matched the tokens
  /// the step emitted (`emitted`: accepted drafts, then the recovered or bonus token). Drafts are deterministic lookups,
  /// accepted exactly when the target's token equals them (greedy: its argmax; sampled: in law), so a proposal's first
  /// min(depth, emitted) positions are observed whether or not they were verified: what was verified, and one position
  /// past it (the emitted token against the first draft cut). A lookup's plain step that had a proposal counts as a
  /// shadow probe.
  void observe_proposal(Request& r, const proposers::DraftBatch& proposed, std::int64_t b, std::int64_t k,
                        std::span<const std::int64_t> emitted) {
    const auto depths = detail::draft_depths(proposed, b);
    if (depths.empty() || emitted.empty()) return;
    const std::int64_t depth = *std::max_element(depths.begin(), depths.end());
    const std::int64_t matched = detail::matched_depth(proposed, b, emitted);
    r.acceptance.observe(std::min<std::int64_t>(depth, static_cast<std::int64_t>(emitted.size())), matched);
    r.rows_per_depth = static_cast<double>(depths.size()) / static_cast<double>(depth);
    if (k == 0 && shadow_probes()) {  // a lookup's plain step; a confident proposal cut to 0 is no probe
      ++r.metrics.shadow_probes;
      r.metrics.shadow_accepted += matched > 0 ? 1 : 0;
    }
  }

  /// GenerationRequest::proposers as member indices of the proposer (has_member_names), in the request's order. Throws
  /// specdec::error for an unknown or repeated name, or for any name when the proposer has no named members.
  std::vector<std::int32_t> member_order(const GenerationRequest& q) const {
    std::vector<std::int32_t> out;
    if (q.proposers.empty()) return out;
    if constexpr (proposers::has_member_names<Draft>) {
      for (const std::string& name : q.proposers) {
        const std::int32_t m = proposer_->member_index(name);
        if (std::find(out.begin(), out.end(), m) != out.end())
          throw error(Status::kInvalidArgument, "add_request: proposers: '" + name + "' named twice");
        out.push_back(m);
      }
      return out;
    } else {
      throw error(Status::kInvalidArgument,
                  "add_request: proposers: the decoder's proposer has no named members (a ProposerChain has); got '" +
                      q.proposers.front() + "'");
    }
  }

  std::int64_t generated(const Request& r) const {
    return static_cast<std::int64_t>(r.context.size() - r.req.prompt.size());
  }

  /// The most drafts request r may propose this step: its g (or the decoder's), within max_new_tokens and the context.
  std::int32_t max_drafts_for(const Request& r) const {
    const std::int32_t g = r.req.num_speculative_tokens >= 0 ? r.req.num_speculative_tokens : options_.num_speculative_tokens;
    const std::int64_t room = std::min<std::int64_t>(r.req.max_new_tokens - generated(r),
                                                     max_sequence_length_ - static_cast<std::int64_t>(r.context.size())) -
                              1;
    return static_cast<std::int32_t>(std::max<std::int64_t>(0, std::min<std::int64_t>(g, room)));
  }

  /// The target's pool for the step's host work (models::HasParallelFor), or none (the calling thread).
  detail::HostParallelFor host_parallel_for() {
    if constexpr (models::HasParallelFor<Target>) {
      return [t = target_](std::int64_t n, const std::function<void(std::int64_t)>& fn) { t->parallel_for(n, fn); };
    } else {
      return {};
    }
  }

  /// How a request's g is chosen each step: fixed (its bound), jointly with the batch's other such requests by the timed
  /// cost model, or alone against the fixed sampled cost (AdaptiveSpeculation::sampled_cost).
  enum class Lengths : std::uint8_t { kFixed, kJoint, kAlone };
  Lengths lengths_of(const GenerationRequest& q) const {
    const AdaptiveSpeculation& a = options_.adaptive;
    if (q.adaptive) return *q.adaptive ? Lengths::kJoint : Lengths::kFixed;
    if (!a.enabled) return Lengths::kFixed;
    if (q.params.greedy() || a.sampled) return Lengths::kJoint;
    return a.sampled_cost ? Lengths::kAlone : Lengths::kFixed;
  }

  /// The chosen g of an adaptive request after the probe rule: a request at g = 0 drafts one token once its plain steps
  /// reach its probe wait (twice as long after each rejected probe, up to probe_backoff intervals; an accepted draft
  /// resets it).
  std::int32_t after_probes(Request& r, std::int32_t chosen, bool shadow = false) const {
    const AdaptiveSpeculation& a = options_.adaptive;
    if (shadow) return chosen;  // a plain step takes a shadow probe instead (shadow_propose)
    if (chosen > 0) {
      r.plain_steps = 0;
      r.probing = false;
      if (r.probe_accepted) {  // drafting again after accepted probes: the next plain stretch waits in full
        r.probe_wait = a.probe_interval;
        r.probe_accepted = false;
      }
    } else if (++r.plain_steps >= r.probe_wait) {
      chosen = 1;  // probe: is drafting paying again? (repeated each step until the proposer drafts something)
      r.probing = true;
    }
    return chosen;
  }

  /// Every request's g for this step: its bound, or under the adaptive policy the batch's best choice (length_policy.hpp),
  /// or for a sampled request under the fixed sampled cost its own all-or-nothing choice, each with the probe rule
  /// (after_probes).
  std::vector<std::int32_t> draft_lengths(const std::vector<Request*>& reqs, bool cut_after = false) {
    const std::size_t B = reqs.size();
    const AdaptiveSpeculation& a = options_.adaptive;
    std::vector<std::int32_t> g(B);
    std::vector<Lengths> mode(B);
    bool any_joint = false;
    for (std::size_t b = 0; b < B; ++b) {
      Request& r = *reqs[b];
      g[b] = max_drafts_for(r);
      mode[b] = g[b] > 0 ? lengths_of(r.req) : Lengths::kFixed;
      any_joint |= mode[b] == Lengths::kJoint;
      // Alone: all or nothing from what the request's own drafting steps yielded against the fixed cost, so its g is a
      // function of its own tokens.
      if (mode[b] == Lengths::kAlone) g[b] = after_probes(r, r.yield.pays(a.sampled_cost, a.sampled_draft_cost) ? g[b] : 0);
    }
    if (!any_joint || cut_after) return g;  // cut after proposing: joint requests propose at their bound
    std::vector<std::vector<double>> tokens(B);
    std::vector<LengthChoice> choices(B);
    for (std::size_t b = 0; b < B; ++b) {
      const Request& r = *reqs[b];
      tokens[b].resize(static_cast<std::size_t>(g[b]) + 1);
      r.acceptance.expected_tokens(tokens[b]);
      choices[b].max_g = g[b];
      choices[b].fixed = mode[b] != Lengths::kJoint;  // the others keep the g chosen above
      choices[b].rows_per_depth = r.rows_per_depth;
      choices[b].tokens = tokens[b];
    }
    const double d = a.draft_seconds_per_position >= 0 ? a.draft_seconds_per_position
                                                       : std::max(draft_position_seconds_, 0.0);
    const bool shadow = shadow_probes();
    std::vector<std::int32_t> chosen = choose_lengths(choices, d);
    for (std::size_t b = 0; b < B; ++b)
      if (mode[b] == Lengths::kJoint) chosen[b] = after_probes(*reqs[b], chosen[b], shadow);
    return chosen;
  }

  /// Asks the proposer for one draft for each request whose plain step takes a shadow probe (shadow_probes(), the
  /// joint policy, room to draft, g[b] = 0 chosen) and keeps its first level in shadow_drafts (deterministic drafts
  /// only). Returns the seconds it took.
  double shadow_propose(const std::vector<Request*>& reqs, const std::vector<std::int32_t>& g) {
    for (Request* r : reqs) r->shadow_drafts.clear();  // nothing left from a step that threw before its verification
    if (!shadow_probes()) return 0.0;
    std::vector<proposers::ProposeRequest> pr;
    std::vector<Request*> who;
    for (std::size_t b = 0; b < reqs.size(); ++b) {
      Request* r = reqs[b];
      if (g[b] != 0 || max_drafts_for(*r) == 0 || lengths_of(r->req) != Lengths::kJoint) continue;
      proposers::ProposeRequest p;
      p.id = r->id;
      p.context = r->context;
      p.params = &r->req.params;
      p.max_drafts = 1;
      p.position = static_cast<std::int64_t>(r->context.size());
      p.members = r->members;
      pr.push_back(p);
      who.push_back(r);
    }
    if (pr.empty()) return 0.0;
    const auto t = Clock::now();
    const proposers::DraftBatch d = proposer_->propose(std::span<const proposers::ProposeRequest>(pr));
    if (d.num_requests() == static_cast<std::int64_t>(pr.size()))
      for (std::size_t i = 0; i < who.size(); ++i) {
        const auto b = static_cast<std::int64_t>(i);
        if (d.num_drafts(b) >= 1 && !d.request_has_probs(b)) {
          // the first level: a chain's first draft, a tree's children of the root
          const bool tree = i < d.parents.size() && !d.parents[i].empty();
          for (std::int64_t j = 0; j < d.num_drafts(b); ++j)
            if (j == 0 || (tree && d.parents[i][static_cast<std::size_t>(j)] == 0))
              who[i]->shadow_drafts.push_back(d.token_ids[static_cast<std::size_t>(d.cu_num_drafts[i] + j)]);
        }
      }
    return seconds_since(t);
  }

  void update_estimate(Request& r, const proposers::DraftBatch& d, std::int64_t b, std::int64_t k, std::int64_t n_acc) {
    if (k == 0) return;  // nothing tested (a probe that found nothing to draft stays due)
    const AdaptiveSpeculation& a = options_.adaptive;
    if (n_acc > 0) {
      // An accepted probe is followed by another one the next plain step, so a request whose text starts to repeat
      // builds its estimate back up in a few steps instead of one probe per probe_interval.
      r.probe_wait = r.probing ? 1 : a.probe_interval;
      r.probe_accepted = r.probing;
    } else if (r.probing) {  // a rejected probe: wait twice as long (at least first_probe_interval), up to
                             // probe_backoff intervals
      r.probe_wait = static_cast<std::int32_t>(
          std::min<std::int64_t>(std::max<std::int64_t>(2 * static_cast<std::int64_t>(r.probe_wait), a.first_probe_interval),
                                 static_cast<std::int64_t>(a.probe_interval) * a.probe_backoff));
      r.probe_accepted = false;
    }
    if (r.probing) {
      r.probing = false;
      r.plain_steps = 0;
    }
    std::int64_t depth = k;
    if (d.request_is_tree(b)) {
      const auto depths = detail::draft_depths(d, b);
      depth = *std::max_element(depths.begin(), depths.end());
    }
    r.acceptance.observe(depth, n_acc);
    r.yield.observe(k, n_acc + 1, depth);
    r.rows_per_depth = static_cast<double>(k) / static_cast<double>(depth);
  }

  static std::int64_t max_depth(const proposers::DraftBatch& d) {
    std::int64_t m = 0;
    for (std::int64_t b = 0; b < d.num_requests(); ++b) {
      if (!d.request_is_tree(b)) {
        m = std::max(m, d.num_drafts(b));
      } else {
        for (auto x : detail::draft_depths(d, b)) m = std::max<std::int64_t>(m, x);
      }
    }
    return m;
  }

  static void record(Request& r, const proposers::DraftBatch& d, std::int64_t b, std::int64_t k,
                     const std::vector<std::int64_t>& nodes) {
    if (k == 0) return;
    r.metrics.drafted += k;
    r.metrics.accepted += static_cast<std::int64_t>(nodes.size());
    const auto depth = detail::draft_depths(d, b);
    for (auto x : depth) {
      if (static_cast<std::size_t>(x) > r.metrics.proposed_at.size()) {
        r.metrics.proposed_at.resize(static_cast<std::size_t>(x), 0);
        r.metrics.accepted_at.resize(static_cast<std::size_t>(x), 0);
      }
      ++r.metrics.proposed_at[static_cast<std::size_t>(x - 1)];
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) ++r.metrics.accepted_at[i];
  }

  void emit(Request& r, std::int64_t token) {
    r.context.push_back(token);
    for (auto s : r.req.stop_token_ids)
      if (s == token) return finish(r, FinishReason::kStopToken);
    if (r.stops.active()) {
      const int hit = r.stops.push(options_.detokenize(token));
      if (hit >= 0) {
        r.stop_string = r.stops.stop(hit);
        return finish(r, FinishReason::kStopString);
      }
    }
    if (generated(r) >= r.req.max_new_tokens || static_cast<std::int64_t>(r.context.size()) >= max_sequence_length_)
      finish(r, FinishReason::kLength);
  }

  static void finish(Request& r, FinishReason why) { r.finish = why; }

  void release(Request& r, bool to_proposer) {
    if (r.slot >= 0) {
      target_->free_sequence(r.slot);
      r.slot = -1;
    }
    if (to_proposer) proposer_->end_request(r.id);
  }

  void store_result(Request& r) {
    GenerationResult res;
    res.id = r.id;
    res.tokens.assign(r.context.begin() + static_cast<std::ptrdiff_t>(r.req.prompt.size()), r.context.end());
    res.finish_reason = r.finish;
    res.stop_string = r.stop_string;
    res.metrics = r.metrics;
    metrics_.total.add(r.metrics);
    results_[r.id] = std::move(res);
  }

  /// Times 1-token target forwards of the running batch (one untimed warm-up, then options_.calibration_forwards timed
  /// ones) and rolls each back. Returns the seconds spent.
  double calibrate(const std::vector<Request*>& reqs) {
    const auto t0 = Clock::now();
    models::ForwardBatch fb;
    fb.cu_num_tokens.push_back(0);
    for (Request* r : reqs) {
      fb.slots.push_back(r->slot);
      fb.token_ids.push_back(r->context.back());
      fb.cu_num_tokens.push_back(fb.cu_num_tokens.back() + 1);
    }
    for (std::int32_t i = 0; i <= options_.calibration_forwards; ++i) {
      const auto t = Clock::now();
      (void)target_->forward(fb);
      const double s = seconds_since(t);
      for (Request* r : reqs) target_->truncate(r->slot, static_cast<std::int64_t>(r->context.size()) - 1);
      if (i == 0) continue;  // warm-up: first-touch allocations and cold caches
      ++metrics_.one_token_forwards;
      metrics_.one_token_seconds += s;
    }
    return seconds_since(t0);
  }

  Draft* proposer_;
  Target* target_;
  DecoderOptions options_;
  std::int64_t vocab_size_ = 0;
  /// The target's context length (models::HasMaxSequenceLength), or unbounded.
  std::int64_t max_sequence_length_ = std::numeric_limits<std::int64_t>::max();
  std::optional<proposers::TargetFeatureSpec> feature_spec_;
  std::map<RequestId, Request> running_;
  std::map<RequestId, GenerationResult> results_;
  RequestId next_id_ = 0;
  TokenCallback callback_;
  StepObserver step_observer_;
  DecoderMetrics metrics_;
  ForwardCostModel cost_model_;          // F(B, T) of verification steps, learned from this run's steps
  std::vector<float> verify_workspace_;  // host verification's rows, kept across steps (no fresh [N + B, V] rows a step)
  std::unique_ptr<DeviceBackend> device_backend_;  // rows on a device (DecoderOptions::device_backend), or none
  double draft_position_seconds_ = -1;   // decayed mean of Proposer::propose seconds per sequential draft position
};

}  // namespace specdec::decoder
