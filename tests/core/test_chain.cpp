// Chain verification: distributions of emitted tokens and of the number accepted, under DESIGN.md's 6-sigma bound.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/logits.hpp"
#include "stats.hpp"

namespace specdec {
namespace {

using test::matches_distribution;

struct ChainCase {
  std::int64_t vocab = 0;
  std::vector<std::vector<float>> p;  // K + 1 target rows
  std::vector<std::vector<float>> q;  // K draft rows (drafts are drawn from them)
  bool pass_probs = true;             // false: deterministic drafts (argmax of q), no probs passed
  float lenience = 1.0f;
  int k() const { return static_cast<int>(q.size()); }
};

struct ChainStats {
  std::vector<std::vector<std::int64_t>> token_at;  // [position][token], counted when the position is emitted
  std::vector<std::int64_t> accepted;               // histogram of num_accepted
  std::int64_t first_accepts = 0;
};

ChainStats run(const ChainCase& c, int trials, std::uint64_t base_seed = 1) {
  const int K = c.k();
  const std::int64_t V = c.vocab;
  ChainStats st;
  st.token_at.assign(K + 1, std::vector<std::int64_t>(V));
  st.accepted.assign(K + 1, 0);
  std::vector<float> q_flat, p_flat;
  for (auto& r : c.q) q_flat.insert(q_flat.end(), r.begin(), r.end());
  for (auto& r : c.p) p_flat.insert(p_flat.end(), r.begin(), r.end());
  std::vector<std::int32_t> drafts(K), out(K + 1);
  std::vector<std::uint8_t> flags(K);
  std::vector<float> scratch(num_tiles(V));
  std::mt19937_64 rng(base_seed * 7919 + 17);
  for (int t = 0; t < trials; ++t) {
    for (int i = 0; i < K; ++i) {
      if (c.pass_probs) {
        drafts[i] = static_cast<std::int32_t>(test::draw_from(rng, c.q[i]));
      } else {
        drafts[i] = static_cast<std::int32_t>(std::max_element(c.q[i].begin(), c.q[i].end()) - c.q[i].begin());
      }
    }
    std::int32_t n_acc = -1;
    const Status s = verify_chain_request<std::int32_t>(V, K, drafts.data(), c.pass_probs ? q_flat.data() : nullptr,
                                                        p_flat.data(), base_seed * 1000003 + t, 100, false,
                                                        c.lenience, out.data(), &n_acc, flags.data(), scratch.data());
    EXPECT_EQ(s, Status::kSuccess);
    if (s != Status::kSuccess) break;
    ++st.accepted[n_acc];
    for (int i = 0; i <= n_acc; ++i) ++st.token_at[i][out[i]];
    for (int i = 0; i < K; ++i) EXPECT_EQ(flags[i], i < n_acc ? 1 : 0);
    st.first_accepts += n_acc > 0;
  }
  return st;
}

// [1 - a0, a0 (1 - a1), ..., a0 ... a_{K-1}]
std::vector<double> accepted_distribution(const std::vector<double>& a) {
  std::vector<double> d(a.size() + 1);
  double prefix = 1.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d[i] = prefix * (1.0 - a[i]);
    prefix *= a[i];
  }
  d[a.size()] = prefix;
  return d;
}

void expect_lossless(const ChainCase& c, int trials, std::uint64_t seed = 1) {
  const ChainStats st = run(c, trials, seed);
  for (int i = 0; i <= c.k(); ++i)
    EXPECT_TRUE(matches_distribution(st.token_at[i], test::as_double(c.p[i]))) << "emitted token at position " << i;
  std::vector<double> a;
  for (int i = 0; i < c.k(); ++i) {
    if (c.pass_probs) {
      a.push_back(test::overlap(c.p[i], c.q[i]));
    } else {
      const auto x = std::max_element(c.q[i].begin(), c.q[i].end()) - c.q[i].begin();
      a.push_back(c.p[i][x]);
    }
  }
  EXPECT_TRUE(matches_distribution(st.accepted, accepted_distribution(a))) << "number of accepted drafts";
}

ChainCase random_case(std::uint64_t seed, std::int64_t vocab, int k, double p_zero = 0.0, double q_zero = 0.0) {
  std::mt19937_64 rng(seed);
  ChainCase c;
  c.vocab = vocab;
  for (int i = 0; i <= k; ++i) c.p.push_back(test::random_row(rng, vocab, p_zero, 0.6));
  for (int i = 0; i < k; ++i) c.q.push_back(test::random_row(rng, vocab, q_zero, 0.6));
  return c;
}

TEST(ChainStats, RandomDistributionsSmallVocab) { expect_lossless(random_case(1, 6, 3), 120000); }

TEST(ChainStats, SeveralTilesVocab) {
  // V = 2500 spans three tiles (the last partial); mass spread across them.
  expect_lossless(random_case(2, 2500, 2), 40000);
}

TEST(ChainStats, EqualDistributionsAlwaysAccept) {
  ChainCase c = random_case(3, 8, 3);
  for (int i = 0; i < 3; ++i) c.q[i] = c.p[i];
  const ChainStats st = run(c, 20000);
  EXPECT_EQ(st.accepted[3], 20000);
  EXPECT_TRUE(matches_distribution(st.token_at[3], test::as_double(c.p[3])));
}

TEST(ChainStats, DisjointSupportsNeverAccept) {
  ChainCase c;
  c.vocab = 6;
  c.p = {{0.5f, 0.3f, 0.2f, 0, 0, 0}, {0.1f, 0.2f, 0.7f, 0, 0, 0}, {1.0f / 3, 1.0f / 3, 1.0f / 3, 0, 0, 0}};
  c.q = {{0, 0, 0, 0.2f, 0.3f, 0.5f}, {0, 0, 0, 0.6f, 0.2f, 0.2f}};
  const ChainStats st = run(c, 60000);
  EXPECT_EQ(st.accepted[0], 60000);
  EXPECT_TRUE(matches_distribution(st.token_at[0], test::as_double(c.p[0])));
}

TEST(ChainStats, OneHotDraft) {
  ChainCase c = random_case(4, 7, 2);
  c.q[0] = {0, 0, 1, 0, 0, 0, 0};
  c.q[1] = {0, 0, 0, 0, 0, 1, 0};
  expect_lossless(c, 100000);
}

TEST(ChainStats, DraftWithZerosWhereTargetIsPositive) { expect_lossless(random_case(5, 9, 3, 0.0, 0.5), 100000); }

TEST(ChainStats, TopKAndTopPTruncatedTarget) {
  std::mt19937_64 rng(6);
  std::normal_distribution<float> n(0.0f, 2.0f);
  ChainCase c;
  c.vocab = 12;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> logits(12), draft_logits(12);
    for (auto& l : logits) l = n(rng);
    for (std::size_t j = 0; j < 12; ++j) draft_logits[j] = logits[j] + 0.7f * n(rng);
    SamplingParams sp;
    sp.top_k = 5;
    sp.top_p = 0.8f;
    c.p.push_back(logits_to_probs(logits, sp));
    if (i < 2) c.q.push_back(logits_to_probs(draft_logits, sp));
  }
  expect_lossless(c, 100000);
}

TEST(ChainStats, NearGreedyTemperature) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  ChainCase c;
  c.vocab = 10;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> logits(10), draft_logits(10);
    for (auto& l : logits) l = n(rng);
    logits[3] = logits[7] = 2.0f;  // a near tie at the top
    for (std::size_t j = 0; j < 10; ++j) draft_logits[j] = logits[j] + 0.01f * n(rng);
    SamplingParams sp;
    sp.temperature = 0.05f;
    c.p.push_back(logits_to_probs(logits, sp));
    if (i < 2) c.q.push_back(logits_to_probs(draft_logits, sp));
  }
  expect_lossless(c, 100000);
}

TEST(ChainStats, NoDraftProbsPath) {
  ChainCase c = random_case(8, 7, 3);
  c.pass_probs = false;
  expect_lossless(c, 100000);
}

TEST(ChainStats, ResidualMassOnlyInLastPartialTile) {
  // V = 2100: tokens >= 2048 form the last partial tile; the residual max(p - q, 0) lives only there.
  ChainCase c;
  c.vocab = 2100;
  std::vector<float> p(2100, 0.0f), q(2100, 0.0f);
  for (int x = 0; x < 2048; ++x) {
    p[x] = 0.5f / 2048;
    q[x] = 1.0f / 2048;  // q covers the first two tiles only, and exceeds p there
  }
  double s = 0;
  for (int x = 2048; x < 2100; ++x) s += x % 3 + 1;
  for (int x = 2048; x < 2100; ++x) p[x] = static_cast<float>((x % 3 + 1) * 0.5 / s);
  c.p = {p, p};
  c.q = {q};
  const ChainStats st = run(c, 40000);
  std::int64_t rejected_in_last = 0;
  EXPECT_TRUE(matches_distribution(st.token_at[0], test::as_double(p)));
  for (int x = 2048; x < 2100; ++x) rejected_in_last += st.token_at[0][x];
  EXPECT_EQ(rejected_in_last, st.accepted[0]);  // every rejection lands in the last tile
}

TEST(ChainStats, LenienceRaisesAcceptanceAsPredicted) {
  ChainCase c = random_case(9, 8, 1);
  for (float l : {1.0f, 0.5f, 0.25f}) {
    c.lenience = l;
    const int n = 100000;
    const ChainStats st = run(c, n, 11);
    // Accept x with probability min(1, p / (l q)): acceptance = sum_x min(q, p / l).
    double a = 0.0;
    for (int x = 0; x < 8; ++x) a += std::min<double>(c.q[0][x], c.p[0][x] / l);
    EXPECT_TRUE(matches_distribution({n - st.first_accepts, st.first_accepts}, {1.0 - a, a})) << "lenience " << l;
  }
}

TEST(Chain, GreedyAcceptsWhileDraftEqualsArgmax) {
  const std::int64_t V = 5;
  const std::vector<float> p = {0.1f, 0.6f, 0.1f, 0.1f, 0.1f,   // argmax 1
                                0.3f, 0.3f, 0.2f, 0.1f, 0.1f,   // tie 0/1 -> 0
                                0.0f, 0.0f, 0.0f, 0.0f, 1.0f};  // argmax 4
  std::vector<float> scratch(1);
  std::int32_t out[3], n;
  std::int32_t drafts1[2] = {1, 0};
  ASSERT_EQ(verify_chain_request<std::int32_t>(V, 2, drafts1, nullptr, p.data(), 1, 0, true, 1.0f, out, &n, nullptr,
                                               scratch.data()),
            Status::kSuccess);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(out[2], 4);
  std::int32_t drafts2[2] = {1, 1};
  ASSERT_EQ(verify_chain_request<std::int32_t>(V, 2, drafts2, nullptr, p.data(), 1, 0, true, 1.0f, out, &n, nullptr,
                                               scratch.data()),
            Status::kSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 0);
}

// ---- bad input: every failure names where, and leaves the outputs untouched ----

struct BatchFixture {
  std::int64_t V = 4;
  std::vector<std::int64_t> cu = {0, 2, 3};
  std::vector<std::int64_t> ids = {1, 2, 3};
  std::vector<float> q = std::vector<float>(3 * 4, 0.25f);
  std::vector<float> p = std::vector<float>(5 * 4, 0.25f);
  std::vector<std::uint64_t> seeds = {1, 2};
  std::vector<std::int64_t> positions = {10, 20};
  std::vector<std::int64_t> out = std::vector<std::int64_t>(2 * 3, 777);
  std::vector<std::int32_t> n_acc = std::vector<std::int32_t>(2, 777);
  std::vector<std::uint8_t> flags = std::vector<std::uint8_t>(3, 77);

  VerifyResult call() {
    ChainVerifyArgs<std::int64_t, std::int64_t> a;
    a.batch_size = 2;
    a.vocab_size = V;
    a.cu_num_draft_tokens = cu.data();
    a.draft_token_ids = ids.data();
    a.draft_probs = q.data();
    a.target_probs = p.data();
    a.seeds = seeds.data();
    a.positions = positions.data();
    ChainVerifyOutputs<std::int64_t> o{out.data(), 3, n_acc.data(), flags.data()};
    return verify_chain(a, o);
  }
  bool untouched() const {
    for (auto v : out)
      if (v != 777) return false;
    for (auto v : n_acc)
      if (v != 777) return false;
    for (auto v : flags)
      if (v != 77) return false;
    return true;
  }
};

TEST(ChainErrors, ValidBatchWritesEverything) {
  BatchFixture f;
  ASSERT_TRUE(f.call().ok());
  EXPECT_EQ(f.n_acc[0], 2);  // p == q: always accepted
  EXPECT_EQ(f.n_acc[1], 1);
  EXPECT_EQ(f.out[0], 1);
  EXPECT_EQ(f.out[1], 2);
  EXPECT_EQ(f.out[3], 3);
  EXPECT_EQ(f.out[5], -1);
}

TEST(ChainErrors, TokenIdOutOfRange) {
  BatchFixture f;
  f.ids[2] = 4;
  const VerifyResult r = f.call();
  EXPECT_EQ(r.status, Status::kInvalidTokenId);
  EXPECT_EQ(r.request, 1);
  EXPECT_EQ(r.position, 0);
  EXPECT_TRUE(f.untouched());
  f.ids[2] = -1;
  EXPECT_EQ(f.call().status, Status::kInvalidTokenId);
}

TEST(ChainErrors, NanNegativeAndInfiniteProbabilities) {
  for (float bad : {std::nanf(""), -0.5f, std::numeric_limits<float>::infinity()}) {
    BatchFixture f;
    f.p[4 + 2] = bad;  // request 0, position 1, the drafted token
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidProbability) << bad;
    EXPECT_EQ(r.request, 0);
    EXPECT_EQ(r.position, 1);
    EXPECT_TRUE(f.untouched());
  }
  BatchFixture f;
  f.q[2 * 4 + 3] = std::nanf("");
  EXPECT_EQ(f.call().request, 1);
}

TEST(ChainErrors, NanInsideAResidualRow) {
  BatchFixture f;
  f.q = {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};  // one-hot drafts
  f.p = {0.5f, 0.0f, 0.5f, std::nanf(""), 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f,
         0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
  const VerifyResult r = f.call();  // p_0(1) = 0 rejects; the residual row holds a NaN
  EXPECT_EQ(r.status, Status::kInvalidProbability);
  EXPECT_EQ(r.request, 0);
  EXPECT_EQ(r.position, 0);
  EXPECT_TRUE(f.untouched());
}

TEST(ChainErrors, ZeroMassTargetRow) {
  BatchFixture f;
  for (int x = 0; x < 4; ++x) f.p[(3 + 1) * 4 + x] = 0.0f;  // request 1's first row (row cu[1] + 1 = 3)
  for (int x = 0; x < 4; ++x) f.p[3 * 4 + x] = 0.0f;
  const VerifyResult r = f.call();
  EXPECT_EQ(r.status, Status::kZeroMass);
  EXPECT_EQ(r.request, 1);
  EXPECT_TRUE(f.untouched());
}

TEST(ChainErrors, BadRaggedLayout) {
  {
    BatchFixture f;
    f.cu = {0, 3, 2};
    EXPECT_EQ(f.call().status, Status::kInvalidArgument);
    EXPECT_TRUE(f.untouched());
  }
  {
    BatchFixture f;
    f.cu = {1, 2, 3};
    EXPECT_EQ(f.call().status, Status::kInvalidArgument);
  }
  {
    BatchFixture f;
    f.positions[1] = -5;
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidArgument);
    EXPECT_EQ(r.request, 1);
  }
}

}  // namespace
}  // namespace specdec
