// LlamaModel on the real SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to float32 at load). Skipped when the file is absent
// (scripts/setup.sh downloads it). The model path can be overridden with SPECDEC_MODEL.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"

namespace sm = specdec::models;

namespace {

std::filesystem::path model_path() {
  if (const char* env = std::getenv("SPECDEC_MODEL")) return env;
  return std::filesystem::path(SPECDEC_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    model_ = std::make_unique<sm::LlamaModel>(sm::load_llama_gguf(model_path()));
    sm::GgufFile file(model_path());
    tokenizer_ = std::make_unique<sm::Tokenizer>(sm::Tokenizer::from_gguf(file));
  }
  static void TearDownTestSuite() {
    model_.reset();
    tokenizer_.reset();
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "model file " << model_path() << " is absent (run scripts/setup.sh to download it)";
  }
  static std::unique_ptr<sm::LlamaModel> model_;
  static std::unique_ptr<sm::Tokenizer> tokenizer_;
};
std::unique_ptr<sm::LlamaModel> SmolLM2::model_;
std::unique_ptr<sm::Tokenizer> SmolLM2::tokenizer_;

std::int64_t top1(const at::Tensor& row) { return row.argmax().item<std::int64_t>(); }

}  // namespace

TEST_F(SmolLM2, ConfigFromGguf) {
  const sm::LlamaConfig& c = model_->config();
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(model_->vocab_size(), 49152);
}

TEST_F(SmolLM2, GreedyAnswerNamesParis) {
  const std::string prompt =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n";
  sm::EncodeOptions opts;
  opts.parse_special = true;
  const std::vector<std::int32_t> ids = tokenizer_->encode(prompt, opts);
  ASSERT_GT(ids.size(), 10u);
  const std::int64_t slot = model_->allocate_sequence();
  sm::ForwardBatch prefill = sm::make_chain_batch(slot, {ids.begin(), ids.end()});
  prefill.last_logits_only = true;
  std::int64_t next = top1(model_->forward(prefill).logits[0]);
  std::vector<std::int32_t> answer;
  for (int step = 0; step < 12 && !tokenizer_->is_end_of_generation(static_cast<std::int32_t>(next)); ++step) {
    answer.push_back(static_cast<std::int32_t>(next));
    next = top1(model_->forward(sm::make_chain_batch(slot, {next})).logits[0]);
  }
  const std::string text = tokenizer_->decode(answer, /*skip_special=*/true);
  EXPECT_NE(text.find("Paris"), std::string::npos) << "greedy answer: '" << text << "'";
  model_->free_sequence(slot);
}

TEST_F(SmolLM2, DraftBlockOfSixEqualsSingleSteps) {
  // The speculative verify step: 6 tokens in one forward give the logits of 6 single-token forwards.
  sm::EncodeOptions opts;
  const std::vector<std::int32_t> ids = tokenizer_->encode("The quick brown fox jumps over the lazy dog because it", opts);
  ASSERT_GE(ids.size(), 8u);
  const std::vector<std::int64_t> prefix(ids.begin(), ids.end() - 6), block(ids.end() - 6, ids.end());
  const std::int64_t a = model_->allocate_sequence(), b = model_->allocate_sequence();
  model_->forward(sm::make_chain_batch(a, prefix));
  model_->forward(sm::make_chain_batch(b, prefix));
  at::Tensor batched = model_->forward(sm::make_chain_batch(a, block)).logits;
  for (std::size_t i = 0; i < block.size(); ++i) {
    at::Tensor single = model_->forward(sm::make_chain_batch(b, {block[i]})).logits[0];
    const double scale = std::max(1.0, single.abs().max().item<double>());
    EXPECT_LE((batched[static_cast<std::int64_t>(i)] - single).abs().max().item<double>(), 1e-4 * scale) << "row " << i;
    EXPECT_EQ(top1(batched[static_cast<std::int64_t>(i)]), top1(single));
  }
  model_->free_sequence(a);
  model_->free_sequence(b);
}
