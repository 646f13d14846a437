// Tree verification: lossless multi-candidate rejection (i.i.d. and deterministic children), and equality with
// the chain verifier on chain-shaped trees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "specdec/sampling/tree.hpp"
#include "stats.hpp"

namespace specdec {
namespace {

using test::matches_distribution;

TEST(Tree, ChainShapedTreeEqualsChainVerifier) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 400; ++trial) {
    const std::int64_t V = trial % 3 == 0 ? 1500 : 9;
    const int K = 1 + trial % 5;
    const bool with_probs = trial % 2 == 0;
    const bool greedy = trial % 7 == 0;
    std::vector<float> p, q;
    std::vector<std::int32_t> drafts(K), parents(K);
    for (int i = 0; i <= K; ++i) {
      auto r = test::random_row(rng, V, 0.2, 0.5);
      p.insert(p.end(), r.begin(), r.end());
    }
    for (int i = 0; i < K; ++i) {
      auto r = test::random_row(rng, V, 0.2, 0.5);
      drafts[i] = static_cast<std::int32_t>(test::draw_from(rng, r));
      q.insert(q.end(), r.begin(), r.end());
      parents[i] = i;
    }
    std::vector<float> scratch(num_tiles(V));
    std::vector<std::int32_t> out_chain(K + 1, -1), out_tree(K + 1, -1), nodes(K + 1, -1);
    std::int32_t n_chain = -1, n_tree = -1;
    ASSERT_EQ(verify_chain_request<std::int32_t>(V, K, drafts.data(), with_probs ? q.data() : nullptr, p.data(),
                                                 trial, 5, greedy, 1.0f, out_chain.data(), &n_chain, nullptr,
                                                 scratch.data()),
              Status::kSuccess);
    ASSERT_EQ(verify_tree_request<std::int32_t>(V, K, drafts.data(), parents.data(), with_probs ? q.data() : nullptr,
                                                p.data(), trial, 5, greedy, out_tree.data(), nodes.data(), &n_tree,
                                                scratch.data()),
              Status::kSuccess);
    ASSERT_EQ(n_chain, n_tree) << trial;
    for (int i = 0; i <= n_chain; ++i) ASSERT_EQ(out_chain[i], out_tree[i]) << trial << " " << i;
    for (int i = 0; i < n_tree; ++i) EXPECT_EQ(nodes[i], i + 1);
  }
}

// A depth-2 tree: the root has `width` children; each child has 2 children. Target rows differ per node.
struct TreeCase {
  std::int64_t V;
  int width;
  bool iid;  // children drawn i.i.d. from q with probs passed; else the top-`width` tokens of q, no probs
  std::vector<std::vector<float>> p;   // one row per node (1 + width + 2 width)
  std::vector<float> q_root, q_child;  // draft distributions at the root and at each depth-1 node
};

void run_tree(const TreeCase& c, int trials) {
  const int n1 = c.width, K = n1 + 2 * n1;
  std::vector<std::int32_t> parents(K);
  for (int j = 0; j < n1; ++j) parents[j] = 0;
  for (int j = 0; j < 2 * n1; ++j) parents[n1 + j] = 1 + j / 2;  // node 1 + j/2 is draft j/2
  std::vector<float> p_flat;
  for (auto& r : c.p) p_flat.insert(p_flat.end(), r.begin(), r.end());
  std::vector<float> q_flat;
  for (int j = 0; j < K; ++j) {
    const auto& q = j < n1 ? c.q_root : c.q_child;
    q_flat.insert(q_flat.end(), q.begin(), q.end());
  }
  auto top = [&](const std::vector<float>& q, int k) {
    std::vector<std::int32_t> idx(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) idx[i] = static_cast<std::int32_t>(i);
    std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) { return q[a] > q[b]; });
    idx.resize(k);
    return idx;
  };
  std::vector<std::int64_t> first(c.V);
  std::vector<std::vector<std::int64_t>> second(1 + n1, std::vector<std::int64_t>(c.V));
  std::vector<std::int64_t> depth_hist(3);
  std::mt19937_64 rng(99);
  std::vector<std::int32_t> drafts(K), out(K + 1), nodes(K + 1);
  std::vector<float> scratch(num_tiles(c.V));
  for (int t = 0; t < trials; ++t) {
    if (c.iid) {
      for (int j = 0; j < K; ++j) drafts[j] = static_cast<std::int32_t>(test::draw_from(rng, j < n1 ? c.q_root : c.q_child));
    } else {
      auto a = top(c.q_root, n1), b = top(c.q_child, 2);
      for (int j = 0; j < n1; ++j) drafts[j] = a[j];
      for (int j = 0; j < 2 * n1; ++j) drafts[n1 + j] = b[j % 2];
    }
    std::int32_t n = -1;
    ASSERT_EQ(verify_tree_request<std::int32_t>(c.V, K, drafts.data(), parents.data(), c.iid ? q_flat.data() : nullptr,
                                                p_flat.data(), 1000 + t, 0, false, out.data(), nodes.data(), &n,
                                                scratch.data()),
              Status::kSuccess);
    ++depth_hist[n];
    ++first[out[0]];
    if (n >= 1) ++second[nodes[0]][out[1]];
  }
  EXPECT_TRUE(matches_distribution(first, test::as_double(c.p[0]))) << "first token";
  for (int node = 1; node <= n1; ++node)
    EXPECT_TRUE(matches_distribution(second[node], test::as_double(c.p[node])))
        << "second token after node " << node;
}

TreeCase make_case(std::uint64_t seed, std::int64_t V, int width, bool iid) {
  std::mt19937_64 rng(seed);
  TreeCase c{V, width, iid, {}, {}, {}};
  for (int n = 0; n < 1 + 3 * width; ++n) c.p.push_back(test::random_row(rng, V, 0.0, 0.7));
  c.q_root = test::random_row(rng, V, 0.3, 0.7);
  c.q_child = test::random_row(rng, V, 0.3, 0.7);
  return c;
}

TEST(TreeStats, IidChildrenMultiCandidateIsLossless) { run_tree(make_case(31, 7, 3, true), 120000); }

TEST(TreeStats, DeterministicTopKChildrenIsLossless) { run_tree(make_case(32, 7, 3, false), 120000); }

TEST(TreeStats, IidChildrenAcrossTiles) { run_tree(make_case(33, 1100, 2, true), 30000); }

TEST(TreeErrors, ParentMustPrecedeChild) {
  const std::int64_t V = 3;
  std::vector<float> p(3 * V, 1.0f / 3), scratch(1);
  std::int32_t drafts[2] = {0, 1}, parents[2] = {0, 2}, out[3], nodes[3], n;
  std::int64_t where = -1;
  EXPECT_EQ(verify_tree_request<std::int32_t>(V, 2, drafts, parents, nullptr, p.data(), 0, 0, false, out, nodes, &n,
                                              scratch.data(), &where),
            Status::kInvalidTree);
  EXPECT_EQ(where, 1);
  parents[1] = -1;
  EXPECT_EQ(verify_tree_request<std::int32_t>(V, 2, drafts, parents, nullptr, p.data(), 0, 0, false, out, nodes, &n,
                                              scratch.data()),
            Status::kInvalidTree);
}

TEST(TreeErrors, BatchLeavesOutputsUntouched) {
  const std::int64_t V = 3;
  std::vector<std::int32_t> cu = {0, 2}, ids = {0, 5}, parents = {0, 1};
  std::vector<float> p(3 * V, 1.0f / 3);
  std::vector<std::uint64_t> seeds = {1};
  std::vector<std::int64_t> pos = {0};
  std::vector<std::int32_t> out(3, 9), n(1, 9), nodes(3, 9);
  TreeVerifyArgs<std::int32_t> a{1, V, cu.data(), ids.data(), parents.data(), nullptr, p.data(), seeds.data(),
                                 pos.data(), nullptr};
  TreeVerifyOutputs<std::int32_t> o{out.data(), 3, n.data(), nodes.data()};
  VerifyResult r = verify_tree(a, o);
  EXPECT_EQ(r.status, Status::kInvalidTokenId);
  EXPECT_EQ(r.position, 1);
  ids[1] = 1;
  parents[1] = 3;
  r = verify_tree(a, o);
  EXPECT_EQ(r.status, Status::kInvalidTree);
  EXPECT_EQ(out, (std::vector<std::int32_t>{9, 9, 9}));
  EXPECT_EQ(n[0], 9);
  parents[1] = 1;
  ASSERT_TRUE(verify_tree(a, o).ok());
  ASSERT_GE(n[0], 0);
  ASSERT_LE(n[0], 2);
  EXPECT_GE(out[n[0]], 0);  // the emitted token follows the accepted path
  for (int i = n[0] + 1; i < 3; ++i) EXPECT_EQ(out[i], -1);
  const auto first = out;
  ASSERT_TRUE(verify_tree(a, o).ok());
  EXPECT_EQ(out, first);  // same seed, same tokens
}


// ---- every public tree entry checks what it reads: named errors, outputs untouched ----

struct TreeRequestFixture {
  std::int64_t V = 3, K = 2;
  std::vector<std::int32_t> drafts = {0, 1}, parents = {0, 1};
  std::vector<float> p = std::vector<float>(3 * 3, 1.0f / 3), scratch = std::vector<float>(1);
  std::vector<std::int32_t> out = std::vector<std::int32_t>(3, 55), nodes = std::vector<std::int32_t>(3, 55);
  std::int32_t n = 55;
  bool greedy = false;
  std::int64_t where = -9;
  VerifyResult error;
  Status call() {
    return verify_tree_request<std::int32_t>(V, K, drafts.data(), parents.empty() ? nullptr : parents.data(), nullptr,
                                             p.data(), 3, 0, greedy, out.data(), nodes.data(), &n, scratch.data(),
                                             &where, &error);
  }
  bool untouched() const {
    return out == std::vector<std::int32_t>(3, 55) && nodes == std::vector<std::int32_t>(3, 55) && n == 55;
  }
};

TEST(TreeRequestErrors, TokenIdOutOfRange) {
  for (std::int32_t bad : {3, -1}) {
    TreeRequestFixture f;
    f.drafts[1] = bad;
    EXPECT_EQ(f.call(), Status::kInvalidTokenId);
    EXPECT_EQ(f.where, 1);
    EXPECT_STREQ(f.error.argument, "draft_token_ids");
    EXPECT_TRUE(f.untouched());
  }
}

TEST(TreeRequestErrors, NegativeCountNullParentsAndVocab) {
  TreeRequestFixture f;
  f.K = -3;
  EXPECT_EQ(f.call(), Status::kInvalidArgument);
  EXPECT_EQ(to_string(f.error), "invalid argument: num_drafts: expected >= 0, got -3");
  EXPECT_TRUE(f.untouched());
  TreeRequestFixture g;
  g.parents.clear();
  EXPECT_EQ(g.call(), Status::kInvalidArgument);
  EXPECT_EQ(to_string(g.error), "invalid argument: parents: expected a non-null pointer, got null");
  EXPECT_TRUE(g.untouched());
  TreeRequestFixture h;
  h.V = -1;
  EXPECT_EQ(h.call(), Status::kInvalidArgument);
  EXPECT_STREQ(h.error.argument, "vocab_size");
  EXPECT_TRUE(h.untouched());
}

TEST(TreeRequestErrors, ParentOutOfRangeIsNamed) {
  TreeRequestFixture f;
  f.parents[1] = 2;
  EXPECT_EQ(f.call(), Status::kInvalidTree);
  EXPECT_EQ(to_string(f.error), "parent index does not point at an earlier node: parents: expected an earlier node in "
                                "[0, j] (0 is the root) with j = 1, got 2 (draft position 1)");
  EXPECT_TRUE(f.untouched());
}

TEST(TreeRequestErrors, GreedyZeroMassRow) {
  TreeRequestFixture f;
  f.greedy = true;
  f.drafts = {2, 1};
  std::fill(f.p.begin(), f.p.begin() + 3, 0.0f);
  EXPECT_EQ(f.call(), Status::kZeroMass);
  EXPECT_EQ(f.where, -1);  // the root's row
  EXPECT_STREQ(f.error.argument, "target_probs");
  EXPECT_TRUE(f.untouched());
  // A zero row deeper in the tree, reached after an accepted greedy child, writes nothing either.
  TreeRequestFixture g;
  g.greedy = true;
  g.p = {0.1f, 0.2f, 0.7f, 0.0f, 0.0f, 0.0f, 0.3f, 0.3f, 0.4f};
  g.drafts = {2, 0};
  g.parents = {0, 1};
  EXPECT_EQ(g.call(), Status::kZeroMass);
  EXPECT_EQ(g.where, 0);  // node 1 = draft 0's row
  EXPECT_TRUE(g.untouched());
}

struct TreeBatchFixture {
  std::int64_t V = 3;
  std::vector<std::int32_t> cu = {0, 2, 3}, ids = {0, 1, 2}, parents = {0, 1, 0};
  std::vector<float> p = std::vector<float>(5 * 3, 1.0f / 3);
  std::vector<std::uint64_t> seeds = {1, 2};
  std::vector<std::int64_t> pos = {0, 9};
  std::vector<std::uint8_t> greedy = {0, 0};
  std::vector<std::int32_t> out = std::vector<std::int32_t>(6, 55), nodes = std::vector<std::int32_t>(6, 55),
                            n = std::vector<std::int32_t>(2, 55);
  std::int64_t parents_size = -1, target_size = -1;
  VerifyResult call() {
    TreeVerifyArgs<std::int32_t> a{2, V, cu.data(), ids.data(), parents.data(), nullptr, p.data(), seeds.data(),
                                   pos.data(), greedy.data()};
    a.parents_size = parents_size;
    a.target_probs_size = target_size;
    return verify_tree(a, TreeVerifyOutputs<std::int32_t>{out.data(), 3, n.data(), nodes.data()});
  }
  bool untouched() const {
    return out == std::vector<std::int32_t>(6, 55) && nodes == std::vector<std::int32_t>(6, 55) &&
           n == std::vector<std::int32_t>(2, 55);
  }
};

TEST(TreeErrors, NegativeDraftCount) {
  TreeBatchFixture f;
  f.cu = {0, 3, 2};
  const VerifyResult r = f.call();
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_EQ(r.request, 1);
  EXPECT_STREQ(r.argument, "cu_num_draft_tokens");
  EXPECT_TRUE(f.untouched());
}

TEST(TreeErrors, ParentOutOfRangeInBatchIsNamed) {
  for (std::int32_t bad : {-1, 2, 100}) {
    TreeBatchFixture f;
    f.parents[1] = bad;
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidTree);
    EXPECT_EQ(r.request, 0);
    EXPECT_EQ(r.position, 1);
    EXPECT_STREQ(r.argument, "parents");
    EXPECT_EQ(*r.received, bad);
    EXPECT_TRUE(f.untouched());
  }
  TreeBatchFixture g;
  g.parents[2] = 1;  // request 1 has one draft: its only valid parent is the root
  EXPECT_EQ(g.call().request, 1);
  EXPECT_TRUE(g.untouched());
}

TEST(TreeErrors, SizesThatDisagree) {
  TreeBatchFixture f;
  f.parents_size = 2;
  EXPECT_EQ(to_string(f.call()), "invalid argument: parents_size: expected N = cu[B] = 3, got 2");
  EXPECT_TRUE(f.untouched());
  TreeBatchFixture g;
  g.target_size = 12;
  EXPECT_EQ(to_string(g.call()), "invalid argument: target_probs_size: expected (N + B) * vocab_size = 15, got 12");
  EXPECT_TRUE(g.untouched());
  TreeBatchFixture h;
  h.parents_size = 3;
  h.target_size = 15;
  EXPECT_TRUE(h.call().ok());
}

TEST(TreeErrors, GreedyZeroMassRowInBatch) {
  TreeBatchFixture f;
  f.greedy = {0, 1};
  std::fill(f.p.begin() + 3 * 3, f.p.begin() + 4 * 3, 0.0f);  // request 1's root row (row cu[1] + 1 = 3)
  const VerifyResult r = f.call();
  EXPECT_EQ(r.status, Status::kZeroMass);
  EXPECT_EQ(r.request, 1);
  EXPECT_TRUE(f.untouched());
}

TEST(TreeMixed, EachRequestGetsItsTokensAlone) {
  // Trees with and without draft probabilities in one batch (has_draft_probs), the unused rows NaN.
  std::mt19937_64 rng(61);
  for (int rep = 0; rep < 60; ++rep) {
    const std::int64_t V = rep % 5 == 0 ? 1100 : 9;
    const std::int64_t B = 1 + rep % 6;
    std::vector<std::int32_t> cu = {0}, ids, parents;
    std::vector<float> q, p;
    std::vector<std::uint64_t> seeds;
    std::vector<std::int64_t> pos;
    std::vector<std::uint8_t> greedy, has_q;
    for (std::int64_t b = 0; b < B; ++b) {
      const int k = static_cast<int>(rng() % 6);
      cu.push_back(cu.back() + k);
      has_q.push_back(rng() % 2);
      greedy.push_back(rng() % 6 == 0);
      seeds.push_back(rng());
      pos.push_back(static_cast<std::int64_t>(rng() % 500));
      for (int j = 0; j < k; ++j) {
        auto row = test::random_row(rng, V, 0.3, 0.6);
        ids.push_back(static_cast<std::int32_t>(test::draw_from(rng, row)));
        parents.push_back(static_cast<std::int32_t>(rng() % (j + 1)));
        if (has_q.back()) q.insert(q.end(), row.begin(), row.end());
        else q.insert(q.end(), static_cast<std::size_t>(V), std::nanf(""));
      }
    }
    const std::int64_t N = cu.back();
    for (std::int64_t r = 0; r < N + B; ++r) {
      auto row = test::random_row(rng, V, 0.2, 0.6);
      p.insert(p.end(), row.begin(), row.end());
    }
    const std::int64_t stride = 7;
    TreeVerifyArgs<std::int32_t> a{B, V, cu.data(), ids.data(), parents.data(), q.data(), p.data(), seeds.data(),
                                   pos.data(), greedy.data()};
    a.has_draft_probs = has_q.data();
    a.draft_token_ids_size = a.parents_size = N;
    a.draft_probs_size = N * V;
    a.target_probs_size = (N + B) * V;
    std::vector<std::int32_t> out(static_cast<std::size_t>(B * stride)), nodes(out.size()), n(B);
    const VerifyResult r = verify_tree(a, TreeVerifyOutputs<std::int32_t>{out.data(), stride, n.data(), nodes.data()});
    ASSERT_TRUE(r.ok()) << to_string(r);
    std::vector<float> scratch(num_tiles(V));
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t start = cu[b], k = cu[b + 1] - start;
      std::vector<std::int32_t> alone(static_cast<std::size_t>(k + 1)), alone_nodes(alone.size());
      std::int32_t alone_n = -1;
      ASSERT_EQ(verify_tree_request<std::int32_t>(V, k, ids.data() + start, parents.data() + start,
                                                  has_q[b] ? q.data() + start * V : nullptr, p.data() + (start + b) * V,
                                                  seeds[b], pos[b], greedy[b] != 0, alone.data(), alone_nodes.data(),
                                                  &alone_n, scratch.data()),
                Status::kSuccess);
      ASSERT_EQ(n[b], alone_n) << "request " << b;
      for (std::int64_t i = 0; i <= alone_n; ++i) ASSERT_EQ(out[b * stride + i], alone[i]) << "request " << b;
      for (std::int64_t i = 0; i < alone_n; ++i) ASSERT_EQ(nodes[b * stride + i], alone_nodes[i]);
    }
  }
}

}  // namespace
}  // namespace specdec
