// CorpusTable / CorpusProposer on their own (no model, no torch): the builder's counts against a brute-force count over
// the token sequences themselves (no hashes), the longest usable match, pruning, saturation, ties, the file's round trip
// and its refusals, the proposer's chains, confidences, path bound and bad options. Through the decoder:
// test_suffix_decoder.cpp (greedy equality, batch independence) and test_decoder_distribution.cpp (the joint law).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "propose_request.hpp"
#include "specdec/proposers/corpus.hpp"

namespace {

namespace sp = specdec::proposers;
namespace fs = std::filesystem;

using Tokens = std::vector<std::int64_t>;

// Sequences with repeats: a few phrases over a small vocabulary, joined at random.
std::vector<Tokens> phrase_corpus(std::uint64_t seed, int sequences) {
  const std::vector<Tokens> phrases = {{1, 2, 3, 4}, {1, 2, 5}, {6, 7, 8, 9, 10}, {2, 3, 4, 11}, {12, 1, 2, 3}, {13}};
  std::mt19937_64 rng(seed);
  std::vector<Tokens> out;
  for (int s = 0; s < sequences; ++s) {
    Tokens t;
    const int n = 3 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      const Tokens& p = phrases[rng() % phrases.size()];
      t.insert(t.end(), p.begin(), p.end());
    }
    out.push_back(t);
  }
  return out;
}

// The reference: for the context n-gram `gram` (oldest first), how often each token followed it in `corpus`.
std::map<std::int64_t, std::uint32_t> followers(const std::vector<Tokens>& corpus, const Tokens& gram) {
  std::map<std::int64_t, std::uint32_t> out;
  const std::size_t n = gram.size();
  for (const Tokens& t : corpus)
    for (std::size_t end = n; end < t.size(); ++end)  // gram = t[end - n .. end), next = t[end]
      if (std::equal(gram.begin(), gram.end(), t.begin() + static_cast<std::ptrdiff_t>(end - n))) ++out[t[end]];
  return out;
}

sp::CorpusTable build(const std::vector<Tokens>& corpus, std::int32_t max_n, std::uint32_t min_count, std::int64_t vocab = 16) {
  sp::CorpusTableBuilder b(vocab, max_n);
  for (const Tokens& t : corpus) {
    if (t.size() < 2) continue;
    const Tokens ctx(t.begin(), t.end() - 1), next(t.begin() + 1, t.end());
    b.add(ctx, next, 0);
  }
  return std::move(b).finish(min_count);
}

TEST(CorpusTable, CountsEqualABruteForceCountOfTheSequences) {
  const auto corpus = phrase_corpus(1, 40);
  const auto table = build(corpus, 4, 1);
  std::int64_t positions = 0;
  for (const auto& t : corpus) positions += static_cast<std::int64_t>(t.size()) - 1;
  EXPECT_EQ(table.positions(), positions);
  // Every context n-gram of every corpus position, looked up by its own hash, holds the reference's best and total.
  std::int64_t checked = 0;
  for (const Tokens& t : corpus)
    for (std::size_t end = 1; end < t.size(); ++end)
      for (std::size_t n = 1; n <= 4 && n <= end; ++n) {
        const Tokens gram(t.begin() + static_cast<std::ptrdiff_t>(end - n), t.begin() + static_cast<std::ptrdiff_t>(end));
        const auto ref = followers(corpus, gram);
        std::uint32_t total = 0, best = 0;
        std::int64_t best_token = -1;
        for (const auto& [tok, c] : ref) {
          total += c;
          if (c > best) best = c, best_token = tok;  // ties: the smaller token (map order)
        }
        std::uint64_t h = sp::NgramIndex::kSeed;
        for (std::size_t i = 0; i < n; ++i) h = sp::NgramIndex::mix(h, gram[gram.size() - 1 - i]);
        const sp::CorpusEntry* e = table.lookup(h);
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(e->token, best_token);
        EXPECT_EQ(e->count, best);
        EXPECT_EQ(e->total, total);
        ++checked;
      }
  EXPECT_GT(checked, 500);
}

TEST(CorpusTable, FindTakesTheLongestUsableMatch) {
  // After "1 2" the corpus has 3 (twice) and 5 (once); after "12 1 2" always 3; after "2" 3 or 5; "9 1 2" never seen.
  const std::vector<Tokens> corpus = {{12, 1, 2, 3}, {12, 1, 2, 3}, {7, 1, 2, 5}};
  const auto table = build(corpus, 4, 1);
  auto hit = table.find(Tokens{12, 1, 2}, 1, 1, 0.0);
  EXPECT_EQ(hit.token, 3);
  EXPECT_EQ(hit.n, 3);
  EXPECT_EQ(hit.count, 2u);
  EXPECT_EQ(hit.total, 2u);
  // An unseen 3-gram: the longest seen suffix, "1 2", followed by 3 two times of three.
  hit = table.find(Tokens{9, 1, 2}, 1, 1, 0.0);
  EXPECT_EQ(hit.token, 3);
  EXPECT_EQ(hit.n, 2);
  EXPECT_EQ(hit.count, 2u);
  EXPECT_EQ(hit.total, 3u);
  // The bounds: a share of 2/3 fails min_share 0.7, so "9 1 2" finds nothing; "12 1 2" still finds its 2/2.
  EXPECT_FALSE(table.find(Tokens{9, 1, 2}, 1, 1, 0.7).found());
  EXPECT_EQ(table.find(Tokens{12, 1, 2}, 1, 1, 0.7).n, 3);
  // min_count bounds the best token's count: every match's best was seen twice; min_n 4 is past the context.
  EXPECT_EQ(table.find(Tokens{12, 1, 2}, 1, 2, 0.0).n, 3);
  EXPECT_FALSE(table.find(Tokens{12, 1, 2}, 1, 3, 0.0).found());
  EXPECT_FALSE(table.find(Tokens{12, 1, 2}, 4, 1, 0.0).found());
  // Confidence: share^2 x total / (total + 1).
  EXPECT_DOUBLE_EQ(table.find(Tokens{9, 1, 2}, 1, 1, 0.0).confidence(), (2.0 / 3.0) * (2.0 / 3.0) * 3.0 / 4.0);
  EXPECT_FALSE(table.find(Tokens{}, 1, 1, 0.0).found());
}

TEST(CorpusTable, MinCountDropsRareGramsAndLabelsMayDifferFromTheText) {
  const auto corpus = phrase_corpus(2, 30);
  const auto all = build(corpus, 3, 1), common = build(corpus, 3, 4);
  EXPECT_LT(common.num_entries(), all.num_entries());
  for (const auto& e : common.entries()) {
    EXPECT_GE(e.total, 4u);
    const sp::CorpusEntry* f = all.lookup(e.key);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->token, e.token);
    EXPECT_EQ(f->count, e.count);
  }
  // Labels (the target's argmax) instead of the text's next token, from position `first` on.
  sp::CorpusTableBuilder b(16, 2);
  b.add(Tokens{4, 5, 6, 4, 5}, Tokens{9, 9}, 3);  // after "... 4" emitted 9, after "... 4 5" emitted 9
  const auto t = std::move(b).finish(1);
  EXPECT_EQ(t.positions(), 2);
  EXPECT_EQ(t.find(Tokens{6, 4}, 1, 1, 0.0).token, 9);
  EXPECT_EQ(t.find(Tokens{4, 5}, 2, 1, 0.0).token, 9);
  EXPECT_FALSE(t.find(Tokens{5, 6}, 1, 1, 0.0).found());  // position 1 is before `first`
}

TEST(CorpusTable, CountsSaturateKeepingTheirRatio) {
  sp::CorpusTableBuilder b(8, 1);
  Tokens ctx, next;
  for (int i = 0; i < 100000; ++i) {
    ctx.push_back(1);
    next.push_back(i % 4 == 0 ? 3 : 2);  // 75% 2, 25% 3
  }
  b.add(ctx, next, 0);
  const auto t = std::move(b).finish(1);
  const auto hit = t.find(Tokens{1}, 1, 1, 0.0);
  EXPECT_EQ(hit.token, 2);
  EXPECT_EQ(hit.total, 65535u);
  EXPECT_NEAR(static_cast<double>(hit.count) / hit.total, 0.75, 1e-4);
}

TEST(CorpusTable, SavesAndLoadsTheSameTable) {
  const auto table = build(phrase_corpus(3, 20), 5, 2);
  const fs::path dir = fs::temp_directory_path() / ("specdec_corpus_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  table.save(dir / "t.bin");
  EXPECT_FALSE(fs::exists(dir / "t.bin.tmp"));
  const auto back = sp::CorpusTable::load(dir / "t.bin");
  EXPECT_EQ(back.vocab_size(), table.vocab_size());
  EXPECT_EQ(back.max_n(), table.max_n());
  EXPECT_EQ(back.positions(), table.positions());
  ASSERT_EQ(back.num_entries(), table.num_entries());
  for (std::int64_t i = 0; i < table.num_entries(); ++i) {
    EXPECT_EQ(back.entries()[static_cast<std::size_t>(i)].key, table.entries()[static_cast<std::size_t>(i)].key);
    EXPECT_EQ(back.entries()[static_cast<std::size_t>(i)].token, table.entries()[static_cast<std::size_t>(i)].token);
  }
  // A directory that does not exist: an error naming the path, and no file anywhere.
  EXPECT_THROW(table.save(dir / "missing" / "t.bin"), specdec::error);
  EXPECT_FALSE(fs::exists(dir / "missing"));
  fs::remove_all(dir);
}

TEST(CorpusTable, LoadRefusesWhatItDidNotWriteNamingTheFile) {
  const auto table = build(phrase_corpus(4, 20), 3, 1);
  const fs::path dir = fs::temp_directory_path() / ("specdec_corpus_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path good = dir / "good.bin";
  table.save(good);
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect_refused = [&](const std::string& name, const std::string& content, const std::string& says) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary).write(content.data(), static_cast<std::streamsize>(content.size()));
    try {
      (void)sp::CorpusTable::load(p);
      ADD_FAILURE() << name << ": loaded";
    } catch (const specdec::error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(p.string()), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
    }
  };
  std::string magic = bytes;
  magic[0] = 'X';
  expect_refused("magic.bin", magic, "not a corpus table");
  expect_refused("short.bin", bytes.substr(0, bytes.size() - 3), "does not match");
  const std::size_t header = 8 + 8 + 16;
  std::string swapped = bytes;  // the first two entries' keys swapped: no longer increasing
  for (std::size_t i = 0; i < 8; ++i) std::swap(swapped[header + i], swapped[header + 16 + i]);
  expect_refused("order.bin", swapped, "strictly increasing");
  std::string token = bytes;  // the first entry's token past the vocabulary
  const std::uint32_t big = 1000;
  std::memcpy(token.data() + header + 8, &big, 4);
  expect_refused("token.bin", token, "token 1000");
  EXPECT_THROW((void)sp::CorpusTable::load(dir / "none.bin"), specdec::error);
  fs::remove_all(dir);
}

specdec::SamplingParams greedy;

sp::DraftBatch propose(sp::CorpusProposer& p, const Tokens& ctx, std::int32_t g) {
  const sp::ProposeRequest r = specdec::test::propose_request(7, ctx, &greedy, g);
  return p.propose(std::span(&r, 1));
}

TEST(CorpusProposer, DraftsTheCorpusContinuationWithItsConfidences) {
  // "6 7 8 9 10" always continues that way; the chain follows it and each draft's confidence is its hit's.
  std::vector<Tokens> corpus(5, Tokens{6, 7, 8, 9, 10});
  const auto table = std::make_shared<const sp::CorpusTable>(build(corpus, 4, 2));
  sp::CorpusOptions o;
  o.min_path_prob = 0.0;
  sp::CorpusProposer p(table, o);
  EXPECT_TRUE(p.reports_confidence());
  EXPECT_TRUE(p.drafts_are_lookups());
  EXPECT_EQ(p.vocab_size(), 16);
  auto d = propose(p, Tokens{3, 6, 7}, 8);
  EXPECT_EQ(d.token_ids, (Tokens{8, 9, 10}));  // nothing follows 10 in the corpus
  ASSERT_EQ(d.confidence.size(), 3u);
  EXPECT_FLOAT_EQ(d.confidence[0], static_cast<float>(table->find(Tokens{6, 7}, 2, 2, 0.5).confidence()));
  EXPECT_FLOAT_EQ(d.confidence[0], 5.0f / 6.0f);
  EXPECT_FALSE(d.probs.defined());
  EXPECT_EQ(propose(p, Tokens{3, 6, 7}, 2).token_ids, (Tokens{8, 9}));  // g caps the chain
  EXPECT_TRUE(propose(p, Tokens{3, 6, 7}, 0).token_ids.empty());
  EXPECT_TRUE(propose(p, Tokens{7}, 4).token_ids.empty());  // a 1-gram is below min_n = 2
  // The path bound: (5/6)^k falls below 0.65 at the third draft.
  o.min_path_prob = 0.65;
  sp::CorpusProposer bounded(table, o);
  EXPECT_EQ(propose(bounded, Tokens{3, 6, 7}, 8).token_ids, (Tokens{8, 9}));
  // max_drafts caps it too; a batch of two requests gets one chain each.
  o.min_path_prob = 0.0;
  o.max_drafts = 1;
  sp::CorpusProposer one(table, o);
  EXPECT_EQ(propose(one, Tokens{6, 7}, 8).token_ids, (Tokens{8}));
  const Tokens a{6, 7}, b{1, 1};
  const sp::ProposeRequest rs[2] = {specdec::test::propose_request(1, a, &greedy, 4),
                                    specdec::test::propose_request(2, b, &greedy, 4)};
  const auto two = p.propose(rs);
  EXPECT_EQ(two.cu_num_drafts, (Tokens{0, 3, 3}));
  EXPECT_EQ(two.confidence.size(), 3u);
}

TEST(CorpusProposer, RefusesBadOptionsNamingThem) {
  const auto table = std::make_shared<const sp::CorpusTable>(build(phrase_corpus(5, 5), 3, 1));
  auto refused = [&](sp::CorpusOptions o, const std::string& says) {
    try {
      sp::CorpusProposer p(table, o);
      ADD_FAILURE() << says << ": accepted";
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  sp::CorpusOptions o;
  o.min_n = 4;  // the table's max_n is 3
  refused(o, "min_n");
  o = {};
  o.min_count = 0;
  refused(o, "min_count");
  o = {};
  o.min_share = 1.5;
  refused(o, "min_share");
  o = {};
  o.max_drafts = -1;
  refused(o, "max_drafts");
  o = {};
  o.min_path_prob = -0.1;
  refused(o, "min_path_prob");
  EXPECT_THROW(sp::CorpusProposer(nullptr), specdec::error);
  EXPECT_THROW(sp::CorpusTableBuilder(0, 3), specdec::error);
  EXPECT_THROW(sp::CorpusTableBuilder(16, 0), specdec::error);
  sp::CorpusTableBuilder b(16, 3);
  EXPECT_THROW(b.add(Tokens{1, 2, 99}, Tokens{1, 1, 1}, 0), specdec::error);  // a token outside the vocabulary
  EXPECT_THROW(b.add(Tokens{1, 2, 3}, Tokens{1}, 0), specdec::error);         // one next token per position
}

}  // namespace
