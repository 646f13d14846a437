// The tensor front: same tokens as the core, and a clear error for every bad input.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/tree.hpp"
#include "specdec/torch/rejection_sample.hpp"
#include "stats.hpp"

namespace specdec {
namespace {

using specdec::torch::rejection_sample;
using specdec::torch::tree_rejection_sample;

struct Inputs {
  at::Tensor ids, cu, q, p, seeds, positions, greedy, parents;
};

Inputs make_inputs(std::int64_t B, std::int64_t V, std::uint64_t seed, at::ScalarType id_type = at::kLong) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> cu = {0};
  for (std::int64_t b = 0; b < B; ++b) cu.push_back(cu.back() + static_cast<std::int64_t>(rng() % 6));
  const std::int64_t N = cu.back();
  std::vector<float> q, p;
  std::vector<std::int64_t> ids, parents;
  for (std::int64_t j = 0; j < N; ++j) {
    auto row = test::random_row(rng, V, 0.1, 0.5);
    ids.push_back(test::draw_from(rng, row));
    q.insert(q.end(), row.begin(), row.end());
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < cu[b + 1] - cu[b]; ++j) parents.push_back(static_cast<std::int64_t>(rng() % (j + 1)));
  for (std::int64_t r = 0; r < N + B; ++r) {
    auto row = test::random_row(rng, V, 0.1, 0.5);
    p.insert(p.end(), row.begin(), row.end());
  }
  std::vector<std::int64_t> seeds, pos;
  std::vector<std::uint8_t> greedy;
  for (std::int64_t b = 0; b < B; ++b) {
    seeds.push_back(static_cast<std::int64_t>(rng()));
    pos.push_back(static_cast<std::int64_t>(rng() % 4096));
    greedy.push_back(rng() % 4 == 0);
  }
  auto i64 = [](std::vector<std::int64_t> v) { return at::tensor(v, at::kLong); };
  Inputs in;
  in.ids = i64(ids).to(id_type);
  in.cu = i64(cu).to(id_type);
  in.q = at::tensor(q).reshape({N, V});
  in.p = at::tensor(p).reshape({N + B, V});
  in.seeds = i64(seeds);
  in.positions = i64(pos);
  in.greedy = at::tensor(std::vector<std::int64_t>(greedy.begin(), greedy.end())).to(at::kBool);
  in.parents = i64(parents).to(id_type);
  return in;
}

template <class IdT>
void expect_same_as_core(const Inputs& in, bool with_probs) {
  const auto r = rejection_sample(in.ids, in.cu, with_probs ? std::optional<at::Tensor>(in.q) : std::nullopt, in.p,
                                  in.seeds, in.positions, in.greedy);
  const std::int64_t B = in.cu.numel() - 1, V = in.p.size(1), stride = r.output_token_ids.size(1);
  const at::Tensor greedy_u8 = in.greedy.to(at::kByte);
  ChainVerifyArgs<IdT, IdT> a{B,
                              V,
                              in.cu.data_ptr<IdT>(),
                              in.ids.data_ptr<IdT>(),
                              with_probs ? in.q.data_ptr<float>() : nullptr,
                              in.p.data_ptr<float>(),
                              reinterpret_cast<const std::uint64_t*>(in.seeds.data_ptr<std::int64_t>()),
                              in.positions.data_ptr<std::int64_t>(),
                              greedy_u8.data_ptr<std::uint8_t>(),
                              1.0f};
  std::vector<IdT> tokens(B * stride);
  std::vector<std::int32_t> n(B);
  std::vector<std::uint8_t> flags(in.ids.numel());
  ASSERT_TRUE(verify_chain(a, ChainVerifyOutputs<IdT>{tokens.data(), stride, n.data(), flags.data()}).ok());
  const IdT* got = r.output_token_ids.data_ptr<IdT>();
  for (std::int64_t i = 0; i < B * stride; ++i) ASSERT_EQ(got[i], tokens[i]) << i;
  for (std::int64_t b = 0; b < B; ++b) ASSERT_EQ(r.num_accepted.data_ptr<std::int32_t>()[b], n[b]);
  for (std::int64_t j = 0; j < in.ids.numel(); ++j) ASSERT_EQ(r.accepted.data_ptr<bool>()[j], flags[j] == 1);
}

TEST(TorchRejectionSample, SameTokensAsCoreInt64) {
  for (std::uint64_t s = 0; s < 6; ++s) expect_same_as_core<std::int64_t>(make_inputs(37, 1300, s), s % 2 == 0);
}

TEST(TorchRejectionSample, SameTokensAsCoreInt32) {
  for (std::uint64_t s = 0; s < 6; ++s) expect_same_as_core<std::int32_t>(make_inputs(64, 257, s, at::kInt), s % 2);
}

TEST(TorchRejectionSample, ParallelRunIsDeterministic) {
  const Inputs in = make_inputs(64, 5000, 9);
  const auto a = rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy);
  for (int threads : {1, 2, 4}) {
    at::set_num_threads(threads);
    const auto b = rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy);
    EXPECT_TRUE(at::equal(a.output_token_ids, b.output_token_ids)) << threads;
    EXPECT_TRUE(at::equal(a.num_accepted, b.num_accepted));
  }
}

TEST(TorchTreeRejectionSample, SameTokensAsCore) {
  const Inputs in = make_inputs(20, 700, 4);
  const auto r = tree_rejection_sample(in.ids, in.parents, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy);
  const std::int64_t B = 20, V = 700, stride = r.output_token_ids.size(1);
  const at::Tensor g = in.greedy.to(at::kByte);
  TreeVerifyArgs<std::int64_t> a{B, V, in.cu.data_ptr<std::int64_t>(), in.ids.data_ptr<std::int64_t>(),
                                 in.parents.data_ptr<std::int64_t>(), in.q.data_ptr<float>(), in.p.data_ptr<float>(),
                                 reinterpret_cast<const std::uint64_t*>(in.seeds.data_ptr<std::int64_t>()),
                                 in.positions.data_ptr<std::int64_t>(), g.data_ptr<std::uint8_t>()};
  std::vector<std::int64_t> tokens(B * stride), nodes(B * stride);
  std::vector<std::int32_t> n(B);
  ASSERT_TRUE(verify_tree(a, TreeVerifyOutputs<std::int64_t>{tokens.data(), stride, n.data(), nodes.data()}).ok());
  for (std::int64_t i = 0; i < B * stride; ++i) {
    ASSERT_EQ(r.output_token_ids.data_ptr<std::int64_t>()[i], tokens[i]);
    ASSERT_EQ(r.accepted_nodes.data_ptr<std::int64_t>()[i], nodes[i]);
  }
}

TEST(TorchRejectionSample, EmittedTokenDistributionThroughTensors) {
  // One request, K = 1, V = 5: the emitted first token ~ p_0 over seeds (6-sigma bound).
  const std::vector<float> p0 = {0.1f, 0.4f, 0.2f, 0.3f, 0.0f}, q0 = {0.3f, 0.1f, 0.1f, 0.1f, 0.4f};
  std::vector<float> p = p0;
  p.insert(p.end(), {0.2f, 0.2f, 0.2f, 0.2f, 0.2f});
  const int n = 20000, B = 1000;  // 20 calls of 1000 requests with distinct seeds
  std::vector<std::int64_t> counts(5);
  std::mt19937_64 rng(3);
  for (int call = 0; call < n / B; ++call) {
    std::vector<std::int64_t> ids, cu = {0}, seeds, pos(B, 0);
    std::vector<float> q_all, p_all;
    for (int b = 0; b < B; ++b) {
      ids.push_back(test::draw_from(rng, q0));
      cu.push_back(b + 1);
      seeds.push_back(call * B + b);
      q_all.insert(q_all.end(), q0.begin(), q0.end());
      p_all.insert(p_all.end(), p.begin(), p.end());
    }
    const auto r = rejection_sample(at::tensor(ids), at::tensor(cu), at::tensor(q_all).reshape({B, 5}),
                                    at::tensor(p_all).reshape({2 * B, 5}), at::tensor(seeds), at::tensor(pos));
    for (int b = 0; b < B; ++b) ++counts[r.output_token_ids[b][0].item<std::int64_t>()];
  }
  EXPECT_TRUE(test::matches_distribution(counts, test::as_double(p0)));
}

// ---- bad input: the message names the argument, the expectation and what was received ----

void expect_error(const std::function<void()>& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << message;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find(message), std::string::npos)
        << "got: " << e.what_without_backtrace() << "\nexpected to contain: " << message;
  }
}

class TorchErrors : public ::testing::Test {
 protected:
  Inputs in = make_inputs(3, 10, 1);
  void call(const Inputs& x, bool probs = true, bool greedy = false, double lenience = 1.0) {
    rejection_sample(x.ids, x.cu, probs ? std::optional<at::Tensor>(x.q) : std::nullopt, x.p, x.seeds, x.positions,
                     greedy ? std::optional<at::Tensor>(x.greedy) : std::nullopt, {lenience, true});
  }
};

TEST_F(TorchErrors, Dtypes) {
  Inputs x = in;
  x.ids = in.ids.to(at::kFloat);
  expect_error([&] { call(x); }, "draft_token_ids: expected int32 or int64, got Float");
  x = in;
  x.cu = in.cu.to(at::kShort);
  expect_error([&] { call(x); }, "cu_num_draft_tokens: expected int32 or int64, got Short");
  x = in;
  x.p = in.p.to(at::kDouble);
  expect_error([&] { call(x); }, "target_probs: expected float32 (on CPU), got Double");
  x = in;
  x.q = in.q.to(at::kHalf);
  expect_error([&] { call(x); }, "draft_probs: expected Float (the dtype of target_probs), got Half");
  x = in;
  x.seeds = in.seeds.to(at::kInt);
  expect_error([&] { call(x); }, "seeds: expected int64, got Int");
  x = in;
  x.positions = in.positions.to(at::kFloat);
  expect_error([&] { call(x); }, "positions: expected int64, got Float");
  x = in;
  x.greedy = in.greedy.to(at::kFloat);
  expect_error([&] { call(x, true, true); }, "greedy: expected bool or uint8, got Float");
}

TEST_F(TorchErrors, Shapes) {
  Inputs x = in;
  x.ids = in.ids.reshape({1, -1});
  expect_error([&] { call(x); }, "draft_token_ids: expected a 1-D tensor [N], got shape [1, ");
  x = in;
  x.p = in.p.flatten();
  expect_error([&] { call(x); }, "target_probs: expected a 2-D tensor [N + B, V], got shape [");
  x = in;
  x.p = in.p.narrow(0, 0, in.p.size(0) - 1).contiguous();
  expect_error([&] { call(x); }, "target_probs: expected N + B = ");
  x = in;
  x.q = in.q.narrow(1, 0, 9).contiguous();
  expect_error([&] { call(x); }, "draft_probs: expected shape [");
  x = in;
  x.seeds = in.seeds.narrow(0, 0, 2).contiguous();
  expect_error([&] { call(x); }, "seeds: expected 3 entries (one per request), got 2");
  x = in;
  x.positions = at::zeros({4}, at::kLong);
  expect_error([&] { call(x); }, "positions: expected 3 entries (one per request), got 4");
}

TEST_F(TorchErrors, Contiguity) {
  Inputs x = in;
  x.p = at::empty({in.p.size(1), in.p.size(0)}).t().copy_(in.p);
  expect_error([&] { call(x); }, "target_probs: expected a contiguous tensor, got strides [1, ");
  x = in;
  x.q = at::empty({in.q.size(1), in.q.size(0)}).t().copy_(in.q);
  ASSERT_GT(in.q.size(0), 1);
  expect_error([&] { call(x); }, "draft_probs: expected a contiguous tensor");
}

TEST_F(TorchErrors, RaggedConsistency) {
  Inputs x = in;
  x.cu = in.cu.clone();
  x.cu[0] = 1;
  expect_error([&] { call(x); }, "cu_num_draft_tokens: expected cu[0] == 0, got 1");
  x.cu = in.cu.clone();
  x.cu[1] = x.cu[2].item<std::int64_t>() + 1;
  expect_error([&] { call(x); }, "cu_num_draft_tokens: expected non-decreasing offsets");
  x.cu = in.cu.clone();
  x.cu[3] = x.cu[3].item<std::int64_t>() - 1;
  x.cu[2] = std::min(x.cu[2].item<std::int64_t>(), x.cu[3].item<std::int64_t>());
  x.cu[1] = std::min(x.cu[1].item<std::int64_t>(), x.cu[2].item<std::int64_t>());
  expect_error([&] { call(x); }, "cu_num_draft_tokens: expected cu[B] == N = ");
}

TEST_F(TorchErrors, TokenIdsOutOfRange) {
  Inputs x = in;
  x.ids = in.ids.clone();
  x.ids[0] = 10;
  expect_error([&] { call(x); }, "draft_token_ids: expected ids in [0, 10) (V of target_probs), got 10 at index 0");
  x.ids[0] = -2;
  expect_error([&] { call(x); }, "got -2 at index 0");
}

TEST_F(TorchErrors, BadProbabilities) {
  Inputs x = in;
  x.p = in.p.clone();
  x.p[2][3] = std::nanf("");
  expect_error([&] { call(x); }, "target_probs: expected finite, non-negative probabilities, got nan at [2, 3]");
  x.p = in.p.clone();
  x.p[1][0] = -0.25f;
  expect_error([&] { call(x); }, "target_probs: expected finite, non-negative probabilities, got -0.25 at [1, 0]");
  x.p = in.p.clone();
  x.p[4] = 0.0f;
  expect_error([&] { call(x); }, "target_probs: expected every row to have positive mass, row 4 is all zeros");
  x = in;
  x.q = in.q.clone();
  x.q[0][1] = std::numeric_limits<float>::infinity();
  expect_error([&] { call(x); }, "draft_probs: expected finite, non-negative probabilities, got inf at [0, 1]");
}

TEST_F(TorchErrors, OtherArguments) {
  Inputs x = in;
  x.positions = in.positions.clone();
  x.positions[1] = -1;
  expect_error([&] { call(x); }, "positions: expected values >= 0, got -1 for request 1");
  expect_error([&] { call(in, true, false, 0.0); }, "lenience: expected a value in (0, 1], got 0");
  expect_error([&] { call(in, true, false, 1.5); }, "lenience: expected a value in (0, 1], got 1.5");
  Inputs t = in;
  t.parents = in.parents.clone();
  ASSERT_GT(t.parents.numel(), 1);
  t.parents[1] = 5;
  expect_error([&] { tree_rejection_sample(t.ids, t.parents, t.cu, t.q, t.p, t.seeds, t.positions); },
               "parents: expected parents[1]");
  expect_error([&] { tree_rejection_sample(in.ids, in.parents.to(at::kInt), in.cu, in.q, in.p, in.seeds,
                                           in.positions); },
               "parents: expected Long (the dtype of draft_token_ids), got Int");
}

TEST_F(TorchErrors, UnscannedRowsStillCheckedWhereRead) {
  // With validate_probs off, a NaN in a row the verifier reads is still an error naming the request.
  Inputs x = make_inputs(2, 6, 5);
  x.q = at::zeros_like(x.q);
  const std::int64_t n0 = x.cu[1].item<std::int64_t>();
  for (std::int64_t j = 0; j < x.ids.numel(); ++j) x.q[j][x.ids[j].item<std::int64_t>()] = 1.0f;
  x.p = x.p.clone();
  x.p.fill_(0.0f);
  x.p.select(1, 0).fill_(std::nanf(""));
  ASSERT_GT(n0, 0);
  expect_error([&] { rejection_sample(x.ids, x.cu, x.q, x.p, x.seeds, x.positions, std::nullopt, {1.0, false}); },
               "rejection_sample: target_probs/draft_probs: expected finite, non-negative probabilities in the rows "
               "of request 0 at draft position 0");
}

}  // namespace
}  // namespace specdec
