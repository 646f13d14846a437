// CrossVocabDraftProposer (token-level intersection): the bridge between vocabularies, drafts only of shared tokens with
// q's rows on the target's vocabulary, the draft cache kept in step through re-tokenization, greedy output equal to plain
// decoding and sampled tokens independent of the batch; string-level exact match (SLEM) for greedy requests. The joint
// law is in tests/decoder/test_decoder_distribution.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common.hpp"
#include "cross_vocab_fixture.hpp"
#include "specdec/proposers/cross_vocab.hpp"
#include "specdec/torch/rows.hpp"

namespace {

using namespace specdec::test;
using Tokens = std::vector<std::int64_t>;

TEST(VocabBridge, MapsEqualTextsAndRefusesBadInput) {
  const std::vector<std::string> draft = {"a", "bc", "", "x", "a"}, target = {"x", "a", "a", "q", "bc"};
  const auto b = sp::VocabBridge::from_texts(draft, target);
  EXPECT_EQ(b.to_target, (Tokens{1, 4, -1, 0, 1}));  // "a" -> the lowest target id with its text; "" never bridged
  EXPECT_EQ(b.shared, 4);
  EXPECT_EQ(b.draft_is_text, (std::vector<std::uint8_t>{1, 1, 0, 1, 1}));  // all but ""
  EXPECT_EQ(b.target_vocab_size, 5);
  const std::uint8_t draft_usable[] = {1, 0, 1, 1, 1}, target_usable[] = {0, 1, 1, 1, 1};
  const auto c = sp::VocabBridge::from_texts(draft, target, draft_usable, target_usable);
  EXPECT_EQ(c.to_target, (Tokens{1, -1, -1, -1, 1}));
  EXPECT_EQ(c.draft_is_text, (std::vector<std::uint8_t>{1, 0, 0, 1, 1}));  // "x" is text, though no usable target has it
  const std::vector<std::string> none = {"p"};
  EXPECT_THROW((void)sp::VocabBridge::from_texts(none, target), specdec::error);
  const std::uint8_t two[] = {1, 1};
  EXPECT_THROW((void)sp::VocabBridge::from_texts(draft, target, two), specdec::error);
}

TEST(CrossVocabDraftProposer, DraftsSharedTokensWithRowsOnTheTargetVocabulary) {
  const CrossVocabPair pair{64, 32, 16};
  auto draft_model = tiny_model(8, pair.draft_vocab());
  sp::CrossVocabDraftProposer<sm::LlamaModel> p(draft_model, pair.bridge(), pair.retokenize());
  EXPECT_EQ(p.vocab_size(), 64);
  specdec::SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.seed = 3;
  const Tokens ctx = {1, 40, 7, 63, 2};  // 40 and 63 are the target's own: the draft sees 7 tokens
  sp::RequestContext rc;
  rc.id = 0;
  rc.context = ctx;
  rc.params = &sampled;
  p.begin_request(rc);
  sp::ProposeRequest r;
  r.id = 0;
  r.context = ctx;
  r.params = &sampled;
  r.max_drafts = 4;
  r.position = static_cast<std::int64_t>(ctx.size());
  const sp::DraftBatch d = p.propose(std::span(&r, 1));
  ASSERT_EQ(d.num_drafts(0), 4);
  ASSERT_TRUE(d.probs.is_host_float32());
  const at::Tensor probs = specdec::torch::tensor_of(d.probs);
  ASSERT_EQ(probs.size(1), 64);
  for (std::int64_t k = 0; k < 4; ++k) {
    EXPECT_LT(d.token_ids[static_cast<std::size_t>(k)], 32) << "only shared tokens are drafted";
    EXPECT_NEAR(probs[k].sum().item<double>(), 1.0, 1e-5);
    EXPECT_EQ(probs[k].narrow(0, 32, 32).sum().item<double>(), 0.0) << "no mass on tokens the draft cannot write";
    EXPECT_GT(probs[k][d.token_ids[static_cast<std::size_t>(k)]].item<double>(), 0.0);
  }
  EXPECT_EQ(draft_model.sequence_length(0), 7 + 3);  // the re-tokenized context and the drafts fed so far
  // The same call again gives the same drafts (the cache rolls back to what the new context shares with it).
  const sp::DraftBatch again = p.propose(std::span(&r, 1));
  EXPECT_EQ(again.token_ids, d.token_ids);
  EXPECT_TRUE(specdec::torch::tensor_of(again.probs).equal(probs));
  p.end_request(0);
  auto other = tiny_model(9, 10);
  EXPECT_THROW((sp::CrossVocabDraftProposer<sm::LlamaModel>(other, pair.bridge(), pair.retokenize())), specdec::error);
}

TEST(CrossVocabDraftProposer, StringLevelDraftsAreTheDraftsGreedyTextInTargetTokens) {
  const CrossVocabPair pair{64, 32, 16};
  const Tokens ctx = {1, 40, 7, 63, 2};
  const Tokens seen = pair.retokenize()(ctx);
  // A draft whose greedy text (47 35 27 0 47 35 2 12) writes target tokens of the target's own (63 = z15 z3).
  constexpr std::uint64_t kSeed = 151;
  // The draft's own greedy continuation over its whole vocabulary, from a fresh slot of the same model.
  Tokens greedy;
  {
    auto ref = tiny_model(kSeed, pair.draft_vocab());
    Tokens ids = seen;
    for (int k = 0; k < 8; ++k) {
      greedy.push_back(fresh_next_logits(ref, ids).argmax().item<std::int64_t>());
      ids.push_back(greedy.back());
    }
  }
  const auto to_target = pair.to_target();
  for (std::int32_t g : {1, 2, 4}) {
    // What SLEM drafts: the text of the fewest greedy draft tokens that writes more than g target tokens (at most 2g
    // draft tokens), without its last target token, at most g.
    Tokens expected;
    for (std::size_t k = 1; k <= 2 * static_cast<std::size_t>(g); ++k) {
      expected = to_target(std::span(greedy).first(k));
      if (expected.size() > static_cast<std::size_t>(g)) break;
    }
    if (!expected.empty()) expected.pop_back();
    if (expected.size() > static_cast<std::size_t>(g)) expected.resize(static_cast<std::size_t>(g));
    auto draft_model = tiny_model(kSeed, pair.draft_vocab());
    sp::CrossVocabDraftProposer<sm::LlamaModel> p(draft_model, pair.bridge(), pair.retokenize(), {}, to_target);
    EXPECT_TRUE(p.string_level_greedy());
    specdec::SamplingParams greedy_params;
    greedy_params.temperature = 0.0f;
    sp::RequestContext rc;
    rc.context = ctx;
    rc.params = &greedy_params;
    p.begin_request(rc);
    sp::ProposeRequest r;
    r.context = ctx;
    r.params = &greedy_params;
    r.max_drafts = g;
    r.position = static_cast<std::int64_t>(ctx.size());
    const sp::DraftBatch d = p.propose(std::span(&r, 1));
    EXPECT_EQ(d.token_ids, expected) << "g " << g;
    EXPECT_FALSE(d.probs.defined()) << "greedy drafts are deterministic";
    EXPECT_EQ(p.propose(std::span(&r, 1)).token_ids, expected) << "the cache rolls back to the context";
  }
  // The greedy text of this draft writes target tokens of the target's own (two draft tokens each) that token-level
  // intersection can never draft.
  const Tokens all = to_target(greedy);
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [&](std::int64_t t) { return t >= pair.shared; }))
      << "the fixture no longer exercises multi-token texts";
}

std::vector<Tokens> generate_with(sp::CrossVocabDraftProposer<sm::LlamaModel>& p, sm::LlamaModel& target,
                                  const std::vector<sd::GenerationRequest>& rs, int g) {
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  o.calibrate = false;
  sd::SpeculativeDecoder dec(p, target, o);
  std::vector<Tokens> out;
  for (auto& res : dec.generate(rs)) out.push_back(res.tokens);
  return out;
}

TEST(CrossVocabDraftProposer, GreedyOutputEqualsPlainDecodingAndSampledTokensDoNotDependOnTheBatch) {
  const CrossVocabPair pair{64, 32, 16};
  auto target = tiny_model(3);
  auto draft_model = tiny_model(8, pair.draft_vocab());
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 3; ++b) rs.push_back(make_request(make_prompt(14 + 4 * b, 64, static_cast<std::uint64_t>(b)), 24));
  std::vector<Tokens> expected;
  {
    sp::NoProposer none;
    sd::DecoderOptions o;
    o.num_speculative_tokens = 0;
    o.calibrate = false;
    sd::SpeculativeDecoder dec(none, target, o);
    for (auto& res : dec.generate(rs)) expected.push_back(res.tokens);
  }
  for (int g : {1, 4}) {
    sp::CrossVocabDraftProposer<sm::LlamaModel> p(draft_model, pair.bridge(), pair.retokenize());
    EXPECT_EQ(generate_with(p, target, rs, g), expected) << "g " << g;
    sp::CrossVocabDraftProposer<sm::LlamaModel> slem(draft_model, pair.bridge(), pair.retokenize(), {}, pair.to_target());
    EXPECT_EQ(generate_with(slem, target, rs, g), expected) << "string-level, g " << g;
  }
  std::vector<sd::GenerationRequest> sampled;
  for (int b = 0; b < 3; ++b)
    sampled.push_back(make_request(make_prompt(20, 64, static_cast<std::uint64_t>(b)), 16, 1.0f, 900 + static_cast<std::uint64_t>(b)));
  auto run = [&](const std::vector<sd::GenerationRequest>& batch) {
    sp::CrossVocabDraftProposer<sm::LlamaModel> p(draft_model, pair.bridge(), pair.retokenize());
    return generate_with(p, target, batch, 3);
  };
  const auto all = run(sampled);
  for (std::size_t b = 0; b < sampled.size(); ++b) EXPECT_EQ(run({sampled[b]})[0], all[b]) << b;
  // Greedy (string-level) and sampled (intersection) requests in one batch: each as alone, the greedy one as plain
  // decoding.
  std::vector<sd::GenerationRequest> mixed = {rs[0], sampled[1], rs[2], sampled[0]};
  sp::CrossVocabDraftProposer<sm::LlamaModel> both(draft_model, pair.bridge(), pair.retokenize(), {}, pair.to_target());
  const auto out = generate_with(both, target, mixed, 3);
  EXPECT_EQ(out[0], expected[0]);
  EXPECT_EQ(out[2], expected[2]);
  EXPECT_EQ(out[1], all[1]);
  EXPECT_EQ(out[3], all[0]);
}

}  // namespace
