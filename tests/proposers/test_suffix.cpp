// SuffixTrie / SuffixProposer on their own (no model, no torch): frequency counts of the bounded-depth suffix trie,
// removal, longest match, best-first trees by path probability, the global cache of finished outputs (a repeated task
// drafts from an earlier answer), bad options. Through the decoder: test_suffix_decoder.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "propose_request.hpp"
#include "specdec/proposers/suffix.hpp"

namespace {

namespace sp = specdec::proposers;

using Tokens = std::vector<std::int64_t>;

struct Proposal {
  Tokens tokens, parents;
};

Proposal propose(sp::SuffixProposer& p, sp::RequestId id, const Tokens& ctx, std::int32_t g) {
  specdec::SamplingParams params;
  const sp::ProposeRequest r = specdec::test::propose_request(id, ctx, &params, g);
  auto d = p.propose(std::span(&r, 1));
  EXPECT_FALSE(d.probs.defined());
  return {d.token_ids, d.parents.empty() ? Tokens{} : d.parents[0]};
}

void begin(sp::SuffixProposer& p, sp::RequestId id, const Tokens& ctx) {
  sp::RequestContext c;
  c.id = id;
  c.context = ctx;
  p.begin_request(c);
}

TEST(Suffix, TrieCountsContinuationsAndRemovesSequences) {
  sp::SuffixTrie t(4);
  t.add_sequence(Tokens{1, 2, 3, 1, 2, 4, 1, 2, 3});
  std::int32_t m = 0;
  const auto node = t.match(Tokens{9, 1, 2}, 1, m);  // "1 2" continues with 3 (twice) and 4 (once)
  ASSERT_GE(node, 0);
  EXPECT_EQ(m, 2);
  Tokens toks, parents;
  const double expected = t.grow(node, 8, 1, 4, 0.0, toks, parents);  // depth 1: the two continuations, 3 first
  EXPECT_EQ(toks, (Tokens{3, 4}));
  EXPECT_EQ(parents, (Tokens{0, 0}));
  EXPECT_NEAR(expected, 1.0, 1e-12);  // 2/3 + 1/3
  // Removing the sequence leaves nothing to match.
  t.add_sequence(Tokens{1, 2, 3, 1, 2, 4, 1, 2, 3}, -1);
  EXPECT_LT(t.match(Tokens{9, 1, 2}, 1, m), 0);
}

// match_open (a live request's cursor) gives match()'s node and length on the same context, token by token, for every
// length bound: random texts over a small vocabulary (many repeats) and depths 2, 5 and 24.
TEST(Suffix, CursorMatchEqualsTheWalkFromTheRoot) {
  std::uint64_t state = 7;
  auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  std::int64_t found = 0;
  for (const std::int32_t depth : {2, 5, 24}) {
    sp::SuffixTrie t(depth);
    sp::SuffixTrie::Cursor c;
    Tokens ctx;
    for (int i = 0; i < 400; ++i) {
      const auto tok = static_cast<std::int64_t>(next() % (i % 3 == 0 ? 3 : 7));
      ctx.push_back(tok);
      t.push(c, tok);
      for (const std::int32_t min_len : {1, 2})
        for (const std::int32_t max_len : {1, 3, depth - 1, depth + 5}) {
          std::int32_t m1 = -5, m2 = -5;
          const std::int32_t n1 = t.match(ctx, min_len, m1, max_len), n2 = t.match_open(c, min_len, m2, max_len);
          ASSERT_EQ(n1, n2) << "depth " << depth << ", token " << i << ", lengths " << min_len << ".." << max_len;
          ASSERT_EQ(m1, m2) << "depth " << depth << ", token " << i << ", lengths " << min_len << ".." << max_len;
          found += n1 >= 0;
        }
    }
  }
  EXPECT_GT(found, 1000);
}

TEST(Suffix, DraftsTheMostLikelyContinuationOfTheLongestMatch) {
  sp::SuffixOptions o;
  o.max_width = 1;  // chains
  o.tokens_per_match_token = 4.0;
  sp::SuffixProposer p(o);
  const Tokens ctx = {5, 6, 7, 8, 9, 1, 5, 6, 7, 8, 9, 2, 3, 5, 6, 7};
  begin(p, 1, ctx);
  const auto d = propose(p, 1, ctx, 3);  // "5 6 7" continues "8 9" twice, then 1 or 2
  EXPECT_EQ(d.tokens, (Tokens{8, 9, 1}));
  EXPECT_TRUE(d.parents.empty());  // a chain
  EXPECT_EQ(p.last_match_length(1), 3);  // "5 6 7" ("3 5 6 7" has no continuation)
  // Depth is capped by the decoder's g.
  EXPECT_EQ(propose(p, 1, ctx, 1).tokens, (Tokens{8}));
}

TEST(Suffix, LongRepeatsDraftTheWholeDepth) {
  // A 40-token passage, then its first 30 tokens again: the longest suffix match (23 tokens in a depth-24 trie) would have
  // one continuation token below it; the match leaves room for g levels, so the whole g-token continuation is drafted,
  // from the request's own trie and, for a later request, from the global trie.
  sp::SuffixOptions o;
  o.max_width = 1;
  sp::SuffixProposer p(o);
  Tokens passage;
  for (std::int64_t i = 0; i < 40; ++i) passage.push_back(100 + i);
  Tokens ctx = passage;
  ctx.insert(ctx.end(), passage.begin(), passage.begin() + 30);
  begin(p, 1, ctx);
  EXPECT_EQ(propose(p, 1, ctx, 5).tokens, (Tokens{130, 131, 132, 133, 134}));
  EXPECT_EQ(p.last_match_length(1), 19);  // room for 5 levels below the match in the depth-24 trie
  EXPECT_EQ(propose(p, 1, ctx, 8).tokens, (Tokens{130, 131, 132, 133, 134, 135, 136, 137}));
  // A finished output (the passage as generated text) drafts in full for a new request that repeats it.
  Tokens prompt = {7};
  Tokens out = prompt;
  out.insert(out.end(), passage.begin(), passage.end());
  begin(p, 2, prompt);
  (void)propose(p, 2, out, 1);  // the request's context grows to the whole passage
  p.end_request(2);
  Tokens again = {8};
  again.insert(again.end(), passage.begin(), passage.begin() + 30);
  begin(p, 3, {8});
  EXPECT_EQ(propose(p, 3, again, 5).tokens, (Tokens{130, 131, 132, 133, 134}));
}

TEST(Suffix, TreesBranchWhereTheContinuationsDiffer) {
  sp::SuffixOptions o;
  o.tokens_per_match_token = 8.0;
  o.min_path_probability = 0.2;
  sp::SuffixProposer p(o);
  // The longest suffix with earlier occurrences is "1 2" (three of them): it continues with 3 always, then 4 (2 of 3)
  // or 5 (1 of 3).
  const Tokens ctx = {1, 2, 3, 4, 7, 1, 2, 3, 5, 8, 1, 2, 3, 4, 9, 1, 2};
  begin(p, 1, ctx);
  const auto d = propose(p, 1, ctx, 2);
  EXPECT_EQ(d.tokens, (Tokens{3, 4, 5}));
  EXPECT_EQ(d.parents, (Tokens{0, 1, 1}));
  // Below the probability floor a branch is left out.
  sp::SuffixOptions strict = o;
  strict.min_path_probability = 0.5;
  sp::SuffixProposer q(strict);
  begin(q, 1, ctx);
  EXPECT_EQ(propose(q, 1, ctx, 2).tokens, (Tokens{3, 4}));
}

TEST(Suffix, FinishedOutputsHelpLaterRequests) {
  sp::SuffixProposer p;
  const Tokens prompt = {40, 41, 42};
  begin(p, 1, prompt);
  Tokens ctx = prompt;
  for (std::int64_t t : {10, 11, 12, 13, 14, 15}) ctx.push_back(t);
  (void)propose(p, 1, ctx, 4);  // the proposer sees the whole output
  p.end_request(1);
  EXPECT_EQ(p.cached_outputs(), 1);
  // A new request whose context ends like the start of that answer drafts its rest from the global trie.
  const Tokens other = {50, 51, 10, 11, 12};
  begin(p, 2, other);
  EXPECT_EQ(propose(p, 2, other, 3).tokens, (Tokens{13, 14, 15}));
  // With no global cache it has nothing to go on.
  sp::SuffixOptions no_cache;
  no_cache.global_outputs = 0;
  sp::SuffixProposer q(no_cache);
  begin(q, 1, prompt);
  (void)propose(q, 1, ctx, 4);
  q.end_request(1);
  begin(q, 2, other);
  EXPECT_TRUE(propose(q, 2, other, 3).tokens.empty());
}

TEST(Suffix, GlobalCacheIsBounded) {
  sp::SuffixOptions o;
  o.global_outputs = 2;
  o.tokens_per_match_token = 4.0;  // a one-token match may draft several
  sp::SuffixProposer p(o);
  for (sp::RequestId id = 0; id < 5; ++id) {
    Tokens ctx = {1};
    for (int i = 0; i < 4; ++i) ctx.push_back(100 * (id + 1) + i);
    begin(p, id, {1});
    (void)propose(p, id, ctx, 2);
    p.end_request(id);
  }
  EXPECT_EQ(p.cached_outputs(), 2);
  begin(p, 9, {7, 100});  // the first output left the cache
  EXPECT_TRUE(propose(p, 9, {7, 100}, 2).tokens.empty());
  begin(p, 10, {7, 500});
  EXPECT_EQ(propose(p, 10, {7, 500}, 2).tokens, (Tokens{501, 502}));
}

TEST(Suffix, GlobalTrieStaysBoundedAndDraftsAsIfFresh) {
  // Many requests through a window of 4 outputs: the global trie drops the nodes of outputs that left (rebuilt once
  // most of its nodes are at zero count), and drafts as a proposer that only ever saw the window's outputs does.
  sp::SuffixOptions o;
  o.global_outputs = 4;
  sp::SuffixProposer p(o);
  auto output = [](sp::RequestId id) {
    Tokens t;
    for (std::int64_t i = 0; i < 60; ++i) t.push_back(1000 + (id * 7919 + i * 104729) % 5000);  // distinct suffixes
    return t;
  };
  auto run = [&](sp::SuffixProposer& q, sp::RequestId id) {
    begin(q, id, {1});
    Tokens ctx = {1};
    for (auto t : output(id)) ctx.push_back(t);
    (void)propose(q, id, ctx, 2);
    q.end_request(id);
  };
  std::int64_t most = 0;
  for (sp::RequestId id = 0; id < 200; ++id) {
    run(p, id);
    most = std::max(most, p.global_nodes());
  }
  EXPECT_EQ(p.cached_outputs(), 4);
  // 4 outputs of 61 tokens hold at most 4 * 61 * 24 nodes; without the rebuild 200 outputs would hold 50 times that
  EXPECT_LE(most, 2 * sp::SuffixProposer::kMinRebuildNodes + 4 * 61 * 24);
  sp::SuffixProposer fresh(o);
  for (sp::RequestId id = 196; id < 200; ++id) run(fresh, id);
  for (sp::RequestId id = 190; id < 200; ++id) {
    const Tokens out = output(id);
    const Tokens ctx = {7, out[10], out[11], out[12]};
    begin(p, 1000 + id, ctx);
    begin(fresh, 1000 + id, ctx);
    const Proposal a = propose(p, 1000 + id, ctx, 4), b = propose(fresh, 1000 + id, ctx, 4);
    EXPECT_EQ(a.tokens, b.tokens) << id;
    EXPECT_EQ(a.parents, b.parents) << id;
    // in the window: the 3-token match drafts 3 nodes (one per matched token)
    if (id >= 196) {
      EXPECT_EQ(a.tokens, (Tokens{out[13], out[14], out[15]})) << id;
    }
  }
}

TEST(Suffix, BadOptionsAndProtocolErrors) {
  auto bad = [](auto set) {
    sp::SuffixOptions o;
    set(o);
    EXPECT_THROW(sp::SuffixProposer{o}, specdec::error);
  };
  bad([](sp::SuffixOptions& o) { o.max_depth = 1; });
  bad([](sp::SuffixOptions& o) { o.min_match = 0; });
  bad([](sp::SuffixOptions& o) { o.tokens_per_match_token = 0; });
  bad([](sp::SuffixOptions& o) { o.max_width = 0; });
  bad([](sp::SuffixOptions& o) { o.min_path_probability = 1.5; });
  bad([](sp::SuffixOptions& o) { o.global_outputs = -1; });
  sp::SuffixProposer p;
  begin(p, 1, {1, 2});
  EXPECT_THROW(begin(p, 1, {1, 2}), specdec::error);
  EXPECT_THROW(propose(p, 2, {1, 2}, 2), specdec::error);
  EXPECT_THROW((void)p.last_match_length(2), specdec::error);
  EXPECT_TRUE(propose(p, 1, {1, 2}, 2).tokens.empty());  // nothing repeats: no match behind the (empty) proposal
  EXPECT_EQ(p.last_match_length(1), 0);
}

}  // namespace
