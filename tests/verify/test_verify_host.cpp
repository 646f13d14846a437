// specdec::verify_logits_host, torch-free: its tokens, counts, flags / nodes and statuses equal the sampling core's
// batched reference (logits_to_probs_batch, then verify_chain / verify_block / verify_tree) on random steps of chains,
// trees and blocks, greedy and sampled requests, with and without draft probabilities; the same bits on any threads;
// bad values land in the request's status, bad sizes raise specdec::error naming the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/tree.hpp"
#include "specdec/verify/host.hpp"

namespace specdec {
namespace {

enum class Shape { kChain, kBlock, kTree };

/// One random verification step in the host entry's layout.
struct Step {
  std::int64_t B = 0, N = 0, V = 0;
  Shape shape = Shape::kChain;
  std::vector<float> logits;  // [N + B, V]
  std::vector<std::int64_t> ids, cu, parents;
  std::vector<float> q;  // [N, V] processed draft rows, or empty
  std::vector<std::uint8_t> has_q;
  std::vector<float> temperature, top_p, min_p;
  std::vector<std::int32_t> top_k;
  std::vector<std::int64_t> seeds, positions;
};

std::vector<float> random_distribution(std::mt19937_64& rng, std::int64_t V) {
  std::vector<float> p(static_cast<std::size_t>(V));
  std::exponential_distribution<float> e(1.0f);
  float sum = 0;
  for (auto& x : p) sum += x = (rng() % 4 == 0 ? 0.0f : e(rng));
  if (sum == 0) p[0] = sum = 1.0f;
  for (auto& x : p) x /= sum;
  return p;
}

Step random_step(std::uint64_t seed, Shape shape, std::int64_t V, int draft_kind /*0 none, 1 all, 2 mixed*/) {
  std::mt19937_64 rng(seed);
  Step s;
  s.shape = shape;
  s.V = V;
  s.B = 1 + static_cast<std::int64_t>(rng() % 5);
  s.cu.push_back(0);
  for (std::int64_t b = 0; b < s.B; ++b) s.cu.push_back(s.cu.back() + static_cast<std::int64_t>(rng() % 5));
  s.N = s.cu.back();
  std::normal_distribution<float> n01(0.0f, 2.0f);
  s.logits.resize(static_cast<std::size_t>((s.N + s.B) * V));
  for (auto& x : s.logits) x = n01(rng);
  for (std::int64_t b = 0; b < s.B; ++b) {
    const int kind = static_cast<int>(rng() % 4);  // greedy, plain sampling, top-k + top-p, min-p
    s.temperature.push_back(kind == 0 ? 0.0f : 0.5f + 0.5f * static_cast<float>(rng() % 3));
    s.top_k.push_back(kind == 2 ? 1 + static_cast<std::int32_t>(rng() % 8) : 0);
    s.top_p.push_back(kind == 2 ? 0.9f : 1.0f);
    s.min_p.push_back(kind == 3 ? 0.05f : 0.0f);
    s.seeds.push_back(static_cast<std::int64_t>(rng()));
    s.positions.push_back(static_cast<std::int64_t>(rng() % 1000));
    s.has_q.push_back(draft_kind == 1 || (draft_kind == 2 && rng() % 2 == 0) ? 1 : 0);
  }
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t j = 0; j < s.cu[b + 1] - s.cu[b]; ++j) {
      if (draft_kind != 0) {
        const std::vector<float> q = random_distribution(rng, V);
        s.q.insert(s.q.end(), q.begin(), q.end());
      }
      // a draft the target's argmax often agrees with, so that chains get past their first node
      const std::int64_t row = s.cu[b] + b + j;
      const auto* lg = s.logits.data() + row * V;
      s.ids.push_back(rng() % 2 ? std::max_element(lg, lg + V) - lg : static_cast<std::int64_t>(rng() % V));
      if (shape == Shape::kTree) s.parents.push_back(static_cast<std::int64_t>(rng() % (j + 1)));
    }
  return s;
}

HostVerifyArgs args_of(const Step& s, std::vector<float>& workspace) {
  workspace.assign(static_cast<std::size_t>((s.N + s.B) * s.V), 0.0f);
  HostVerifyArgs a;
  a.target_logits = s.logits.data();
  a.target_logits_stride = s.V;
  a.vocab_size = s.V;
  a.draft_token_ids = s.ids;
  a.cu_num_draft_tokens = s.cu;
  a.parents = s.parents;
  a.draft_probs = s.q.empty() ? nullptr : s.q.data();
  if (!s.q.empty()) a.has_draft_probs = s.has_q;
  a.temperature = s.temperature;
  a.top_k = s.top_k;
  a.top_p = s.top_p;
  a.min_p = s.min_p;
  a.seeds = s.seeds;
  a.positions = s.positions;
  a.method = s.shape == Shape::kBlock ? VerifyMethod::kBlock : VerifyMethod::kToken;
  a.workspace = workspace.data();
  return a;
}

/// The sampling core's batched path on the same step: every target row processed, then the batch verifier.
HostVerifyResult reference(const Step& s) {
  const std::int64_t B = s.B, N = s.N, V = s.V;
  std::vector<LogitsParams> params;
  std::vector<std::uint8_t> greedy;
  for (std::int64_t b = 0; b < B; ++b) {
    params.push_back(detail::request_logits_params(s.temperature.data(), s.top_k.data(), s.top_p.data(),
                                                   s.min_p.data(), b));
    greedy.push_back(s.temperature[static_cast<std::size_t>(b)] == 0.0f ? 1 : 0);
  }
  std::vector<float> p(static_cast<std::size_t>((N + B) * V));
  std::vector<Status> row_status(static_cast<std::size_t>(N + B));
  EXPECT_EQ(logits_to_probs_batch<std::int64_t>(s.logits.data(), N + B, V, V, params.data(), B, s.cu.data(), 1,
                                                 p.data(), row_status.data()),
            Status::kSuccess);
  std::vector<std::uint64_t> seeds(s.seeds.begin(), s.seeds.end());
  HostVerifyResult r;
  std::int64_t width = 0;
  for (std::int64_t b = 0; b < B; ++b) width = std::max(width, s.cu[b + 1] - s.cu[b]);
  r.stride = width + 1;
  r.output_token_ids.assign(static_cast<std::size_t>(B * r.stride), -1);
  r.num_accepted.assign(static_cast<std::size_t>(B), 0);
  r.status.assign(static_cast<std::size_t>(B), 0);
  const float* q = s.q.empty() ? nullptr : s.q.data();
  const std::uint8_t* has_q = s.q.empty() ? nullptr : s.has_q.data();
  VerifyResult v;
  if (s.shape == Shape::kTree && N > 0) {  // a tree step without drafts is a chain step (no parents to pass)
    r.accepted_nodes.assign(static_cast<std::size_t>(B * r.stride), -1);
    TreeVerifyArgs<std::int64_t> a;
    a.batch_size = B;
    a.vocab_size = V;
    a.cu_num_draft_tokens = s.cu.data();
    a.draft_token_ids = s.ids.data();
    a.parents = s.parents.data();
    a.draft_probs = q;
    a.target_probs = p.data();
    a.seeds = seeds.data();
    a.positions = s.positions.data();
    a.greedy = greedy.data();
    a.has_draft_probs = has_q;
    TreeVerifyOutputs<std::int64_t> o{r.output_token_ids.data(), r.stride, r.num_accepted.data(),
                                      r.accepted_nodes.data()};
    v = verify_tree(a, o);
  } else {
    r.accepted.assign(static_cast<std::size_t>(N), 0);
    ChainVerifyArgs<std::int64_t> a;
    a.batch_size = B;
    a.vocab_size = V;
    a.cu_num_draft_tokens = s.cu.data();
    a.draft_token_ids = s.ids.data();
    a.draft_probs = q;
    a.target_probs = p.data();
    a.seeds = seeds.data();
    a.positions = s.positions.data();
    a.greedy = greedy.data();
    a.has_draft_probs = has_q;
    ChainVerifyOutputs<std::int64_t> o{r.output_token_ids.data(), r.stride, r.num_accepted.data(), r.accepted.data()};
    v = s.shape == Shape::kBlock ? verify_block(a, o) : verify_chain(a, o);
  }
  EXPECT_TRUE(v.ok()) << to_string(v);
  return r;
}

void expect_same(const HostVerifyResult& got, const HostVerifyResult& want, const std::string& what) {
  EXPECT_EQ(got.stride, want.stride) << what;
  EXPECT_EQ(got.output_token_ids, want.output_token_ids) << what;
  EXPECT_EQ(got.num_accepted, want.num_accepted) << what;
  EXPECT_EQ(got.accepted, want.accepted) << what;
  EXPECT_EQ(got.accepted_nodes, want.accepted_nodes) << what;
  EXPECT_EQ(got.status, want.status) << what;
}

/// A per-index parallel_for on fresh threads, indices dealt round-robin.
void threads_for(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  constexpr int kThreads = 3;
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      for (std::int64_t i = t; i < n; i += kThreads) fn(i);
    });
  for (auto& th : pool) th.join();
}

TEST(HostVerify, EqualsTheCoreReferenceOnRandomSteps) {
  std::int64_t accepted = 0, sampled_steps = 0;
  for (Shape shape : {Shape::kChain, Shape::kBlock, Shape::kTree})
    for (std::int64_t V : {5, 64, 1000})
      for (int draft_kind : {0, 1, 2})
        for (std::uint64_t seed = 1; seed <= 8; ++seed) {
          const Step s = random_step(seed * 131 + static_cast<std::uint64_t>(V), shape, V, draft_kind);
          std::vector<float> ws;
          HostVerifyArgs a = args_of(s, ws);
          const HostVerifyResult want = reference(s);
          const std::string what = "shape " + std::to_string(static_cast<int>(shape)) + " V " + std::to_string(V) +
                                   " drafts " + std::to_string(draft_kind) + " seed " + std::to_string(seed);
          for (bool all_rows : {true, false}) {
            a.all_target_probs = all_rows;
            expect_same(verify_logits_host(a), want, what + (all_rows ? " all rows" : " lazy rows"));
          }
          for (std::int64_t b = 0; b < s.B; ++b) {
            accepted += want.num_accepted[static_cast<std::size_t>(b)];
            sampled_steps += s.temperature[static_cast<std::size_t>(b)] > 0 && s.cu[b + 1] > s.cu[b];
          }
        }
  EXPECT_GT(accepted, 100) << "the steps accept drafts, so the comparison reaches past the first node";
  EXPECT_GT(sampled_steps, 100);
}

// Per-request methods (HostVerifyArgs::block): each request gets what its own method gives it alone (requests are
// independent), so a mixed step equals the token reference's rows for token requests and the block reference's rows
// for block requests.
TEST(HostVerify, PerRequestMethodsEqualEachMethodsReference) {
  int mixed = 0;
  for (std::int64_t V : {5, 64, 1000})
    for (int draft_kind : {0, 1, 2})
      for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        Step s = random_step(seed * 977 + static_cast<std::uint64_t>(V), Shape::kChain, V, draft_kind);
        const HostVerifyResult token = reference(s);
        s.shape = Shape::kBlock;
        const HostVerifyResult block = reference(s);
        s.shape = Shape::kChain;
        std::vector<std::uint8_t> methods(static_cast<std::size_t>(s.B));
        for (std::int64_t b = 0; b < s.B; ++b) methods[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>((b + seed) % 2);
        mixed += std::count(methods.begin(), methods.end(), 1) > 0 && std::count(methods.begin(), methods.end(), 0) > 0;
        HostVerifyResult want = token;
        for (std::int64_t b = 0; b < s.B; ++b) {
          if (!methods[static_cast<std::size_t>(b)]) continue;
          std::copy_n(block.output_token_ids.begin() + b * want.stride, want.stride, want.output_token_ids.begin() + b * want.stride);
          want.num_accepted[static_cast<std::size_t>(b)] = block.num_accepted[static_cast<std::size_t>(b)];
          want.status[static_cast<std::size_t>(b)] = block.status[static_cast<std::size_t>(b)];
          std::copy(block.accepted.begin() + s.cu[b], block.accepted.begin() + s.cu[b + 1], want.accepted.begin() + s.cu[b]);
        }
        std::vector<float> ws;
        HostVerifyArgs a = args_of(s, ws);
        a.block = methods;
        for (bool all_rows : {true, false}) {
          a.all_target_probs = all_rows;
          expect_same(verify_logits_host(a), want, "V " + std::to_string(V) + " drafts " + std::to_string(draft_kind) +
                                                       " seed " + std::to_string(seed));
        }
      }
  EXPECT_GT(mixed, 20);
}

TEST(HostVerify, SameBitsOnAnyThreads) {
  for (Shape shape : {Shape::kChain, Shape::kBlock, Shape::kTree})
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      const Step s = random_step(seed, shape, 300, static_cast<int>(seed % 3));
      std::vector<float> ws;
      HostVerifyArgs a = args_of(s, ws);
      const HostVerifyResult serial = verify_logits_host(a);
      a.parallel_for = threads_for;
      expect_same(verify_logits_host(a), serial, "seed " + std::to_string(seed));
    }
}

TEST(HostVerify, BadValuesLandInTheirRequestsStatus) {
  Step s = random_step(5, Shape::kChain, 50, 1);
  while (s.B < 2 || s.cu[2] - s.cu[1] < 1) s = random_step(s.seeds[0] & 0xffff, Shape::kChain, 50, 1);
  std::vector<float> ws;
  const HostVerifyResult clean = verify_logits_host(args_of(s, ws));
  Step bad = s;
  bad.logits[static_cast<std::size_t>((bad.cu[1] + 1) * bad.V + 3)] = std::numeric_limits<float>::quiet_NaN();
  const HostVerifyResult r = verify_logits_host(args_of(bad, ws));
  EXPECT_EQ(r.status[1], static_cast<std::int32_t>(Status::kInvalidProbability));
  EXPECT_EQ(r.num_accepted[1], 0);
  EXPECT_EQ(r.output_token_ids[static_cast<std::size_t>(r.stride)], -1);
  for (std::int64_t b = 0; b < s.B; ++b) {
    if (b == 1) continue;
    EXPECT_EQ(r.status[static_cast<std::size_t>(b)], 0) << "request " << b << " is independent";
    EXPECT_EQ(r.num_accepted[static_cast<std::size_t>(b)], clean.num_accepted[static_cast<std::size_t>(b)]);
  }
  bad = s;
  bad.ids[static_cast<std::size_t>(bad.cu[1])] = bad.V;  // request 1's first draft out of range
  EXPECT_EQ(verify_logits_host(args_of(bad, ws)).status[1], static_cast<std::int32_t>(Status::kInvalidTokenId));
}

TEST(HostVerify, SizesAreNamedErrors) {
  Step s = random_step(11, Shape::kTree, 64, 1);
  while (s.B != 3 || s.N == 0) s = random_step(s.seeds[0] & 0xffff, Shape::kTree, 64, 1);
  std::vector<float> ws;
  const HostVerifyArgs a = args_of(s, ws);
  EXPECT_NO_THROW(verify_logits_host(a));
  auto none = a;  // no sampling parameters at all: the defaults
  none.temperature = {};
  none.top_k = {};
  none.top_p = {};
  none.min_p = {};
  EXPECT_NO_THROW(verify_logits_host(none));
  auto expect_error = [](const HostVerifyArgs& e, const std::string& message) {
    try {
      verify_logits_host(e);
      FAIL() << "expected specdec::error containing: " << message;
    } catch (const error& err) {
      EXPECT_NE(std::string(err.what()).find(message), std::string::npos) << err.what();
      EXPECT_EQ(err.status(), Status::kInvalidArgument);
    }
  };
  const std::vector<std::int64_t> two(2, 0);
  const std::vector<float> one(1, 1.0f);
  auto e = a;
  e.seeds = two;
  expect_error(e, "seeds: expected 3 values (one per request), got 2");
  e = a;
  e.temperature = one;
  expect_error(e, "temperature: expected 3 values (one per request) or none, got 1");
  const std::vector<std::int64_t> too_many(static_cast<std::size_t>(s.N + 1), 0);
  e = a;
  e.parents = too_many;
  expect_error(e, "parents: expected " + std::to_string(s.N) + " values (one per draft) or none, got " +
                      std::to_string(s.N + 1));
  e = a;
  e.cu_num_draft_tokens = {};
  expect_error(e, "cu_num_draft_tokens: expected [B + 1] offsets, got none");
  e = a;
  e.target_logits_stride = s.V - 1;
  expect_error(e, "target_logits_stride: expected rows at least V = 64 floats apart, got 63");
  e = a;
  e.workspace = nullptr;
  expect_error(e, "workspace: expected [N + B, V]");
  e = a;
  e.vocab_size = 0;
  expect_error(e, "vocab_size: expected V in [1, 2^31), got 0");
  e = a;
  e.method = VerifyMethod::kBlock;
  expect_error(e, "method: expected token for tree verification");
  e = a;
  const std::vector<std::uint8_t> flags(static_cast<std::size_t>(s.B), 1);
  e.block = flags;
  expect_error(e, "block: expected none for tree verification");
  e = a;
  e.parents = {};
  e.block = std::span<const std::uint8_t>(flags).first(1);
  expect_error(e, "block: expected 3 values (one per request) or none, got 1");
}

}  // namespace
}  // namespace specdec
