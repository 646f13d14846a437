// SuffixProposer through the decoder: greedy output equal to plain decoding (chains and trees, batches), and a
// request's sampled tokens independent of its batch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "specdec/proposers/corpus.hpp"
#include "specdec/proposers/suffix.hpp"

namespace {

using namespace specdec::test;

using Tokens = std::vector<std::int64_t>;

std::vector<Tokens> generate_all(auto& proposer, sm::LlamaModel& target, const std::vector<sd::GenerationRequest>& rs, int g) {
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  sd::SpeculativeDecoder dec(proposer, target, o);
  std::vector<Tokens> out;
  for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
  return out;
}

TEST(Suffix, GreedyOutputEqualsPlainDecoding) {
  auto target = tiny_model(3);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 4; ++b) rs.push_back(make_request(make_prompt(16 + 4 * b, 64, static_cast<std::uint64_t>(b)), 24));
  sp::NoProposer none;
  const auto plain = generate_all(none, target, rs, 0);
  for (std::int32_t width : {1, 4}) {
    for (int g : {2, 5}) {
      sp::SuffixOptions o;
      o.max_width = width;
      o.min_path_probability = 0.0;
      sp::SuffixProposer suffix(o);
      EXPECT_EQ(generate_all(suffix, target, rs, g), plain) << "width " << width << " g " << g;
      // A second pass over the same prompts drafts from the first pass's outputs in the global trie: still exact, and
      // it accepts drafts.
      sd::DecoderOptions dopt;
      dopt.num_speculative_tokens = g;
      sd::SpeculativeDecoder dec(suffix, target, dopt);
      std::vector<Tokens> again;
      for (auto& r : dec.generate(rs)) again.push_back(r.tokens);
      EXPECT_EQ(again, plain);
      EXPECT_GT(dec.metrics().total.accepted, 0);
    }
  }
}

TEST(Suffix, SampledTokensDoNotDependOnTheBatch) {
  auto target = tiny_model(4);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 3; ++b)
    rs.push_back(make_request(make_prompt(20, 64, static_cast<std::uint64_t>(b)), 20, 1.0f, 300 + static_cast<std::uint64_t>(b)));
  sp::SuffixOptions o;
  o.global_outputs = 0;  // otherwise earlier requests' outputs change later drafts (still lossless, not comparable)
  sp::SuffixProposer together(o);
  const auto all = generate_all(together, target, rs, 4);
  for (std::size_t b = 0; b < rs.size(); ++b) {
    sp::SuffixProposer alone(o);
    EXPECT_EQ(generate_all(alone, target, {rs[b]}, 4)[0], all[b]) << b;
  }
}

// The corpus proposer over a table of the target's own greedy outputs for these prompts (as `specdec-train corpus` builds
// it from the target's answers): greedy output equal to plain decoding, alone and in a batch, with drafts accepted; and a
// request's sampled tokens independent of its batch.
std::shared_ptr<const sp::CorpusTable> table_of(const std::vector<sd::GenerationRequest>& rs, const std::vector<Tokens>& outs,
                                                std::int64_t vocab) {
  sp::CorpusTableBuilder b(vocab, 6);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    Tokens all = rs[i].prompt;
    all.insert(all.end(), outs[i].begin(), outs[i].end());
    const Tokens ctx(all.begin(), all.end() - 1), next(all.begin() + 1, all.end());
    b.add(ctx, next, 0);
  }
  return std::make_shared<const sp::CorpusTable>(std::move(b).finish(1));
}

TEST(Corpus, GreedyOutputEqualsPlainDecoding) {
  auto target = tiny_model(5);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 4; ++b) rs.push_back(make_request(make_prompt(12 + 3 * b, 64, 40 + static_cast<std::uint64_t>(b)), 24));
  sp::NoProposer none;
  const auto plain = generate_all(none, target, rs, 0);
  sp::CorpusOptions co;
  co.min_count = 1;
  co.min_path_prob = 0.0;
  for (int g : {1, 4}) {
    sp::CorpusProposer corpus(table_of(rs, plain, target.vocab_size()), co);
    sd::DecoderOptions o;
    o.num_speculative_tokens = g;
    sd::SpeculativeDecoder dec(corpus, target, o);
    std::vector<Tokens> got;
    for (auto& r : dec.generate(rs)) got.push_back(r.tokens);
    EXPECT_EQ(got, plain) << "g " << g;
    EXPECT_GT(dec.metrics().total.accepted, 0) << "g " << g;
    for (std::size_t b = 0; b < rs.size(); ++b) EXPECT_EQ(generate_all(corpus, target, {rs[b]}, g)[0], plain[b]) << b;
  }
  // A table of other text (the outputs shifted to other requests' prompts) drafts wrong tokens: still exact.
  std::vector<Tokens> shifted(plain.rbegin(), plain.rend());
  sp::CorpusProposer wrong(table_of(rs, shifted, target.vocab_size()), co);
  EXPECT_EQ(generate_all(wrong, target, rs, 4), plain);
}

TEST(Corpus, SampledTokensDoNotDependOnTheBatch) {
  auto target = tiny_model(6);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 3; ++b)
    rs.push_back(make_request(make_prompt(20, 64, 500 + static_cast<std::uint64_t>(b)), 20, 1.0f, 700 + static_cast<std::uint64_t>(b)));
  sp::NoProposer none;
  sp::CorpusOptions co;
  co.min_count = 1;
  co.min_path_prob = 0.0;
  sp::CorpusProposer corpus(table_of(rs, generate_all(none, target, rs, 0), target.vocab_size()), co);
  const auto all = generate_all(corpus, target, rs, 4);
  for (std::size_t b = 0; b < rs.size(); ++b) EXPECT_EQ(generate_all(corpus, target, {rs[b]}, 4)[0], all[b]) << b;
}

}  // namespace
