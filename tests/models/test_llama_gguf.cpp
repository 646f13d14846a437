// LlamaModel on the real SmolLM2-135M-Instruct (Q4_1 GGUF, its matrices kept packed in their block formats). Skipped when
// the file is absent (scripts/setup.sh downloads it). The model path can be overridden with SPECDEC_MODEL; ctest also runs
// the batch-invariance test with SPECDEC_CPU_ISA=avx2 and =portable, so it holds on every instruction-set path.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "specdec/torch/aten_llama.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/torch/rows.hpp"

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
  // `text`'s tokens split before its last `tail` tokens, and two fresh sequences that have both read the first part.
  struct TwoAfterPrefix {
    std::vector<std::int64_t> prefix, tail;
    std::int64_t a = 0, b = 0;
  };
  static TwoAfterPrefix two_after_prefix(const std::string& text, std::size_t tail) {
    const std::vector<std::int32_t> ids = tokenizer_->encode(text, sm::EncodeOptions{});
    TwoAfterPrefix t;
    if (ids.size() < tail + 4) return t;  // the caller checks tail.size()
    t.prefix.assign(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(tail));
    t.tail.assign(ids.end() - static_cast<std::ptrdiff_t>(tail), ids.end());
    t.a = model_->allocate_sequence();
    t.b = model_->allocate_sequence();
    model_->forward(sm::make_chain_batch(t.a, t.prefix));
    model_->forward(sm::make_chain_batch(t.b, t.prefix));
    return t;
  }
  static std::unique_ptr<sm::LlamaModel> model_;
  static std::unique_ptr<sm::Tokenizer> tokenizer_;
};
std::unique_ptr<sm::LlamaModel> SmolLM2::model_;
std::unique_ptr<sm::Tokenizer> SmolLM2::tokenizer_;

std::int64_t top1(const at::Tensor& row) { return row.argmax().item<std::int64_t>(); }

std::string fmt_name(const char* tensor, const char* kind) { return std::string("blk.0.") + tensor + "." + kind; }

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
  std::int64_t next = top1(specdec::torch::tensor_of(model_->forward(prefill).logits)[0]);
  std::vector<std::int32_t> answer;
  for (int step = 0; step < 12 && !tokenizer_->is_end_of_generation(static_cast<std::int32_t>(next)); ++step) {
    answer.push_back(static_cast<std::int32_t>(next));
    next = top1(specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(slot, {next})).logits)[0]);
  }
  const std::string text = tokenizer_->decode(answer, /*skip_special=*/true);
  EXPECT_NE(text.find("Paris"), std::string::npos) << "greedy answer: '" << text << "'";
  model_->free_sequence(slot);
}

TEST_F(SmolLM2, PackedForwardIsBatchInvariant) {
  // The promise speculative decoding rests on, for the packed block-format products on this process's instruction set
  // (model_->kernel_name()): a token's logits are bit-identical decoded alone, in a 6-token verification, as a tree node,
  // and beside another sequence in the same call.
  sm::EncodeOptions opts;
  const std::vector<std::int32_t> ids = tokenizer_->encode("def merge_sorted(left, right):\n    result = []\n    i = j = 0", opts);
  ASSERT_GE(ids.size(), 10u);
  const std::vector<std::int64_t> prefix(ids.begin(), ids.end() - 6), block(ids.end() - 6, ids.end());
  const std::int64_t a = model_->allocate_sequence(), b = model_->allocate_sequence(), c = model_->allocate_sequence();
  for (auto s : {a, b, c}) model_->forward(sm::make_chain_batch(s, prefix));
  const std::int64_t len = model_->sequence_length(a);
  std::vector<at::Tensor> alone;
  for (auto t : block) alone.push_back(specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(b, {t})).logits)[0].clone());
  // A 6-token verification.
  at::Tensor chain = specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(a, block)).logits);
  for (std::size_t i = 0; i < block.size(); ++i)
    EXPECT_TRUE(chain[static_cast<std::int64_t>(i)].equal(alone[i])) << model_->kernel_name() << ": chain row " << i;
  // A tree whose path 0-1-3 is block[0..2], next to sequence c's 2-token chain in the same call.
  model_->truncate(a, len);
  sm::ForwardBatch both;
  both.slots = {c, a};
  both.token_ids = {block[0], block[1], block[0], block[1], block[4], block[2], block[5]};
  both.cu_num_tokens = {0, 2, 7};
  both.parents = {{}, {-1, 0, 0, 1, 2}};
  at::Tensor mixed = specdec::torch::tensor_of(model_->forward(both).logits);
  EXPECT_TRUE(mixed[0].equal(alone[0]) && mixed[1].equal(alone[1])) << model_->kernel_name() << ": the chain beside a tree";
  EXPECT_TRUE(mixed[2].equal(alone[0]) && mixed[3].equal(alone[1]) && mixed[5].equal(alone[2]))
      << model_->kernel_name() << ": tree nodes on the path";
  for (auto s : {a, b, c}) model_->free_sequence(s);
}

TEST_F(SmolLM2, PromptForwardHasTheBitsOfDecodingTokenByToken) {
  // A prompt longer than a verification (its attention in blocks of 16 tokens through the streaming kernel) gives
  // every token the logits it gets when the prompt is decoded one token at a time, bit for bit, and so does a second
  // long chunk after it (blocks over a cached prefix): prefill, verification and decoding compute each token alike.
  sm::EncodeOptions opts;
  const std::vector<std::int32_t> ids = tokenizer_->encode(
      "Speculative decoding drafts a few tokens ahead with a cheap proposer and lets the target model score all of them "
      "in one forward pass; the rejection sampler then keeps exactly the tokens the target would have produced, so the "
      "output distribution is the target's own. A prompt lookup proposer copies spans of the prompt, which pays off "
      "when the answer quotes the question, as edits of code and summaries of documents often do.",
      opts);
  ASSERT_GE(ids.size(), 70u);
  const std::vector<std::int64_t> first(ids.begin(), ids.begin() + 41), second(ids.begin() + 41, ids.end());
  const std::int64_t a = model_->allocate_sequence(), b = model_->allocate_sequence();
  const at::Tensor chunk1 = specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(a, first)).logits);
  const at::Tensor chunk2 = specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(a, second)).logits);
  std::int64_t row = 0;
  for (const at::Tensor& chunk : {chunk1, chunk2})
    for (std::int64_t i = 0; i < chunk.size(0); ++i, ++row) {
      const std::int64_t token = ids[static_cast<std::size_t>(row)];
      const at::Tensor single = specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(b, {token})).logits)[0];
      EXPECT_TRUE(chunk[i].equal(single)) << model_->kernel_name() << ": token " << row << " of " << ids.size();
    }
  model_->free_sequence(a);
  model_->free_sequence(b);
}

TEST_F(SmolLM2, TreesOfMoreThanSixteenNodesKeepEachPathsBits) {
  // A tree larger than a verification chain (EAGLE-2's default keeps 24 drafts: 25 nodes) still computes every node
  // alone: the nodes of a root-to-leaf path get the logits of that path decoded token by token, bit for bit.
  const auto [prefix, path, a, b] =
      two_after_prefix("def merge_sorted(left, right):\n    result = []\n    i = j = 0", 4);
  ASSERT_EQ(path.size(), 4u);
  std::vector<at::Tensor> alone;
  for (auto t : path) alone.push_back(specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(b, {t})).logits)[0].clone());
  // Node 0 = path[0]; nodes 1-15 its other children; node 16 = path[1] (a child of 0), node 17 a sibling under it,
  // node 18 = path[2] (a child of 16), node 19 = path[3] (a child of 18): 20 nodes.
  sm::ForwardBatch tree = sm::make_chain_batch(a, {path[0]});
  std::vector<std::int32_t> parents{-1};
  for (std::int64_t j = 1; j <= 15; ++j) {
    tree.token_ids.push_back((path[1] + 97 * j) % model_->vocab_size());
    parents.push_back(0);
  }
  for (const auto& [token, parent] : std::vector<std::pair<std::int64_t, std::int32_t>>{
           {path[1], 0}, {(path[2] + 5) % model_->vocab_size(), 16}, {path[2], 16}, {path[3], 18}}) {
    tree.token_ids.push_back(token);
    parents.push_back(parent);
  }
  tree.cu_num_tokens = {0, static_cast<std::int64_t>(tree.token_ids.size())};
  tree.parents = {parents};
  ASSERT_EQ(tree.token_ids.size(), 20u);
  const at::Tensor logits = specdec::torch::tensor_of(model_->forward(tree).logits);
  const std::int64_t nodes[] = {0, 16, 18, 19};
  for (std::size_t k = 0; k < 4; ++k)
    EXPECT_TRUE(logits[nodes[k]].equal(alone[k]))
        << model_->kernel_name() << ": node " << nodes[k] << " (path token " << k << ")";
  model_->free_sequence(a);
  model_->free_sequence(b);
}

TEST_F(SmolLM2, DraftBlockOfSixEqualsSingleSteps) {
  // The speculative verify step: 6 tokens in one forward give the logits of 6 single-token forwards.
  const auto [prefix, block, a, b] = two_after_prefix("The quick brown fox jumps over the lazy dog because it", 6);
  ASSERT_EQ(block.size(), 6u);
  at::Tensor batched = specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(a, block)).logits);
  for (std::size_t i = 0; i < block.size(); ++i) {
    at::Tensor single = specdec::torch::tensor_of(model_->forward(sm::make_chain_batch(b, {block[i]})).logits)[0];
    const double scale = std::max(1.0, single.abs().max().item<double>());
    EXPECT_LE((batched[static_cast<std::int64_t>(i)] - single).abs().max().item<double>(), 1e-4 * scale) << "row " << i;
    EXPECT_EQ(top1(batched[static_cast<std::int64_t>(i)]), top1(single));
  }
  model_->free_sequence(a);
  model_->free_sequence(b);
}

// The loaders take the other architectures' options: a small qwen2 file (q/k/v biases, q/k rows in rotate_half order)
// loads in both, and Gemma 3 270M (where it has been fetched) is refused, if at all, for a tensor type, never for an
// option of its block. (The options' math: test_llama_archs.cpp.)
TEST(GgufLoaders, TakeTheOptionsOfQwenAndGemma) {
  using specdec_test::GgmlType;
  using specdec_test::GgufType;
  specdec_test::Writer w;
  w.string("general.architecture", "qwen2");
  w.scalar<std::uint32_t>("qwen2.embedding_length", GgufType::kUint32, 32);
  w.scalar<std::uint32_t>("qwen2.feed_forward_length", GgufType::kUint32, 64);
  w.scalar<std::uint32_t>("qwen2.block_count", GgufType::kUint32, 1);
  w.scalar<std::uint32_t>("qwen2.attention.head_count", GgufType::kUint32, 2);
  w.scalar<float>("qwen2.attention.layer_norm_rms_epsilon", GgufType::kFloat32, 1e-6f);
  w.scalar<std::uint32_t>("qwen2.vocab_size", GgufType::kUint32, 16);
  const auto f32 = [](std::size_t n) { return std::vector<std::byte>(n * 4); };
  w.tensor("token_embd.weight", {32, 16}, GgmlType::kF32, f32(32 * 16));
  w.tensor("output_norm.weight", {32}, GgmlType::kF32, f32(32));
  for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output"}) w.tensor(fmt_name(t, "weight"), {32, 32}, GgmlType::kF32, f32(1024));
  for (const char* t : {"attn_q", "attn_k", "attn_v"}) w.tensor(fmt_name(t, "bias"), {32}, GgmlType::kF32, f32(32));
  for (const char* t : {"attn_norm", "ffn_norm"}) w.tensor(fmt_name(t, "weight"), {32}, GgmlType::kF32, f32(32));
  w.tensor(fmt_name("ffn_gate", "weight"), {32, 64}, GgmlType::kF32, f32(2048));
  w.tensor(fmt_name("ffn_up", "weight"), {32, 64}, GgmlType::kF32, f32(2048));
  w.tensor(fmt_name("ffn_down", "weight"), {64, 32}, GgmlType::kF32, f32(2048));
  const auto path = std::filesystem::temp_directory_path() / ("specdec_qwen2_" + std::to_string(::getpid()) + ".gguf");
  specdec_test::write_file(path, w.build());
  const auto error_of = [](auto&& load) -> std::string {
    try {
      load();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string packed = error_of([&] {
    sm::LlamaModel m = sm::load_llama_gguf(path);
    if (m.config().architecture != "qwen2" || !m.config().attention_bias) throw std::runtime_error("not qwen2's config");
    (void)m.forward(sm::make_chain_batch(m.allocate_sequence(), {1, 2, 3}));
  });
  const std::string aten = error_of([&] {
    sm::AtenLlamaModel m = sm::load_aten_llama_gguf(path);
    (void)m.forward(sm::make_chain_batch(m.allocate_sequence(), {1, 2, 3}));
  });
  std::filesystem::remove(path);
  EXPECT_EQ(packed, "(no error)");
  EXPECT_EQ(aten, "(no error)");

  const std::filesystem::path gemma = std::filesystem::path(SPECDEC_MODELS_DIR) / "gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(gemma)) GTEST_SKIP() << gemma << " is absent (scripts/fetch-gemma.sh downloads it)";
  const std::string g = error_of([&] { (void)sm::load_llama_gguf(gemma); });
  EXPECT_EQ(g.find("does not support yet"), std::string::npos) << g;
}
