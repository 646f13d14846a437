// Chain verification: distributions of emitted tokens and of the number accepted, under docs/design.md's 6-sigma bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "specdec/sampling/block.hpp"
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


TEST(ChainErrors, GreedyZeroMassRowInBatch) {
  // A greedy request whose row sums to zero has no argmax to emit: kZeroMass, as for the same row sampled.
  for (int greedy : {1, 0}) {
    BatchFixture f;
    for (int x = 0; x < 4; ++x) f.p[3 * 4 + x] = 0.0f;  // request 1's first target row (row cu[1] + 1 = 3)
    std::vector<std::uint8_t> g = {0, static_cast<std::uint8_t>(greedy)};
    ChainVerifyArgs<std::int64_t, std::int64_t> a;
    a.batch_size = 2;
    a.vocab_size = f.V;
    a.cu_num_draft_tokens = f.cu.data();
    a.draft_token_ids = f.ids.data();
    a.draft_probs = f.q.data();
    a.target_probs = f.p.data();
    a.seeds = f.seeds.data();
    a.positions = f.positions.data();
    a.greedy = g.data();
    const VerifyResult r =
        verify_chain(a, ChainVerifyOutputs<std::int64_t>{f.out.data(), 3, f.n_acc.data(), f.flags.data()});
    EXPECT_EQ(r.status, Status::kZeroMass) << "greedy " << greedy;
    EXPECT_EQ(r.request, 1);
    EXPECT_EQ(r.position, 0);
    EXPECT_STREQ(r.argument, "target_probs");
    EXPECT_TRUE(f.untouched());
  }
}

TEST(ChainErrors, GreedyZeroMassBonusRow) {
  // Every draft matches the argmax; the bonus row has no mass.
  const std::int64_t V = 3;
  const std::vector<float> p = {0.2f, 0.7f, 0.1f, 0.0f, 0.0f, 0.0f};
  std::vector<float> scratch(1);
  std::int32_t drafts[1] = {1}, out[2] = {55, 55}, n = 55;
  std::uint8_t flags[1] = {77};
  std::int64_t where = -9;
  VerifyResult err;
  EXPECT_EQ(verify_chain_request<std::int32_t>(V, 1, drafts, nullptr, p.data(), 1, 0, true, 1.0f, out, &n, flags,
                                               scratch.data(), &where, &err),
            Status::kZeroMass);
  EXPECT_EQ(where, 1);
  EXPECT_EQ(err.position, 1);
  EXPECT_EQ(out[0], 55);  // nothing written, although draft 0 was accepted before the bonus row failed
  EXPECT_EQ(out[1], 55);
  EXPECT_EQ(n, 55);
  EXPECT_EQ(flags[0], 77);
}

// The checked single-request entry: every argument it reads is checked, and nothing is written on failure.
struct RequestFixture {
  std::int64_t V = 4, K = 2, position = 3;
  std::vector<std::int32_t> drafts = {1, 2};
  std::vector<float> q = std::vector<float>(2 * 4, 0.25f);
  std::vector<float> p = std::vector<float>(3 * 4, 0.25f);
  std::vector<float> scratch = std::vector<float>(1);
  std::vector<std::int32_t> out = std::vector<std::int32_t>(3, 55);
  std::int32_t n = 55;
  std::vector<std::uint8_t> flags = std::vector<std::uint8_t>(2, 77);
  float lenience = 1.0f;
  bool greedy = false;
  std::int64_t where = -9;
  VerifyResult error;
  const std::int32_t* ids() const { return drafts.empty() ? nullptr : drafts.data(); }
  Status call(const float* target = nullptr, bool use_target = true) {
    const float* t = use_target ? (target ? target : p.data()) : nullptr;
    return verify_chain_request<std::int32_t>(V, K, ids(), q.data(), t, 7, position, greedy, lenience, out.data(), &n,
                                              flags.data(), scratch.data(), &where, &error);
  }
  bool untouched() const {
    return out == std::vector<std::int32_t>(3, 55) && n == 55 && flags == std::vector<std::uint8_t>(2, 77);
  }
};

TEST(ChainRequestErrors, ValidRequestWritesEverything) {
  RequestFixture f;
  ASSERT_EQ(f.call(), Status::kSuccess);
  EXPECT_EQ(f.n, 2);  // p == q
  EXPECT_EQ(f.out[0], 1);
  EXPECT_EQ(f.out[1], 2);
  EXPECT_GE(f.out[2], 0);
  EXPECT_EQ(f.where, -9);  // reports untouched on success
}

TEST(ChainRequestErrors, NegativeNumDrafts) {
  RequestFixture f;
  f.K = -1;
  EXPECT_EQ(f.call(), Status::kInvalidArgument);
  EXPECT_STREQ(f.error.argument, "num_drafts");
  EXPECT_EQ(to_string(f.error), "invalid argument: num_drafts: expected >= 0, got -1");
  EXPECT_TRUE(f.untouched());
}

TEST(ChainRequestErrors, NonPositiveVocabSize) {
  RequestFixture f;
  f.V = 0;
  EXPECT_EQ(f.call(), Status::kInvalidArgument);
  EXPECT_EQ(to_string(f.error), "invalid argument: vocab_size: expected > 0, got 0");
  EXPECT_TRUE(f.untouched());
}

TEST(ChainRequestErrors, TokenIdOutOfRange) {
  for (std::int32_t bad : {4, -1, 1 << 30}) {
    RequestFixture f;
    f.drafts[1] = bad;
    EXPECT_EQ(f.call(), Status::kInvalidTokenId) << bad;
    EXPECT_EQ(f.where, 1);
    EXPECT_EQ(to_string(f.error), "token id out of range: draft_token_ids: expected an id in [0, vocab_size) with "
                                  "vocab_size = 4, got " + std::to_string(bad) + " (draft position 1)");
    EXPECT_TRUE(f.untouched());
  }
}

TEST(ChainRequestErrors, NullPointers) {
  {
    RequestFixture f;
    f.drafts.clear();  // K = 2 drafts but no ids
    EXPECT_EQ(f.call(), Status::kInvalidArgument);
    EXPECT_EQ(to_string(f.error), "invalid argument: draft_token_ids: expected a non-null pointer, got null");
    EXPECT_TRUE(f.untouched());
  }
  {
    RequestFixture f;
    EXPECT_EQ(f.call(nullptr, false), Status::kInvalidArgument);
    EXPECT_STREQ(f.error.argument, "target_probs");
    EXPECT_TRUE(f.untouched());
  }
  {
    RequestFixture f;
    std::int32_t n = 0;
    EXPECT_EQ(verify_chain_request<std::int32_t>(f.V, f.K, f.drafts.data(), f.q.data(), f.p.data(), 7, 0, false, 1.0f,
                                                 nullptr, &n, nullptr, f.scratch.data()),
              Status::kInvalidArgument);
    EXPECT_EQ(verify_chain_request<std::int32_t>(f.V, f.K, f.drafts.data(), f.q.data(), f.p.data(), 7, 0, false, 1.0f,
                                                 f.out.data(), nullptr, nullptr, f.scratch.data()),
              Status::kInvalidArgument);
    EXPECT_EQ(verify_chain_request<std::int32_t>(f.V, f.K, f.drafts.data(), f.q.data(), f.p.data(), 7, 0, false, 1.0f,
                                                 f.out.data(), &n, nullptr, nullptr),
              Status::kInvalidArgument);
    EXPECT_TRUE(f.untouched());
  }
}

TEST(ChainRequestErrors, LenienceAndPosition) {
  for (float l : {0.0f, 1.5f, std::nanf("")}) {
    RequestFixture f;
    f.lenience = l;
    EXPECT_EQ(f.call(), Status::kInvalidArgument) << l;
    EXPECT_STREQ(f.error.argument, "lenience");
    EXPECT_TRUE(f.untouched());
  }
  RequestFixture f;
  f.position = -2;
  EXPECT_EQ(f.call(), Status::kInvalidArgument);
  EXPECT_EQ(to_string(f.error), "invalid argument: position: expected >= 0, got -2");
  EXPECT_TRUE(f.untouched());
}

TEST(ChainRequestErrors, BadValueInALaterRowWritesNothing) {
  RequestFixture f;
  f.p[1 * 4 + 2] = std::nanf("");  // draft 1's target value; draft 0 is accepted first (p == q)
  EXPECT_EQ(f.call(), Status::kInvalidProbability);
  EXPECT_EQ(f.where, 1);
  EXPECT_STREQ(f.error.argument, "target_probs");
  EXPECT_EQ(to_string(f.error),
            "probability is NaN, infinite or negative: target_probs: expected finite, non-negative probabilities, got "
            "nan (draft position 1)");
  EXPECT_TRUE(f.untouched());
  RequestFixture g;
  g.q[1 * 4 + 2] = -1.0f;
  EXPECT_EQ(g.call(), Status::kInvalidProbability);
  EXPECT_STREQ(g.error.argument, "draft_probs");
  EXPECT_EQ(*g.error.received, -1.0);
  EXPECT_TRUE(g.untouched());
}

TEST(ChainRequestErrors, GreedyZeroMassRow) {
  RequestFixture f;
  f.greedy = true;
  std::fill(f.p.begin(), f.p.begin() + 4, 0.0f);
  EXPECT_EQ(f.call(), Status::kZeroMass);
  EXPECT_EQ(f.where, 0);
  EXPECT_EQ(to_string(f.error), "distribution has zero mass: target_probs: expected a row with positive mass, got 0 "
                                "(draft position 0)");
  EXPECT_TRUE(f.untouched());
}

// ---- buffer sizes: a K that disagrees with the buffers is an error naming the argument, expected and got ----

struct SizedBatch : BatchFixture {
  std::int64_t ids_size = 3, q_size = 12, p_size = 20;
  std::vector<std::uint8_t> has_q;
  bool with_q = true;
  VerifyResult call_sized() {
    ChainVerifyArgs<std::int64_t, std::int64_t> a;
    a.batch_size = 2;
    a.vocab_size = V;
    a.cu_num_draft_tokens = cu.data();
    a.draft_token_ids = ids.data();
    a.draft_probs = with_q ? q.data() : nullptr;
    a.target_probs = p.data();
    a.seeds = seeds.data();
    a.positions = positions.data();
    a.has_draft_probs = has_q.empty() ? nullptr : has_q.data();
    a.draft_token_ids_size = ids_size;
    a.draft_probs_size = q_size;
    a.target_probs_size = p_size;
    return verify_chain(a, ChainVerifyOutputs<std::int64_t>{out.data(), 3, n_acc.data(), flags.data()});
  }
};

TEST(ChainErrors, SizesThatAgreePass) {
  SizedBatch f;
  EXPECT_TRUE(f.call_sized().ok());
  SizedBatch g;
  g.ids_size = g.q_size = g.p_size = -1;  // not given: the caller's contract
  EXPECT_TRUE(g.call_sized().ok());
}

TEST(ChainErrors, DraftTokenIdsSizeDisagreesWithCu) {
  SizedBatch f;
  f.cu = {0, 2, 4};  // K_1 = 2, but draft_token_ids holds 3 ids
  const VerifyResult r = f.call_sized();
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_EQ(to_string(r), "invalid argument: cu_num_draft_tokens: expected cu[B] == draft_token_ids_size = 3, got 4");
  EXPECT_TRUE(f.untouched());
}

TEST(ChainErrors, DraftProbsSizeDisagrees) {
  SizedBatch f;
  f.q_size = 8;  // rows for 2 drafts, not 3
  const VerifyResult r = f.call_sized();
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_EQ(to_string(r), "invalid argument: draft_probs_size: expected N * vocab_size = 12, got 8");
  EXPECT_TRUE(f.untouched());
  SizedBatch g;
  g.with_q = false;  // no draft probs: their size is not read
  g.q_size = 8;
  EXPECT_TRUE(g.call_sized().ok());
}

TEST(ChainErrors, TargetProbsSizeDisagrees) {
  SizedBatch f;
  f.p_size = 16;  // N rows, not N + B
  const VerifyResult r = f.call_sized();
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_EQ(to_string(r), "invalid argument: target_probs_size: expected (N + B) * vocab_size = 20, got 16");
  EXPECT_TRUE(f.untouched());
}

TEST(ChainErrors, OutputStrideAndNamedRaggedErrors) {
  {
    BatchFixture f;
    ChainVerifyArgs<std::int64_t, std::int64_t> a;
    a.batch_size = 2;
    a.vocab_size = f.V;
    a.cu_num_draft_tokens = f.cu.data();
    a.draft_token_ids = f.ids.data();
    a.target_probs = f.p.data();
    a.seeds = f.seeds.data();
    a.positions = f.positions.data();
    const VerifyResult r =
        verify_chain(a, ChainVerifyOutputs<std::int64_t>{f.out.data(), 2, f.n_acc.data(), f.flags.data()});
    EXPECT_EQ(to_string(r), "invalid argument: output_stride: expected >= max_b K_b + 1 = 3, got 2");
    EXPECT_TRUE(f.untouched());
    a.batch_size = -1;
    EXPECT_STREQ(verify_chain(a, ChainVerifyOutputs<std::int64_t>{f.out.data(), 3, f.n_acc.data()}).argument,
                 "batch_size");
    a.batch_size = 2;
    a.seeds = nullptr;
    EXPECT_EQ(to_string(verify_chain(a, ChainVerifyOutputs<std::int64_t>{f.out.data(), 3, f.n_acc.data()})),
              "invalid argument: seeds: expected a non-null pointer, got null");
    EXPECT_TRUE(f.untouched());
  }
  BatchFixture f;
  f.cu = {0, 3, 2};
  EXPECT_EQ(to_string(f.call()),
            "invalid argument: cu_num_draft_tokens: expected K_b = cu[b + 1] - cu[b] >= 0, got -1 (request 1)");
  BatchFixture g;
  g.ids[2] = 9;
  EXPECT_EQ(to_string(g.call()), "token id out of range: draft_token_ids: expected an id in [0, vocab_size) with "
                                 "vocab_size = 4, got 9 (request 1, draft position 0)");
}

TEST(ChainErrors, ExtremeOffsetsAreErrorsWithoutOverflow) {
  // Offsets near the int64 limits: named errors, no signed overflow on the way (the sanitizer build runs this).
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  {
    BatchFixture f;
    f.cu = {0, kMax, kMin};
    const VerifyResult r = f.call();
    EXPECT_EQ(r.status, Status::kInvalidArgument);
    EXPECT_STREQ(r.argument, "cu_num_draft_tokens");
    EXPECT_EQ(r.request, 1);
    EXPECT_TRUE(f.untouched());
  }
  {
    BatchFixture f;
    f.cu = {0, 2, kMax};
    const VerifyResult r = f.call();
    EXPECT_STREQ(r.argument, "output_stride");
    EXPECT_TRUE(f.untouched());
  }
}

TEST(ChainErrors, HasDraftProbsWithoutDraftProbs) {
  SizedBatch f;
  f.with_q = false;
  f.has_q = {0, 1};
  const VerifyResult r = f.call_sized();
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_EQ(to_string(r), "invalid argument: has_draft_probs: expected 0 when draft_probs is null, got 1 (request 1)");
  EXPECT_TRUE(f.untouched());
  f.has_q = {0, 0};
  EXPECT_TRUE(f.call_sized().ok());
}

// ---- per-request draft kinds: n-gram style and draft-model requests in one batch ----

struct MixedBatch {
  std::int64_t B = 0, V = 0;
  std::vector<std::int32_t> cu = {0}, ids;
  std::vector<float> q, p;
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> positions;
  std::vector<std::uint8_t> greedy, has_q;
};

MixedBatch make_mixed(std::mt19937_64& rng, std::int64_t B, std::int64_t V, int max_k) {
  MixedBatch m;
  m.B = B;
  m.V = V;
  for (std::int64_t b = 0; b < B; ++b) {
    const int k = static_cast<int>(rng() % (max_k + 1));
    m.cu.push_back(m.cu.back() + k);
    m.has_q.push_back(rng() % 2);
    m.greedy.push_back(rng() % 5 == 0);
    m.seeds.push_back(rng());
    m.positions.push_back(static_cast<std::int64_t>(rng() % 1000));
    for (int j = 0; j < k; ++j) {
      auto row = test::random_row(rng, V, 0.3, 0.5);
      if (m.has_q.back()) {
        m.ids.push_back(static_cast<std::int32_t>(test::draw_from(rng, row)));
        m.q.insert(m.q.end(), row.begin(), row.end());
      } else {  // a deterministic draft; its draft_probs row is never read, so it holds NaNs
        m.ids.push_back(static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
        m.q.insert(m.q.end(), static_cast<std::size_t>(V), std::nanf(""));
      }
    }
  }
  for (std::int64_t r = 0; r < m.cu.back() + B; ++r) {
    auto row = test::random_row(rng, V, 0.2, 0.5);
    m.p.insert(m.p.end(), row.begin(), row.end());
  }
  return m;
}

TEST(ChainMixed, EachRequestGetsItsTokensAlone) {
  std::mt19937_64 rng(41);
  for (int rep = 0; rep < 60; ++rep) {
    const std::int64_t V = rep % 4 == 0 ? 2100 : 11;
    const MixedBatch m = make_mixed(rng, 1 + rep % 7, V, 5);
    std::int64_t max_k = 0;
    for (std::int64_t b = 0; b < m.B; ++b) max_k = std::max<std::int64_t>(max_k, m.cu[b + 1] - m.cu[b]);
    const std::int64_t stride = max_k + 1, N = m.cu.back();
    ChainVerifyArgs<std::int32_t> a;
    a.batch_size = m.B;
    a.vocab_size = V;
    a.cu_num_draft_tokens = m.cu.data();
    a.draft_token_ids = m.ids.data();
    a.draft_probs = m.q.data();
    a.target_probs = m.p.data();
    a.seeds = m.seeds.data();
    a.positions = m.positions.data();
    a.greedy = m.greedy.data();
    a.has_draft_probs = m.has_q.data();
    a.draft_token_ids_size = N;
    a.draft_probs_size = N * V;
    a.target_probs_size = (N + m.B) * V;
    std::vector<std::int32_t> out(static_cast<std::size_t>(m.B * stride), 55), n(static_cast<std::size_t>(m.B));
    std::vector<std::uint8_t> flags(static_cast<std::size_t>(N) + 1, 77);
    const VerifyResult r =
        verify_chain(a, ChainVerifyOutputs<std::int32_t>{out.data(), stride, n.data(), flags.data()});
    ASSERT_TRUE(r.ok()) << to_string(r);
    std::vector<float> scratch(num_tiles(V));
    for (std::int64_t b = 0; b < m.B; ++b) {
      const std::int64_t start = m.cu[b], k = m.cu[b + 1] - start;
      std::vector<std::int32_t> alone(static_cast<std::size_t>(k + 1));
      std::vector<std::uint8_t> alone_flags(static_cast<std::size_t>(k) + 1);
      std::int32_t alone_n = -1;
      const float* q = m.has_q[b] ? m.q.data() + start * V : nullptr;
      ASSERT_EQ(verify_chain_request<std::int32_t>(V, k, m.ids.data() + start, q,
                                                   m.p.data() + (start + b) * V, m.seeds[b], m.positions[b],
                                                   m.greedy[b] != 0, 1.0f, alone.data(), &alone_n, alone_flags.data(),
                                                   scratch.data()),
                Status::kSuccess);
      ASSERT_EQ(n[b], alone_n) << "request " << b;
      for (std::int64_t i = 0; i <= alone_n; ++i) ASSERT_EQ(out[b * stride + i], alone[i]) << "request " << b;
      for (std::int64_t i = alone_n + 1; i < stride; ++i) ASSERT_EQ(out[b * stride + i], -1);
      for (std::int64_t j = 0; j < k; ++j) ASSERT_EQ(flags[start + j], alone_flags[j]);
    }
    EXPECT_EQ(flags[N], 77);  // sentinel after the last flag
  }
}

TEST(ChainMixedStats, MixedBatchIsLossless) {
  // Two requests share every batch: request 0 drafts from q with its probabilities, request 1 drafts the argmax of
  // q deterministically (no probabilities; its draft_probs rows hold NaN). Over many seeds the tokens each emits
  // at every position follow the target, and the number accepted follows [1 - a0, a0 (1 - a1), a0 a1].
  const ChainCase c = random_case(51, 7, 2);
  const int K = 2, trials = 60000;
  const std::int64_t V = c.vocab;
  std::vector<float> p_req, q_rows;
  for (auto& r : c.p) p_req.insert(p_req.end(), r.begin(), r.end());
  std::vector<float> p_all = p_req;
  p_all.insert(p_all.end(), p_req.begin(), p_req.end());
  for (auto& r : c.q) q_rows.insert(q_rows.end(), r.begin(), r.end());
  std::vector<float> q_all = q_rows;
  q_all.insert(q_all.end(), static_cast<std::size_t>(K * V), std::nanf(""));
  std::vector<std::int32_t> cu = {0, K, 2 * K}, ids(2 * K), out(2 * (K + 1)), n(2);
  std::vector<std::uint8_t> has_q = {1, 0};
  std::vector<std::int64_t> positions = {40, 40};
  std::vector<std::vector<std::vector<std::int64_t>>> token_at(2, std::vector<std::vector<std::int64_t>>(
                                                                      K + 1, std::vector<std::int64_t>(V)));
  std::vector<std::vector<std::int64_t>> accepted(2, std::vector<std::int64_t>(K + 1));
  std::mt19937_64 rng(52);
  for (int t = 0; t < trials; ++t) {
    for (int i = 0; i < K; ++i) {
      ids[i] = static_cast<std::int32_t>(test::draw_from(rng, c.q[i]));
      ids[K + i] = static_cast<std::int32_t>(std::max_element(c.q[i].begin(), c.q[i].end()) - c.q[i].begin());
    }
    std::vector<std::uint64_t> seeds = {2 * static_cast<std::uint64_t>(t), 2 * static_cast<std::uint64_t>(t) + 1};
    ChainVerifyArgs<std::int32_t> a;
    a.batch_size = 2;
    a.vocab_size = V;
    a.cu_num_draft_tokens = cu.data();
    a.draft_token_ids = ids.data();
    a.draft_probs = q_all.data();
    a.target_probs = p_all.data();
    a.seeds = seeds.data();
    a.positions = positions.data();
    a.has_draft_probs = has_q.data();
    const VerifyResult r = verify_chain(a, ChainVerifyOutputs<std::int32_t>{out.data(), K + 1, n.data(), nullptr});
    ASSERT_TRUE(r.ok()) << to_string(r);
    for (int b = 0; b < 2; ++b) {
      ++accepted[b][n[b]];
      for (int i = 0; i <= n[b]; ++i) ++token_at[b][i][out[b * (K + 1) + i]];
    }
  }
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i <= K; ++i)
      EXPECT_TRUE(matches_distribution(token_at[b][i], test::as_double(c.p[i])))
          << "request " << b << " position " << i;
  std::vector<double> a_iid, a_det;
  for (int i = 0; i < K; ++i) {
    a_iid.push_back(test::overlap(c.p[i], c.q[i]));
    a_det.push_back(c.p[i][std::max_element(c.q[i].begin(), c.q[i].end()) - c.q[i].begin()]);
  }
  EXPECT_TRUE(matches_distribution(accepted[0], accepted_distribution(a_iid))) << "request 0 (with probs)";
  EXPECT_TRUE(matches_distribution(accepted[1], accepted_distribution(a_det))) << "request 1 (deterministic)";
}

// race_weights.hpp: the tile masses of every race weight (block verification's too) on every vector path the CPU has
// against the one-lane tile_mass, bit for bit: rows of probabilities with zeros, a draft row above and below them, the
// removed token in the first, last and a middle lane of a vector, and rows with an invalid value (NaN, +inf, a negative
// or a value above FLT_MAX's sums) in some tiles; lengths around the vectors, the 32-lane tile rows and partial last
// tiles.
// Each weight's vector forms against its one-lane operator(), token by token (a mass can hide a last-bit difference).
bool same_bits(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }
template <class Weight>
bool lanes4_equal_one_lane(const Weight& weight, std::int64_t n) {
#if defined(SPECDEC_LOGITS_VECTORS)
  if constexpr (requires { weight.template lanes<4>(std::int64_t{0}); })
    for (std::int64_t x = 0; x + 4 <= n; x += 4) {
      const auto v = weight.template lanes<4>(x);
      for (int i = 0; i < 4; ++i)
        if (!same_bits(v[i], weight(x + i))) return false;
    }
#endif
  return true;
}
#if defined(SPECDEC_LOGITS_AVX512)
template <class Weight>
__attribute__((target("avx512f"))) bool lanes16_equal_one_lane(const Weight& weight, std::int64_t n) {
  for (std::int64_t x = 0; x + 16 <= n; x += 16) {
    alignas(64) float v[16];
    _mm512_store_ps(v, weight.lanes16(x));
    for (int i = 0; i < 16; ++i)
      if (!same_bits(v[i], weight(x + i))) return false;
  }
  return true;
}
#endif
template <class Weight>
bool vector_forms_equal_one_lane(const Weight& weight, std::int64_t n) {
  bool ok = lanes4_equal_one_lane(weight, n);
#if defined(SPECDEC_LOGITS_AVX512)
  if (specdec::detail::logits_path_available(specdec::detail::LogitsPath::kAvx512)) ok = ok && lanes16_equal_one_lane(weight, n);
#endif
  return ok;
}

TEST(RaceTileMasses, EveryVectorPathEqualsTheOneLaneBits) {
  using specdec::detail::LogitsPath;
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
    }
    return true;
  };
  int paths = 0, checked = 0, invalid_rows = 0;
  for (const LogitsPath path : {LogitsPath::kVector4, LogitsPath::kAvx512}) {
    if (!specdec::detail::logits_path_available(path)) continue;
    ++paths;
    for (const std::int64_t V : {1, 5, 16, 33, 1000, 1024, 1025, 2048, 3071, 49152, 50001})
      for (int trial = 0; trial < 6; ++trial) {
        std::vector<float> p(static_cast<std::size_t>(V)), q(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) {
          p[i] = unit(rng) < 0.2f ? 0.0f : unit(rng) * 1e-3f;
          q[i] = unit(rng) < 0.5f ? p[i] : unit(rng) * 1e-3f;
        }
        if (trial >= 4) {  // invalid values: NaN, +inf, a negative, and huge values whose sum overflows
          const float bad[] = {std::nanf(""), inf, -1e-6f, FLT_MAX};
          for (int k = 0; k < 3; ++k) {
            const auto at = static_cast<std::size_t>(rng() % static_cast<std::uint32_t>(V));
            (k % 2 ? q : p)[at] = bad[rng() % 4];
          }
          if (V > 64) p[1] = p[2] = FLT_MAX;
          ++invalid_rows;
        }
        const std::int64_t removed_at[] = {0, V - 1, V / 2, std::min<std::int64_t>(15, V - 1),
                                           static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(V))};
        const std::size_t tiles = static_cast<std::size_t>(specdec::num_tiles(V));
        std::vector<float> want(tiles), got(tiles);
        const specdec::detail::RowWeight row{p.data()};
        specdec::detail::race_tile_masses_one_lane(row, V, want.data());
        specdec::detail::race_tile_masses(row, V, got.data(), path);
        ASSERT_TRUE(same(want, got)) << "p, path " << static_cast<int>(path) << " V " << V << " trial " << trial;
        ASSERT_TRUE(vector_forms_equal_one_lane(row, V)) << "p by token, V " << V;
        const specdec::detail::ResidualWeight residual{p.data(), q.data()};
        specdec::detail::race_tile_masses_one_lane(residual, V, want.data());
        specdec::detail::race_tile_masses(residual, V, got.data(), path);
        ASSERT_TRUE(same(want, got)) << "max(p - q, 0), path " << static_cast<int>(path) << " V " << V << " trial "
                                     << trial;
        ASSERT_TRUE(vector_forms_equal_one_lane(residual, V)) << "max(p - q, 0) by token, V " << V;
        for (const float w : {1.0f, 0.37f, 1e-3f}) {  // block verification's max(w p - q, 0), fused as fma_rn
          const specdec::detail::BlockResidualWeight block{p.data(), q.data(), w};
          specdec::detail::race_tile_masses_one_lane(block, V, want.data());
          specdec::detail::race_tile_masses(block, V, got.data(), path);
          ASSERT_TRUE(same(want, got)) << "max(" << w << " p - q, 0), path " << static_cast<int>(path) << " V " << V
                                       << " trial " << trial;
          ASSERT_TRUE(vector_forms_equal_one_lane(block, V)) << "max(" << w << " p - q, 0) by token, V " << V;
        }
        for (const std::int64_t removed : removed_at) {
          const specdec::detail::RemovedWeight without{p.data(), removed};
          specdec::detail::race_tile_masses_one_lane(without, V, want.data());
          specdec::detail::race_tile_masses(without, V, got.data(), path);
          ASSERT_TRUE(same(want, got)) << "p without " << removed << ", path " << static_cast<int>(path) << " V " << V
                                       << " trial " << trial;
          ASSERT_TRUE(vector_forms_equal_one_lane(without, V)) << "p without " << removed << " by token, V " << V;
          ++checked;
        }
      }
  }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  EXPECT_GE(paths, 1) << "an x86-64 GCC/clang build has at least the 4-wide path";
#endif
  EXPECT_GT(checked, 0);
  EXPECT_GT(invalid_rows, 0);
}

}  // namespace
}  // namespace specdec
