// Block verification (sampling/block.hpp): the algorithm checked exactly by enumeration (lossless, and never fewer
// accepted drafts in expectation than token-level), the implementation checked against it and against the target
// under docs/design.md's 6-sigma bound (the whole block's outcome, the first emitted token, the joint distribution of the
// first two tokens over several decoding steps, the number accepted), greedy and deterministic rows equal to
// verify_chain, and every bad input reported by name with the outputs untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/logits.hpp"
#include "stats.hpp"

namespace specdec {
namespace {

using test::matches_distribution;
using Prefix = std::vector<int>;

// ---------------------------------------------------------------------------------------------------------------
// A context-dependent pair of models over a small vocabulary: the target's and the draft's next-token rows are
// functions of the whole prefix (drawn once per prefix from a seeded generator).

enum class DraftKind { kRandom, kEqual, kOneHot, kZerosWherePositive, kDisjoint };

struct Model {
  std::int64_t V = 4;
  std::uint64_t salt = 1;
  DraftKind kind = DraftKind::kRandom;
  double target_zeros = 0.0;
  double concentration = 0.6;
  std::function<std::vector<float>(std::vector<float>)> process;  // optional post-processing of target rows
  mutable std::map<Prefix, std::vector<float>> p_rows, q_rows;

  std::mt19937_64 rng_for(const Prefix& prefix, std::uint64_t which) const {
    std::uint64_t h = salt * 0x9E3779B97F4A7C15ull + which;
    for (int x : prefix) h = (h ^ static_cast<std::uint64_t>(x + 1)) * 0x100000001B3ull;
    return std::mt19937_64(h);
  }
  const std::vector<float>& p(const Prefix& prefix) const {
    auto it = p_rows.find(prefix);
    if (it != p_rows.end()) return it->second;
    auto rng = rng_for(prefix, 1);
    std::vector<float> row = test::random_row(rng, V, target_zeros, concentration);
    if (kind == DraftKind::kDisjoint)  // target on even ids only
      for (std::int64_t x = 1; x < V; x += 2) row[x] = 0.0f;
    if (process) row = process(row);
    double s = 0;
    for (float v : row) s += v;
    for (float& v : row) v = static_cast<float>(v / s);
    return p_rows.emplace(prefix, row).first->second;
  }
  const std::vector<float>& q(const Prefix& prefix) const {
    auto it = q_rows.find(prefix);
    if (it != q_rows.end()) return it->second;
    auto rng = rng_for(prefix, 2);
    std::vector<float> row;
    switch (kind) {
      case DraftKind::kEqual: row = p(prefix); break;
      case DraftKind::kOneHot:
        row.assign(static_cast<std::size_t>(V), 0.0f);
        row[rng() % V] = 1.0f;
        break;
      case DraftKind::kZerosWherePositive: row = test::random_row(rng, V, 0.5, concentration); break;
      case DraftKind::kDisjoint:
        row = test::random_row(rng, V, 0.0, concentration);
        for (std::int64_t x = 0; x < V; x += 2) row[x] = 0.0f;
        {
          double s = 0;
          for (float v : row) s += v;
          for (float& v : row) v = static_cast<float>(v / s);
        }
        break;
      default: row = test::random_row(rng, V, 0.0, concentration); break;
    }
    return q_rows.emplace(prefix, row).first->second;
  }
};

Prefix extend(Prefix a, const Prefix& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Every sequence of length k over V tokens, in lexicographic order.
void for_each_sequence(std::int64_t V, int k, const std::function<void(const Prefix&)>& f) {
  Prefix x(static_cast<std::size_t>(k), 0);
  for (;;) {
    f(x);
    int i = k - 1;
    while (i >= 0 && ++x[static_cast<std::size_t>(i)] == V) x[static_cast<std::size_t>(i--)] = 0;
    if (i < 0) return;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The algorithm in double precision (Algorithm 2 of the paper), by enumeration of the draft block.

struct Exact {
  std::vector<double> tau;            // P(tau = t), t = 0..K
  std::map<Prefix, double> outcome;   // P(emitted block = w), w = accepted drafts + one token
  double mean_tau = 0.0;
};

Exact exact_block(const Model& m, const Prefix& ctx, int K) {
  Exact e;
  e.tau.assign(static_cast<std::size_t>(K + 1), 0.0);
  const std::int64_t V = m.V;
  for_each_sequence(V, K, [&](const Prefix& X) {
    double qx = 1.0;
    std::vector<double> w(static_cast<std::size_t>(K + 1), 1.0), h(static_cast<std::size_t>(K + 1), 0.0);
    for (int i = 1; i <= K; ++i) {
      const Prefix pre = extend(ctx, Prefix(X.begin(), X.begin() + i - 1));
      const double q = m.q(pre)[X[i - 1]], p = m.p(pre)[X[i - 1]];
      qx *= q;
      if (qx == 0.0) return;
      w[i] = std::min(w[i - 1] * p / q, 1.0);
    }
    auto residual = [&](int i) {
      const Prefix pre = extend(ctx, Prefix(X.begin(), X.begin() + i));
      std::vector<double> r(static_cast<std::size_t>(V));
      for (std::int64_t x = 0; x < V; ++x) r[x] = std::max(w[i] * m.p(pre)[x] - m.q(pre)[x], 0.0);
      return r;
    };
    for (int i = 1; i < K; ++i) {
      double s = 0.0;
      for (double v : residual(i)) s += v;
      const double den = s + 1.0 - w[i];
      h[i] = den > 0.0 ? s / den : 0.0;
    }
    h[K] = w[K];
    for (int t = 0; t <= K; ++t) {
      double pt = t == 0 ? 1.0 : h[t];
      for (int j = t + 1; j <= K; ++j) pt *= 1.0 - h[j];
      if (pt <= 0.0) continue;
      e.tau[t] += qx * pt;
      e.mean_tau += qx * pt * t;
      std::vector<double> next;
      if (t == K) {
        const auto& row = m.p(extend(ctx, X));
        next.assign(row.begin(), row.end());
      } else {
        next = residual(t);
      }
      double s = 0.0;
      for (double v : next) s += v;
      if (s <= 0.0) {  // only through rounding (P ~= Q): the implementation falls back to P
        const auto& row = m.p(extend(ctx, Prefix(X.begin(), X.begin() + t)));
        next.assign(row.begin(), row.end());
        s = 0.0;
        for (double v : next) s += v;
      }
      for (std::int64_t y = 0; y < V; ++y) {
        if (next[y] <= 0.0) continue;
        Prefix out(X.begin(), X.begin() + t);
        out.push_back(static_cast<int>(y));
        e.outcome[out] += qx * pt * next[y] / s;
      }
    }
  });
  return e;
}

/// Token-level's expected number of accepted drafts: sum over the block of q(X) sum_k prod_{j <= k} min(1, p / q).
double exact_token_mean(const Model& m, const Prefix& ctx, int K) {
  double mean = 0.0;
  for_each_sequence(m.V, K, [&](const Prefix& X) {
    double qx = 1.0, a = 1.0;
    for (int i = 1; i <= K; ++i) {
      const Prefix pre = extend(ctx, Prefix(X.begin(), X.begin() + i - 1));
      qx *= m.q(pre)[X[i - 1]];
    }
    if (qx == 0.0) return;
    for (int i = 1; i <= K; ++i) {
      const Prefix pre = extend(ctx, Prefix(X.begin(), X.begin() + i - 1));
      a *= std::min(1.0, static_cast<double>(m.p(pre)[X[i - 1]]) / m.q(pre)[X[i - 1]]);
      mean += qx * a;
    }
  });
  return mean;
}

/// The target's probability of the sequence `z` after `ctx`.
double target_probability(const Model& m, const Prefix& ctx, const Prefix& z) {
  double pr = 1.0;
  for (std::size_t k = 0; k < z.size(); ++k) pr *= m.p(extend(ctx, Prefix(z.begin(), z.begin() + k)))[z[k]];
  return pr;
}

/// Largest |P(stream starts with z) - target(z)| over every z of length K + 1, where the stream is the emitted block
/// followed by sampling from the target: 0 for a lossless verifier.
double exact_stream_error(const Model& m, const Exact& e, int K) {
  double worst = 0.0;
  for_each_sequence(m.V, K + 1, [&](const Prefix& z) {
    double total = 0.0;
    for (const auto& [w, pw] : e.outcome) {
      if (!std::equal(w.begin(), w.end(), z.begin())) continue;
      total += pw * target_probability(m, w, Prefix(z.begin() + static_cast<std::ptrdiff_t>(w.size()), z.end()));
    }
    worst = std::max(worst, std::abs(total - target_probability(m, {}, z)));
  });
  return worst;
}

// ---------------------------------------------------------------------------------------------------------------
// The implementation, one request at a time.

struct Step {
  std::vector<float> p, q;  // [K + 1, V], [K, V]
  std::vector<std::int32_t> drafts;
};

Step make_step(const Model& m, const Prefix& ctx, int K, std::mt19937_64& rng) {
  Step s;
  Prefix pre = ctx;
  for (int i = 0; i < K; ++i) {
    const auto& q = m.q(pre);
    const auto x = static_cast<std::int32_t>(test::draw_from(rng, q));
    s.q.insert(s.q.end(), q.begin(), q.end());
    const auto& p = m.p(pre);
    s.p.insert(s.p.end(), p.begin(), p.end());
    s.drafts.push_back(x);
    pre.push_back(x);
  }
  const auto& p = m.p(pre);
  s.p.insert(s.p.end(), p.begin(), p.end());
  return s;
}

struct Verified {
  std::vector<std::int32_t> tokens;
  std::int32_t accepted = -1;
};

Verified verify(const Model& m, const Step& s, std::uint64_t seed, std::int64_t position, bool block = true,
                bool pass_probs = true) {
  const auto K = static_cast<std::int64_t>(s.drafts.size());
  std::vector<std::int32_t> out(static_cast<std::size_t>(K + 1), -7);
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(K), 9);
  std::vector<float> scratch(static_cast<std::size_t>(num_tiles(m.V)));
  std::int32_t n = -1;
  const float* q = pass_probs ? s.q.data() : nullptr;
  const Status st =
      block ? verify_block_request<std::int32_t>(m.V, K, s.drafts.data(), q, s.p.data(), seed, position, false,
                                                 out.data(), &n, flags.data(), scratch.data())
            : verify_chain_request<std::int32_t>(m.V, K, s.drafts.data(), q, s.p.data(), seed, position, false, 1.0f,
                                                 out.data(), &n, flags.data(), scratch.data());
  EXPECT_EQ(st, Status::kSuccess);
  Verified v;
  if (st != Status::kSuccess) return v;
  for (std::int64_t j = 0; j < K; ++j) EXPECT_EQ(flags[j], j < n ? 1 : 0);
  for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(out[j], s.drafts[j]);
  v.accepted = n;
  v.tokens.assign(out.begin(), out.begin() + n + 1);
  return v;
}

/// Index of a block outcome among every sequence of length 1..K+1 (for histograms).
std::int64_t outcome_index(const Prefix& w, std::int64_t V) {
  std::int64_t base = 0, width = V, idx = 0;
  for (std::size_t len = 1; len < w.size(); ++len, width *= V) base += width;
  for (int x : w) idx = idx * V + x;
  return base + idx;
}

// ---------------------------------------------------------------------------------------------------------------
// The algorithm itself, exactly.

// The paper's example (section 3): binary vocabulary, target (1/3, 2/3), draft (2/3, 1/3), block of 2: token-level
// accepts 10/9 drafts in expectation, block verification 11/9.
TEST(BlockExact, PaperExample) {
  Model m;
  m.V = 2;
  for (int len = 0; len <= 3; ++len)
    for_each_sequence(2, len, [&](const Prefix& pre) {
      m.p_rows[pre] = {1.0f / 3, 2.0f / 3};
      m.q_rows[pre] = {2.0f / 3, 1.0f / 3};
    });
  const Exact e = exact_block(m, {}, 2);
  EXPECT_NEAR(e.mean_tau, 11.0 / 9.0, 1e-6);
  EXPECT_NEAR(exact_token_mean(m, {}, 2), 10.0 / 9.0, 1e-6);
  EXPECT_LT(exact_stream_error(m, e, 2), 1e-6);
}

// Lossless and never behind token-level, on random context-dependent pairs (every draft kind).
TEST(BlockExact, LosslessAndAtLeastTokenLevelOnRandomPairs) {
  int strictly_better = 0, cases = 0;
  for (std::uint64_t salt = 1; salt <= 40; ++salt) {
    Model m;
    m.salt = salt;
    m.V = 2 + static_cast<std::int64_t>(salt % 3);
    m.kind = static_cast<DraftKind>(salt % 5);
    m.target_zeros = salt % 4 == 0 ? 0.3 : 0.0;
    const int K = 1 + static_cast<int>(salt % 4);
    const Exact e = exact_block(m, {}, K);
    const double token = exact_token_mean(m, {}, K);
    // 1e-6: the float rows sum to 1 only within ~1e-7.
    EXPECT_GE(e.mean_tau, token - 1e-6) << "salt " << salt << " V " << m.V << " K " << K << " diff " << e.mean_tau - token;
    EXPECT_LT(exact_stream_error(m, e, K), 1e-6) << "salt " << salt;
    double total = 0.0;
    for (double t : e.tau) total += t;
    EXPECT_NEAR(total, 1.0, 1e-6);
    strictly_better += e.mean_tau > token + 1e-6;
    ++cases;
  }
  EXPECT_GT(strictly_better, cases / 4);  // the gain is real, not only a tie
}

// ---------------------------------------------------------------------------------------------------------------
// The implementation against the algorithm and against the target (6 sigma).

void expect_step_matches_algorithm(const Model& m, int K, int trials, std::uint64_t seed) {
  const Exact e = exact_block(m, {}, K);
  std::int64_t categories = 0;
  for (std::int64_t len = 1, width = m.V; len <= K + 1; ++len, width *= m.V) categories += width;
  std::vector<double> want(static_cast<std::size_t>(categories), 0.0);
  for (const auto& [w, pw] : e.outcome) want[outcome_index(w, m.V)] += pw;
  std::vector<std::int64_t> got(want.size(), 0), tau(static_cast<std::size_t>(K + 1), 0),
      first(static_cast<std::size_t>(m.V), 0);
  std::mt19937_64 rng(seed);
  for (int t = 0; t < trials; ++t) {
    const Step s = make_step(m, {}, K, rng);
    const Verified v = verify(m, s, seed * 1000003 + t, 100);
    ASSERT_GE(v.accepted, 0);
    ++got[outcome_index(Prefix(v.tokens.begin(), v.tokens.end()), m.V)];
    ++tau[v.accepted];
    ++first[v.tokens[0]];
  }
  EXPECT_TRUE(matches_distribution(got, want)) << "the whole block (accepted drafts + token)";
  EXPECT_TRUE(matches_distribution(tau, e.tau)) << "number of accepted drafts";
  const auto& p0 = m.p({});
  EXPECT_TRUE(matches_distribution(first, test::as_double(p0))) << "first emitted token vs the target";
}

TEST(BlockStats, RandomPairsMatchTheAlgorithm) {
  Model m;
  m.salt = 11;
  m.V = 3;
  expect_step_matches_algorithm(m, 3, 100000, 1);
}

TEST(BlockStats, DraftWithZerosWhereTargetIsPositive) {
  Model m;
  m.salt = 12;
  m.V = 4;
  m.kind = DraftKind::kZerosWherePositive;
  expect_step_matches_algorithm(m, 2, 80000, 2);
}

TEST(BlockStats, OneHotDraft) {
  Model m;
  m.salt = 13;
  m.V = 3;
  m.kind = DraftKind::kOneHot;
  expect_step_matches_algorithm(m, 3, 60000, 3);
}

TEST(BlockStats, TargetWithZerosAndNearGreedyTemperature) {
  Model m;
  m.salt = 14;
  m.V = 4;
  m.target_zeros = 0.3;
  SamplingParams sp;
  sp.temperature = 0.25f;  // sharpen log-probabilities: near greedy
  m.process = [sp](std::vector<float> row) {
    std::vector<float> logits(row.size());
    for (std::size_t i = 0; i < row.size(); ++i)
      logits[i] = row[i] > 0 ? std::log(row[i]) : -std::numeric_limits<float>::infinity();
    return logits_to_probs(logits, sp);
  };
  expect_step_matches_algorithm(m, 3, 60000, 4);
}

TEST(BlockStats, TopKTruncatedTarget) {
  Model m;
  m.salt = 15;
  m.V = 5;
  SamplingParams sp;
  sp.top_k = 2;
  m.process = [sp](std::vector<float> row) {
    std::vector<float> logits(row.size());
    for (std::size_t i = 0; i < row.size(); ++i) logits[i] = std::log(row[i] + 1e-6f);
    return logits_to_probs(logits, sp);
  };
  expect_step_matches_algorithm(m, 2, 60000, 5);
}

TEST(BlockStats, DisjointSupportsNeverAccept) {
  Model m;
  m.salt = 16;
  m.V = 4;
  m.kind = DraftKind::kDisjoint;
  std::mt19937_64 rng(6);
  std::vector<std::int64_t> first(4, 0);
  for (int t = 0; t < 40000; ++t) {
    const Verified v = verify(m, make_step(m, {}, 3, rng), 600 + t, 7);
    ASSERT_EQ(v.accepted, 0);
    ++first[v.tokens[0]];
  }
  EXPECT_TRUE(matches_distribution(first, test::as_double(m.p({}))));
}

// p == q: every draft is accepted (w_i = 1 and h_K = 1), and the bonus token follows the target.
TEST(BlockStats, EqualDistributionsAcceptEverything) {
  Model m;
  m.salt = 17;
  m.V = 6;
  m.kind = DraftKind::kEqual;
  const int K = 4;
  std::mt19937_64 rng(7);
  std::map<Prefix, std::int64_t> seen;
  for (int t = 0; t < 30000; ++t) {
    const Step s = make_step(m, {}, K, rng);
    const Verified v = verify(m, s, 700 + t, 0);
    ASSERT_EQ(v.accepted, K);
    ++seen[Prefix(v.tokens.begin(), v.tokens.end())];
  }
  // The whole emitted block (K + 1 tokens) is distributed as the target's K + 1 tokens.
  std::vector<std::int64_t> got;
  std::vector<double> want;
  for_each_sequence(m.V, K + 1, [&](const Prefix& z) {
    const auto it = seen.find(z);
    got.push_back(it == seen.end() ? 0 : it->second);
    want.push_back(target_probability(m, {}, z));
  });
  EXPECT_TRUE(matches_distribution(got, want));
}

// Several tiles (V = 2500, the last tile partial) with a context-independent pair: the first emitted token follows
// the target and the accepted count follows the exact distribution.
TEST(BlockStats, SeveralTilesVocab) {
  std::mt19937_64 rng(8);
  const std::int64_t V = 2500;
  const int K = 3;
  std::vector<std::vector<float>> p, q;
  for (int i = 0; i <= K; ++i) p.push_back(test::random_row(rng, V, 0.0, 0.6));
  for (int i = 0; i < K; ++i) q.push_back(test::random_row(rng, V, 0.3, 0.6));
  // Mass of the last rows concentrated in the last partial tile.
  for (std::int64_t x = 0; x < 2048; ++x) p[1][x] *= 0.01f;
  {
    double sum = 0;
    for (float v : p[1]) sum += v;
    for (float& v : p[1]) v = static_cast<float>(v / sum);
  }
  Model m;
  m.V = V;
  Step s;
  for (auto& r : q) s.q.insert(s.q.end(), r.begin(), r.end());
  for (auto& r : p) s.p.insert(s.p.end(), r.begin(), r.end());
  std::vector<std::int64_t> first(static_cast<std::size_t>(V), 0), tau(K + 1, 0);
  const int trials = 30000;
  for (int t = 0; t < trials; ++t) {
    s.drafts.clear();
    for (int i = 0; i < K; ++i) s.drafts.push_back(static_cast<std::int32_t>(test::draw_from(rng, q[i])));
    const Verified v = verify(m, s, 900 + t, 1000);
    ASSERT_GE(v.accepted, 0);
    ++first[v.tokens[0]];
    ++tau[v.accepted];
  }
  EXPECT_TRUE(matches_distribution(first, test::as_double(p[0])));
  // Context-independent rows: the same enumeration over a model whose rows do not depend on the prefix is too large
  // here (V^K); check instead the mean accepted count against token-level's exact value from below.
  double token = 0.0, a = 1.0;
  for (int i = 0; i < K; ++i) {
    a *= test::overlap(p[i], q[i]);
    token += a;
  }
  double mean = 0.0, var = 0.0;
  for (int t = 0; t <= K; ++t) mean += static_cast<double>(t) * tau[t] / trials;
  for (int t = 0; t <= K; ++t) var += (t - mean) * (t - mean) * tau[t] / trials;
  EXPECT_GE(mean, token - 6.0 * std::sqrt(var / trials) - 1e-3);
}

// Decoding two tokens over as many verification steps as it takes (the draft drawn from q at each step, positions
// advancing by the emitted count, one seed per sequence): the joint distribution of the first two tokens is the
// target's. This also covers the independence of the uniforms across steps (eta keyed by the block's start).
void expect_joint_of_first_two(const Model& m, int K, int trials, std::uint64_t seed) {
  const std::int64_t V = m.V;
  std::vector<std::int64_t> got(static_cast<std::size_t>(V * V), 0);
  std::mt19937_64 rng(seed);
  int multi_step = 0;
  for (int t = 0; t < trials; ++t) {
    Prefix emitted;
    std::int64_t position = 37;
    int steps = 0;
    while (emitted.size() < 2) {
      const Step s = make_step(m, emitted, K, rng);
      const Verified v = verify(m, s, seed * 7777 + t, position);
      ASSERT_GE(v.accepted, 0);
      emitted.insert(emitted.end(), v.tokens.begin(), v.tokens.end());
      position += static_cast<std::int64_t>(v.tokens.size());
      ++steps;
    }
    multi_step += steps > 1;
    ++got[emitted[0] * V + emitted[1]];
  }
  std::vector<double> want(got.size());
  for (std::int64_t a = 0; a < V; ++a)
    for (std::int64_t b = 0; b < V; ++b)
      want[a * V + b] = target_probability(m, {}, {static_cast<int>(a), static_cast<int>(b)});
  EXPECT_TRUE(matches_distribution(got, want));
  EXPECT_GT(multi_step, trials / 20);  // the second token often comes from a second step
}

TEST(BlockStats, JointOfFirstTwoTokens) {
  Model m;
  m.salt = 21;
  m.V = 5;
  expect_joint_of_first_two(m, 3, 100000, 21);
}

TEST(BlockStats, JointOfFirstTwoTokensDraftWithZeros) {
  Model m;
  m.salt = 22;
  m.V = 4;
  m.kind = DraftKind::kZerosWherePositive;
  m.target_zeros = 0.25;
  expect_joint_of_first_two(m, 2, 80000, 22);
}

// The implementation's mean accepted count beside token-level's, both on the same drafts and seeds.
TEST(BlockStats, AcceptsAtLeastAsManyAsTokenLevel) {
  for (std::uint64_t salt : {31u, 32u, 33u}) {
    Model m;
    m.salt = salt;
    m.V = 4;
    const int K = 4, trials = 40000;
    std::mt19937_64 rng(salt);
    double block_sum = 0, token_sum = 0;
    for (int t = 0; t < trials; ++t) {
      const Step s = make_step(m, {}, K, rng);
      block_sum += verify(m, s, salt * 100 + t, 5, true).accepted;
      token_sum += verify(m, s, salt * 100 + t, 5, false).accepted;
    }
    const double exact_block_mean = exact_block(m, {}, K).mean_tau, exact_token = exact_token_mean(m, {}, K);
    const double sd = std::sqrt(static_cast<double>(K * K) / trials);  // a crude bound on the means' deviations
    EXPECT_NEAR(block_sum / trials, exact_block_mean, 6 * sd) << "salt " << salt;
    EXPECT_NEAR(token_sum / trials, exact_token, 6 * sd) << "salt " << salt;
    EXPECT_GE(exact_block_mean, exact_token);
  }
}

// expected_accepted_drafts, averaged over the drafted blocks with their draft probabilities, gives both methods' exact
// expectations (the figures the decoder's paired measurement reports).
TEST(BlockExact, ExpectedAcceptedDraftsAveragesToTheExactMeans) {
  for (std::uint64_t salt : {41u, 42u, 43u, 44u}) {
    Model m;
    m.salt = salt;
    m.V = 3 + static_cast<std::int64_t>(salt % 2);
    m.kind = salt == 43 ? DraftKind::kZerosWherePositive : DraftKind::kRandom;
    const int K = 3;
    double token = 0.0, block = 0.0;
    for_each_sequence(m.V, K, [&](const Prefix& X) {
      Step st;
      double qx = 1.0;
      Prefix pre;
      for (int i = 0; i < K; ++i) {
        const auto& q = m.q(pre);
        const auto& p = m.p(pre);
        qx *= q[X[i]];
        st.q.insert(st.q.end(), q.begin(), q.end());
        st.p.insert(st.p.end(), p.begin(), p.end());
        st.drafts.push_back(X[i]);
        pre.push_back(X[i]);
      }
      const auto& p = m.p(pre);
      st.p.insert(st.p.end(), p.begin(), p.end());
      if (qx == 0.0) return;
      ExpectedAccepted e;
      ASSERT_EQ(expected_accepted_drafts<std::int32_t>(m.V, K, st.drafts.data(), st.q.data(), st.p.data(), e),
                Status::kSuccess);
      token += qx * e.token;
      block += qx * e.block;
    });
    EXPECT_NEAR(token, exact_token_mean(m, {}, K), 1e-5) << salt;
    EXPECT_NEAR(block, exact_block(m, {}, K).mean_tau, 1e-5) << salt;
    EXPECT_GE(block, token - 1e-6) << salt;
  }
  ExpectedAccepted e;
  const std::int32_t bad_id = 7;
  const float row[4] = {0.25f, 0.25f, 0.25f, 0.25f};
  EXPECT_EQ(expected_accepted_drafts<std::int32_t>(4, 1, &bad_id, row, row, e), Status::kInvalidTokenId);
  EXPECT_EQ(expected_accepted_drafts<std::int32_t>(0, 1, &bad_id, row, row, e), Status::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------------------
// Rows that keep token-level's rule, batches and determinism.

struct Batch {
  std::int64_t B = 0, V = 0, stride = 0;
  std::vector<std::int32_t> cu, ids;
  std::vector<float> p, q;
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> positions;
  std::vector<std::uint8_t> greedy, has_q;
};

Batch random_batch(std::mt19937_64& rng, std::int64_t V, int B, int max_k, double greedy_frac) {
  Batch c;
  c.B = B;
  c.V = V;
  c.cu.push_back(0);
  std::uniform_real_distribution<double> U(0, 1);
  for (int b = 0; b < B; ++b) c.cu.push_back(c.cu.back() + static_cast<std::int32_t>(rng() % (max_k + 1)));
  const std::int64_t N = c.cu.back();
  c.stride = max_k + 1;
  for (int b = 0; b < B; ++b) {
    const std::int64_t k = c.cu[b + 1] - c.cu[b];
    for (std::int64_t r = 0; r <= k; ++r) {
      const auto row = test::random_row(rng, V, 0.2, 0.5);
      c.p.insert(c.p.end(), row.begin(), row.end());
    }
    c.seeds.push_back(rng());
    c.positions.push_back(static_cast<std::int64_t>(rng() % 1000));
    c.greedy.push_back(U(rng) < greedy_frac);
    c.has_q.push_back(U(rng) < 0.5 ? 0 : 1);
  }
  for (std::int64_t j = 0; j < N; ++j) {
    const auto row = test::random_row(rng, V, 0.2, 0.5);
    c.q.insert(c.q.end(), row.begin(), row.end());
    c.ids.push_back(static_cast<std::int32_t>(rng() % 2 ? test::draw_from(rng, row) : rng() % V));
  }
  return c;
}

ChainVerifyArgs<std::int32_t> args_of(const Batch& c, bool with_q, bool per_request_kind) {
  ChainVerifyArgs<std::int32_t> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.cu_num_draft_tokens = c.cu.data();
  a.draft_token_ids = c.ids.data();
  a.draft_probs = with_q ? c.q.data() : nullptr;
  a.target_probs = c.p.data();
  a.seeds = c.seeds.data();
  a.positions = c.positions.data();
  a.greedy = c.greedy.data();
  a.has_draft_probs = with_q && per_request_kind ? c.has_q.data() : nullptr;
  return a;
}

struct Outputs {
  std::vector<std::int32_t> out, n;
  std::vector<std::uint8_t> flags;
  Outputs(const Batch& c)
      : out(static_cast<std::size_t>(c.B * c.stride), -5), n(static_cast<std::size_t>(c.B), -5),
        flags(static_cast<std::size_t>(c.cu.back()), 7) {}
  ChainVerifyOutputs<std::int32_t> view(std::int64_t stride) {
    return {out.data(), stride, n.data(), flags.data()};
  }
  bool operator==(const Outputs&) const = default;
};

// Greedy rows and rows without draft probabilities follow verify_chain bit for bit (all-greedy, no-probs and mixed
// batches with a per-request draft kind).
TEST(Block, GreedyAndDeterministicRowsEqualVerifyChain) {
  std::mt19937_64 rng(41);
  for (int rep = 0; rep < 200; ++rep) {
    const std::int64_t V = rep % 3 == 0 ? 1500 : 2 + static_cast<std::int64_t>(rng() % 9);
    Batch c = random_batch(rng, V, 1 + rep % 5, 5, rep % 2 ? 1.0 : 0.0);
    const bool with_q = rep % 4 != 1;  // rep % 4 == 1: no draft probs at all
    const bool mixed = rep % 4 == 3;   // per-request draft kind
    if (with_q && !mixed) std::fill(c.greedy.begin(), c.greedy.end(), 1);  // then only greedy rows
    const auto a = args_of(c, with_q, mixed);
    Outputs block(c), chain(c);
    ASSERT_TRUE(verify_block(a, block.view(c.stride)).ok()) << rep;
    ASSERT_TRUE(verify_chain(a, chain.view(c.stride)).ok()) << rep;
    for (std::int64_t b = 0; b < c.B; ++b) {
      const bool token_rule = c.greedy[b] || !with_q || (mixed && !c.has_q[b]);
      if (!token_rule) continue;
      for (std::int64_t e = 0; e < c.stride; ++e)
        ASSERT_EQ(block.out[b * c.stride + e], chain.out[b * c.stride + e]) << rep << " request " << b;
      ASSERT_EQ(block.n[b], chain.n[b]) << rep << " request " << b;
    }
  }
}

// A request's tokens do not depend on its batch, and the batch entry equals the single-request entry.
TEST(Block, RequestAloneEqualsRequestInBatch) {
  std::mt19937_64 rng(42);
  for (int rep = 0; rep < 100; ++rep) {
    const Batch c = random_batch(rng, 3 + rep % 40, 6, 6, 0.2);
    const auto a = args_of(c, true, rep % 2 == 1);
    Outputs all(c);
    ASSERT_TRUE(verify_block(a, all.view(c.stride)).ok());
    std::vector<float> scratch(static_cast<std::size_t>(num_tiles(c.V)));
    for (std::int64_t b = 0; b < c.B; ++b) {
      const std::int64_t s = c.cu[b], k = c.cu[b + 1] - s;
      std::vector<std::int32_t> out(static_cast<std::size_t>(k + 1));
      std::vector<std::uint8_t> flags(static_cast<std::size_t>(k));
      std::int32_t n = -1;
      const bool q = rep % 2 == 0 || c.has_q[b];
      ASSERT_EQ(verify_block_request<std::int32_t>(c.V, k, c.ids.data() + s, q ? c.q.data() + s * c.V : nullptr,
                                                   c.p.data() + (s + b) * c.V, c.seeds[b], c.positions[b],
                                                   c.greedy[b] != 0, out.data(), &n, flags.data(), scratch.data()),
                Status::kSuccess);
      ASSERT_EQ(n, all.n[b]);
      for (std::int64_t e = 0; e <= n; ++e) ASSERT_EQ(out[e], all.out[b * c.stride + e]);
      for (std::int64_t e = n + 1; e < c.stride; ++e) ASSERT_EQ(all.out[b * c.stride + e], -1);
      for (std::int64_t j = 0; j < k; ++j) ASSERT_EQ(flags[j], all.flags[s + j]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Bad input: named statuses, outputs untouched.

struct Fixture {
  // Two requests over V = 4: request 0 has 2 drafts, request 1 has 1.
  std::vector<std::int32_t> cu{0, 2, 3}, ids{1, 2, 3};
  std::vector<float> q{0.1f, 0.6f, 0.2f, 0.1f, 0.25f, 0.25f, 0.25f, 0.25f, 0.1f, 0.2f, 0.3f, 0.4f};
  std::vector<float> p{0.4f, 0.3f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.7f, 0.25f, 0.25f, 0.25f, 0.25f,
                       0.3f, 0.3f, 0.2f, 0.2f, 0.5f, 0.5f, 0.0f, 0.0f};
  std::vector<std::uint64_t> seeds{5, 6};
  std::vector<std::int64_t> positions{10, 20};
  std::vector<std::int32_t> out = std::vector<std::int32_t>(6, -9), n{-9, -9};
  std::vector<std::uint8_t> flags{9, 9, 9};
  float lenience = 1.0f;
  std::int64_t stride = 3;
  VerifyResult call() {
    ChainVerifyArgs<std::int32_t> a;
    a.batch_size = 2;
    a.vocab_size = 4;
    a.cu_num_draft_tokens = cu.data();
    a.draft_token_ids = ids.data();
    a.draft_probs = q.data();
    a.target_probs = p.data();
    a.seeds = seeds.data();
    a.positions = positions.data();
    a.lenience = lenience;
    return verify_block(a, ChainVerifyOutputs<std::int32_t>{out.data(), stride, n.data(), flags.data()});
  }
  bool untouched() const {
    for (auto v : out)
      if (v != -9) return false;
    return n[0] == -9 && n[1] == -9 && flags[0] == 9 && flags[1] == 9 && flags[2] == 9;
  }
};

TEST(BlockErrors, ValidBatchWritesEverything) {
  Fixture f;
  ASSERT_TRUE(f.call().ok());
  EXPECT_FALSE(f.untouched());
  for (int b = 0; b < 2; ++b) {
    ASSERT_GE(f.n[b], 0);
    for (int e = f.n[b] + 1; e < 3; ++e) EXPECT_EQ(f.out[b * 3 + e], -1);
  }
}

TEST(BlockErrors, TokenIdOutOfRange) {
  for (std::int32_t bad : {4, -1}) {
    Fixture f;
    f.ids[2] = bad;
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidTokenId);
    EXPECT_EQ(r.request, 1);
    EXPECT_EQ(r.position, 0);
    EXPECT_STREQ(r.argument, "draft_token_ids");
    EXPECT_TRUE(f.untouched());
  }
}

TEST(BlockErrors, BadValueAtADraftedToken) {
  for (float bad : {std::nanf(""), -0.5f, std::numeric_limits<float>::infinity()}) {
    Fixture f;
    f.p[4 + 2] = bad;  // request 0, draft position 1, the drafted token (id 2)
    VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidProbability) << bad;
    EXPECT_EQ(r.request, 0);
    EXPECT_EQ(r.position, 1);
    EXPECT_STREQ(r.argument, "target_probs");
    EXPECT_TRUE(f.untouched());
    Fixture g;
    g.q[1] = bad;  // request 0, draft position 0, drafted token 1
    r = g.call();
    EXPECT_EQ(r.status, Status::kInvalidProbability);
    EXPECT_EQ(r.position, 0);
    EXPECT_STREQ(r.argument, "draft_probs");
    EXPECT_TRUE(g.untouched());
  }
}

// A bad value inside a row that h_i reads in full (row 1 of request 0, not at a drafted token), for a block whose
// bonus test fails (w_2 = 0: the target gives the second draft probability 0).
TEST(BlockErrors, BadValueInsideARowReadForTheStopProbability) {
  Fixture f;
  f.p[4 + 2] = 0.0f;  // P_1(x_2) = 0: w_2 = 0, so eta_2 > h_2 and h_1 reads rows 1 in full
  f.p[4 + 2 + 1] = 0.8f;
  f.q[4 + 0] = std::nanf("");  // Q_1(0), not a drafted token
  const VerifyResult r = f.call();
  EXPECT_EQ(r.status, Status::kInvalidProbability);
  EXPECT_EQ(r.request, 0);
  EXPECT_EQ(r.position, 1);
  EXPECT_TRUE(f.untouched());
}

TEST(BlockErrors, ZeroMassBonusRow) {
  Fixture f;
  // Request 1: one draft, p == q on its first row (w_1 = 1, always accepted), bonus row all zero.
  for (int x = 0; x < 4; ++x) f.p[3 * 4 + x] = f.q[2 * 4 + x];
  for (int x = 0; x < 4; ++x) f.p[4 * 4 + x] = 0.0f;
  const VerifyResult r = f.call();
  EXPECT_EQ(r.status, Status::kZeroMass);
  EXPECT_EQ(r.request, 1);
  EXPECT_EQ(r.position, 1);
  EXPECT_TRUE(f.untouched());
}

TEST(BlockErrors, LenienceMustBeOne) {
  for (float l : {0.5f, 0.0f, 1.5f, std::nanf("")}) {
    Fixture f;
    f.lenience = l;
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidArgument) << l;
    EXPECT_STREQ(r.argument, "lenience");
    EXPECT_TRUE(f.untouched());
  }
}

TEST(BlockErrors, BadLayoutAndPointers) {
  {
    Fixture f;
    f.cu = {0, 3, 2};
    EXPECT_EQ(f.call().status, Status::kInvalidArgument);
    EXPECT_TRUE(f.untouched());
  }
  {
    Fixture f;
    f.cu = {1, 2, 3};
    EXPECT_EQ(f.call().status, Status::kInvalidArgument);
    EXPECT_TRUE(f.untouched());
  }
  {
    Fixture f;
    f.positions[1] = -1;
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidArgument);
    EXPECT_STREQ(r.argument, "positions");
    EXPECT_TRUE(f.untouched());
  }
  {
    Fixture f;
    f.stride = 2;  // request 0 needs K + 1 = 3
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidArgument);
    EXPECT_STREQ(r.argument, "output_stride");
    EXPECT_TRUE(f.untouched());
  }
  // The checked single-request entry.
  std::vector<std::int32_t> ids{1, 2}, out(3, -9);
  std::vector<float> q(8, 0.25f), p(12, 0.25f), scratch(1);
  std::int32_t n = -9;
  VerifyResult err;
  EXPECT_EQ(verify_block_request<std::int32_t>(4, -1, ids.data(), q.data(), p.data(), 1, 0, false, out.data(), &n,
                                               nullptr, scratch.data(), nullptr, &err),
            Status::kInvalidArgument);
  EXPECT_STREQ(err.argument, "num_drafts");
  ids[1] = 9;
  EXPECT_EQ(verify_block_request<std::int32_t>(4, 2, ids.data(), q.data(), p.data(), 1, 0, false, out.data(), &n,
                                               nullptr, scratch.data(), nullptr, &err),
            Status::kInvalidTokenId);
  ids[1] = 2;
  EXPECT_EQ(verify_block_request<std::int32_t>(4, 2, ids.data(), q.data(), p.data(), 1, 0, false, out.data(), &n,
                                               nullptr, nullptr, nullptr, &err),
            Status::kInvalidArgument);
  EXPECT_STREQ(err.argument, "tile_masses");
  EXPECT_EQ(n, -9);
  EXPECT_EQ(out, std::vector<std::int32_t>(3, -9));
  EXPECT_EQ(verify_block_request<std::int32_t>(4, 2, ids.data(), q.data(), p.data(), 1, 0, false, out.data(), &n,
                                               nullptr, scratch.data()),
            Status::kSuccess);
  EXPECT_EQ(n, 2);  // p == q
}

}  // namespace
}  // namespace specdec
