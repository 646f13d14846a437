// DraftModelProposer: draft cache in step with the accepted prefix, deterministic drafts, probs rows, vocabulary check.
#include <gtest/gtest.h>

#include "common.hpp"
#include "specdec/torch/rows.hpp"
#include "specdec/proposers/process_logits.hpp"

namespace {

using namespace specdec::test;

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
  sp::RequestContext c{1, ctx, &params, nullptr};
  p.begin_request(c);
  sp::ProposeRequest r{1, ctx, &params, 4, 2, {}};
  const auto d = p.propose(std::span(&r, 1));
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

TEST(DraftModel, DraftSeedIsNotTheVerifierSeed) {
  EXPECT_NE(sp::draft_seed(0), 0u);
  EXPECT_NE(sp::draft_seed(1), sp::draft_seed(2));
  EXPECT_EQ(sp::draft_seed(12345), sp::draft_seed(12345));
}

}  // namespace
