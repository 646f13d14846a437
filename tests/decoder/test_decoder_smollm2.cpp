// SpeculativeDecoder on the real SmolLM2-135M (skipped when the GGUF file is absent): greedy n-gram speculation equals
// greedy autoregressive decoding.
#include <gtest/gtest.h>

#include <filesystem>

#include "common.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/tokenizer.hpp"

namespace {

using namespace specdec::test;

TEST(DecoderSmolLM2, GreedyNgramEqualsAutoregressive) {
  const std::filesystem::path path = std::filesystem::path(SPECDEC_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model file absent: " << path;
  auto target = sm::load_llama_gguf(path);
  const sm::GgufFile file(path);
  const auto tok = sm::Tokenizer::from_gguf(file);
  const auto ids = tok.encode("The list: apples, pears, plums. Again the list: apples, pears,");
  std::vector<std::int64_t> prompt(ids.begin(), ids.end());
  auto r = make_request(prompt, 24);
  sp::NoProposer none;
  std::vector<std::int64_t> base;
  {
    sd::SpeculativeDecoder dec(none, target);
    base = dec.generate(std::vector{r})[0].tokens;
  }
  sp::NgramProposer ngram;
  sd::DecoderOptions o;
  o.num_speculative_tokens = 4;
  o.detokenize = sd::make_detokenizer(tok);
  sd::SpeculativeDecoder dec(ngram, target, o);
  const auto res = dec.generate(std::vector{r});
  EXPECT_EQ(res[0].tokens, base) << tok.decode(std::vector<std::int32_t>(base.begin(), base.end()));
  EXPECT_GT(dec.metrics().total.accepted, 0);
}

}  // namespace
