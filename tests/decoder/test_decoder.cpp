// SpeculativeDecoder: greedy equivalence with autoregressive decoding for every proposer, KV caches in step, determinism across
// batch compositions, stop conditions, metrics and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "common.hpp"

namespace {

using namespace specdec::test;
using Decoder = sd::SpeculativeDecoder<sp::NoProposer, sm::LlamaModel>;

std::vector<sd::GenerationRequest> batch_requests(std::int64_t batch, std::int64_t vocab, std::int64_t max_new,
                                                  float temperature = 0.0f) {
  std::vector<sd::GenerationRequest> rs;
  for (std::int64_t b = 0; b < batch; ++b)
    rs.push_back(make_request(make_prompt(3 + 5 * b, vocab, static_cast<std::uint64_t>(b)), max_new, temperature,
                              1000 + static_cast<std::uint64_t>(b)));
  return rs;
}

std::vector<std::vector<std::int64_t>> baseline(sm::LlamaModel& target, const std::vector<sd::GenerationRequest>& rs) {
  sp::NoProposer none;
  Decoder dec(none, target);
  std::vector<std::vector<std::int64_t>> out;
  for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
  return out;
}

TEST(Decoder, BaselineIsGreedyDecoding) {
  auto target = tiny_model(1);
  const auto rs = batch_requests(3, 64, 12);
  const auto base = baseline(target, rs);
  for (std::size_t b = 0; b < rs.size(); ++b) EXPECT_EQ(base[b], reference_greedy(target, rs[b].prompt, 12)) << b;
}

TEST(Decoder, GreedyDraftModelEqualsAutoregressive) {
  auto target = tiny_model(1);
  auto same = tiny_model(1);     // an identical draft: everything accepted
  auto other = tiny_model(77);   // an unrelated draft: mostly rejected, still exact
  for (std::int64_t batch : {1, 3, 8}) {
    const auto rs = batch_requests(batch, 64, 20);
    const auto base = baseline(target, rs);
    for (auto* draft_model : {&same, &other}) {
      for (int g : {1, 2, 4, 8}) {
        sp::DraftModelProposer<sm::LlamaModel> draft(*draft_model);
        sd::DecoderOptions o;
        o.num_speculative_tokens = g;
        sd::SpeculativeDecoder dec(draft, target, o);
        const auto res = dec.generate(rs);
        for (std::size_t b = 0; b < rs.size(); ++b)
          EXPECT_EQ(res[b].tokens, base[b]) << "batch " << batch << " g " << g << " request " << b
                                            << (draft_model == &same ? " (same draft)" : " (other draft)");
        if (draft_model == &same) {
          EXPECT_NEAR(dec.metrics().total.acceptance_rate(), 1.0, 1e-9) << g;
        }
        EXPECT_EQ(target.cache().num_slots() >= 1, true);
      }
    }
  }
}

TEST(Decoder, GreedyNgramEqualsAutoregressive) {
  auto target = tiny_model(2);
  for (std::int64_t batch : {1, 2, 5, 8}) {
    const auto rs = batch_requests(batch, 64, 24);
    const auto base = baseline(target, rs);
    for (int g : {1, 2, 4, 8}) {
      for (int candidates : {1, 3}) {  // 3: trees of n-gram matches as siblings
        sp::NgramOptions no;
        no.num_candidates = candidates;
        no.min_n = 1;
        no.max_n = 3;
        sp::NgramProposer ngram(no);
        for (bool adaptive : {false, true}) {  // exactly g drafts a step, and the default draft-length policy
          sd::DecoderOptions o;
          o.num_speculative_tokens = g;
          o.adaptive.enabled = adaptive;
          sd::SpeculativeDecoder dec(ngram, target, o);
          const auto res = dec.generate(rs);
          for (std::size_t b = 0; b < rs.size(); ++b)
            EXPECT_EQ(res[b].tokens, base[b])
                << "batch " << batch << " g " << g << " candidates " << candidates << " adaptive " << adaptive << " request " << b;
          if (batch == 8 && g == 4 && !adaptive) {
            EXPECT_GT(dec.metrics().total.accepted, 0) << "no n-gram draft was ever accepted";
          }
        }
      }
    }
  }
}

/// A proposer that returns a fixed-shape tree: two children of the root (the target's argmax and another token), each with a
/// chain below it. Checks the tree path of the decoder (forward with parents, tree verification, keep_path).
struct TwoBranchProposer {
  static constexpr bool supports_trees = true;
  sm::LlamaModel* oracle;  // the target's weights (a separate instance) to make one branch right
  void begin_request(const sp::RequestContext&) {}
  void end_request(sp::RequestId) {}
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> reqs) {
    sp::DraftBatch d;
    for (const auto& r : reqs) {
      std::vector<std::int64_t> ctx(r.context.begin(), r.context.end());
      const auto g = std::min<std::int32_t>(r.max_drafts, 3);
      if (g == 0) {
        d.append({});
        continue;
      }
      const auto right = reference_greedy(*oracle, ctx, g);
      std::vector<std::int64_t> toks, parents;
      // branch A: a wrong first token (right + 1) with a chain; branch B: the right chain (the second child of the root)
      toks.push_back((right[0] + 1) % oracle->vocab_size());
      parents.push_back(0);
      for (std::int32_t i = 0; i < g; ++i) {
        toks.push_back(right[static_cast<std::size_t>(i)]);
        parents.push_back(i == 0 ? 0 : static_cast<std::int64_t>(toks.size()) - 1);
      }
      d.append(toks, parents);
    }
    return d;
  }
  void observe(std::span<const sp::StepFeedback> fb) {
    for (const auto& f : fb) last_nodes.assign(f.accepted_nodes.begin(), f.accepted_nodes.end());
  }
  std::vector<std::int64_t> last_nodes;
};

TEST(Decoder, GreedyTreeEqualsAutoregressive) {
  auto target = tiny_model(3);
  auto oracle = tiny_model(3);
  const auto rs = batch_requests(3, 64, 14);
  const auto base = baseline(target, rs);
  TwoBranchProposer p{&oracle, {}};
  sd::DecoderOptions o;
  o.num_speculative_tokens = 3;
  o.adaptive.enabled = false;  // every step drafts the full tree (the policy would skip drafts as costly as the target)
  sd::SpeculativeDecoder dec(p, target, o);
  const auto res = dec.generate(rs);
  for (std::size_t b = 0; b < rs.size(); ++b) EXPECT_EQ(res[b].tokens, base[b]) << b;
  EXPECT_GT(dec.metrics().total.accepted, 0);
  // every step accepts the right branch whole (3 drafts + bonus) except where max_new_tokens cuts it short
  EXPECT_GT(dec.metrics().total.mean_accepted_length(), 3.0);
}

TEST(Decoder, KvCachesEqualRecomputationAfterEveryStep) {
  auto target = tiny_model(4);
  auto draft_model = tiny_model(5);
  auto target_ref = tiny_model(4);
  auto draft_ref = tiny_model(5);
  sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
  sd::DecoderOptions o;
  o.num_speculative_tokens = 3;
  sd::SpeculativeDecoder dec(draft, target, o);
  std::vector<sd::RequestId> ids;
  for (auto& r : batch_requests(4, 64, 16, 1.0f)) ids.push_back(dec.add_request(r));
  int steps = 0;
  while (!dec.idle()) {
    dec.step();
    ++steps;
    for (auto id : ids) {
      if (dec.num_running() == 0) break;
      std::vector<std::int64_t> ctx;
      try {
        auto c = dec.context(id);
        ctx.assign(c.begin(), c.end());
      } catch (const specdec::error&) {
        continue;  // finished
      }
      EXPECT_EQ(target.sequence_length(dec.target_slot(id)), static_cast<std::int64_t>(ctx.size()) - 1);
      const at::Tensor a = cached_next_logits(target, dec.target_slot(id), ctx);
      const at::Tensor b = fresh_next_logits(target_ref, ctx);
      EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-4)) << "target cache, request " << id << " step " << steps;
      const auto ds = draft.slot(id);
      EXPECT_LE(draft_model.sequence_length(ds), static_cast<std::int64_t>(ctx.size()) - 1);
      EXPECT_GE(draft_model.sequence_length(ds), static_cast<std::int64_t>(ctx.size()) - 2);
      const at::Tensor c = cached_next_logits(draft_model, ds, ctx);
      const at::Tensor d = fresh_next_logits(draft_ref, ctx);
      EXPECT_TRUE(at::allclose(c, d, 1e-4, 1e-4)) << "draft cache, request " << id << " step " << steps;
    }
  }
  EXPECT_GT(steps, 3);
}

TEST(Decoder, SameSeedSameTokensWhateverTheBatch) {
  auto target = tiny_model(6);
  auto draft_model = tiny_model(7);
  auto run = [&](const std::vector<sd::GenerationRequest>& rs, int g) {
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    sd::DecoderOptions o;
    o.num_speculative_tokens = g;
    sd::SpeculativeDecoder dec(draft, target, o);
    return dec.generate(rs);
  };
  auto rs = batch_requests(5, 64, 16, 0.8f);
  rs[2].params.top_k = 10;
  rs[3].params.top_p = 0.9f;
  rs[4].params.min_p = 0.05f;
  for (int g : {0, 3}) {
    const auto together = run(rs, g);
    for (std::size_t b = 0; b < rs.size(); ++b) {
      const auto alone = run({rs[b]}, g);
      EXPECT_EQ(alone[0].tokens, together[b].tokens) << "g " << g << " request " << b;
      auto others = rs;  // a different batch around it
      std::rotate(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(b), others.end());
      others.resize(2);
      others[1].params.seed += 99;
      const auto mixed = run(others, g);
      EXPECT_EQ(mixed[0].tokens, together[b].tokens) << "g " << g << " request " << b;
    }
  }
}

TEST(Decoder, StopTokensStopStringsAndStreaming) {
  auto target = tiny_model(8);
  auto base = baseline(target, {make_request(make_prompt(7, 64, 3), 20)})[0];
  ASSERT_EQ(base.size(), 20u);
  sp::NgramProposer ngram;
  sd::DecoderOptions o;
  o.num_speculative_tokens = 4;
  o.detokenize = [](std::int64_t t) { return "<" + std::to_string(t) + ">"; };
  sd::SpeculativeDecoder dec(ngram, target, o);
  // stop token: the first occurrence of base[9]
  auto r1 = make_request(make_prompt(7, 64, 3), 20);
  r1.stop_token_ids = {base[9]};
  // stop string spanning two tokens
  auto r2 = make_request(make_prompt(7, 64, 3), 20);
  r2.stop_strings = {std::to_string(base[4]) + "><" + std::to_string(base[5]) + ">"};
  auto r3 = make_request(make_prompt(7, 64, 3), 5);
  std::map<sd::RequestId, std::vector<std::int64_t>> streamed;
  std::map<sd::RequestId, int> finished_calls;
  const auto res = dec.generate(std::vector{r1, r2, r3}, [&](sd::RequestId id, std::span<const std::int64_t> t, bool fin) {
    streamed[id].insert(streamed[id].end(), t.begin(), t.end());
    finished_calls[id] += fin ? 1 : 0;
  });
  const auto first = static_cast<std::size_t>(std::find(base.begin(), base.end(), base[9]) - base.begin());
  EXPECT_EQ(res[0].tokens, std::vector<std::int64_t>(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  EXPECT_EQ(res[0].finish_reason, sd::FinishReason::kStopToken);
  EXPECT_EQ(res[1].finish_reason, sd::FinishReason::kStopString);
  EXPECT_LE(res[1].tokens.size(), 6u);
  EXPECT_EQ(res[1].tokens, std::vector<std::int64_t>(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(res[1].tokens.size())));
  EXPECT_EQ(res[2].tokens, std::vector<std::int64_t>(base.begin(), base.begin() + 5));
  EXPECT_EQ(res[2].finish_reason, sd::FinishReason::kLength);
  for (const auto& r : res) {
    EXPECT_EQ(streamed[r.id], r.tokens);
    EXPECT_EQ(finished_calls[r.id], 1);
  }
}

TEST(Decoder, Metrics) {
  auto target = tiny_model(9);
  auto same = tiny_model(9);
  sp::DraftModelProposer<sm::LlamaModel> draft(same);
  sd::DecoderOptions o;
  o.num_speculative_tokens = 4;
  o.adaptive.enabled = false;  // g = 4 every step
  sd::SpeculativeDecoder dec(draft, target, o);
  const auto rs = batch_requests(2, 64, 40);
  const auto res = dec.generate(rs);
  const auto& m = dec.metrics();
  EXPECT_EQ(m.total.emitted, 80);
  EXPECT_NEAR(m.total.acceptance_rate(), 1.0, 1e-9);
  EXPECT_NEAR(m.total.mean_accepted_length(), 5.0, 0.5);  // g + 1 except where max_new_tokens cuts a step short
  EXPECT_NEAR(m.mean_gamma(), 4.0, 0.5);
  EXPECT_GT(m.one_token_forward_seconds(), 0.0);
  EXPECT_GT(m.cost_ratio(), 0.0);
  EXPECT_GT(m.verify_cost_ratio(), 0.0);
  EXPECT_GT(m.tokens_per_second(), 0.0);
  EXPECT_GT(m.theoretical_speedup(), 0.0);
  EXPECT_EQ(m.total.proposed_at.size(), 4u);
  for (double a : m.total.acceptance_by_position()) EXPECT_NEAR(a, 1.0, 1e-9);
  EXPECT_EQ(res[0].metrics.emitted, 40);
  EXPECT_EQ(m.total.target_forwards, res[0].metrics.target_forwards + res[1].metrics.target_forwards);
  EXPECT_EQ(m.steps, std::max(res[0].metrics.target_forwards, res[1].metrics.target_forwards));
}

TEST(Decoder, BadInputIsRefusedCleanly) {
  auto target = tiny_model(10);
  sp::NgramProposer ngram;
  sd::SpeculativeDecoder dec(ngram, target);
  auto expect_error = [&](sd::GenerationRequest r, const std::string& needle) {
    try {
      dec.add_request(r);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(dec.num_running(), 0u);
  };
  expect_error(make_request({}, 4), "prompt");
  expect_error(make_request({1, 2, 64}, 4), "prompt[2]");
  expect_error(make_request({1, -1}, 4), "prompt[1]");
  expect_error(make_request({1, 2}, 0), "max_new_tokens");
  auto r = make_request({1, 2}, 4);
  r.num_speculative_tokens = -2;
  expect_error(r, "num_speculative_tokens");
  r = make_request({1, 2}, 4);
  r.params.temperature = -1;
  expect_error(r, "temperature");
  r = make_request({1, 2}, 4);
  r.stop_strings = {"x"};
  expect_error(r, "detokenize");
  sd::DecoderOptions o;
  o.num_speculative_tokens = -1;
  EXPECT_THROW((sd::SpeculativeDecoder(ngram, target, o)), specdec::error);
  // generate with one bad request among good ones: nothing runs, nothing is left behind
  std::vector<sd::GenerationRequest> rs{make_request({1, 2, 3}, 4), make_request({}, 4)};
  EXPECT_THROW(dec.generate(rs), specdec::error);
  EXPECT_EQ(dec.num_running(), 0u);
  // and the decoder still works
  const auto ok = dec.generate(std::vector{make_request({1, 2, 3}, 4)});
  EXPECT_EQ(ok[0].tokens.size(), 4u);
}

TEST(Decoder, DraftVocabularyMismatchIsAnError) {
  auto target = tiny_model(11, 64);
  auto draft_model = tiny_model(12, 80);
  sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
  try {
    sd::SpeculativeDecoder dec(draft, target);
    ADD_FAILURE() << "no error";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary has 80 tokens but the target's has 64"), std::string::npos) << e.what();
  }
  EXPECT_THROW((sp::DraftModelProposer<sm::LlamaModel>(draft_model, 64)), specdec::error);
}

TEST(Decoder, ProposerReturningTooManyDraftsIsAnError) {
  struct Greedy {
    void begin_request(const sp::RequestContext&) {}
    void end_request(sp::RequestId) {}
    sp::DraftBatch propose(std::span<const sp::ProposeRequest> reqs) {
      sp::DraftBatch d;
      for (const auto& r : reqs) d.append(std::vector<std::int64_t>(static_cast<std::size_t>(r.max_drafts) + 1, 1));
      return d;
    }
    void observe(std::span<const sp::StepFeedback>) {}
  } p;
  auto target = tiny_model(13);
  sd::SpeculativeDecoder dec(p, target);
  dec.add_request(make_request({1, 2, 3}, 8));
  try {
    dec.step();
    ADD_FAILURE() << "no error";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("expected at most max_drafts"), std::string::npos) << e.what();
  }
}

TEST(Decoder, StopsAtTheTargetsContextLength) {
  static_assert(sm::HasMaxSequenceLength<sm::LlamaModel>);
  auto c = tiny_config();
  c.max_position_embeddings = 24;
  sm::LlamaOptions lo;
  lo.initial_cache_capacity = 8;
  auto target = sm::LlamaModel::random(c, 21, lo);
  ASSERT_EQ(target.max_sequence_length(), 24);
  const auto prompt = make_prompt(7, 64, 5);
  const auto want = reference_greedy(target, prompt, 24 - 7);  // every position the window holds
  for (int g : {0, 3, 8}) {  // drafts are cut so a verification never writes past the window
    sp::NgramOptions no;
    no.min_n = 1;
    no.max_n = 2;
    sp::NgramProposer ngram(no);
    sd::DecoderOptions o;
    o.num_speculative_tokens = g;
    sd::SpeculativeDecoder dec(ngram, target, o);
    const auto res = dec.generate(std::vector{make_request(prompt, 100)});
    EXPECT_EQ(res[0].finish_reason, sd::FinishReason::kLength) << g;
    EXPECT_EQ(res[0].tokens, want) << g;  // prompt + generated == the context length, greedy tokens unchanged
  }
  // A prompt that leaves no room for a token is refused, naming the limit; a forward past the window is an error too.
  sp::NoProposer none;
  Decoder dec(none, target);
  try {
    dec.add_request(make_request(make_prompt(24, 64, 5), 4));
    ADD_FAILURE() << "no error";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("context length 24"), std::string::npos) << e.what();
  }
  const auto slot = target.allocate_sequence();
  EXPECT_THROW(target.forward(sm::make_chain_batch(slot, make_prompt(25, 64, 5))), specdec::error);
  EXPECT_EQ(target.sequence_length(slot), 0);
  target.free_sequence(slot);
  // LlamaOptions::context_length overrides the config's window.
  lo.context_length = 40;
  EXPECT_EQ(sm::LlamaModel::random(c, 21, lo).max_sequence_length(), 40);
}

}  // namespace
