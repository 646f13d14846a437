// EAGLE-2 dynamic tree builder on hand-made head distributions: the kept nodes are the best by path probability among the
// nodes the beam reaches (checked against an independent re-implementation and, when num_nodes <= top_k, against the whole
// tree enumerated to the same depth), parents are valid and topological, scores are the path sums, siblings are distinct.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "specdec/proposers/eagle.hpp"
#include "specdec/sampling/status.hpp"

namespace sp = specdec::proposers;

namespace {

using Path = std::vector<std::int64_t>;

// A deterministic "head": log-probabilities of the next token after `path`, from a seeded random softmax per path.
std::vector<float> head_row(const Path& path, std::int64_t vocab, std::uint64_t salt) {
  std::uint64_t h = 1469598103934665603ull ^ salt;
  for (auto t : path) h = (h ^ static_cast<std::uint64_t>(t + 1)) * 1099511628211ull;
  std::mt19937_64 rng(h);
  std::normal_distribution<double> n(0.0, 2.0);
  std::vector<double> logits(static_cast<std::size_t>(vocab));
  double mx = -1e300;
  for (auto& l : logits) mx = std::max(mx, l = n(rng));
  double z = 0;
  for (auto l : logits) z += std::exp(l - mx);
  std::vector<float> out(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(logits[i] - mx - std::log(z));
  return out;
}

// Candidate score along a path, accumulated in float exactly as the builder does (parent score + child log-prob).
float path_score(const Path& p, std::int64_t vocab, std::uint64_t salt) {
  float s = 0.f;
  Path prefix;
  for (auto t : p) {
    s = s + head_row(prefix, vocab, salt)[static_cast<std::size_t>(t)];
    prefix.push_back(t);
  }
  return s;
}

struct Built {
  std::vector<Path> paths;  // per kept node, its token path from the root
  std::vector<std::int64_t> parents;
  std::vector<float> scores;
  std::int64_t rows = 0;  // head rows the builder asked for (frontier nodes expanded)
};

Built build(const sp::DynamicTreeParams& params, std::int32_t max_depth, std::int64_t vocab, std::uint64_t salt) {
  sp::DynamicTreeBuilder b(params, max_depth, head_row({}, vocab, salt));
  auto path_of = [&](std::int64_t c) {
    Path p;
    for (; c >= 0; c = b.candidates()[static_cast<std::size_t>(c)].parent) p.push_back(b.candidates()[static_cast<std::size_t>(c)].token);
    std::reverse(p.begin(), p.end());
    return p;
  };
  std::int64_t expanded = 0;
  while (!b.frontier().empty()) {
    std::vector<float> rows;
    for (auto c : b.frontier()) {
      const auto r = head_row(path_of(c), vocab, salt);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    expanded += static_cast<std::int64_t>(b.frontier().size());
    b.expand(rows);
  }
  const auto sel = b.select();
  Built out;
  out.rows = expanded;
  out.parents = b.tree_parents(sel);
  for (auto c : sel) {
    out.paths.push_back(path_of(c));
    out.scores.push_back(b.candidates()[static_cast<std::size_t>(c)].score);
  }
  return out;
}

// Independent EAGLE-2 beam: the root's top_k children; then, for each level, every frontier node's top_k children, the next
// frontier being the level's top_k by score; finally the best num_nodes of everything generated.
std::set<Path> reference_beam(const sp::DynamicTreeParams& params, std::int32_t max_depth, std::int64_t vocab, std::uint64_t salt,
                              std::int64_t* rows = nullptr) {
  const std::int64_t k = std::min<std::int64_t>(params.top_k, vocab);
  auto best_children = [&](const Path& parent) {
    const auto row = head_row(parent, vocab, salt);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(vocab));
    for (std::int64_t i = 0; i < vocab; ++i) ids[static_cast<std::size_t>(i)] = i;
    std::stable_sort(ids.begin(), ids.end(), [&](auto a, auto b) { return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)]; });
    std::vector<Path> out;
    for (std::int64_t i = 0; i < k; ++i) {
      Path p = parent;
      p.push_back(ids[static_cast<std::size_t>(i)]);
      out.push_back(p);
    }
    return out;
  };
  // min_path_prob: children whose path probability is below it are never generated.
  const auto above = [&](const std::vector<Path>& paths) {
    std::vector<Path> out;
    for (const auto& p : paths)
      if (params.min_path_prob <= 0 || path_score(p, vocab, salt) >= static_cast<float>(std::log(params.min_path_prob))) out.push_back(p);
    return out;
  };
  std::vector<Path> pool = above(best_children({}));
  std::vector<Path> frontier = pool;
  for (std::int32_t d = 2; d <= max_depth; ++d) {
    std::vector<Path> level;
    if (rows) *rows += static_cast<std::int64_t>(frontier.size());
    for (const auto& f : frontier)
      for (auto& c : above(best_children(f))) level.push_back(c);
    pool.insert(pool.end(), level.begin(), level.end());
    std::stable_sort(level.begin(), level.end(),
                     [&](const Path& a, const Path& b) { return path_score(a, vocab, salt) > path_score(b, vocab, salt); });
    level.resize(std::min<std::size_t>(level.size(), static_cast<std::size_t>(k)));
    frontier = level;
  }
  std::stable_sort(pool.begin(), pool.end(),
                   [&](const Path& a, const Path& b) { return path_score(a, vocab, salt) > path_score(b, vocab, salt); });
  pool.resize(std::min<std::size_t>(pool.size(), static_cast<std::size_t>(params.num_nodes)));
  return {pool.begin(), pool.end()};
}

// Every path of length 1..max_depth, best first.
std::vector<Path> whole_tree(std::int32_t max_depth, std::int64_t vocab, std::uint64_t salt) {
  std::vector<Path> all, level = {{}};
  for (std::int32_t d = 1; d <= max_depth; ++d) {
    std::vector<Path> next;
    for (const auto& p : level)
      for (std::int64_t t = 0; t < vocab; ++t) {
        Path q = p;
        q.push_back(t);
        next.push_back(q);
      }
    all.insert(all.end(), next.begin(), next.end());
    level = next;
  }
  std::map<Path, float> score;
  for (const auto& p : all) score[p] = path_score(p, vocab, salt);
  std::stable_sort(all.begin(), all.end(), [&](const Path& a, const Path& b) { return score.at(a) > score.at(b); });
  return all;
}

void check_structure(const Built& t, std::int32_t max_depth, std::int64_t vocab, std::uint64_t salt) {
  std::set<std::pair<std::int64_t, std::int64_t>> child_tokens;  // (parent node, token)
  for (std::size_t j = 0; j < t.paths.size(); ++j) {
    const auto p = t.parents[j];
    ASSERT_GE(p, 0);
    ASSERT_LE(p, static_cast<std::int64_t>(j)) << "draft " << j << ": parent node must come first (topological order)";
    const Path& path = t.paths[j];
    ASSERT_LE(static_cast<std::int32_t>(path.size()), max_depth);
    if (p == 0) {
      EXPECT_EQ(path.size(), 1u);
    } else {
      Path parent = t.paths[static_cast<std::size_t>(p - 1)];
      parent.push_back(path.back());
      EXPECT_EQ(parent, path) << "draft " << j << " is not a child of its parent node";
    }
    EXPECT_EQ(t.scores[j], path_score(path, vocab, salt)) << "draft " << j;
    EXPECT_TRUE(child_tokens.insert({p, path.back()}).second) << "siblings repeat token " << path.back();
  }
}

}  // namespace

TEST(EagleTree, KeepsTheBestNodesOfTheWholeTreeWhenNumNodesAtMostTopK) {
  for (std::uint64_t salt = 0; salt < 20; ++salt) {
    sp::DynamicTreeParams params;
    params.top_k = 6;
    params.num_nodes = 1 + static_cast<std::int32_t>(salt % 6);
    const std::int32_t depth = 4;
    const std::int64_t vocab = 5;
    const Built t = build(params, depth, vocab, salt);
    check_structure(t, depth, vocab, salt);
    const auto all = whole_tree(depth, vocab, salt);
    std::set<Path> want(all.begin(), all.begin() + params.num_nodes);
    EXPECT_EQ(std::set<Path>(t.paths.begin(), t.paths.end()), want) << "salt " << salt;
  }
}

// The builder against the independent beam: the same kept set, for no more head rows. It skips the frontier nodes that
// can no longer be kept (scoring below the num_nodes-th best so far), so it asks for fewer rows on many trees.
TEST(EagleTree, MatchesIndependentBeamAndRerank) {
  std::int64_t fewer = 0;
  for (std::uint64_t salt = 100; salt < 170; ++salt) {
    sp::DynamicTreeParams params;
    params.top_k = 2 + static_cast<std::int32_t>(salt % 3);
    params.num_nodes = 1 + static_cast<std::int32_t>(salt % 14);
    const std::int32_t depth = 1 + static_cast<std::int32_t>(salt % 5);
    const std::int64_t vocab = 7;
    const Built t = build(params, depth, vocab, salt);
    check_structure(t, depth, vocab, salt);
    std::int64_t beam_rows = 0;
    const auto want = reference_beam(params, depth, vocab, salt, &beam_rows);
    EXPECT_EQ(t.paths.size(), want.size());
    EXPECT_EQ(std::set<Path>(t.paths.begin(), t.paths.end()), want) << "salt " << salt;
    // Every kept node beats every node of the beam that was dropped (reranking keeps the best N).
    const float worst_kept = *std::min_element(t.scores.begin(), t.scores.end());
    EXPECT_TRUE(std::isfinite(worst_kept));
    EXPECT_LE(t.rows, beam_rows) << "salt " << salt;
    fewer += t.rows < beam_rows;
  }
  EXPECT_GE(fewer, 20) << "the builder expanded as many nodes as the full beam on most trees";
}

// min_path_prob: nodes of path probability below it are neither kept nor expanded. Against the independent beam with
// the same bound, and, where the beam covers every path (depth 2, top_k = the vocabulary), against all paths above it.
TEST(EagleTree, MinPathProbKeepsOnlyThePathsAboveIt) {
  for (std::uint64_t salt = 500; salt < 512; ++salt)
    for (double p : {0.02, 0.1, 0.3, 0.6}) {
      sp::DynamicTreeParams params;
      params.min_path_prob = p;
      params.top_k = 3;
      params.num_nodes = 2 + static_cast<std::int32_t>(salt % 9);
      const std::int32_t depth = 4;
      const std::int64_t vocab = 6;
      const Built t = build(params, depth, vocab, salt);
      check_structure(t, depth, vocab, salt);
      EXPECT_EQ(std::set<Path>(t.paths.begin(), t.paths.end()), reference_beam(params, depth, vocab, salt))
          << "salt " << salt << " p " << p;
      for (const float score : t.scores) EXPECT_GE(score, static_cast<float>(std::log(p)));
      params.top_k = 6;
      params.num_nodes = 1000;
      const Built all = build(params, 2, vocab, salt);
      std::set<Path> want;
      for (const auto& path : whole_tree(2, vocab, salt))
        if (path_score(path, vocab, salt) >= static_cast<float>(std::log(p))) want.insert(path);
      EXPECT_EQ(std::set<Path>(all.paths.begin(), all.paths.end()), want) << "salt " << salt << " p " << p;
    }
  // Nothing above the bound: no drafts, and nothing to expand.
  sp::DynamicTreeParams params;
  params.min_path_prob = 0.9;
  sp::DynamicTreeBuilder b(params, 3, std::vector<float>{std::log(0.5f), std::log(0.5f)});
  EXPECT_TRUE(b.frontier().empty());
  EXPECT_TRUE(b.select().empty());
}

TEST(EagleTree, HandMadeDistribution) {
  // Root: a 0.5, b 0.3, c 0.2 (ids 0, 1, 2; id 3 has probability 0). Below a: a 0.9, b 0.1; below b: c 0.6, a 0.4;
  // below c: a 1.0. With top_k = 2, depth 2 and 4 nodes: level 1 = {a .5, b .3}; level 2 = {aa .45, ab .05, bc .18,
  // ba .12}; the best 4 overall: a .5, aa .45, b .3, bc .18.
  const float ninf = -INFINITY;
  auto L = [](double p) { return p > 0 ? static_cast<float>(std::log(p)) : -INFINITY; };
  sp::DynamicTreeParams params;
  params.top_k = 2;
  params.num_nodes = 4;
  sp::DynamicTreeBuilder b(params, 2, std::vector<float>{L(0.5), L(0.3), L(0.2), ninf});
  ASSERT_EQ(b.frontier(), (std::vector<std::int64_t>{0, 1}));
  b.expand(std::vector<float>{L(0.9), L(0.1), ninf, ninf, /* below b: */ L(0.4), ninf, L(0.6), ninf});
  EXPECT_TRUE(b.frontier().empty());
  const auto sel = b.select();
  std::vector<std::int64_t> tokens;
  for (auto c : sel) tokens.push_back(b.candidates()[static_cast<std::size_t>(c)].token);
  // Creation order: a, b (level 1), then a's children aa, then b's children bc.
  EXPECT_EQ(tokens, (std::vector<std::int64_t>{0, 1, 0, 2}));
  EXPECT_EQ(b.tree_parents(sel), (std::vector<std::int64_t>{0, 0, 1, 2}));
  EXPECT_NEAR(std::exp(b.candidates()[static_cast<std::size_t>(sel[3])].score), 0.18, 1e-6);
}

TEST(EagleTree, ZeroProbabilityChildrenAreNeverKept) {
  sp::DynamicTreeParams params;
  params.top_k = 4;
  params.num_nodes = 10;
  sp::DynamicTreeBuilder b(params, 1, std::vector<float>{0.f, -INFINITY, -INFINITY});
  const auto sel = b.select();
  ASSERT_EQ(sel.size(), 1u);
  EXPECT_EQ(b.candidates()[static_cast<std::size_t>(sel[0])].token, 0);
}

TEST(EagleTree, BadArgumentsAreNamed) {
  sp::DynamicTreeParams params;
  params.top_k = 0;
  try {
    sp::DynamicTreeBuilder b(params, 2, std::vector<float>{0.f});
    ADD_FAILURE() << "expected an error";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("top_k"), std::string::npos) << e.what();
  }
  params.top_k = 2;
  for (double p : {-0.1, 1.5}) {
    sp::DynamicTreeParams bad = params;
    bad.min_path_prob = p;
    try {
      sp::DynamicTreeBuilder t(bad, 2, std::vector<float>{0.f});
      ADD_FAILURE() << "expected an error for min_path_prob " << p;
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find("min_path_prob"), std::string::npos) << e.what();
    }
  }
  sp::DynamicTreeBuilder b(params, 2, std::vector<float>{0.f, -1.f, -2.f});
  try {
    b.expand(std::vector<float>{0.f});
    ADD_FAILURE() << "expected an error";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("logprobs"), std::string::npos) << e.what();
  }
}
