// NgramIndex / NgramProposer: longest-then-most-recent match, incremental indexing, trees of several matches, bad options.
#include <gtest/gtest.h>

#include "propose_request.hpp"
#include "specdec/proposers/ngram.hpp"

namespace {

namespace sp = specdec::proposers;

std::vector<std::int64_t> drafts_for(const std::vector<std::int64_t>& ctx, sp::NgramOptions o, std::int32_t g,
                                     std::vector<std::int64_t>* parents = nullptr) {
  sp::NgramProposer p(o);
  sp::RequestContext c;
  c.id = 1;
  c.context = ctx;
  p.begin_request(c);
  specdec::SamplingParams params;
  const sp::ProposeRequest r = specdec::test::propose_request(1, ctx, &params, g);
  auto d = p.propose(std::span(&r, 1));
  EXPECT_EQ(d.num_requests(), 1);
  EXPECT_FALSE(d.probs.defined());
  if (parents) *parents = d.parents.empty() ? std::vector<std::int64_t>{} : d.parents[0];
  return d.token_ids;
}

TEST(Ngram, LongestThenMostRecentMatch) {
  sp::NgramOptions o;
  o.min_n = 1;
  o.max_n = 3;
  // suffix "1 2 3": longest match (n = 3) at the start continues with 4 5; the later "2 3" (n = 2) continues with 9
  EXPECT_EQ(drafts_for({1, 2, 3, 4, 5, 7, 2, 3, 9, 8, 1, 2, 3}, o, 2), (std::vector<std::int64_t>{4, 5}));
  // only n = 1 matches: the most recent occurrence of 3 wins
  EXPECT_EQ(drafts_for({3, 4, 5, 3, 6, 7, 3}, o, 3), (std::vector<std::int64_t>{6, 7, 3}));
  // no match
  EXPECT_TRUE(drafts_for({1, 2, 3, 4}, o, 3).empty());
  // g caps and max_drafts caps
  EXPECT_EQ(drafts_for({5, 6, 7, 8, 9, 5}, o, 2), (std::vector<std::int64_t>{6, 7}));
  o.max_drafts = 1;
  EXPECT_EQ(drafts_for({5, 6, 7, 8, 9, 5}, o, 4), (std::vector<std::int64_t>{6}));
  o.max_drafts = 8;
  // min_n = 2: a single-token match does not count
  o.min_n = 2;
  EXPECT_TRUE(drafts_for({3, 4, 5, 3, 6, 7, 3}, o, 3).empty());
  // the continuation may run into the suffix itself (periodic text)
  o.min_n = 1;
  EXPECT_EQ(drafts_for({1, 2, 1, 2, 1}, o, 4), (std::vector<std::int64_t>{2, 1}));
}

TEST(Ngram, IncrementalIndexEqualsFreshIndex) {
  std::vector<std::int64_t> ctx;
  std::uint64_t s = 7;
  sp::NgramIndex inc(1, 4);
  for (int i = 0; i < 3000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ctx.push_back(static_cast<std::int64_t>((s >> 33) % 20));
    inc.push(ctx.back());
    if (i % 97 == 0) {
      sp::NgramIndex fresh(1, 4);
      fresh.extend(ctx);
      const auto a = inc.find(), b = fresh.find();
      EXPECT_EQ(a.end, b.end);
      EXPECT_EQ(a.n, b.n);
      // brute force: the longest n <= 4 with an earlier occurrence, the latest one
      const auto L = static_cast<std::int64_t>(ctx.size());
      std::int64_t best_end = -1, best_n = 0;
      for (std::int64_t n = std::min<std::int64_t>(4, L - 1); n >= 1 && best_end < 0; --n)
        for (std::int64_t j = L - 2; j >= n - 1; --j) {
          bool eq = true;
          for (std::int64_t k = 0; k < n && eq; ++k) eq = ctx[static_cast<std::size_t>(j - k)] == ctx[static_cast<std::size_t>(L - 1 - k)];
          if (eq) {
            best_end = j;
            best_n = n;
            break;
          }
        }
      EXPECT_EQ(a.end, best_end) << i;
      EXPECT_EQ(a.n, best_n) << i;
    }
  }
}

TEST(Ngram, SeveralMatchesFormATrie) {
  sp::NgramOptions o;
  o.min_n = 1;
  o.max_n = 2;
  o.num_candidates = 3;
  std::vector<std::int64_t> parents;
  // the longest suffix "0 7" occurs twice, followed by 4 0 and by 1 3 (the earlier "7 1 2" is a 1-gram match only)
  auto d = drafts_for({7, 1, 2, 0, 7, 1, 3, 0, 7, 4, 0, 7}, o, 2, &parents);
  EXPECT_EQ(d, (std::vector<std::int64_t>{4, 0, 1, 3}));
  EXPECT_EQ(parents, (std::vector<std::int64_t>{0, 1, 0, 3}));
  // "7" with 1-grams only: followed by 1 3, 1 2 and 4 -> 4 | 1 3 | (1) 2, shared prefixes merged
  o.max_n = 1;
  d = drafts_for({7, 1, 2, 0, 7, 1, 3, 0, 7, 4, 0, 7}, o, 2, &parents);
  EXPECT_EQ(d, (std::vector<std::int64_t>{4, 0, 1, 3, 2}));
  EXPECT_EQ(parents, (std::vector<std::int64_t>{0, 1, 0, 3, 3}));
}

TEST(Ngram, BadOptionsAndUnknownRequests) {
  sp::NgramOptions o;
  o.min_n = 0;
  EXPECT_THROW(sp::NgramProposer{o}, specdec::error);
  o.min_n = 3;
  o.max_n = 2;
  EXPECT_THROW(sp::NgramProposer{o}, specdec::error);
  o = {};
  o.num_candidates = 0;
  EXPECT_THROW(sp::NgramProposer{o}, specdec::error);
  sp::NgramProposer p;
  sp::ProposeRequest r;
  r.id = 5;
  EXPECT_THROW(p.propose(std::span(&r, 1)), specdec::error);
}

}  // namespace
