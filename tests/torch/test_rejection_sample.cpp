// The tensor front: same tokens as the core, and a clear error for every bad input.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/tree.hpp"
// The deprecated probabilities-in entries, tested (or defined) here.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
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


TEST_F(TorchErrors, GreedyZeroMassRowWithoutScan) {
  // validate_probs off: the greedy row the verifier reads has no mass -> an error, not token 0.
  Inputs x = make_inputs(2, 6, 5);
  x.p = x.p.clone();
  const std::int64_t row = x.cu[1].item<std::int64_t>() + 1;  // request 1's first row
  x.p[row] = 0.0f;
  const at::Tensor greedy = at::ones({2}, at::kBool);
  expect_error([&] { rejection_sample(x.ids, x.cu, std::nullopt, x.p, x.seeds, x.positions, greedy, {1.0, false}); },
               "rejection_sample: target_probs: expected positive mass in the rows of request 1");
  expect_error([&] {
    tree_rejection_sample(x.ids, x.parents, x.cu, std::nullopt, x.p, x.seeds, x.positions, greedy, {1.0, false});
  }, "tree_rejection_sample: target_probs: expected positive mass in the rows of request 1");
}

TEST_F(TorchErrors, HasDraftProbs) {
  const at::Tensor flags = at::tensor(std::vector<std::int64_t>{1, 0, 1}).to(at::kBool);
  auto call_flags = [&](const std::optional<at::Tensor>& q, const at::Tensor& f) {
    rejection_sample(in.ids, in.cu, q, in.p, in.seeds, in.positions, std::nullopt, {}, f);
  };
  expect_error([&] { call_flags(in.q, flags.to(at::kFloat)); }, "has_draft_probs: expected bool or uint8, got Float");
  expect_error([&] { call_flags(in.q, flags.narrow(0, 0, 2).contiguous()); },
               "has_draft_probs: expected 3 entries (one per request), got 2");
  expect_error([&] { call_flags(in.q, flags.reshape({3, 1})); },
               "has_draft_probs: expected a 1-D tensor [B], got shape");
  // A request with drafts flagged 1 while draft_probs is absent.
  std::int64_t flagged = -1;
  for (std::int64_t b = 0; b < 3 && flagged < 0; ++b)
    if (flags[b].item<bool>() && in.cu[b + 1].item<std::int64_t>() > in.cu[b].item<std::int64_t>()) flagged = b;
  ASSERT_GE(flagged, 0);
  expect_error([&] { call_flags(std::nullopt, flags); },
               "has_draft_probs: expected 0 for a request with drafts when draft_probs is absent, got 1 for request " +
                   std::to_string(flagged));
  EXPECT_NO_THROW(call_flags(std::nullopt, at::zeros({3}, at::kByte)));
}

/// A batch mixing requests with draft probs (flag 1) and deterministic drafts (flag 0, their q rows NaN).
Inputs mixed_inputs(std::int64_t B, std::int64_t V, std::uint64_t seed, at::Tensor& flags) {
  Inputs in = make_inputs(B, V, seed);
  std::mt19937_64 rng(seed + 100);
  std::vector<std::uint8_t> f;
  in.q = in.q.clone();
  for (std::int64_t b = 0; b < B; ++b) {
    f.push_back(rng() % 2);
    if (!f.back())
      for (std::int64_t j = in.cu[b].item<std::int64_t>(); j < in.cu[b + 1].item<std::int64_t>(); ++j)
        in.q[j].fill_(std::nanf(""));
  }
  flags = at::tensor(std::vector<std::int64_t>(f.begin(), f.end())).to(at::kByte);
  return in;
}

TEST(TorchRejectionSample, MixedDraftKindsEachRequestAsAlone) {
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    at::Tensor flags;
    const Inputs in = mixed_inputs(24, 300, seed, flags);
    // validate_probs on: the NaN rows of requests without probs are not scanned (never read).
    const auto r = rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy, {}, flags);
    const std::int64_t stride = r.output_token_ids.size(1), V = 300;
    const at::Tensor g = in.greedy.to(at::kByte);
    std::vector<float> scratch(num_tiles(V));
    for (std::int64_t b = 0; b < 24; ++b) {
      const std::int64_t start = in.cu[b].item<std::int64_t>(), k = in.cu[b + 1].item<std::int64_t>() - start;
      std::vector<std::int64_t> alone(static_cast<std::size_t>(k + 1));
      std::int32_t n = -1;
      ASSERT_EQ(verify_chain_request<std::int64_t>(
                    V, k, in.ids.data_ptr<std::int64_t>() + start,
                    flags[b].item<int>() ? in.q.data_ptr<float>() + start * V : nullptr,
                    in.p.data_ptr<float>() + (start + b) * V,
                    static_cast<std::uint64_t>(in.seeds[b].item<std::int64_t>()), in.positions[b].item<std::int64_t>(),
                    g[b].item<int>() != 0, 1.0f, alone.data(), &n, nullptr, scratch.data()),
                Status::kSuccess);
      ASSERT_EQ(r.num_accepted[b].item<std::int32_t>(), n) << "request " << b;
      for (std::int64_t i = 0; i <= n; ++i) ASSERT_EQ(r.output_token_ids[b][i].item<std::int64_t>(), alone[i]);
      for (std::int64_t i = n + 1; i < stride; ++i) ASSERT_EQ(r.output_token_ids[b][i].item<std::int64_t>(), -1);
    }
    // Without the flags, the NaN rows are scanned and refused.
    expect_error([&] { rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy); },
                 "draft_probs: expected finite, non-negative probabilities, got nan");
  }
}

TEST(TorchTreeRejectionSample, MixedDraftKindsSameAsCore) {
  at::Tensor flags;
  const Inputs in = mixed_inputs(20, 700, 7, flags);
  const auto r = tree_rejection_sample(in.ids, in.parents, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy, {},
                                       flags);
  const std::int64_t B = 20, V = 700, stride = r.output_token_ids.size(1);
  const at::Tensor g = in.greedy.to(at::kByte);
  TreeVerifyArgs<std::int64_t> a{B, V, in.cu.data_ptr<std::int64_t>(), in.ids.data_ptr<std::int64_t>(),
                                 in.parents.data_ptr<std::int64_t>(), in.q.data_ptr<float>(), in.p.data_ptr<float>(),
                                 reinterpret_cast<const std::uint64_t*>(in.seeds.data_ptr<std::int64_t>()),
                                 in.positions.data_ptr<std::int64_t>(), g.data_ptr<std::uint8_t>()};
  a.has_draft_probs = flags.data_ptr<std::uint8_t>();
  std::vector<std::int64_t> tokens(B * stride), nodes(B * stride);
  std::vector<std::int32_t> n(B);
  ASSERT_TRUE(verify_tree(a, TreeVerifyOutputs<std::int64_t>{tokens.data(), stride, n.data(), nodes.data()}).ok());
  for (std::int64_t i = 0; i < B * stride; ++i) {
    ASSERT_EQ(r.output_token_ids.data_ptr<std::int64_t>()[i], tokens[i]);
    ASSERT_EQ(r.accepted_nodes.data_ptr<std::int64_t>()[i], nodes[i]);
  }
}


torch::RejectionSampleOptions block_options() {
  torch::RejectionSampleOptions o;
  o.method = VerifyMethod::kBlock;
  return o;
}

TEST(TorchRejectionSample, BlockVerificationSameAsCore) {
  std::int64_t differs_from_token = 0;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    at::Tensor flags;
    const Inputs in = mixed_inputs(32, 400, seed + 40, flags);
    const auto r = rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy, block_options(), flags);
    const auto token = rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy, {}, flags);
    const std::int64_t B = 32, V = 400, stride = r.output_token_ids.size(1);
    const at::Tensor g = in.greedy.to(at::kByte);
    ChainVerifyArgs<std::int64_t, std::int64_t> a{B,
                                                  V,
                                                  in.cu.data_ptr<std::int64_t>(),
                                                  in.ids.data_ptr<std::int64_t>(),
                                                  in.q.data_ptr<float>(),
                                                  in.p.data_ptr<float>(),
                                                  reinterpret_cast<const std::uint64_t*>(in.seeds.data_ptr<std::int64_t>()),
                                                  in.positions.data_ptr<std::int64_t>(),
                                                  g.data_ptr<std::uint8_t>(),
                                                  1.0f};
    a.has_draft_probs = flags.data_ptr<std::uint8_t>();
    std::vector<std::int64_t> tokens(B * stride);
    std::vector<std::int32_t> n(B);
    std::vector<std::uint8_t> accepted(in.ids.numel());
    ASSERT_TRUE(verify_block(a, ChainVerifyOutputs<std::int64_t>{tokens.data(), stride, n.data(), accepted.data()}).ok());
    for (std::int64_t i = 0; i < B * stride; ++i) ASSERT_EQ(r.output_token_ids.data_ptr<std::int64_t>()[i], tokens[i]) << i;
    for (std::int64_t b = 0; b < B; ++b) ASSERT_EQ(r.num_accepted[b].item<std::int32_t>(), n[b]) << b;
    for (std::int64_t j = 0; j < in.ids.numel(); ++j) ASSERT_EQ(r.accepted.data_ptr<bool>()[j], accepted[j] == 1) << j;
    for (std::int64_t b = 0; b < B; ++b)
      differs_from_token += !at::equal(r.output_token_ids[b], token.output_token_ids[b]);
  }
  EXPECT_GT(differs_from_token, 0);  // the method is applied (block and token rules differ on some sampled requests)
}

TEST_F(TorchErrors, BlockVerificationArguments) {
  torch::RejectionSampleOptions o = block_options();
  o.lenience = 0.5;
  expect_error([&] { rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, std::nullopt, o); },
               "lenience: expected 1 with block verification (it is lossless only), got 0.5");
  expect_error([&] {
    tree_rejection_sample(in.ids, in.parents, in.cu, in.q, in.p, in.seeds, in.positions, std::nullopt, block_options());
  }, "method: expected token for tree verification (block verification applies to chains), got block");
}


#if defined(SPECDEC_TORCH_HAS_CUDA)
// The CUDA path of the tensor front (built when the libtorch found has CUDA; skipped without a device): the same
// tokens as the CPU path for mixed draft kinds, and the per-request errors named.
TEST(TorchCuda, MixedDraftKindsSameAsCpu) {
  if (!::torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    at::Tensor flags;
    const Inputs in = mixed_inputs(32, 1500, seed + 10, flags);
    const auto cpu = rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy, {}, flags);
    const auto dev = [](const at::Tensor& t) { return t.to(at::kCUDA); };
    const auto gpu = rejection_sample(dev(in.ids), dev(in.cu), dev(in.q), dev(in.p), dev(in.seeds),
                                      dev(in.positions), dev(in.greedy), {}, dev(flags));
    EXPECT_TRUE(at::equal(cpu.output_token_ids, gpu.output_token_ids.cpu())) << seed;
    EXPECT_TRUE(at::equal(cpu.num_accepted, gpu.num_accepted.cpu())) << seed;
    EXPECT_TRUE(at::equal(cpu.accepted, gpu.accepted.cpu())) << seed;
    const auto tcpu = tree_rejection_sample(in.ids, in.parents, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy,
                                            {}, flags);
    const auto tgpu = tree_rejection_sample(dev(in.ids), dev(in.parents), dev(in.cu), dev(in.q), dev(in.p),
                                            dev(in.seeds), dev(in.positions), dev(in.greedy), {}, dev(flags));
    EXPECT_TRUE(at::equal(tcpu.output_token_ids, tgpu.output_token_ids.cpu())) << seed;
    EXPECT_TRUE(at::equal(tcpu.accepted_nodes, tgpu.accepted_nodes.cpu())) << seed;
  }
}

TEST(TorchCuda, BlockVerificationSameAsCpu) {
  if (!::torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    at::Tensor flags;
    const Inputs in = mixed_inputs(32, 1500, seed + 60, flags);
    const auto cpu = rejection_sample(in.ids, in.cu, in.q, in.p, in.seeds, in.positions, in.greedy, block_options(), flags);
    const auto dev = [](const at::Tensor& t) { return t.to(at::kCUDA); };
    const auto gpu = rejection_sample(dev(in.ids), dev(in.cu), dev(in.q), dev(in.p), dev(in.seeds), dev(in.positions),
                                      dev(in.greedy), block_options(), dev(flags));
    EXPECT_TRUE(at::equal(cpu.output_token_ids, gpu.output_token_ids.cpu())) << seed;
    EXPECT_TRUE(at::equal(cpu.num_accepted, gpu.num_accepted.cpu())) << seed;
    EXPECT_TRUE(at::equal(cpu.accepted, gpu.accepted.cpu())) << seed;
  }
}

TEST(TorchCuda, PerRequestErrorsAreNamed) {
  if (!::torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Inputs x = make_inputs(3, 10, 1);
  const auto dev = [](const at::Tensor& t) { return t.to(at::kCUDA); };
  at::Tensor ids = x.ids.clone();
  ids[0] = 10;
  expect_error([&] { rejection_sample(dev(ids), dev(x.cu), dev(x.q), dev(x.p), dev(x.seeds), dev(x.positions)); },
               "draft_token_ids: expected ids in [0, V), got an id out of range");
  at::Tensor p = x.p.clone();
  p[0] = 0.0f;  // request 0's first row, read by the greedy argmax
  expect_error([&] {
    rejection_sample(dev(x.ids), dev(x.cu), std::nullopt, dev(p), dev(x.seeds), dev(x.positions),
                     dev(at::ones({3}, at::kBool)));
  }, "target_probs: expected a row with positive mass, got a row that is all zeros");
  at::Tensor cu = x.cu.clone();
  cu[3] = cu[3].item<std::int64_t>() - 1;  // cu[B] != N
  cu[2] = std::min(cu[2].item<std::int64_t>(), cu[3].item<std::int64_t>());
  cu[1] = std::min(cu[1].item<std::int64_t>(), cu[2].item<std::int64_t>());
  expect_error([&] { rejection_sample(dev(x.ids), dev(cu), dev(x.q), dev(x.p), dev(x.seeds), dev(x.positions)); },
               "request 2 failed: invalid argument");
}
#endif

}  // namespace
}  // namespace specdec
