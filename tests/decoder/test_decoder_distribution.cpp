// The joint distribution of the first two generated tokens under speculation (draft model proposer, float32 or on the packed
// Q8_0 products, token-level and block verification) and under plain decoding matches the target's exact p(x1) p(x2 | x1)
// within docs/design.md's 6-sigma bound
// per category; a proposer chain's mixed batch (n-gram drafts for one prompt, draft-model drafts for another, verified in the
// same steps) matches each prompt's reference, and so does a batch whose requests name their own members and order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common.hpp"
#include "specdec/torch/rows.hpp"
#include "specdec/proposers/proposer_chain.hpp"
#include "../proposers/cross_vocab_fixture.hpp"
#include "specdec/proposers/corpus.hpp"
#include "specdec/proposers/suffix.hpp"
#include "specdec/proposers/process_logits.hpp"

namespace {

using namespace specdec::test;

/// Exact reference: processed target rows after the prompt, and after prompt + x1 for every x1.
std::vector<double> joint_reference(sm::LlamaModel& target, const std::vector<std::int64_t>& prompt,
                                    const specdec::SamplingParams& params) {
  const std::int64_t V = target.vocab_size();
  const specdec::SamplingParams* pp[] = {&params};
  const at::Tensor p1 = specdec::torch::tensor_of(sp::process_logits(specdec::torch::rows_of(fresh_next_logits(target, prompt).unsqueeze(0).contiguous()), pp))[0];
  std::vector<double> pi(static_cast<std::size_t>(V * V), 0.0);
  for (std::int64_t x1 = 0; x1 < V; ++x1) {
    const double a = p1[x1].item<float>();
    if (a == 0.0) continue;
    auto ctx = prompt;
    ctx.push_back(x1);
    const at::Tensor p2 = specdec::torch::tensor_of(sp::process_logits(specdec::torch::rows_of(fresh_next_logits(target, ctx).unsqueeze(0).contiguous()), pp))[0];
    for (std::int64_t x2 = 0; x2 < V; ++x2) pi[static_cast<std::size_t>(x1 * V + x2)] = a * p2[x2].item<float>();
  }
  return pi;
}

/// docs/design.md's bound: each category's count of n draws within 6 sigma of n * pi (+ 5 where pi > 0) of the exact joint law.
void expect_within_six_sigma(const std::vector<std::int64_t>& count, const std::vector<double>& pi, std::int64_t n,
                             std::int64_t V, const std::string& what = "") {
  for (std::size_t c = 0; c < pi.size(); ++c) {
    const double e = static_cast<double>(n) * pi[c];
    const double bound = 6.0 * std::sqrt(e * (1.0 - pi[c])) + (pi[c] > 0 ? 5.0 : 0.0);
    EXPECT_LE(std::abs(static_cast<double>(count[c]) - e), bound)
        << what << "category (" << c / static_cast<std::size_t>(V) << ", " << c % static_cast<std::size_t>(V) << "): count "
        << count[c] << ", expected " << e;
  }
}

/// Draws n requests' first two tokens (of `new_tokens` generated; `tweak` edits the decoder's options, `tweak_request` the
/// i-th request) and checks their joint distribution; returns the decoder's metrics.
template <class Proposer>
sd::DecoderMetrics check_joint(Proposer& proposer, sm::LlamaModel& target, const specdec::SamplingParams& params, int g,
                               std::int64_t n, const std::vector<std::int64_t>& prompt = {1, 5, 2, 7},
                               specdec::VerifyMethod method = specdec::VerifyMethod::kToken, std::int64_t new_tokens = 2,
                               const std::function<void(sd::DecoderOptions&)>& tweak = {},
                               const std::function<void(sd::GenerationRequest&, std::int64_t)>& tweak_request = {}) {
  const std::int64_t V = target.vocab_size();
  const auto pi = joint_reference(target, prompt, params);
  std::vector<std::int64_t> count(pi.size(), 0);
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  o.calibrate = false;
  if (tweak) tweak(o);
  sd::SpeculativeDecoder dec(proposer, target, o);
  constexpr std::int64_t kPerCall = 500;
  for (std::int64_t start = 0; start < n; start += kPerCall) {
    std::vector<sd::GenerationRequest> rs;
    for (std::int64_t i = start; i < std::min(n, start + kPerCall); ++i) {
      auto r = make_request(prompt, new_tokens);
      r.params = params;
      r.params.seed = 0xABCDEF00ull + static_cast<std::uint64_t>(i);
      r.verify_method = method;
      if (tweak_request) tweak_request(r, i);
      rs.push_back(r);
    }
    for (const auto& r : dec.generate(rs)) {
      if (r.tokens.size() != static_cast<std::size_t>(new_tokens)) {
        ADD_FAILURE() << "a request generated " << r.tokens.size() << " tokens, expected " << new_tokens;
        return dec.metrics();
      }
      ++count[static_cast<std::size_t>(r.tokens[0] * V + r.tokens[1])];
    }
  }
  expect_within_six_sigma(count, pi, n, V);
  if (g > 0) {
    EXPECT_GT(dec.metrics().total.accepted, 0);
  }
  return dec.metrics();
}

specdec::SamplingParams params(float t, int top_k = 0, float top_p = 1.0f) {
  specdec::SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

constexpr std::int64_t kVocab = 12;
constexpr std::int64_t kDraws = 12000;

TEST(DecoderDistribution, DraftModelFirstTwoTokensMatchTarget) {
  auto target = tiny_model(21, kVocab);
  auto draft_model = tiny_model(22, kVocab);
  for (int g : {2, 3}) {
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    check_joint(draft, target, params(1.0f), g, kDraws);
  }
}

// Chains that stop where the product of q's largest probabilities falls below min_path_prob: the stop looks at q, never at
// the drawn token, so the law stays the target's; and it stops chains (fewer drafts than g per forward).
TEST(DecoderDistribution, DraftModelMinPathProbFirstTwoTokensMatchTarget) {
  auto target = tiny_model(21, kVocab);
  auto draft_model = tiny_model(22, kVocab);
  sp::DraftModelOptions opts;
  opts.min_path_prob = 0.3;
  sp::DraftModelProposer<sm::LlamaModel> draft(draft_model, opts);
  const auto m = check_joint(draft, target, params(1.0f), 3, kDraws);
  EXPECT_LT(m.total.drafted, 3 * m.total.target_forwards) << "min_path_prob stopped no chain";
  EXPECT_GT(m.total.drafted, 0);
}

// The draft model on the target's packed kernels (its float weights quantised to Q8_0 at load, 16- and 8-bit activations,
// as specdec-generate runs a distilled draft): its q is what it proposes with, so the law stays the target's.
// A random draft model of kVocab tokens on the packed kernels (float weights quantised to Q8_0 at load).
sm::LlamaModel packed_draft_model(int bits, std::vector<std::int64_t> output_ids = {}) {
  sm::LlamaOptions o;
  o.initial_cache_capacity = 64;
  o.initial_cache_slots = 4;
  o.quantize_float_weights = true;
  o.activation_bits = bits;
  o.output_ids = std::move(output_ids);
  return sm::LlamaModel::random(tiny_config(kVocab, 2), 22, o);
}

TEST(DecoderDistribution, PackedDraftModelFirstTwoTokensMatchTarget) {
  auto target = tiny_model(21, kVocab);
  for (int bits : {16, 8}) {
    auto draft_model = packed_draft_model(bits);
    ASSERT_NE(draft_model.kernel_name(), "float32");
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    SCOPED_TRACE("activations " + std::to_string(bits) + " bits");
    check_joint(draft, target, params(0.8f, 8), 3, kDraws);
  }
}

// A reduced output vocabulary (DraftModelOptions::output_ids, the model built with the same LlamaOptions::output_ids, on
// the packed kernels as the CLI holds a draft): drafts come from 7 of the 12 tokens and q is 0 on the rest, which the
// target still emits. The law stays the target's, plain and truncated.
TEST(DecoderDistribution, ReducedVocabularyDraftModelFirstTwoTokensMatchTarget) {
  auto target = tiny_model(21, kVocab);
  const std::vector<std::int64_t> ids = {9, 2, 5, 0, 11, 7, 3};
  auto draft_model = packed_draft_model(16, ids);
  ASSERT_EQ(draft_model.output_size(), 7);
  sp::DraftModelOptions d;
  d.output_ids = ids;
  for (const auto& p : {params(1.0f), params(0.8f, 8)}) {
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model, d);
    SCOPED_TRACE("temperature " + std::to_string(p.temperature));
    const auto m = check_joint(draft, target, p, 3, kDraws);
    EXPECT_GT(m.total.accepted, 0);
  }
}

TEST(DecoderDistribution, DraftModelTruncatedParams) {
  auto target = tiny_model(23, kVocab);
  auto draft_model = tiny_model(24, kVocab);
  sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
  check_joint(draft, target, params(0.7f, 6, 0.9f), 2, kDraws);
}

TEST(DecoderDistribution, DraftModelBlockVerificationFirstTwoTokensMatchTarget) {
  auto target = tiny_model(21, kVocab);
  auto draft_model = tiny_model(22, kVocab);
  for (int g : {2, 3}) {
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    check_joint(draft, target, params(1.0f), g, kDraws, {1, 5, 2, 7}, specdec::VerifyMethod::kBlock);
  }
}

TEST(DecoderDistribution, DraftModelBlockVerificationTruncatedParams) {
  auto truncated_target = tiny_model(23, kVocab);
  auto truncated_draft = tiny_model(24, kVocab);
  sp::DraftModelProposer<sm::LlamaModel> draft(truncated_draft);
  check_joint(draft, truncated_target, params(0.7f, 6, 0.9f), 2, kDraws, {1, 5, 2, 7}, specdec::VerifyMethod::kBlock);
}

TEST(DecoderDistribution, AutoregressiveFirstTwoTokensMatchTarget) {
  auto target = tiny_model(21, kVocab);
  sp::NoProposer none;
  check_joint(none, target, params(1.0f), 0, kDraws);
}

TEST(DecoderDistribution, NgramFirstTwoTokensMatchTarget) {
  auto target = tiny_model(25, kVocab);
  sp::NgramProposer ngram;
  // the suffix "1 5" recurs: the n-gram drafts "2 7" (deterministic drafts, verified with p(x))
  check_joint(ngram, target, params(1.0f), 3, kDraws, {1, 5, 2, 7, 3, 1, 5});
}

TEST(DecoderDistribution, NgramPerRequestDraftLengthsFirstTwoTokensMatchTarget) {
  // Sampled requests choosing g alone against a fixed cost (AdaptiveSpeculation::sampled_cost): with the prior estimate
  // a step drafts, after a rejected first draft the estimate falls below the cost of a draft and the next step is
  // plain, so the second token's step depends on the first's outcome. Still the target's joint distribution.
  auto target = tiny_model(25, kVocab);
  sp::NgramProposer ngram;
  const auto m = check_joint(ngram, target, params(1.0f), 3, kDraws, {1, 5, 2, 7, 3, 1, 5}, specdec::VerifyMethod::kToken, 6,
                             [](sd::DecoderOptions& o) {
                               o.adaptive.enabled = true;
                               o.adaptive.sampled_cost = [](std::int64_t rows) { return 1.0 + 0.3 * static_cast<double>(rows); };
                             });
  // the policy went plain where fixed drafting (the same proposer and prompt) drafts
  sp::NgramProposer ngram_fixed;
  const auto fixed = check_joint(ngram_fixed, target, params(1.0f), 3, 2000, {1, 5, 2, 7, 3, 1, 5},
                                 specdec::VerifyMethod::kToken, 6);
  auto drafting = [](const sd::DecoderMetrics& x) {
    return static_cast<double>(x.total.steps_with_drafts) / static_cast<double>(x.total.target_forwards);
  };
  EXPECT_GT(m.total.steps_with_drafts, 0);
  EXPECT_LT(drafting(m), drafting(fixed) - 0.05) << "policy " << drafting(m) << ", fixed " << drafting(fixed);
}

TEST(DecoderDistribution, SuffixTreesFirstTwoTokensMatchTarget) {
  auto target = tiny_model(26, kVocab);
  sp::SuffixOptions o;
  o.tokens_per_match_token = 4.0;
  o.min_path_probability = 0.0;
  sp::SuffixProposer suffix(o);
  // Drafts from the prompt's own repeats and, as requests finish, from earlier outputs in the global trie: deterministic
  // trees (siblings verified by sampling without replacement).
  check_joint(suffix, target, params(1.0f), 3, kDraws, {1, 5, 2, 7, 3, 1, 5});
}

TEST(DecoderDistribution, CorpusFirstTwoTokensMatchTarget) {
  auto target = tiny_model(29, kVocab);
  // A table that continues the prompt "1 5 2 7" with "3 1 5" (deterministic drafts with confidences, verified with
  // p(x)); its counts make the path bound keep 3 drafts.
  sp::CorpusTableBuilder b(kVocab, 4);
  for (int i = 0; i < 4; ++i) b.add(std::vector<std::int64_t>{1, 5, 2, 7, 3, 1}, std::vector<std::int64_t>{5, 2, 7, 3, 1, 5}, 0);
  sp::CorpusOptions co;
  co.min_path_prob = 0.0;
  sp::CorpusProposer corpus(std::make_shared<const sp::CorpusTable>(std::move(b).finish(2)), co);
  check_joint(corpus, target, params(1.0f), 3, kDraws);
}

TEST(DecoderDistribution, ProposerChainMixedBatchFirstTwoTokensMatchTarget) {
  auto target = tiny_model(27, kVocab);
  NgramThenDraft f(28, kVocab);
  sp::ProposerChain& chain = f.chain;
  // Even requests repeat "1 5" (the n-gram drafts "2 7 3": deterministic drafts); odd requests repeat nothing (the draft
  // model drafts with its distributions). Both kinds share every verification step.
  const std::vector<std::int64_t> prompts[2] = {{1, 5, 2, 7, 3, 1, 5}, {1, 5, 2, 7}};
  const auto params1 = params(1.0f);
  const std::int64_t V = kVocab;
  std::vector<double> pi[2] = {joint_reference(target, prompts[0], params1), joint_reference(target, prompts[1], params1)};
  std::vector<std::int64_t> count[2] = {std::vector<std::int64_t>(pi[0].size()), std::vector<std::int64_t>(pi[1].size())};
  sd::DecoderOptions o;
  o.num_speculative_tokens = 3;
  o.calibrate = false;
  sd::SpeculativeDecoder dec(chain, target, o);
  constexpr std::int64_t kPerCall = 500;
  const std::int64_t n = 2 * kDraws;
  for (std::int64_t start = 0; start < n; start += kPerCall) {
    std::vector<sd::GenerationRequest> rs;
    for (std::int64_t i = start; i < std::min(n, start + kPerCall); ++i) {
      auto r = make_request(prompts[i % 2], 2);
      r.params = params1;
      r.params.seed = 0x5EED0000ull + static_cast<std::uint64_t>(i);
      rs.push_back(r);
    }
    const auto results = dec.generate(rs);
    for (std::size_t j = 0; j < results.size(); ++j) {
      ASSERT_EQ(results[j].tokens.size(), 2u);
      ++count[(start + static_cast<std::int64_t>(j)) % 2][static_cast<std::size_t>(results[j].tokens[0] * V + results[j].tokens[1])];
    }
  }
  EXPECT_GT(chain.drafted_by(0), 0);
  EXPECT_GT(chain.drafted_by(1), 0);
  EXPECT_GT(dec.metrics().total.accepted, 0);
  for (int k = 0; k < 2; ++k) {
    expect_within_six_sigma(count[k], pi[k], kDraws, V, "prompt " + std::to_string(k) + " ");
  }
}

// A proposer whose confidences are scaled by `factor` (capped at 1): still a function of each step's draft distribution,
// not of the draw, so a chain may choose by it.
template <class P>
struct ScaledConfidence {
  P* p;
  float factor;
  void begin_request(const sp::RequestContext& c) { p->begin_request(c); }
  void end_request(sp::RequestId id) { p->end_request(id); }
  void observe(std::span<const sp::StepFeedback> f) { p->observe(f); }
  bool reports_confidence() const { return true; }
  std::int64_t vocab_size() const { return p->vocab_size(); }
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> rs) {
    sp::DraftBatch d = p->propose(rs);
    for (float& c : d.confidence) c = std::min(1.0f, c * factor);
    return d;
  }
};

// ChainSelection::kMostExpected on a prompt whose "1 5" the n-gram continues: each step the n-gram's deterministic draft
// (valued by the acceptance this request has seen so far) or the draft model's sampled draft (valued by its first
// confidence, doubled so that both win: the n-gram the first step, then either, by what the first step emitted),
// whichever is worth more; three tokens, the first two counted. The choice never looks at the draws or the target's next
// tokens, so the joint law holds.
TEST(DecoderDistribution, ProposerChainMostExpectedFirstTwoTokensMatchTarget) {
  auto target = tiny_model(31, kVocab);
  auto draft_model = tiny_model(32, kVocab);
  sp::NgramProposer ngram;
  sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
  ScaledConfidence<sp::DraftModelProposer<sm::LlamaModel>> scaled{&draft, 2.0f};
  sp::ChainOptions co;
  co.selection = sp::ChainSelection::kMostExpected;
  sp::ProposerChain chain(co);
  chain.add(ngram, "ngram").add(scaled, "draft");
  check_joint(chain, target, params(1.0f), 1, kDraws, {1, 5, 2, 7, 3, 1, 5}, specdec::VerifyMethod::kToken, 3);
  EXPECT_GT(chain.drafted_by(0), kDraws / 10);
  EXPECT_GT(chain.drafted_by(1), kDraws / 10);
}

// A draft model of another vocabulary (token-level intersection): 6 of the target's 12 tokens shared, the draft writing
// each of the target's own tokens as two of its 4 extra ones. Its drafts are shared tokens only, with q on the target's
// vocabulary; the joint law of the first two tokens holds.
TEST(DecoderDistribution, CrossVocabDraftFirstTwoTokensMatchTarget) {
  auto target = tiny_model(33, kVocab);
  const CrossVocabPair pair{kVocab, 6, 4};
  auto draft_model = tiny_model(34, pair.draft_vocab());
  // With SLEM on, as the CLI runs it: sampled requests still draft by intersection.
  sp::CrossVocabDraftProposer<sm::LlamaModel> p(draft_model, pair.bridge(), pair.retokenize(), {}, pair.to_target());
  const auto m = check_joint(p, target, params(1.0f), 3, kDraws, {1, 5, 2, 7, 3, 1, 5});
  EXPECT_GT(m.total.accepted, 0);
}

// Requests of one batch naming their own members and order (GenerationRequest::proposers) on one prompt whose "1 5"
// the n-gram continues: the chain's order (n-gram drafts), the draft model alone (its sampled drafts, though the lookup
// would draft), the draft model then the n-gram, and the n-gram alone. Every order keeps the target's joint law of the
// first two tokens.
TEST(DecoderDistribution, ProposerChainPerRequestOrdersFirstTwoTokensMatchTarget) {
  auto target = tiny_model(29, kVocab);
  NgramThenDraft f(30, kVocab);
  sp::ProposerChain& chain = f.chain;
  const std::vector<std::vector<std::string>> orders = {{}, {"draft"}, {"draft", "ngram"}, {"ngram"}};
  check_joint(chain, target, params(1.0f), 3, kDraws, {1, 5, 2, 7, 3, 1, 5}, specdec::VerifyMethod::kToken, 2, {},
              [&](sd::GenerationRequest& r, std::int64_t i) { r.proposers = orders[static_cast<std::size_t>(i) % orders.size()]; });
  EXPECT_GT(chain.drafted_by(0), 0);
  EXPECT_GT(chain.drafted_by(1), 0);
}

}  // namespace
