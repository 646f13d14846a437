// DraftModelProposer: draft cache in step with the accepted prefix, deterministic drafts, probs rows, vocabulary check.
#include <gtest/gtest.h>

#include "common.hpp"
#include "specdec/torch/rows.hpp"
#include "specdec/proposers/process_logits.hpp"

namespace {

using namespace specdec::test;

// Begins request `id` on `ctx` and proposes up to g drafts for it (position = the context's length).
sp::DraftBatch begin_and_propose(sp::DraftModelProposer<sm::LlamaModel>& p, sp::RequestId id, const std::vector<std::int64_t>& ctx,
                                 const specdec::SamplingParams& params, std::int32_t g) {
  sp::RequestContext c{id, ctx, &params, nullptr};
  p.begin_request(c);
  sp::ProposeRequest r{id, ctx, &params, g, static_cast<std::int64_t>(ctx.size()), {}};
  return p.propose(std::span(&r, 1));
}

TEST(DraftModel, DraftsAreDeterministicAndProbsAreProcessedRows) {
  auto m = tiny_model(31);
  sp::DraftModelProposer<sm::LlamaModel> p(m);
  const std::vector<std::int64_t> ctx{3, 4, 5, 6};
  specdec::SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 5;
  params.seed = 42;
  for (int rep = 0; rep < 2; ++rep) {
    sp::RequestContext c{7, ctx, &params, nullptr};
    p.begin_request(c);
    EXPECT_EQ(m.sequence_length(p.slot(7)), 3);
    sp::ProposeRequest r{7, ctx, &params, 3, 4, {}};
    const auto d = p.propose(std::span(&r, 1));
    ASSERT_EQ(d.token_ids.size(), 3u);
    ASSERT_TRUE(d.probs.is_host_float32());
    const at::Tensor probs = specdec::torch::tensor_of(d.probs);
    ASSERT_EQ(probs.size(0), 3);
    // row 0 is the processed distribution after the context
    const specdec::SamplingParams* pp[] = {&params};
    const at::Tensor ref = specdec::torch::tensor_of(sp::process_logits(specdec::torch::rows_of(fresh_next_logits(m, ctx).unsqueeze(0).contiguous()), pp))[0];
    EXPECT_TRUE(at::allclose(probs[0], ref, 1e-5, 1e-6));
    EXPECT_EQ((probs > 0).sum(1).max().item<std::int64_t>(), 5);  // top-k 5
    for (int i = 0; i < 3; ++i) EXPECT_GT(probs[i][d.token_ids[static_cast<std::size_t>(i)]].item<float>(), 0.0f);
    static std::vector<std::int64_t> first;
    if (rep == 0) first = d.token_ids;
    else EXPECT_EQ(d.token_ids, first);
    EXPECT_EQ(m.sequence_length(p.slot(7)), 6);  // ctx + d1 + d2
    // one draft accepted, then an emitted token: the cache rolls back to ctx + d1
    std::vector<std::int64_t> next = ctx;
    next.push_back(d.token_ids[0]);
    next.push_back(9);
    const std::int64_t nodes[] = {1};
    sp::StepFeedback f;
    f.id = 7;
    f.num_drafts = 3;
    f.num_accepted = 1;
    f.accepted_nodes = nodes;
    f.emitted_token = 9;
    f.context = next;
    p.observe(std::span(&f, 1));
    EXPECT_EQ(m.sequence_length(p.slot(7)), 5);
    p.end_request(7);
  }
}

TEST(DraftModel, GreedyDraftsAreArgmax) {
  auto m = tiny_model(32);
  sp::DraftModelProposer<sm::LlamaModel> p(m);
  const std::vector<std::int64_t> ctx{1, 2};
  specdec::SamplingParams params;
  params.temperature = 0;
  const auto d = begin_and_propose(p, 1, ctx, params, 4);
  EXPECT_EQ(d.token_ids, reference_greedy(m, ctx, 4));
}

TEST(DraftModel, ErrorsAreClear) {
  auto m = tiny_model(33, 64);
  try {
    sp::DraftModelProposer<sm::LlamaModel> p(m, 100);
    ADD_FAILURE();
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary has 64 tokens but the target's has 100"), std::string::npos);
  }
  sp::DraftModelProposer<sm::LlamaModel> p(m);
  specdec::SamplingParams params;
  sp::ProposeRequest r{3, {}, &params, 2, 0, {}};
  EXPECT_THROW(p.propose(std::span(&r, 1)), specdec::error);
  const std::vector<std::int64_t> ctx{1};
  sp::RequestContext c{3, ctx, &params, nullptr};
  p.begin_request(c);
  EXPECT_THROW(p.begin_request(c), specdec::error);
  EXPECT_EQ(m.sequence_length(p.slot(3)), 0);
}

// DraftModelOptions::output_ids: the draft's logits score a subset of the vocabulary (LlamaOptions::output_ids); greedy
// drafts are the subset's argmax, sampled ones come with q's rows over the whole vocabulary, 0 off the subset.
TEST(DraftModel, OutputIdsMapTheDraftsColumnsToTokens) {
  const std::vector<std::int64_t> ids = {40, 7, 63, 12, 0, 25, 33, 51, 19, 2};
  sm::LlamaOptions o;
  o.initial_cache_capacity = 64;
  o.initial_cache_slots = 4;
  auto whole = sm::LlamaModel::random(tiny_config(64, 2), 35, o);
  o.output_ids = ids;
  auto part = sm::LlamaModel::random(tiny_config(64, 2), 35, o);
  sp::DraftModelOptions d;
  d.output_ids = ids;
  sp::DraftModelProposer<sm::LlamaModel> p(part, 64, d);
  const std::vector<std::int64_t> ctx{3, 4, 5, 6, 44};  // 44, 3, ...: inputs outside the subset
  const at::Tensor cols = at::tensor(ids, at::kLong);
  // The whole model's logits with every token off the subset at -inf: what the subset's drafts are drawn from.
  auto restricted = [&](const std::vector<std::int64_t>& c) {
    const at::Tensor l = fresh_next_logits(whole, c);
    at::Tensor r = at::full_like(l, -std::numeric_limits<float>::infinity());
    r.index_put_({cols}, l.index_select(0, cols));
    return r;
  };
  specdec::SamplingParams greedy;
  greedy.temperature = 0;
  const auto g = begin_and_propose(p, 1, ctx, greedy, 3);
  ASSERT_EQ(g.token_ids.size(), 3u);
  std::vector<std::int64_t> c = ctx;
  for (const auto t : g.token_ids) {
    EXPECT_EQ(t, restricted(c).argmax().item<std::int64_t>());
    c.push_back(t);
  }
  p.end_request(1);

  specdec::SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.seed = 8;
  const auto s = begin_and_propose(p, 2, ctx, sampled, 2);
  ASSERT_EQ(s.token_ids.size(), 2u);
  const at::Tensor probs = specdec::torch::tensor_of(s.probs);
  ASSERT_EQ(probs.sizes(), (std::vector<std::int64_t>{2, 64}));
  const specdec::SamplingParams* pp[] = {&sampled};
  const at::Tensor ref =
      specdec::torch::tensor_of(sp::process_logits(specdec::torch::rows_of(restricted(ctx).unsqueeze(0).contiguous()), pp))[0];
  EXPECT_TRUE(at::allclose(probs[0], ref, 1e-5, 1e-6));
  EXPECT_EQ((probs > 0).sum().item<std::int64_t>() , (probs.index_select(1, cols) > 0).sum().item<std::int64_t>());
  for (int i = 0; i < 2; ++i) {
    const std::int64_t t = s.token_ids[static_cast<std::size_t>(i)];
    EXPECT_NE(std::find(ids.begin(), ids.end(), t), ids.end());
    EXPECT_GT(probs[i][t].item<float>(), 0.0f);
  }
  p.end_request(2);

  // Bad maps: errors naming the option, at construction (bad ids) or at the first forward (a map the logits do not fit).
  for (const auto& bad : {std::vector<std::int64_t>{1, 64}, std::vector<std::int64_t>{5, 5}}) {
    sp::DraftModelOptions b;
    b.output_ids = bad;
    try {
      sp::DraftModelProposer<sm::LlamaModel> q(part, b);
      ADD_FAILURE() << "no error";
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find("output_ids"), std::string::npos) << e.what();
    }
  }
  sp::DraftModelProposer<sm::LlamaModel> unmapped(part);  // 10 columns, no map
  try {
    (void)begin_and_propose(unmapped, 3, ctx, greedy, 1);
    ADD_FAILURE() << "no error";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("10 columns, expected 64"), std::string::npos) << e.what();
  }
}

TEST(DraftModel, DraftSeedIsNotTheVerifierSeed) {
  EXPECT_NE(sp::draft_seed(0), 0u);
  EXPECT_NE(sp::draft_seed(1), sp::draft_seed(2));
  EXPECT_EQ(sp::draft_seed(12345), sp::draft_seed(12345));
}

}  // namespace
