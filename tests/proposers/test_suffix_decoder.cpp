// SuffixProposer through the decoder: greedy output equal to plain decoding (chains and trees, batches), and a
// request's sampled tokens independent of its batch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common.hpp"
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

}  // namespace
