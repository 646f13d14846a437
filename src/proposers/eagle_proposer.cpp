// EagleProposer: drafting chains and EAGLE-2 trees with an EAGLE head from the target's features (see eagle.hpp).
#include "eagle_internal.hpp"
#include "specdec/sampling/logits_simd.hpp"

namespace specdec::proposers {

using namespace eagle_internal;

namespace {

// log_softmax of one row of n logits at temperature t: (x - max) / t - log sum exp((x - max) / t), the sum by the
// sampler's exponential weights and tile masses (specdec::detail::top_probability: the same bits on every
// instruction-set path, a few microseconds for 8192 logits where a double exp per logit took tens). Every value is
// <= 0, so a child never outscores its parent.
void log_softmax_row(const float* x, std::int64_t n, float* out, std::vector<float>& scratch, float t = 1.0f) {
  const float m = *std::max_element(x, x + n);
  const double top = specdec::detail::top_probability(x, n, m, scratch, t);  // 1 / sum_i exp((x_i - m) / t)
  const auto log_mass = static_cast<float>(-std::log(top));
  const float inv_t = 1.0f / t;
  for (std::int64_t i = 0; i < n; ++i) out[i] = (x[i] - m) * inv_t - log_mass;
}

}  // namespace


struct EagleProposer::Impl {
  struct Request {
    std::int64_t slot = -1;
    const SamplingParams* params = nullptr;
    std::vector<float> pending_features;          // target feature rows not yet run through the head, [rows, width]
    std::vector<std::int64_t> pending_tokens;     // the token following each pending row
    std::vector<float> last_hidden;               // [H] head output of the last committed row (empty before one)
    std::vector<float> last_logits;               // [Vd] its logits
  };

  EagleHead head;
  EagleProposerOptions opts;
  std::vector<std::int64_t> feature_layers;  // EAGLE-3, resolved
  std::unordered_map<RequestId, Request> requests;
  // The draft ids in ascending order of their target ids: a sampled row is processed and drawn over the draft
  // vocabulary in this order, which is the target vocabulary's order without the tokens the head cannot draft (their
  // probability is 0), so it draws what a pass over the whole target row would draw, at Vd instead of V entries.
  std::vector<std::int64_t> by_target;

  Impl(EagleHead h, const EagleProposerOptions& o) : head(std::move(h)), opts(o) {
    const auto& d2t = head.draft_to_target();
    by_target.resize(d2t.size());
    for (std::size_t d = 0; d < d2t.size(); ++d) by_target[d] = static_cast<std::int64_t>(d);
    std::sort(by_target.begin(), by_target.end(), [&](std::int64_t a, std::int64_t b) {
      return d2t[static_cast<std::size_t>(a)] < d2t[static_cast<std::size_t>(b)];
    });
  }

  Request& find(RequestId id, const char* who) {
    auto it = requests.find(id);
    if (it == requests.end()) fail(fmt::format("EagleProposer::{}: id: expected an active request, got {}", who, id));
    return it->second;
  }

  // Checks the decoder's target features (float32 host rows of the widths the head reads); with `out`, appends them
  // as [rows, feature_size] (EAGLE-3: low, mid and high side by side).
  void features_of(const TargetFeatures& f, const char* who, std::vector<float>* out) const {
    const std::int64_t H = head.hidden_size();
    auto check = [&](const Rows& r, const char* what, std::int64_t width) {
      if (!r.defined() || r.rows() != f.rows || r.cols() != width)
        fail(fmt::format("EagleProposer::{}: features.{}: expected [{}, {}], got {}", who, what, f.rows, width,
                         r.defined() ? fmt::format("[{}, {}]", r.rows(), r.cols()) : std::string("none")));
      if (!r.is_host_float32())
        fail(fmt::format("EagleProposer::{}: features.{}: expected float32 rows in host memory, got {} rows{}", who, what,
                         to_string(r.dtype()), r.device().is_cpu() ? "" : " on a GPU"));
      return &r;
    };
    std::vector<const Rows*> parts;
    if (head.version() == EagleVersion::kEagle1) {
      const bool pre = head.config().feature == EagleFeature::kPreNorm;
      parts.push_back(check(pre ? f.hidden_pre_norm : f.hidden_post_norm, pre ? "hidden_pre_norm" : "hidden_post_norm", H));
    } else {
      const std::int64_t Ht = head.config().target_hidden_size;
      if (f.layer_hidden.size() != 3)
        fail(fmt::format("EagleProposer::{}: features.layer_hidden: expected 3 row sets (low, mid, high), got {}", who,
                         f.layer_hidden.size()));
      static constexpr const char* kNames[3] = {"layer_hidden[0]", "layer_hidden[1]", "layer_hidden[2]"};
      for (std::size_t j = 0; j < 3; ++j) parts.push_back(check(f.layer_hidden[j], kNames[j], Ht));
    }
    if (out == nullptr) return;
    for (std::int64_t i = 0; i < f.rows; ++i)
      for (const Rows* r : parts) out->insert(out->end(), r->host_row(i), r->host_row(i) + r->cols());
  }

  void add_pending(Request& r, const TargetFeatures& f, std::span<const std::int64_t> context, const char* who) {
    if (f.rows == 0) return;
    if (f.start < 0 || f.start + f.rows >= static_cast<std::int64_t>(context.size()))
      fail(fmt::format("EagleProposer::{}: features: rows [{}, {}) need the following tokens up to index {}, but the context has {}",
                       who, f.start, f.start + f.rows, f.start + f.rows, context.size()));
    features_of(f, who, &r.pending_features);
    for (std::int64_t i = 0; i < f.rows; ++i) r.pending_tokens.push_back(context[static_cast<std::size_t>(f.start + i + 1)]);
  }

  // Runs these requests' pending feature rows through the head in one forward (committed) and keeps each request's last
  // hidden row and draft logits; the rows are then no longer pending.
  void run_pending(std::span<Request* const> order) {
    EagleHeadBatch batch;
    auto feats = std::make_shared<std::vector<float>>();
    batch.cu_num_tokens.push_back(0);
    std::vector<Request*> kept;
    for (Request* r : order) {
      if (r->pending_tokens.empty()) continue;
      kept.push_back(r);
      batch.slots.push_back(r->slot);
      batch.token_ids.insert(batch.token_ids.end(), r->pending_tokens.begin(), r->pending_tokens.end());
      batch.cu_num_tokens.push_back(static_cast<std::int64_t>(batch.token_ids.size()));
      feats->insert(feats->end(), r->pending_features.begin(), r->pending_features.end());
    }
    if (kept.empty()) return;
    const auto rows = static_cast<std::int64_t>(batch.token_ids.size());
    batch.features = Rows::host_float32_over(feats, rows, static_cast<std::int64_t>(feats->size()) / rows);
    batch.commit = true;
    batch.last_logits_only = true;
    EagleHeadOutput out = head.forward(batch);
    const std::int64_t H = head.hidden_size(), Vd = head.draft_vocab_size();
    for (std::size_t k = 0; k < kept.size(); ++k) {
      Request& r = *kept[k];
      const float* h = out.hidden.host_row(batch.cu_num_tokens[k + 1] - 1);
      r.last_hidden.assign(h, h + H);
      const float* l = out.logits.host_row(static_cast<std::int64_t>(k));
      r.last_logits.assign(l, l + Vd);
      r.pending_features.clear();
      r.pending_tokens.clear();
    }
  }

  DraftBatch propose(std::span<const ProposeRequest> reqs);
};

EagleProposer::EagleProposer(EagleHead head, const EagleProposerOptions& options)
    : impl_(std::make_unique<Impl>(std::move(head), options)) {
  Impl& m = *impl_;
  if (m.head.version() == EagleVersion::kEagle3) {
    m.feature_layers = m.head.config().feature_layers;
    if (m.feature_layers.empty()) {
      if (options.target_num_layers < 1)
        fail("EagleProposer: options.target_num_layers: the EAGLE-3 head names no feature layers, expected the target's "
             "layer count (>= 1) to pick the defaults, got 0");
      m.feature_layers = eagle3_default_feature_layers(options.target_num_layers);
    }
    for (auto l : m.feature_layers)
      if (options.target_num_layers > 0 && l >= options.target_num_layers)
        fail(fmt::format("EagleProposer: feature layer {}: expected < target_num_layers = {}", l, options.target_num_layers));
  }
  if (!(options.min_draft_prob >= 0.0 && options.min_draft_prob <= 1.0))
    fail(fmt::format("EagleProposer: options.min_draft_prob: expected in [0, 1], got {}", options.min_draft_prob));
  if (!(options.min_path_prob >= 0.0 && options.min_path_prob <= 1.0))
    fail(fmt::format("EagleProposer: options.min_path_prob: expected in [0, 1], got {}", options.min_path_prob));
  if (options.tree.top_k < 1 || options.tree.num_nodes < 1 || options.tree.depth < 0)
    fail(fmt::format("EagleProposer: options.tree: expected top_k >= 1, num_nodes >= 1, depth >= 0, got {}, {}, {}",
                     options.tree.top_k, options.tree.num_nodes, options.tree.depth));
}
EagleProposer::EagleProposer(EagleProposer&&) noexcept = default;
EagleProposer& EagleProposer::operator=(EagleProposer&&) noexcept = default;
EagleProposer::~EagleProposer() = default;

TargetFeatureSpec EagleProposer::target_feature_spec() const {
  TargetFeatureSpec s;
  if (impl_->head.version() == EagleVersion::kEagle1) s.final_hidden = true;
  else s.layers = impl_->feature_layers;
  return s;
}
std::int64_t EagleProposer::vocab_size() const { return impl_->head.vocab_size(); }
EagleHead& EagleProposer::head() noexcept { return impl_->head; }
const EagleHead& EagleProposer::head() const noexcept { return impl_->head; }
const EagleProposerOptions& EagleProposer::options() const noexcept { return impl_->opts; }
void EagleProposer::set_mode(EagleDraftMode mode) noexcept { impl_->opts.mode = mode; }
bool EagleProposer::reports_confidence() const noexcept { return true; }
std::int64_t EagleProposer::pending_rows(RequestId id) const {
  auto it = impl_->requests.find(id);
  if (it == impl_->requests.end()) fail(fmt::format("EagleProposer::pending_rows: id: expected an active request, got {}", id));
  return static_cast<std::int64_t>(it->second.pending_tokens.size());
}

void EagleProposer::begin_request(const RequestContext& ctx) {
  Impl& m = *impl_;
  if (m.requests.count(ctx.id)) fail(fmt::format("EagleProposer::begin_request: id: request {} is already active", ctx.id));
  if (!ctx.params) fail("EagleProposer::begin_request: params: expected the request's SamplingParams, got null");
  check(*ctx.params);
  if (ctx.context.empty()) fail("EagleProposer::begin_request: context: expected at least one token, got none");
  const auto n = static_cast<std::int64_t>(ctx.context.size());
  if (!ctx.features && n > 1)
    fail("EagleProposer::begin_request: features: expected the target features of context[0 .. n-1) (the proposer wants "
         "target features), got null");
  Impl::Request r;
  r.params = ctx.params;
  if (ctx.features) {
    if (ctx.features->rows != n - 1 || ctx.features->start != 0)
      fail(fmt::format("EagleProposer::begin_request: features: expected rows [0, {}) of the prompt, got [{}, {})", n - 1,
                       ctx.features->start, ctx.features->start + ctx.features->rows));
    m.add_pending(r, *ctx.features, ctx.context, "begin_request");
  }
  r.slot = m.head.allocate_sequence();
  Impl::Request& live = m.requests.emplace(ctx.id, std::move(r)).first->second;
  // The prompt's rows go through the head now, with the target's prefill, rather than at the first propose(): a step's
  // drafting then costs what drafting costs (and a chain whose other member drafts the first steps does not pay a whole
  // prompt's head forward in one of its decode steps).
  try {
    Impl::Request* one = &live;
    m.run_pending(std::span<Impl::Request* const>(&one, 1));
  } catch (...) {
    m.head.free_sequence(live.slot);
    m.requests.erase(ctx.id);
    throw;
  }
}

void EagleProposer::end_request(RequestId id) {
  Impl& m = *impl_;
  Impl::Request& r = m.find(id, "end_request");
  m.head.free_sequence(r.slot);
  m.requests.erase(id);
}

void EagleProposer::observe(std::span<const StepFeedback> feedback) {
  Impl& m = *impl_;
  // Validate everything first so a bad entry leaves every request unchanged.
  for (const auto& f : feedback) {
    m.find(f.id, "observe");
    if (!f.features) fail(fmt::format("EagleProposer::observe: request {}: features: expected the rows of [root, accepted drafts], got null", f.id));
    if (f.features->rows != f.num_accepted + 1)
      fail(fmt::format("EagleProposer::observe: request {}: features.rows: expected num_accepted + 1 = {}, got {}", f.id,
                       f.num_accepted + 1, f.features->rows));
    if (f.features->start + f.features->rows != static_cast<std::int64_t>(f.context.size()) - 1)
      fail(fmt::format("EagleProposer::observe: request {}: features: expected rows ending at the emitted token (index {}), got [{}, {})",
                       f.id, f.context.size() - 1, f.features->start, f.features->start + f.features->rows));
    m.features_of(*f.features, "observe", nullptr);
  }
  for (const auto& f : feedback) m.add_pending(m.find(f.id, "observe"), *f.features, f.context, "observe");
}

DraftBatch EagleProposer::propose(std::span<const ProposeRequest> requests) { return impl_->propose(requests); }

DraftBatch EagleProposer::Impl::propose(std::span<const ProposeRequest> reqs) {
  const auto B = static_cast<std::int64_t>(reqs.size());
  std::vector<Request*> rs(static_cast<std::size_t>(B));
  for (std::int64_t i = 0; i < B; ++i) {
    const ProposeRequest& q = reqs[static_cast<std::size_t>(i)];
    rs[static_cast<std::size_t>(i)] = &find(q.id, "propose");
    if (q.max_drafts < 0) fail(fmt::format("EagleProposer::propose: requests[{}].max_drafts: expected >= 0, got {}", i, q.max_drafts));
    const SamplingParams* p = q.params ? q.params : rs[static_cast<std::size_t>(i)]->params;
    check(*p);
  }
  const std::int64_t V = head.vocab_size(), Vd = head.draft_vocab_size();
  const auto& d2t = head.draft_to_target();

  // 1. Run pending target-feature rows through the head (committed) for every request that drafts this step.
  {
    std::vector<Request*> order;
    for (std::int64_t i = 0; i < B; ++i) {
      Request& r = *rs[static_cast<std::size_t>(i)];
      head.truncate(r.slot, head.committed_length(r.slot));
      if (reqs[static_cast<std::size_t>(i)].max_drafts == 0 || r.pending_tokens.empty()) continue;
      if (std::find(order.begin(), order.end(), &r) != order.end())
        fail(fmt::format("EagleProposer::propose: requests[{}].id: request {} appears twice", i, reqs[static_cast<std::size_t>(i)].id));
      order.push_back(&r);
    }
    run_pending(order);
  }

  // Requests that draft this step.
  std::vector<std::int64_t> active;
  for (std::int64_t i = 0; i < B; ++i)
    if (reqs[static_cast<std::size_t>(i)].max_drafts > 0 && !rs[static_cast<std::size_t>(i)]->last_hidden.empty()) active.push_back(i);

  std::vector<std::vector<std::int64_t>> drafts(static_cast<std::size_t>(B));
  std::vector<std::vector<std::int64_t>> tree_parents(static_cast<std::size_t>(B));
  // Chain sampling: per request, its drafts' processed rows over the draft vocabulary in by_target order ([g * Vd]).
  std::vector<std::vector<float>> probs_rows(static_cast<std::size_t>(B));
  std::vector<std::vector<float>> confidences(static_cast<std::size_t>(B));  // DraftBatch::confidence
  bool any_probs = false;

  if (opts.mode == EagleDraftMode::kChain) {
    // Current head state per active request.
    std::vector<std::vector<float>> hidden(active.size()), logits(active.size());
    for (std::size_t a = 0; a < active.size(); ++a) {
      hidden[a] = rs[static_cast<std::size_t>(active[a])]->last_hidden;
      logits[a] = rs[static_cast<std::size_t>(active[a])]->last_logits;
    }
    std::vector<bool> sampled(active.size()), stopped(active.size(), false);
    std::vector<double> path(active.size(), 1.0);  // product of the chain's confidences so far (min_path_prob)
    for (std::size_t a = 0; a < active.size(); ++a) {
      const ProposeRequest& q = reqs[static_cast<std::size_t>(active[a])];
      const SamplingParams& p = q.params ? *q.params : *rs[static_cast<std::size_t>(active[a])]->params;
      sampled[a] = opts.chain_sampling == EagleChainSampling::kSample && !p.greedy();
      any_probs = any_probs || sampled[a];
    }
    std::int32_t max_g = 0;
    for (auto i : active) max_g = std::max(max_g, reqs[static_cast<std::size_t>(i)].max_drafts);
    std::vector<float> draft_logits(static_cast<std::size_t>(Vd)), probs(static_cast<std::size_t>(Vd)), weights;
    for (std::int32_t s = 0; s < max_g; ++s) {
      EagleHeadBatch step;
      auto feats = std::make_shared<std::vector<float>>();
      std::vector<std::size_t> stepping;
      step.cu_num_tokens.push_back(0);
      for (std::size_t a = 0; a < active.size(); ++a) {
        const std::int64_t i = active[a];
        const ProposeRequest& q = reqs[static_cast<std::size_t>(i)];
        if (s >= q.max_drafts || stopped[a]) continue;
        const SamplingParams& p = q.params ? *q.params : *rs[static_cast<std::size_t>(i)]->params;
        const float* lp = logits[a].data();
        std::int64_t token = -1;
        double confidence = 1.0;  // the head's largest probability at this step (min_draft_prob, DraftBatch::confidence)
        if (!any_probs || !sampled[a]) {
          std::int64_t best = 0;
          for (std::int64_t d = 1; d < Vd; ++d)
            if (lp[d] > lp[best]) best = d;
          token = d2t[static_cast<std::size_t>(best)];
          // A greedy request's draft is accepted when it is the target's argmax: the head's top probability estimates
          // that. A sampled request's argmax draft is accepted with the target's probability of it at the request's
          // temperature: the head's top probability at that temperature estimates it.
          confidence = specdec::detail::top_probability(lp, Vd, lp[best], weights, p.greedy() ? 1.0f : p.temperature);
        }
        if (any_probs) {
          // The draft distribution, processed with the request's params over the draft vocabulary in target-id order
          // (the target vocabulary's other tokens have probability 0 and are never drawn).
          for (std::int64_t j = 0; j < Vd; ++j) draft_logits[static_cast<std::size_t>(j)] = lp[by_target[static_cast<std::size_t>(j)]];
          const Status st = logits_to_probs(draft_logits, p, probs);
          if (st != Status::kSuccess)
            throw specdec::error(st, fmt::format("EagleProposer::propose: request {}: head logits: {}", q.id, to_string(st)));
          if (sampled[a]) {
            const float u = uniform(draft_key(p.seed), q.position + s, Purpose::kAccept, 0);
            double cum = 0.0;
            std::int64_t last_nonzero = -1;
            for (std::int64_t j = 0; j < Vd; ++j) {
              if (probs[static_cast<std::size_t>(j)] <= 0.f) continue;
              last_nonzero = j;
              cum += probs[static_cast<std::size_t>(j)];
              if (static_cast<double>(u) < cum) {
                token = d2t[static_cast<std::size_t>(by_target[static_cast<std::size_t>(j)])];
                break;
              }
            }
            if (token < 0) token = d2t[static_cast<std::size_t>(by_target[static_cast<std::size_t>(last_nonzero)])];
            // The distribution's largest probability, not the drawn token's: a stop that looked at the draft itself would
            // keep drafts distributed as q restricted to confident tokens while the verifier divides by q.
            confidence = *std::max_element(probs.begin(), probs.end());
          } else {
            // A deterministic row inside a sampled batch: the verifier treats greedy rows by argmax; give its one-hot.
            std::fill(probs.begin(), probs.end(), 0.f);
            for (std::int64_t j = 0; j < Vd; ++j)
              if (d2t[static_cast<std::size_t>(by_target[static_cast<std::size_t>(j)])] == token) probs[static_cast<std::size_t>(j)] = 1.f;
          }
        }
        if (confidence < opts.min_draft_prob || path[a] * confidence < opts.min_path_prob) {  // the chain ends here, without this draft
          stopped[a] = true;
          continue;
        }
        path[a] *= confidence;
        if (any_probs)
          probs_rows[static_cast<std::size_t>(i)].insert(probs_rows[static_cast<std::size_t>(i)].end(), probs.begin(), probs.end());
        drafts[static_cast<std::size_t>(i)].push_back(token);
        confidences[static_cast<std::size_t>(i)].push_back(static_cast<float>(confidence));
        if (s + 1 < q.max_drafts) {
          step.slots.push_back(rs[static_cast<std::size_t>(i)]->slot);
          step.token_ids.push_back(token);
          step.cu_num_tokens.push_back(static_cast<std::int64_t>(step.token_ids.size()));
          feats->insert(feats->end(), hidden[a].begin(), hidden[a].end());
          stepping.push_back(a);
        }
      }
      if (stepping.empty()) continue;
      step.features = Rows::host_float32_over(feats, static_cast<std::int64_t>(stepping.size()), head.hidden_size());
      step.features_are_head_hidden = true;
      EagleHeadOutput out = head.forward(step);
      for (std::size_t k = 0; k < stepping.size(); ++k) {
        const float* h = out.hidden.host_row(static_cast<std::int64_t>(k));
        hidden[stepping[k]].assign(h, h + head.hidden_size());
        const float* l = out.logits.host_row(static_cast<std::int64_t>(k));
        logits[stepping[k]].assign(l, l + Vd);
      }
    }
  } else {
    // EAGLE-2 dynamic trees, grown level by level for all requests at once.
    struct TreeState {
      std::int64_t req = 0;
      // The head's law the tree is ranked by: greedy requests at temperature 1 (the head's chance that a token is the
      // target's argmax), sampled ones at theirs (its estimate of the target's probability there, the chance a
      // deterministic child is accepted), so the nodes' confidences say what the policy should expect of them.
      float temperature = 1.0f;
      std::unique_ptr<DynamicTreeBuilder> builder;
      std::unordered_map<std::int64_t, std::int64_t> position;  // candidate -> head cache position
      std::unordered_map<std::int64_t, std::vector<float>> hidden;  // candidate -> head output row
    };
    std::vector<TreeState> trees;
    std::vector<float> scratch;
    DynamicTreeParams tree_params = opts.tree;
    tree_params.min_path_prob = std::max(opts.tree.min_path_prob, opts.min_path_prob);
    for (const auto i : active) {
      const ProposeRequest& q = reqs[static_cast<std::size_t>(i)];
      const std::int32_t max_depth = opts.tree.depth > 0 ? std::min<std::int32_t>(q.max_drafts, opts.tree.depth + 1) : q.max_drafts;
      std::vector<float> lp(static_cast<std::size_t>(Vd));
      const SamplingParams& p = q.params ? *q.params : *rs[static_cast<std::size_t>(i)]->params;
      TreeState t;
      t.temperature = p.greedy() ? 1.0f : p.temperature;
      log_softmax_row(rs[static_cast<std::size_t>(i)]->last_logits.data(), Vd, lp.data(), scratch, t.temperature);
      t.req = i;
      t.builder = std::make_unique<DynamicTreeBuilder>(tree_params, max_depth, std::span<const float>(lp));
      trees.push_back(std::move(t));
    }
    for (;;) {
      EagleHeadBatch step;
      auto feats = std::make_shared<std::vector<float>>();
      std::vector<std::size_t> stepping;
      step.cu_num_tokens.push_back(0);
      for (std::size_t k = 0; k < trees.size(); ++k) {
        TreeState& t = trees[k];
        const auto& front = t.builder->frontier();
        if (front.empty()) continue;
        Request& r = *rs[static_cast<std::size_t>(t.req)];
        const std::int64_t L = head.sequence_length(r.slot);
        std::vector<std::int64_t> par;
        for (std::size_t f = 0; f < front.size(); ++f) {
          const auto& c = t.builder->candidates()[static_cast<std::size_t>(front[f])];
          step.token_ids.push_back(d2t[static_cast<std::size_t>(c.token)]);
          par.push_back(c.parent < 0 ? -1 : t.position.at(c.parent));
          const std::vector<float>& h = c.parent < 0 ? r.last_hidden : t.hidden.at(c.parent);
          feats->insert(feats->end(), h.begin(), h.end());
          t.position[front[f]] = L + static_cast<std::int64_t>(f);
        }
        step.slots.push_back(r.slot);
        step.parents.push_back(std::move(par));
        step.cu_num_tokens.push_back(static_cast<std::int64_t>(step.token_ids.size()));
        stepping.push_back(k);
      }
      if (stepping.empty()) break;
      const auto rows = static_cast<std::int64_t>(step.token_ids.size());
      step.features = Rows::host_float32_over(feats, rows, head.hidden_size());
      step.features_are_head_hidden = true;
      EagleHeadOutput out = head.forward(step);
      std::vector<float> lp(static_cast<std::size_t>(rows * Vd));
      for (std::size_t s = 0; s < stepping.size(); ++s)
        for (std::int64_t r = step.cu_num_tokens[s]; r < step.cu_num_tokens[s + 1]; ++r)
          log_softmax_row(out.logits.host_row(r), Vd, lp.data() + r * Vd, scratch, trees[stepping[s]].temperature);
      for (std::size_t s = 0; s < stepping.size(); ++s) {
        TreeState& t = trees[stepping[s]];
        const std::int64_t begin = step.cu_num_tokens[s], n = step.cu_num_tokens[s + 1] - begin;
        const auto front = t.builder->frontier();  // copy: expand() replaces it
        for (std::int64_t f = 0; f < n; ++f) {
          const float* h = out.hidden.host_row(begin + f);
          t.hidden[front[static_cast<std::size_t>(f)]].assign(h, h + head.hidden_size());
        }
        t.builder->expand(std::span<const float>(lp.data() + begin * Vd, static_cast<std::size_t>(n * Vd)));
      }
    }
    for (auto& t : trees) {
      const auto selected = t.builder->select();
      const auto& cand = t.builder->candidates();
      for (const auto c : selected) {
        const auto& node = cand[static_cast<std::size_t>(c)];
        drafts[static_cast<std::size_t>(t.req)].push_back(d2t[static_cast<std::size_t>(node.token)]);
        // The head's probability of this node's token after its parent's path (at the tree's temperature): the product
        // of these along a path is the node's path probability, the chance the head gives it.
        const float parent_score = node.parent < 0 ? 0.f : cand[static_cast<std::size_t>(node.parent)].score;
        confidences[static_cast<std::size_t>(t.req)].push_back(
            static_cast<float>(std::exp(static_cast<double>(node.score) - static_cast<double>(parent_score))));
      }
      tree_parents[static_cast<std::size_t>(t.req)] = t.builder->tree_parents(selected);
    }
  }

  // Drop every drafting row: the head keeps only rows built from real target features.
  for (std::int64_t i = 0; i < B; ++i) {
    Request& r = *rs[static_cast<std::size_t>(i)];
    head.truncate(r.slot, head.committed_length(r.slot));
  }

  DraftBatch out;
  out.cu_num_drafts.push_back(0);
  for (std::int64_t i = 0; i < B; ++i) {
    if (opts.mode == EagleDraftMode::kTree) out.append(drafts[static_cast<std::size_t>(i)], tree_parents[static_cast<std::size_t>(i)]);
    else out.append(drafts[static_cast<std::size_t>(i)]);
    out.confidence.insert(out.confidence.end(), confidences[static_cast<std::size_t>(i)].begin(),
                            confidences[static_cast<std::size_t>(i)].end());
  }
  if (opts.mode == EagleDraftMode::kTree && out.parents.empty()) out.parents.assign(static_cast<std::size_t>(B), {});
  if (any_probs) {  // the rows over the whole target vocabulary (0 outside the draft vocabulary)
    const std::int64_t N = out.cu_num_drafts.back();
    out.probs = Rows::host_float32(N, V);
    float* dst = out.probs.mutable_host_float32_data();
    for (std::int64_t i = 0; i < B; ++i) {
      const auto& rows = probs_rows[static_cast<std::size_t>(i)];
      for (std::size_t r = 0; r * static_cast<std::size_t>(Vd) < rows.size(); ++r) {
        float* row = dst + (out.cu_num_drafts[i] + static_cast<std::int64_t>(r)) * V;
        const float* src = rows.data() + r * static_cast<std::size_t>(Vd);
        for (std::int64_t j = 0; j < Vd; ++j)
          row[d2t[static_cast<std::size_t>(by_target[static_cast<std::size_t>(j)])]] = src[j];
      }
    }
  }
  return out;
}

}  // namespace specdec::proposers
