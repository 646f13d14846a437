#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <numeric>
#include <cstdio>
#include <cstring>
#include <random>

#include "specdec/sampling/logits.hpp"

namespace specdec {
namespace {

std::vector<double> softmax_ref(const std::vector<float>& logits, double t) {
  double m = -1e300;
  for (float l : logits) m = std::max<double>(m, l);
  std::vector<double> p(logits.size());
  double s = 0;
  for (std::size_t i = 0; i < p.size(); ++i) s += p[i] = std::exp((logits[i] - m) / t);
  for (auto& x : p) x /= s;
  return p;
}

const std::vector<float> kLogits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f, -std::numeric_limits<float>::infinity()};

TEST(Logits, TemperatureSoftmaxMatchesFp64) {
  for (float t : {0.05f, 0.7f, 1.0f, 2.5f}) {
    SamplingParams sp;
    sp.temperature = t;
    const auto p = logits_to_probs(kLogits, sp);
    const auto ref = softmax_ref(kLogits, t);
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], ref[i], 1e-6 * std::max(1.0, ref[i])) << t << " " << i;
    EXPECT_EQ(p.back(), 0.0f);
  }
}

TEST(Logits, GreedyIsOneHotOnLowestArgmax) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  const auto p = logits_to_probs(kLogits, sp);
  EXPECT_EQ(p, (std::vector<float>{0, 1, 0, 0, 0, 0, 0}));
}

TEST(Logits, TopKKeepsKLargestWithIdTieBreak) {
  SamplingParams sp;
  sp.top_k = 2;
  const auto p = logits_to_probs(kLogits, sp);
  EXPECT_NEAR(p[1], 0.5f, 1e-7);
  EXPECT_NEAR(p[3], 0.5f, 1e-7);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-6);
  for (int i : {0, 2, 4, 5, 6}) EXPECT_EQ(p[i], 0.0f);
  sp.top_k = 1;  // tie between ids 1 and 3: the lower id wins
  EXPECT_EQ(logits_to_probs(kLogits, sp), (std::vector<float>{0, 1, 0, 0, 0, 0, 0}));
}

TEST(Logits, TopPKeepsSmallestPrefixReachingMass) {
  const auto full = softmax_ref(kLogits, 1.0);  // order: 1, 3, 5, 0, 4, 2
  SamplingParams sp;
  sp.top_p = static_cast<float>(full[1] + full[3] + 0.5 * full[5]);  // crosses inside token 5
  const auto p = logits_to_probs(kLogits, sp);
  const double kept = full[1] + full[3] + full[5];
  for (int i : {1, 3, 5}) EXPECT_NEAR(p[i], full[i] / kept, 1e-6);
  for (int i : {0, 2, 4, 6}) EXPECT_EQ(p[i], 0.0f);
}

TEST(Logits, MinPDropsBelowFractionOfMax) {
  const auto full = softmax_ref(kLogits, 1.0);
  SamplingParams sp;
  sp.min_p = 0.3f;  // keeps p >= 0.3 * p_max: ids 1, 3 (= max) and 5 (e^-1 = 0.37)
  const auto p = logits_to_probs(kLogits, sp);
  const double kept = full[1] + full[3] + full[5];
  for (int i : {1, 3, 5}) EXPECT_NEAR(p[i], full[i] / kept, 1e-6);
  for (int i : {0, 2, 4, 6}) EXPECT_EQ(p[i], 0.0f);
}

TEST(Logits, BadInputIsReported) {
  std::vector<float> out(3);
  SamplingParams sp;
  const std::vector<float> nan_logits = {0.0f, std::nanf(""), 1.0f};
  EXPECT_EQ(logits_to_probs(std::span<const float>(nan_logits), sp, std::span<float>(out)),
            Status::kInvalidProbability);
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> all_banned = {ninf, ninf, ninf};
  EXPECT_EQ(logits_to_probs(std::span<const float>(all_banned), sp, std::span<float>(out)), Status::kZeroMass);
  sp.temperature = -1.0f;
  try {
    logits_to_probs(kLogits, sp);
    FAIL() << "expected specdec::error";
  } catch (const error& e) {
    EXPECT_STREQ(e.what(), "SamplingParams.temperature: expected a finite value >= 0, got -1.000000");
  }
  sp = {};
  sp.top_p = 0.0f;
  std::string msg;
  EXPECT_EQ(validate(sp, &msg), Status::kInvalidArgument);
  EXPECT_EQ(msg, "top_p: expected a value in (0, 1], got 0.000000");
  sp = {};
  sp.top_k = -3;
  EXPECT_EQ(validate(sp, &msg), Status::kInvalidArgument);
  EXPECT_EQ(msg, "top_k: expected >= 0 (0 = off), got -3");
  sp = {};
  sp.min_p = 1.5f;
  EXPECT_EQ(validate(sp, &msg), Status::kInvalidArgument);
  EXPECT_EQ(msg, "min_p: expected a value in [0, 1], got 1.500000");
}

// ---------------------------------------------------------------------------------------------------------------
// The shared arithmetic (logits_core.hpp) against fp64.

TEST(Logits, DeterministicExpWithin2UlpOfFp64) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -104.0f * static_cast<float>(i) / 2000000.0f;
    const float got = detail::exp_nonpositive(x);
    const double ref = std::exp(static_cast<double>(x));
    if (ref < 1.2e-38) {  // denormal results: within one denormal step (plus the exp's own error)
      EXPECT_LE(std::abs(got - ref), 2.0 * 1.4013e-45 + 3e-7 * ref) << x;
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
    worst = std::max(worst, std::abs(got - ref) / ulp);
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(detail::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(detail::exp_nonpositive(-200.0f), 0.0f);
}

double worst_relative_error = 0;  // over every check_against_fp64 call, printed by the large-vocabulary test

/// fp64 check of one processed row: the kept set is a prefix of the fp64 order (to `tol`), each cut's rule holds in
/// fp64 to `tol`, and every kept probability is within `tol` (relative) of e64_x / sum over the kept set.
void check_against_fp64(const std::vector<float>& logits, const SamplingParams& sp, const std::vector<float>& p,
                        double tol) {
  const std::size_t n = logits.size();
  double m = -1e300;
  for (float l : logits) m = std::max<double>(m, l);
  std::vector<double> e(n);
  for (std::size_t i = 0; i < n; ++i) e[i] = std::exp((static_cast<double>(logits[i]) - m) / sp.temperature);
  double kept_mass = 0, min_kept = 1e300, max_dropped = 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] > 0) {
      kept_mass += e[i];
      min_kept = std::min(min_kept, e[i]);
      ++kept;
    } else if (e[i] > 1e-30) {
      max_dropped = std::max(max_dropped, e[i]);
    }
  }
  ASSERT_GT(kept, 0u);
  EXPECT_GE(min_kept, max_dropped * (1 - tol)) << "kept set is not a prefix of the descending order";
  if (sp.top_k > 0) {
    EXPECT_LE(kept, static_cast<std::size_t>(sp.top_k));
  }
  if (sp.min_p > 0) {
    EXPECT_GE(min_kept, sp.min_p * (1 - tol));
  }
  if (sp.top_p < 1 && sp.top_k == 0 && sp.min_p == 0) {
    double all = 0;
    for (double v : e) all += v;
    const double target = sp.top_p * all;
    EXPECT_GE(kept_mass, target * (1 - tol)) << "top-p set does not reach the target";
    EXPECT_LT(kept_mass - min_kept, target * (1 + tol)) << "top-p set is not the smallest reaching the target";
  }
  if (sp.top_k > 0 && sp.top_p == 1 && sp.min_p == 0) {
    EXPECT_EQ(kept, std::min<std::size_t>(sp.top_k, n));
  }
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += p[i];
    if (p[i] == 0) continue;
    const double ref = e[i] / kept_mass;
    ASSERT_LE(std::abs(p[i] - ref), tol * ref + 1e-30) << i << " got " << p[i] << " want " << ref;
    worst_relative_error = std::max(worst_relative_error, std::abs(p[i] - ref) / ref);
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(Logits, LargeVocabulariesMatchFp64WithinStatedTolerance) {
  // The rule's tolerance against fp64: 2e-6 relative on every kept probability (the deterministic exp is within
  // 2 ulp, the fixed-order float sums within a few ulp of the mass), and the cut's conditions to the same 2e-6.
  constexpr double kTol = 2e-6;
  std::mt19937 rng(7);
  for (std::size_t v : {std::size_t{1}, std::size_t{7}, std::size_t{1023}, std::size_t{1025}, std::size_t{32000},
                        std::size_t{128256}, std::size_t{151936}}) {
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> logits(v);
    for (auto& l : logits) l = nd(rng);
    if (v > 10) logits[v / 3] = -std::numeric_limits<float>::infinity();
    const SamplingParams cases[] = {
        {1.0f, 0, 1.0f, 0.0f, 0},   {0.7f, 40, 1.0f, 0.0f, 0},  {1.3f, 0, 0.9f, 0.0f, 0},
        {1.0f, 0, 1.0f, 0.05f, 0},  {0.8f, 50, 0.8f, 0.02f, 0}, {2.5f, 1000, 0.95f, 0.0f, 0},
        {0.05f, 0, 0.5f, 0.0f, 0},  {1.0f, 1, 1.0f, 0.0f, 0},
    };
    for (const auto& sp : cases) {
      SCOPED_TRACE(testing::Message() << "V=" << v << " T=" << sp.temperature << " k=" << sp.top_k << " p=" << sp.top_p
                                      << " min_p=" << sp.min_p);
      const auto p = logits_to_probs(logits, sp);
      check_against_fp64(logits, sp, p, kTol);
    }
  }
  std::printf("worst relative error of a kept probability against fp64: %.3g (tolerance %.1g)\n",
              worst_relative_error, kTol);
}

TEST(Logits, TopKTiesAtTheCutKeepLowerIds) {
  // 10 tokens at 5, 100 at 3 (ids scattered over 3 tiles, one partial), the rest below 2: top_k = 50 keeps the 10
  // and the 40 lowest ids of the 3-group.
  const std::size_t v = 3001;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> low(-4.0f, 2.0f);
  std::vector<float> logits(v);
  for (auto& l : logits) l = low(rng);
  std::vector<std::size_t> ids(v);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::size_t> threes(ids.begin() + 10, ids.begin() + 110);
  for (std::size_t i = 0; i < 10; ++i) logits[ids[i]] = 5.0f;
  for (auto id : threes) logits[id] = 3.0f;
  std::sort(threes.begin(), threes.end());
  SamplingParams sp;
  sp.top_k = 50;
  const auto p = logits_to_probs(logits, sp);
  std::vector<bool> want(v, false);
  for (std::size_t i = 0; i < 10; ++i) want[ids[i]] = true;
  for (std::size_t i = 0; i < 40; ++i) want[threes[i]] = true;
  for (std::size_t x = 0; x < v; ++x) ASSERT_EQ(p[x] > 0.0f, want[x]) << x;
}

TEST(Logits, TopPTiesAtTheCutKeepTheSmallestPrefixByLowerIds) {
  // Equal logits: every weight is 1, masses are exact integers, target 0.5 * 3001 = 1500.5, so the smallest prefix
  // reaching it is the 1501 lowest ids, each with probability 1/1501.
  const std::vector<float> logits(3001, 0.25f);
  SamplingParams sp;
  sp.top_p = 0.5f;
  const auto p = logits_to_probs(logits, sp);
  for (std::size_t x = 0; x < logits.size(); ++x) ASSERT_EQ(p[x], x < 1501 ? 1.0f / 1501.0f : 0.0f) << x;
  // With top-k first: the top-k set's mass is the target's base (10 equal tokens, p = 0.35 -> 4 of them).
  sp.top_k = 10;
  sp.top_p = 0.35f;
  const auto q = logits_to_probs(logits, sp);
  for (std::size_t x = 0; x < logits.size(); ++x) ASSERT_EQ(q[x], x < 4 ? 0.25f : 0.0f) << x;
}

TEST(Logits, TemperatureNearZero) {
  std::vector<float> logits = {0.0f, 1.0f, 1.0f - 1e-3f, 1.0f, -std::numeric_limits<float>::infinity(), 0.5f};
  for (float t : {1e-6f, 1e-30f, 1e-40f /* denormal: 1/T overflows */}) {
    SamplingParams sp;
    sp.temperature = t;
    EXPECT_EQ(logits_to_probs(logits, sp), (std::vector<float>{0, 0.5f, 0, 0.5f, 0, 0})) << t;
    sp.top_k = 1;
    EXPECT_EQ(logits_to_probs(logits, sp), (std::vector<float>{0, 1, 0, 0, 0, 0})) << t;
  }
  // T = 1e-4: the 1e-3 gap gives e^-10 exactly as fp64 says.
  SamplingParams sp;
  sp.temperature = 1e-4f;
  const auto p = logits_to_probs(logits, sp);
  check_against_fp64(logits, sp, p, 2e-5);  // (l - max) / T is itself rounded: 1e-3 / 1e-4 carries ~1e-6
}

TEST(Logits, BatchEqualsRowByRowAndReportsPerRow) {
  const std::int64_t v = 2050;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  // Two requests with K = 2 and K = 0 drafts: target rows [0, 3) and [3, 4) (rows_extra = 1); a 5th row no request
  // owns; request 1 has a NaN.
  const std::int64_t rows = 5;
  std::vector<float> logits(static_cast<std::size_t>(rows * (v + 3)));
  for (auto& l : logits) l = nd(rng);
  logits[static_cast<std::size_t>(3 * (v + 3) + 17)] = std::nanf("");
  const std::vector<std::int32_t> cu = {0, 2, 2};
  const LogitsParams params[2] = {{0.9f, 30, 0.9f, 0.01f}, {1.0f, 0, 1.0f, 0.0f}};
  std::vector<float> probs(static_cast<std::size_t>(rows * v), -1.0f);
  std::vector<Status> status(rows, Status::kCudaError);
  ASSERT_EQ(logits_to_probs_batch<std::int32_t>(logits.data(), rows, v, v + 3, params, 2, cu.data(), 1, probs.data(),
                                                status.data()),
            Status::kSuccess);
  EXPECT_EQ(status, (std::vector<Status>{Status::kSuccess, Status::kSuccess, Status::kSuccess,
                                         Status::kInvalidProbability, Status::kInvalidArgument}));
  SamplingParams sp{0.9f, 30, 0.9f, 0.01f, 0};
  for (std::int64_t r = 0; r < 3; ++r) {
    const auto want = logits_to_probs(std::span<const float>(logits.data() + r * (v + 3), v), sp);
    EXPECT_EQ(0, std::memcmp(want.data(), probs.data() + r * v, v * sizeof(float))) << r;
  }
  for (std::int64_t r = 3; r < 5; ++r)
    for (std::int64_t x = 0; x < v; ++x) ASSERT_EQ(probs[static_cast<std::size_t>(r * v + x)], 0.0f);
  // Bad sizes: nothing written.
  EXPECT_EQ(logits_to_probs_batch<std::int32_t>(logits.data(), rows, v, v - 1, params, 2, cu.data(), 1, probs.data(),
                                                status.data()),
            Status::kInvalidArgument);
  const LogitsParams bad[1] = {{-1.0f, 0, 1.0f, 0.0f}};
  std::vector<Status> one(1);
  EXPECT_EQ(logits_to_probs_batch<std::int64_t>(logits.data(), 1, v, v, bad, 1, nullptr, 0, probs.data(), one.data()),
            Status::kSuccess);
  EXPECT_EQ(one[0], Status::kInvalidArgument);
}

}  // namespace
}  // namespace specdec

// The vectorised row scan against a one-lane reference: the largest value, lowest index on ties (+0 and -0 equal), and
// validity (logits: NaN and +inf invalid, -inf valid; probabilities: also negatives invalid), for every length from 0 to
// 80 and some up to 1023 (the 16- and 64-lane bodies and the tail) and values placed at the start, in the body and in
// the tail.
TEST(RowScan, ArgmaxAndValidityEqualTheOneLaneScan) {
  using specdec::detail::RowValues;
  std::mt19937 rng(11);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, 1.0f, 1.0f, 3.5f, -inf, inf, std::numeric_limits<float>::quiet_NaN(), -2.0f,
                            std::numeric_limits<float>::denorm_min(), FLT_MAX};
  std::uniform_int_distribution<int> pick(0, 10), small(0, 3);
  int checked = 0;
  std::vector<std::int64_t> lengths;
  for (std::int64_t n = 0; n <= 80; ++n) lengths.push_back(n);
  for (std::int64_t n : {127, 128, 129, 191, 200, 1000, 1023}) lengths.push_back(n);  // the 64-lane AVX-512 body too
  for (const std::int64_t n : lengths)
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = trial % 2 == 0 ? static_cast<float>(small(rng)) : specials[pick(rng)];  // many ties
      if (trial % 5 == 4)
        for (auto& x : v) x = -inf;  // every value -inf
      auto reference = [&](bool probabilities) {
        specdec::detail::RowArgmax r;
        for (std::int64_t x = 0; x < n; ++x) {
          const float a = v[static_cast<std::size_t>(x)];
          r.all_valid = r.all_valid && a <= FLT_MAX && (!probabilities || a >= 0.0f);
          if (a > r.max) {
            r.max = a;
            r.index = x;
          }
        }
        return r;
      };
      for (bool probabilities : {false, true}) {
        const auto want = reference(probabilities);
        const auto got = probabilities ? specdec::detail::row_argmax<RowValues::kProbabilities>(v.data(), n)
                                       : specdec::detail::row_argmax<RowValues::kLogits>(v.data(), n);
        ASSERT_EQ(got.all_valid, want.all_valid) << "n " << n << " trial " << trial;
        if (!want.all_valid) continue;
        ASSERT_EQ(got.index, want.index) << "n " << n << " trial " << trial;
        ASSERT_EQ(got.max, want.max) << "n " << n << " trial " << trial;
        ++checked;
      }
    }
  EXPECT_GT(checked, 2000);
}

// Every vector path of logits_simd.hpp the CPU has against the one-lane code, bit for bit: the weights of step 2 over
// logits whose scaled differences cover exp's whole range (1 down to the denormals and 0, with -inf), the tile masses
// and the normalisation, for lengths around the 16-lane body, the 32-lane tile rows and partial last tiles.
TEST(LogitsPaths, EveryVectorPathEqualsTheOneLaneBits) {
  using specdec::detail::LogitsPath;
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 6.0f);
  std::uniform_real_distribution<float> deep(-110.0f, 0.0f);
  std::uniform_int_distribution<int> kind(0, 9);
  const float inf = std::numeric_limits<float>::infinity();
  int paths = 0;
  for (const LogitsPath path : {LogitsPath::kVector4, LogitsPath::kAvx512}) {
    if (!specdec::detail::logits_path_available(path)) continue;
    ++paths;
    for (const std::int64_t n : {1, 3, 15, 16, 17, 31, 33, 1000, 1024, 1025, 4097, 49152, 50001})
      for (const float t : {1.0f, 0.7f, 0.05f, 3.0f, 1e-3f}) {
        std::vector<float> logits(static_cast<std::size_t>(n));
        for (auto& l : logits) {
          const int k = kind(rng);
          // deep: (l - max) / t spans exp's range down to the denormals and 0
          l = k == 0 ? -inf : k <= 3 ? deep(rng) * t : std::min(normal(rng) * t, 0.0f);
        }
        logits[static_cast<std::size_t>(n / 2)] = 0.0f;  // the max: weight exactly 1
        const float max_logit = *std::max_element(logits.begin(), logits.end());
        std::vector<float> want(logits.size()), got(logits.size());
        specdec::detail::logit_weights_one_lane(logits.data(), n, max_logit, t, want.data());
        specdec::detail::logit_weights(path, logits.data(), n, max_logit, t, got.data());
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << "weights, path " << static_cast<int>(path) << " n " << n << " t " << t;
        bool denormal = false;
        for (float w : want) denormal = denormal || (w > 0.0f && w < FLT_MIN);
        if (n >= 1000) {
          ASSERT_TRUE(denormal) << "the rows must reach exp's denormal range, n " << n;
        }
        const std::int64_t tiles = specdec::num_tiles(n);
        std::vector<float> mw(static_cast<std::size_t>(tiles)), mg(static_cast<std::size_t>(tiles));
        specdec::detail::tile_masses_one_lane(want.data(), n, mw.data());
        specdec::detail::tile_masses(path, want.data(), n, mg.data());
        ASSERT_EQ(std::memcmp(mw.data(), mg.data(), mw.size() * sizeof(float)), 0)
            << "tile masses, path " << static_cast<int>(path) << " n " << n;
        const float mass = specdec::detail::combine_tiles(mw.data(), tiles, 1);
        got = want;
        const float inverse = specdec::detail::inverse_mass(mass);
        specdec::detail::normalise_one_lane(want.data(), n, inverse);
        specdec::detail::normalise_row(path, got.data(), n, inverse);
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << "normalisation, path " << static_cast<int>(path) << " n " << n;
      }
  }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  EXPECT_GE(paths, 1) << "an x86-64 GCC/clang build has at least the 4-wide path";
#endif
}
