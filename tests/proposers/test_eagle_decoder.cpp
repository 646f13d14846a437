// EagleProposer end to end with SpeculativeDecoder on small random-weight Llama targets:
//  - an untrained (random) EAGLE-1 or EAGLE-3 head, chain or tree, g in {1, 2, 4}, batch 1 and 3, gives exactly the target's
//    greedy output;
//  - the proposer's head state follows the accepted tokens: after every decoder step its next drafts equal those of a fresh
//    head fed the target features of the whole context;
//  - at temperature > 0 on an 8-token vocabulary, the first token and the first two tokens under EAGLE speculation (sampled
//    chain, argmax chain, tree; float32 heads and heads on the packed Q8_0 products) are distributed as the target's
//    (docs/design.md's 6-sigma bound per category);
//  - in a ProposerChain after an n-gram member (the chain routes target features): the same greedy output, the head state
//    still follows every accepted token whichever member drafted, and the same 6-sigma joint law of the first two tokens.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../core/stats.hpp"
#include "specdec/torch/float_tensor.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/proposers/eagle.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/proposers/proposer_chain.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/torch/rows.hpp"

namespace sp = specdec::proposers;
namespace sm = specdec::models;
namespace sd = specdec::decoder;

namespace {

struct Target {
  sm::LlamaConfig config;
  std::map<std::string, at::Tensor> weights;
  sm::LlamaModel make() const {
    return sm::LlamaModel(config, specdec::torch::weight_getter([this](const std::string& n) {
      auto it = weights.find(n);
      return it == weights.end() ? at::Tensor() : it->second;
    }));
  }
  sp::EagleTargetWeights shared() const {
    return {specdec::torch::float_tensor_of(weights.at("model.embed_tokens.weight")),
            specdec::torch::float_tensor_of(weights.at("lm_head.weight"))};
  }
};

Target make_target(std::int64_t vocab, std::int64_t layers, std::uint64_t seed, double logit_scale = 1.0) {
  Target t;
  sm::LlamaConfig& c = t.config;
  c.vocab_size = vocab;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 512;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto randn = [&](std::vector<std::int64_t> shape, double mean, double std) { return at::normal(mean, std, shape, gen, at::kFloat); };
  const double s = 1.0 / std::sqrt(32.0);
  auto& w = t.weights;
  w["model.embed_tokens.weight"] = randn({vocab, 32}, 0, 1);
  w["lm_head.weight"] = randn({vocab, 32}, 0, s * logit_scale);
  w["model.norm.weight"] = randn({32}, 1, 0.1);
  for (std::int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = randn({32}, 1, 0.1);
    w[p + "post_attention_layernorm.weight"] = randn({32}, 1, 0.1);
    w[p + "self_attn.q_proj.weight"] = randn({32, 32}, 0, 2 * s);
    w[p + "self_attn.k_proj.weight"] = randn({16, 32}, 0, 2 * s);
    w[p + "self_attn.v_proj.weight"] = randn({16, 32}, 0, s);
    w[p + "self_attn.o_proj.weight"] = randn({32, 32}, 0, s);
    w[p + "mlp.gate_proj.weight"] = randn({48, 32}, 0, s);
    w[p + "mlp.up_proj.weight"] = randn({48, 32}, 0, s);
    w[p + "mlp.down_proj.weight"] = randn({32, 48}, 0, 1.0 / std::sqrt(48.0));
  }
  return t;
}

sp::EagleHeadConfig head_config(sp::EagleVersion v, std::int64_t vocab, std::int64_t draft_vocab = 0) {
  sp::EagleHeadConfig c;
  c.version = v;
  c.layer.vocab_size = vocab;
  c.layer.hidden_size = 32;
  c.layer.intermediate_size = 40;
  c.layer.num_layers = 1;
  c.layer.num_heads = 4;
  c.layer.num_kv_heads = 2;
  c.layer.head_dim = 8;
  c.layer.rms_norm_eps = 1e-6;
  c.layer.max_position_embeddings = 512;
  if (v == sp::EagleVersion::kEagle3) {
    c.draft_vocab_size = vocab > 16 ? 40 : vocab;
    c.feature_layers = {0, 1, 2};
  }
  if (draft_vocab > 0) c.draft_vocab_size = draft_vocab;
  return c;
}

sp::EagleProposer make_proposer(const Target& t, sp::EagleVersion v, sp::EagleDraftMode mode,
                                sp::EagleChainSampling sampling = sp::EagleChainSampling::kSample, std::uint64_t seed = 77,
                                std::int64_t draft_vocab = 0, double min_draft_prob = 0.0,
                                const sp::EagleHeadOptions& head_options = {}, double min_path_prob = 0.0) {
  sp::EagleProposerOptions o;
  o.mode = mode;
  o.min_draft_prob = min_draft_prob;
  o.min_path_prob = min_path_prob;
  o.chain_sampling = sampling;
  o.tree.top_k = 4;
  o.tree.num_nodes = 10;
  o.target_num_layers = t.config.num_layers;
  return sp::EagleProposer(
      sp::EagleHead::random(head_config(v, t.config.vocab_size, draft_vocab), seed, t.shared(), head_options), o);
}

std::vector<std::int64_t> random_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> d(0, vocab - 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (auto& e : t) e = d(rng);
  return t;
}

// Plain greedy decoding of the target, one token per forward.
std::vector<std::int64_t> greedy(sm::LlamaModel& m, const std::vector<std::int64_t>& prompt, std::int64_t n) {
  const std::int64_t s = m.allocate_sequence();
  auto fb = sm::make_chain_batch(s, prompt);
  fb.last_logits_only = true;
  at::Tensor logits = specdec::torch::tensor_of(m.forward(fb).logits);
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; ++i) {
    out.push_back(logits[0].argmax().item<std::int64_t>());
    logits = specdec::torch::tensor_of(m.forward(sm::make_chain_batch(s, {out.back()})).logits);
  }
  m.free_sequence(s);
  return out;
}

// The greedy tests' prompts (vocabulary 61), the target's greedy continuations of them and the requests: temperature 0,
// kGreedyTokens new tokens each.
constexpr std::int64_t kGreedyTokens = 16;

std::vector<std::vector<std::int64_t>> greedy_prompts() {
  return {random_tokens(5, 61, 2), random_tokens(1, 61, 3), random_tokens(9, 61, 4)};
}

std::vector<std::vector<std::int64_t>> greedy_outputs(sm::LlamaModel& target, const std::vector<std::vector<std::int64_t>>& prompts) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& p : prompts) out.push_back(greedy(target, p, kGreedyTokens));
  return out;
}

std::vector<sd::GenerationRequest> greedy_requests(std::span<const std::vector<std::int64_t>> prompts) {
  std::vector<sd::GenerationRequest> reqs;
  for (const auto& p : prompts) {
    sd::GenerationRequest r;
    r.prompt = p;
    r.params.temperature = 0.f;
    r.max_new_tokens = kGreedyTokens;
    reqs.push_back(r);
  }
  return reqs;
}

const char* name(sp::EagleVersion v) { return v == sp::EagleVersion::kEagle1 ? "eagle1" : "eagle3"; }
const char* name(sp::EagleDraftMode m) { return m == sp::EagleDraftMode::kChain ? "chain" : "tree"; }

}  // namespace

TEST(EagleDecoder, RandomHeadGivesTheTargetsGreedyOutput) {
  const Target t = make_target(61, 4, 1);
  sm::LlamaModel target = t.make();
  const auto prompts = greedy_prompts();
  const auto want = greedy_outputs(target, prompts);
  std::int64_t tree_accepted = 0;
  // (version, draft vocabulary): EAGLE-1 also with a 30-token draft vocabulary (the other 31 tokens are never drafted).
  for (auto [v, dv] : {std::pair{sp::EagleVersion::kEagle1, std::int64_t{0}}, std::pair{sp::EagleVersion::kEagle3, std::int64_t{0}},
                       std::pair{sp::EagleVersion::kEagle1, std::int64_t{30}}})
    for (auto mode : {sp::EagleDraftMode::kChain, sp::EagleDraftMode::kTree})
      for (int g : {1, 2, 4})
        for (std::size_t batch : {std::size_t{1}, std::size_t{3}}) {
          SCOPED_TRACE(std::string(name(v)) + " dv=" + std::to_string(dv) + " " + name(mode) + " g=" + std::to_string(g) +
                       " batch=" + std::to_string(batch));
          sp::EagleProposer proposer = make_proposer(t, v, mode, sp::EagleChainSampling::kSample, 77, dv);
          sd::DecoderOptions opts;
          opts.num_speculative_tokens = g;
          sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec(proposer, target, opts);
          const auto res = dec.generate(greedy_requests(std::span(prompts).first(batch)));
          ASSERT_EQ(res.size(), batch);
          for (std::size_t i = 0; i < batch; ++i) EXPECT_EQ(res[i].tokens, want[i]) << "request " << i;
          EXPECT_GT(dec.metrics().total.drafted, 0);
          if (mode == sp::EagleDraftMode::kTree) tree_accepted += dec.metrics().total.accepted;
        }
  EXPECT_GT(tree_accepted, 0) << "no tree draft was ever accepted: the accepted-path bookkeeping went untested";
}

// EagleHeadOptions::quantize_weights: the head runs on Q8_0 copies of its matrices on the packed products, with 16- and
// 8-bit activations. Its drafts may differ slightly from the float head's; the decoded output must not.
TEST(EagleDecoder, QuantisedHeadKeepsTheTargetsGreedyOutput) {
  const Target t = make_target(61, 4, 1);
  sm::LlamaModel target = t.make();
  const auto prompts = greedy_prompts();
  const auto want = greedy_outputs(target, prompts);
  for (auto v : {sp::EagleVersion::kEagle1, sp::EagleVersion::kEagle3})
    for (auto mode : {sp::EagleDraftMode::kChain, sp::EagleDraftMode::kTree})
      for (std::size_t batch : {std::size_t{1}, std::size_t{3}})
      for (int bits : {16, 8}) {
        SCOPED_TRACE(std::string(name(v)) + " " + name(mode) + " batch=" + std::to_string(batch) + " bits=" + std::to_string(bits));
        sp::EagleHeadOptions ho;
        ho.quantize_weights = true;
        ho.activation_bits = bits;
        sp::EagleProposerOptions o;
        o.mode = mode;
        o.tree.top_k = 4;
        o.tree.num_nodes = 10;
        o.target_num_layers = t.config.num_layers;
        sp::EagleProposer proposer(sp::EagleHead::random(head_config(v, t.config.vocab_size), 77, t.shared(), ho), o);
        sd::DecoderOptions opts;
        opts.num_speculative_tokens = 4;
        sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec(proposer, target, opts);
        const auto res = dec.generate(greedy_requests(std::span(prompts).first(batch)));
        ASSERT_EQ(res.size(), batch);
        for (std::size_t i = 0; i < batch; ++i) EXPECT_EQ(res[i].tokens, want[i]) << "request " << i;
        EXPECT_GT(dec.metrics().total.drafted, 0);
      }
}

// min_draft_prob ends a chain at the first unsure draft: the greedy output stays the target's, 1.0 drafts nothing, and some
// threshold in between drafts some but fewer than g per step.
TEST(EagleDecoder, ConfidenceStopKeepsGreedyOutputAndShortensChains) {
  const Target t = make_target(61, 4, 1);
  sm::LlamaModel target = t.make();
  const auto prompts = greedy_prompts();
  const auto want = greedy_outputs(target, prompts);
  const int g = 4;
  for (auto v : {sp::EagleVersion::kEagle1, sp::EagleVersion::kEagle3}) {
    bool shortened = false;
    for (double min_prob : {0.02, 0.05, 0.1, 0.2, 0.4, 1.0})
      for (bool path : {false, true}) {
        SCOPED_TRACE(std::string(name(v)) + (path ? " min_path_prob=" : " min_draft_prob=") + std::to_string(min_prob));
        sp::EagleProposer proposer = path ? make_proposer(t, v, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 77, 0,
                                                          0.0, {}, min_prob)
                                          : make_proposer(t, v, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 77, 0, min_prob);
        sd::DecoderOptions opts;
        opts.num_speculative_tokens = g;
        sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec(proposer, target, opts);
        const auto res = dec.generate(greedy_requests(prompts));
        for (std::size_t i = 0; i < res.size(); ++i) EXPECT_EQ(res[i].tokens, want[i]) << "request " << i;
        const auto& m = dec.metrics().total;
        if (min_prob == 1.0) {
          EXPECT_EQ(m.drafted, 0);
        }
        if (m.drafted > 0 && m.drafted < g * m.target_forwards) shortened = true;
      }
    EXPECT_TRUE(shortened) << name(v) << ": no threshold drafted some but fewer than g per step";
  }
  EXPECT_THROW(make_proposer(t, sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 77, 0, 1.5),
               specdec::error);
  EXPECT_THROW(make_proposer(t, sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 77, 0, 0.0,
                             {}, 1.5),
               specdec::error);
}

// After every step, the proposer's next drafts equal a fresh head's drafts computed from the whole context's target features.
namespace {

// The drafts of a fresh head (seed 91, as the tests' proposers) fed the target features of the whole context, computed in one
// target forward, for the request `q` describes.
sp::DraftBatch fresh_head_drafts(const Target& t, sp::EagleVersion v, sp::EagleDraftMode mode, const std::vector<std::int64_t>& ctx,
                                 sp::ProposeRequest q, const specdec::SamplingParams& params) {
  sp::EagleProposer fresh = make_proposer(t, v, mode, sp::EagleChainSampling::kSample, 91);
  sm::LlamaModel ref_target = t.make();
  const std::int64_t slot = ref_target.allocate_sequence();
  auto fb = sm::make_chain_batch(slot, {ctx.begin(), ctx.end() - 1});
  const auto spec = fresh.target_feature_spec();
  fb.return_final_hidden = spec.final_hidden;
  fb.hidden_layers = spec.layers;
  const auto out = ref_target.forward(fb);
  sp::TargetFeatures f;
  f.start = 0;
  f.rows = static_cast<std::int64_t>(ctx.size()) - 1;
  f.hidden_pre_norm = out.hidden_pre_norm;
  f.hidden_post_norm = out.hidden_post_norm;
  f.layer_hidden = out.layer_hidden;
  sp::RequestContext rc;
  rc.id = 0;
  rc.context = ctx;
  rc.params = &params;
  rc.features = &f;
  fresh.begin_request(rc);
  q.id = 0;
  return fresh.propose(std::span<const sp::ProposeRequest>(&q, 1));
}

}  // namespace

TEST(EagleDecoder, HeadStateFollowsAcceptedTokens) {
  const Target t = make_target(8, 3, 5);
  sm::LlamaModel target = t.make();
  for (auto v : {sp::EagleVersion::kEagle1, sp::EagleVersion::kEagle3})
    for (auto mode : {sp::EagleDraftMode::kChain, sp::EagleDraftMode::kTree}) {
      SCOPED_TRACE(std::string(name(v)) + " " + name(mode));
      // Sampled chain drafts inside the decoder (temperature 1, so drafts get accepted); the comparison below asks for greedy
      // drafts (the argmax chain), which are a function of the head's state alone.
      sp::EagleProposer proposer = make_proposer(t, v, mode, sp::EagleChainSampling::kSample, 91);
      sd::DecoderOptions opts;
      opts.num_speculative_tokens = 3;
      opts.calibrate = false;
      sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec(proposer, target, opts);
      sd::GenerationRequest r;
      r.prompt = random_tokens(6, 8, 6);
      r.params.temperature = 1.f;
      r.params.seed = 3;
      r.max_new_tokens = 40;
      const auto id = dec.add_request(r);
      std::int64_t accepted_steps = 0;
      for (int step = 0; step < 12 && dec.num_running() > 0; ++step) {
        const std::size_t before = dec.context(id).size();
        if (!dec.step().empty()) break;
        const std::vector<std::int64_t> ctx(dec.context(id).begin(), dec.context(id).end());
        accepted_steps += ctx.size() > before + 1;  // more than the recovered/bonus token: drafts were accepted
        // What the proposer drafts next (argmax chain of 3, or the tree).
        specdec::SamplingParams greedy_params;
        greedy_params.temperature = 0.f;
        sp::ProposeRequest q;
        q.id = id;
        q.context = ctx;
        q.params = &greedy_params;
        q.max_drafts = 3;
        q.position = static_cast<std::int64_t>(ctx.size());
        const sp::DraftBatch got = proposer.propose(std::span<const sp::ProposeRequest>(&q, 1));

        const sp::DraftBatch want = fresh_head_drafts(t, v, mode, ctx, q, r.params);
        EXPECT_EQ(got.token_ids, want.token_ids) << "step " << step;
        EXPECT_EQ(got.parents, want.parents) << "step " << step;
        EXPECT_EQ(proposer.pending_rows(id), 0);
      }
      EXPECT_GT(accepted_steps, 0) << "no step accepted a draft: the accepted-feature path went untested";
      dec.cancel(id);
    }
}

namespace {

// The target's processed distribution of the first token after `prompt` and the joint law of the first two ([V], [V * V]).
void target_first_two(sm::LlamaModel& target, const std::vector<std::int64_t>& prompt, const specdec::SamplingParams& params,
                      std::int64_t V, std::vector<double>& p1, std::vector<double>& p12) {
  p1.assign(static_cast<std::size_t>(V), 0.0);
  p12.assign(static_cast<std::size_t>(V * V), 0.0);
  const std::int64_t s = target.allocate_sequence();
  auto fb = sm::make_chain_batch(s, prompt);
  fb.last_logits_only = true;
  const at::Tensor l = specdec::torch::tensor_of(target.forward(fb).logits)[0].contiguous();
  const auto q = specdec::logits_to_probs(std::span<const float>(l.data_ptr<float>(), V), params);
  for (std::int64_t a = 0; a < V; ++a) {
    p1[static_cast<std::size_t>(a)] = q[static_cast<std::size_t>(a)];
    if (q[static_cast<std::size_t>(a)] == 0.f) continue;
    const std::int64_t s2 = target.allocate_sequence();
    auto prompt2 = prompt;
    prompt2.push_back(a);
    auto fb2 = sm::make_chain_batch(s2, prompt2);
    fb2.last_logits_only = true;
    const at::Tensor l2 = specdec::torch::tensor_of(target.forward(fb2).logits)[0].contiguous();
    const auto q2 = specdec::logits_to_probs(std::span<const float>(l2.data_ptr<float>(), V), params);
    for (std::int64_t b = 0; b < V; ++b)
      p12[static_cast<std::size_t>(a * V + b)] = static_cast<double>(q[static_cast<std::size_t>(a)]) * q2[static_cast<std::size_t>(b)];
    target.free_sequence(s2);
  }
  target.free_sequence(s);
}

// Runs n requests (seeds 0..n-1) with the same prompt and returns the counts of the first token and of the first two tokens.
template <class P>
void sample_first_tokens(sm::LlamaModel& target, P& proposer, const std::vector<std::int64_t>& prompt,
                         const specdec::SamplingParams& params, std::int32_t g, std::int64_t n, std::int64_t vocab,
                         std::vector<std::int64_t>& first, std::vector<std::int64_t>& pairs, std::int64_t& accepted,
                         double& drafts_per_forward, bool cut = false) {
  sd::DecoderOptions opts;
  opts.num_speculative_tokens = g;
  opts.calibrate = false;
  if (cut) {  // the adaptive policy: sampled requests choose alone against a fixed cost and cut confident chains (a
              // verification cheap enough that the random head's chains are cut at several lengths, not only at 0)
    opts.adaptive.enabled = true;
    opts.adaptive.forward_seconds = [](std::int64_t b, std::int64_t t) { return 1.0 + 0.08 * static_cast<double>(t - b); };
    opts.adaptive.draft_seconds_per_position = 0.0;
    opts.adaptive.sampled_cost = [](std::int64_t rows) { return 1.0 + 0.08 * static_cast<double>(rows); };
  }
  sd::SpeculativeDecoder<P, sm::LlamaModel> dec(proposer, target, opts);
  first.assign(static_cast<std::size_t>(vocab), 0);
  pairs.assign(static_cast<std::size_t>(vocab * vocab), 0);
  const std::int64_t chunk = 200;
  for (std::int64_t b = 0; b < n; b += chunk) {
    std::vector<sd::GenerationRequest> reqs;
    for (std::int64_t i = b; i < std::min(n, b + chunk); ++i) {
      sd::GenerationRequest r;
      r.prompt = prompt;
      r.params = params;
      r.params.seed = static_cast<std::uint64_t>(i) * 7919 + 13;
      r.max_new_tokens = g + 1;
      reqs.push_back(r);
    }
    for (const auto& res : dec.generate(reqs)) {
      ++first[static_cast<std::size_t>(res.tokens.at(0))];
      ++pairs[static_cast<std::size_t>(res.tokens.at(0) * vocab + res.tokens.at(1))];
    }
  }
  accepted = dec.metrics().total.accepted;
  drafts_per_forward = static_cast<double>(dec.metrics().total.drafted) / static_cast<double>(dec.metrics().total.target_forwards);
}

}  // namespace

TEST(EagleDecoder, SampledOutputIsDistributedAsTheTarget) {
  const std::int64_t V = 8;
  const Target t = make_target(V, 3, 9, 4.0);
  sm::LlamaModel target = t.make();
  const std::vector<std::int64_t> prompt = {3, 1, 4, 1, 5};
  specdec::SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 6;

  // The target's distributions of the first token and of the second given the first.
  std::vector<double> p1, p12;
  target_first_two(target, prompt, params, V, p1, p12);

  struct Case {
    sp::EagleVersion v;
    sp::EagleDraftMode mode;
    sp::EagleChainSampling sampling;
    std::int64_t draft_vocab = 0;  // 0 = the whole vocabulary
    double min_draft_prob = 0.0;
    int packed_bits = 0;  // > 0: the head on the packed products (EagleHeadOptions::quantize_weights) with these activations
    double min_path_prob = 0.0;
    bool cut = false;  // the decoder's adaptive policy, which cuts argmax chains of sampled requests by their confidences
    std::uint64_t head_seed = 126;
  };
  double full_rate = 0;    // drafts per forward of full chains (the first case)
  double argmax_rate = 0;  // drafts per forward of the argmax chains without the adaptive policy
  double tree_rate = 0;    // drafts per forward of whole EAGLE-1 trees on the float head
  for (const Case c : {Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample},
                       Case{sp::EagleVersion::kEagle3, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample},
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kArgmax},
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kArgmax, 0, 0.0, 0,
                            0.0, true},
                       Case{sp::EagleVersion::kEagle3, sp::EagleDraftMode::kTree, sp::EagleChainSampling::kSample},
                       // EAGLE-1 drafting from 5 of the 8 tokens: the other 3 have draft probability 0.
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 5},
                       // chains that stop at the first step whose largest draft probability is < 0.6 (min_draft_prob)
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 0, 0.6},
                       Case{sp::EagleVersion::kEagle3, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 0, 0.6},
                       // chains that stop where the product of the steps' largest probabilities falls below 0.7
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 0, 0.0, 0, 0.7},
                       // the head on the target's packed kernels: Q8_0 weights, 16- and 8-bit activations
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 0, 0.0, 16},
                       Case{sp::EagleVersion::kEagle3, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 0, 0.0, 8},
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kTree, sp::EagleChainSampling::kSample, 0, 0.0, 16},
                       // trees of one head (seed 127: head 126's first tree holds none of the target's first tokens, so
                       // the policy would stop drafting before any were accepted): the whole (first, the reference
                       // rate), kept to nodes of path probability >= 0.3, and under the adaptive policy (sampled
                       // requests draft or not by their own yield; their trees are not cut by depth)
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kTree, sp::EagleChainSampling::kSample, 0, 0.0, 0, 0.0,
                            false, 127},
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kTree, sp::EagleChainSampling::kSample, 0, 0.0, 0, 0.3,
                            false, 127},
                       Case{sp::EagleVersion::kEagle1, sp::EagleDraftMode::kTree, sp::EagleChainSampling::kSample, 0, 0.0, 0, 0.0,
                            true, 127}}) {
    SCOPED_TRACE(std::string(name(c.v)) + " " + name(c.mode) + (c.sampling == sp::EagleChainSampling::kSample ? " sampled" : " argmax") +
                 (c.draft_vocab ? " draft vocabulary " + std::to_string(c.draft_vocab) : "") +
                 (c.min_draft_prob > 0 ? " min_draft_prob " + std::to_string(c.min_draft_prob) : "") +
                 (c.packed_bits > 0 ? " packed, activations " + std::to_string(c.packed_bits) + " bits" : "") +
                 (c.min_path_prob > 0 ? " min_path_prob " + std::to_string(c.min_path_prob) : "") +
                 (c.cut ? " adaptive, cut" : ""));
    sp::EagleHeadOptions ho;
    ho.quantize_weights = c.packed_bits > 0;
    ho.activation_bits = c.packed_bits > 0 ? c.packed_bits : 16;
    // Head seed 126: with 8 tokens a random head's deterministic first draft is either inside the target's top 6 or not,
    // so whether the accepted-drafts precondition below holds is one draw; seed 123 passed it under ATen's generator and
    // fails it (28 accepted) under EagleHead::random's std::mt19937_64, and the law checks pass on both.
    sp::EagleProposer proposer = make_proposer(t, c.v, c.mode, c.sampling, c.head_seed, c.draft_vocab, c.min_draft_prob, ho, c.min_path_prob);
    std::vector<std::int64_t> first, pairs;
    std::int64_t accepted = 0;
    double drafts_per_forward = 0;
    sample_first_tokens(target, proposer, prompt, params, 3, 2000, V, first, pairs, accepted, drafts_per_forward, c.cut);
    EXPECT_TRUE(specdec::test::matches_distribution(first, p1));
    EXPECT_TRUE(specdec::test::matches_distribution(pairs, p12));
    EXPECT_GT(accepted, 50) << "too few accepted drafts for the test to exercise speculation";
    std::printf("%s min_draft_prob %.2f min_path_prob %.2f: %.2f drafts per target forward\n", name(c.v), c.min_draft_prob,
                c.min_path_prob, drafts_per_forward);
    if (c.min_draft_prob == 0 && c.min_path_prob == 0 && c.mode == sp::EagleDraftMode::kChain && c.draft_vocab == 0 &&
        c.packed_bits == 0 && !c.cut && full_rate == 0)
      full_rate = drafts_per_forward;
    if (c.sampling == sp::EagleChainSampling::kArgmax && !c.cut) argmax_rate = drafts_per_forward;
    const bool tree = c.mode == sp::EagleDraftMode::kTree;
    if (tree && c.head_seed == 127 && c.min_path_prob == 0 && !c.cut)
      tree_rate = drafts_per_forward;
    if (c.cut) {
      EXPECT_LT(drafts_per_forward, 0.95 * (tree ? tree_rate : argmax_rate)) << "the policy shortened (almost) no proposal";
    }
    if (c.min_draft_prob > 0 || c.min_path_prob > 0) {
      EXPECT_LT(drafts_per_forward, 0.8 * (tree ? tree_rate : full_rate)) << "the threshold stopped (almost) no proposal";
    }
  }
}

// The chain asks its members for target features only when one reads them, and refuses two that read different ones.
TEST(EagleChain, FeatureSpecIsTheFeatureMembers) {
  const Target t = make_target(61, 4, 1);
  sp::NgramProposer ngram;
  sp::ProposerChain lookups;
  lookups.add(ngram, "ngram");
  EXPECT_FALSE(lookups.target_feature_spec().final_hidden);
  EXPECT_TRUE(lookups.target_feature_spec().layers.empty());
  sp::EagleProposer e1 = make_proposer(t, sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain);
  sp::EagleProposer e3 = make_proposer(t, sp::EagleVersion::kEagle3, sp::EagleDraftMode::kChain);
  sp::ProposerChain chain;
  chain.add(ngram, "ngram").add(e1, "eagle");
  EXPECT_EQ(chain.target_feature_spec().final_hidden, e1.target_feature_spec().final_hidden);
  EXPECT_EQ(chain.target_feature_spec().layers, e1.target_feature_spec().layers);
  EXPECT_THROW(chain.add(e3, "eagle3"), specdec::error);
  EXPECT_EQ(chain.size(), 2u);
}

// n-gram first, EAGLE where the n-gram finds nothing: the target's greedy output, both members draft, and after every step
// the head's next drafts equal a fresh head's computed from the whole context (its state followed the tokens the n-gram's
// drafts put into the context as well as its own).
TEST(EagleChain, AfterAnNgramKeepsGreedyOutputAndHeadState) {
  const Target t = make_target(61, 4, 1);
  sm::LlamaModel target = t.make();
  const auto prompts = greedy_prompts();
  const auto want = greedy_outputs(target, prompts);
  for (auto v : {sp::EagleVersion::kEagle1, sp::EagleVersion::kEagle3})
    for (auto mode : {sp::EagleDraftMode::kChain, sp::EagleDraftMode::kTree})
      for (std::size_t batch : {std::size_t{1}, std::size_t{3}}) {
        SCOPED_TRACE(std::string(name(v)) + " " + name(mode) + " batch=" + std::to_string(batch));
        sp::NgramProposer ngram(sp::NgramOptions{1, 2, 8, 1});
        sp::EagleProposer eagle = make_proposer(t, v, mode, sp::EagleChainSampling::kSample, 91);
        sp::ProposerChain chain;
        chain.add(ngram, "ngram").add(eagle, "eagle");
        sd::DecoderOptions opts;
        opts.num_speculative_tokens = 3;
        opts.calibrate = false;
        sd::SpeculativeDecoder<sp::ProposerChain, sm::LlamaModel> dec(chain, target, opts);
        const auto reqs = greedy_requests(std::span(prompts).first(batch));
        std::vector<sd::RequestId> ids;
        for (const auto& r : reqs) ids.push_back(dec.add_request(r));
        bool first_done = false;
        for (int step = 0; step < 64 && dec.num_running() > 0; ++step) {
          for (const auto id : dec.step()) first_done = first_done || id == ids[0];
          if (first_done) continue;
          const std::vector<std::int64_t> ctx(dec.context(ids[0]).begin(), dec.context(ids[0]).end());
          specdec::SamplingParams greedy_params;
          greedy_params.temperature = 0.f;
          sp::ProposeRequest q;
          q.id = ids[0];
          q.context = ctx;
          q.params = &greedy_params;
          q.max_drafts = 3;
          q.position = static_cast<std::int64_t>(ctx.size());
          const sp::DraftBatch got = eagle.propose(std::span<const sp::ProposeRequest>(&q, 1));
          const sp::DraftBatch fresh = fresh_head_drafts(t, v, mode, ctx, q, greedy_params);
          EXPECT_EQ(got.token_ids, fresh.token_ids) << "step " << step;
          EXPECT_EQ(got.parents, fresh.parents) << "step " << step;
        }
        for (std::size_t i = 0; i < batch; ++i) EXPECT_EQ(dec.take_result(ids[i]).tokens, want[i]) << "request " << i;
        EXPECT_GT(chain.drafted_by(0), 0) << "the n-gram never drafted";
        EXPECT_GT(chain.drafted_by(1), 0) << "EAGLE never drafted";
      }
}

// The joint law of the first two tokens at temperature 0.9 with the n-gram's deterministic drafts and EAGLE's sampled ones
// mixed in one batch (6 sigma per category).
TEST(EagleChain, SampledOutputIsDistributedAsTheTarget) {
  const std::int64_t V = 8;
  const Target t = make_target(V, 3, 9, 4.0);
  sm::LlamaModel target = t.make();
  const std::vector<std::int64_t> prompt = {3, 1, 4, 1, 5, 1};
  specdec::SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 6;
  std::vector<double> p1, p12;
  target_first_two(target, prompt, params, V, p1, p12);
  sp::NgramProposer ngram(sp::NgramOptions{1, 2, 8, 1});
  sp::EagleProposer eagle = make_proposer(t, sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kSample, 123);
  sp::ProposerChain chain;
  chain.add(ngram, "ngram").add(eagle, "eagle");
  std::vector<std::int64_t> first, pairs;
  std::int64_t accepted = 0;
  double drafts_per_forward = 0;
  sample_first_tokens(target, chain, prompt, params, 3, 2000, V, first, pairs, accepted, drafts_per_forward);
  EXPECT_TRUE(specdec::test::matches_distribution(first, p1));
  EXPECT_TRUE(specdec::test::matches_distribution(pairs, p12));
  EXPECT_GT(accepted, 50) << "too few accepted drafts for the test to exercise speculation";
  EXPECT_GT(chain.drafted_by(0), 100) << "the n-gram rarely drafted";
  EXPECT_GT(chain.drafted_by(1), 100) << "EAGLE rarely drafted";
}

// The adaptive policy with the confidence cut (chains proposed at the bound, cut by the head's confidences): the target's
// greedy output, alone and in a batch, as an EAGLE proposer alone and after an n-gram; every chain draft has a confidence
// in [0, 1].
TEST(EagleDecoder, ConfidenceCutKeepsGreedyOutput) {
  const Target t = make_target(61, 4, 1);
  sm::LlamaModel target = t.make();
  const auto prompts = greedy_prompts();
  const auto want = greedy_outputs(target, prompts);
  for (auto v : {sp::EagleVersion::kEagle1, sp::EagleVersion::kEagle3})
    for (auto mode : {sp::EagleDraftMode::kChain, sp::EagleDraftMode::kTree})
    for (bool in_chain : {false, true})
      for (std::size_t batch : {std::size_t{1}, std::size_t{3}}) {
        SCOPED_TRACE(std::string(name(v)) + " " + name(mode) + (in_chain ? " after an n-gram" : "") + " batch=" + std::to_string(batch));
        sp::EagleProposer eagle = make_proposer(t, v, mode);
        ASSERT_TRUE(eagle.reports_confidence());
        sd::DecoderOptions opts;
        opts.num_speculative_tokens = 4;
        opts.calibrate = false;
        opts.adaptive.enabled = true;
        opts.adaptive.forward_seconds = [](std::int64_t b, std::int64_t rows) { return 1.0 + 0.05 * static_cast<double>(rows - b); };
        opts.adaptive.draft_seconds_per_position = 0.0;
        const auto reqs = greedy_requests(std::span(prompts).first(batch));
        std::vector<sd::GenerationResult> res;
        if (in_chain) {
          sp::NgramProposer ngram(sp::NgramOptions{2, 3, 8, 1});
          sp::ProposerChain chain;
          chain.add(ngram, "ngram").add(eagle, "eagle");
          sd::SpeculativeDecoder<sp::ProposerChain, sm::LlamaModel> dec(chain, target, opts);
          res = dec.generate(reqs);
        } else {
          sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec(eagle, target, opts);
          res = dec.generate(reqs);
          EXPECT_GT(dec.metrics().total.drafted, 0);
        }
        ASSERT_EQ(res.size(), batch);
        for (std::size_t i = 0; i < batch; ++i) EXPECT_EQ(res[i].tokens, want[i]) << "request " << i;
      }
  // The confidences a chain reports.
  sp::EagleProposer eagle = make_proposer(t, sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain);
  sd::DecoderOptions opts;
  opts.num_speculative_tokens = 4;
  opts.calibrate = false;
  sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec(eagle, target, opts);
  const auto id = dec.add_request(greedy_requests(std::span(prompts).first(1))[0]);
  specdec::SamplingParams greedy_params;
  greedy_params.temperature = 0.f;
  const std::vector<std::int64_t> ctx(dec.context(id).begin(), dec.context(id).end());
  sp::ProposeRequest q;
  q.id = id;
  q.context = ctx;
  q.params = &greedy_params;
  q.max_drafts = 4;
  q.position = static_cast<std::int64_t>(ctx.size());
  const sp::DraftBatch d = eagle.propose(std::span<const sp::ProposeRequest>(&q, 1));
  ASSERT_EQ(d.confidence.size(), d.token_ids.size());
  for (const float c : d.confidence) {
    EXPECT_GT(c, 1.f / 61.f - 1e-6f);  // the largest of 61 probabilities
    EXPECT_LE(c, 1.f);
  }
  dec.cancel(id);
  // Argmax drafts of a sampled request: the same tokens, each with the head's top probability at the request's
  // temperature (sharper than at 1, so larger).
  sp::EagleProposer argmax = make_proposer(t, sp::EagleVersion::kEagle1, sp::EagleDraftMode::kChain, sp::EagleChainSampling::kArgmax);
  sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec2(argmax, target, opts);
  const auto id2 = dec2.add_request(greedy_requests(std::span(prompts).first(1))[0]);
  const auto greedy_drafts = [&](const specdec::SamplingParams* params) {
    sp::ProposeRequest r = q;
    r.id = id2;
    r.params = params;
    return argmax.propose(std::span<const sp::ProposeRequest>(&r, 1));
  };
  specdec::SamplingParams cool;
  cool.temperature = 0.5f;
  const sp::DraftBatch at1 = greedy_drafts(&greedy_params), at05 = greedy_drafts(&cool);
  EXPECT_EQ(at05.token_ids, at1.token_ids);
  EXPECT_FALSE(at05.probs.defined());
  ASSERT_EQ(at05.confidence.size(), at1.confidence.size());
  for (std::size_t j = 0; j < at1.confidence.size(); ++j) {
    EXPECT_GT(at05.confidence[j], at1.confidence[j]) << j;
    EXPECT_LE(at05.confidence[j], 1.f) << j;
  }
  dec2.cancel(id2);
  // A tree's confidences: each node's probability under the head after its parent's path, so siblings (distinct tokens
  // of one distribution) sum to at most 1 and come best first.
  sp::EagleProposer tree = make_proposer(t, sp::EagleVersion::kEagle1, sp::EagleDraftMode::kTree);
  sd::SpeculativeDecoder<sp::EagleProposer, sm::LlamaModel> dec3(tree, target, opts);
  const auto id3 = dec3.add_request(greedy_requests(std::span(prompts).first(1))[0]);
  sp::ProposeRequest r3 = q;
  r3.id = id3;
  const sp::DraftBatch td = tree.propose(std::span<const sp::ProposeRequest>(&r3, 1));
  ASSERT_EQ(td.parents.size(), 1u);
  ASSERT_EQ(td.confidence.size(), td.token_ids.size());
  ASSERT_EQ(td.parents[0].size(), td.token_ids.size());
  ASSERT_GT(td.token_ids.size(), 1u);
  std::map<std::int64_t, std::vector<float>> siblings;  // parent node -> its children's confidences, in draft order
  for (std::size_t j = 0; j < td.token_ids.size(); ++j) {
    EXPECT_GT(td.confidence[j], 0.f) << j;
    EXPECT_LE(td.confidence[j], 1.f) << j;
    siblings[td.parents[0][j]].push_back(td.confidence[j]);
  }
  for (const auto& [parent, conf] : siblings) {
    double sum = 0;
    for (float c : conf) sum += c;
    EXPECT_LE(sum, 1.0 + 1e-5) << "children of node " << parent;
    EXPECT_TRUE(std::is_sorted(conf.rbegin(), conf.rend())) << "children of node " << parent << " not best first";
  }
  dec3.cancel(id3);
}
