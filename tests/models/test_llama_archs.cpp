// The Llama block's options for the other GGUF architectures (LlamaConfig: qwen2's q/k/v biases, qwen3's and gemma3's
// QK-norm, gemma3's post-attention and post-MLP norms, GELU gating, embedding scale, sliding-window layers with their
// own RoPE base, attention scale, final logit soft-cap, head_dim beyond hidden / heads) in both forwards:
//   - LlamaModel against AtenLlamaModel on the same float32 weights, at every position of a prompt, a verification chain
//     and a tree;
//   - LlamaModel's batch invariance with the options on (packed Q8_0 products, float16 cache): a token's logits are
//     bit-identical decoded alone, in a prompt (the blocked attention), in a verification chain, as a tree node and
//     beside another sequence, over a context long enough for the attention to split its keys (where the sliding
//     window skips whole key ranges);
//   - the window's edges: in a model whose every layer slides, the last position's logits ignore exactly the tokens
//     beyond the receptive field (layers * (window - 1) positions back) and not one closer;
//   - the small random-weight GGUF files of tests/models/write_gguf_models.py (llama.cpp's writer): the packed forward
//     against the float reference on the same file, and greedy decoding (SPECDEC_GGUF_MODEL_FIXTURES; ctest's fixture).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "specdec/torch/aten_llama.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/torch/rows.hpp"

namespace {

namespace sm = specdec::models;

sm::LlamaConfig base_config() {
  sm::LlamaConfig c;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 1024;
  c.rope_theta = 1e6;
  c.rms_norm_eps = 1e-6;
  return c;
}

sm::LlamaConfig qwen2_config() {
  auto c = base_config();
  c.architecture = "qwen2";
  c.attention_bias = true;
  return c;
}

sm::LlamaConfig qwen3_config() {
  auto c = base_config();
  c.architecture = "qwen3";
  c.qk_norm = true;
  c.head_dim = 32;  // q_dim 128 != hidden 64
  return c;
}

// Gemma 3's block: every option on, layers 0 and 1 sliding (window 5, RoPE base 10^4), layer 2 global (10^6).
sm::LlamaConfig gemma3_config(std::int64_t heads = 4, std::int64_t kv_heads = 2, std::int64_t head_dim = 32) {
  auto c = base_config();
  c.architecture = "gemma3";
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.qk_norm = c.post_attention_norm = c.post_ffn_norm = true;
  c.ffn_activation = sm::FfnActivation::kGeluTanh;
  c.embedding_scale = std::sqrt(64.f);
  c.tie_word_embeddings = true;
  c.sliding_window = 5;
  c.sliding_layers = {true, true, false};
  c.sliding_rope_theta = 1e4;
  c.attention_scale = 0.2;  // not 1 / sqrt(head_dim)
  c.final_logit_softcap = 15.0;
  return c;
}

std::vector<std::int64_t> some_tokens(std::int64_t n, std::int64_t vocab, std::int64_t seed) {
  std::vector<std::int64_t> t;
  for (std::int64_t i = 0; i < n; ++i) t.push_back((seed + 37 * i + (i * i) % 11) % vocab);
  return t;
}

sm::ForwardOutput run(auto& m, std::int64_t slot, std::vector<std::int64_t> tokens, std::vector<std::int32_t> parents = {}) {
  sm::ForwardBatch b = sm::make_chain_batch(slot, std::move(tokens));
  if (!parents.empty()) b.parents = {std::move(parents)};
  return m.forward(b);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

struct Named {
  const char* name;
  sm::LlamaConfig config;
};

std::vector<Named> option_configs() {
  return {{"qwen2", qwen2_config()}, {"qwen3", qwen3_config()}, {"gemma3", gemma3_config()},
          {"gemma3_head_dim_256", gemma3_config(2, 1, 256)}};
}

// LlamaModel's float path and AtenLlamaModel on the same float32 weights compute the same function; they differ only in
// the order of float32 sums (blocked dot products against BLAS), a few 1e-6 relative per step, which leaves the logits
// (of magnitude ~10) within 2e-4 of each other, as for Llama's block (AtenLlama.MatchesLlamaModelOnTheSameWeights). An
// option missing or applied differently in one of them moves logits by 1e-1 or more.
TEST(LlamaArchs, OptionsMatchTheAtenReference) {
  for (const auto& [name, c] : option_configs()) {
    SCOPED_TRACE(name);
    const auto weights = sm::random_llama_weights(c, 23);
    sm::LlamaOptions float_cache;
    float_cache.kv_cache_half = false;
    float_cache.num_threads = 2;
    sm::LlamaModel ref(c, weights, float_cache);
    sm::AtenLlamaModel m(c, weights);
    const auto rs = ref.allocate_sequence(), ms = m.allocate_sequence();
    const auto prompt = some_tokens(21, c.vocab_size, 5);  // more than 16 tokens: the blocked attention
    const auto a = run(ref, rs, prompt), b = run(m, ms, prompt);
    ASSERT_EQ(specdec::torch::tensor_of(a.logits).size(0), 21);
    for (std::int64_t i = 0; i < 21; ++i) EXPECT_LT(max_diff(specdec::torch::tensor_of(a.logits)[i], specdec::torch::tensor_of(b.logits)[i]), 2e-4) << "prompt position " << i;
    EXPECT_GT(specdec::torch::tensor_of(a.logits).abs().max().item<double>(), 1.0);  // the comparison is not between near-zero logits
    // A tree over the cached prompt (depths 0, 1, 1, 2, 3), then one path kept and two more tokens.
    const std::vector<std::int64_t> tree = {4, 30, 31, 32, 50};
    const std::vector<std::int32_t> parents = {-1, 0, 0, 1, 3};
    EXPECT_LT(max_diff(specdec::torch::tensor_of(run(ref, rs, tree, parents).logits), specdec::torch::tensor_of(run(m, ms, tree, parents).logits)), 2e-4) << "tree";
    const std::vector<std::int64_t> path = {0, 1, 3};
    ref.keep_path(rs, 21, path);
    m.keep_path(ms, 21, path);
    EXPECT_LT(max_diff(specdec::torch::tensor_of(run(ref, rs, {12, 13}).logits), specdec::torch::tensor_of(run(m, ms, {12, 13}).logits)), 2e-4) << "after keep_path";
    for (int step = 0; step < 8; ++step)  // decoding past the window
      EXPECT_LT(max_diff(specdec::torch::tensor_of(run(ref, rs, {(7 * step) % c.vocab_size}).logits), specdec::torch::tensor_of(run(m, ms, {(7 * step) % c.vocab_size}).logits)),
                2e-4)
          << "decode step " << step;
  }
}

// Batch invariance with every option on, on packed Q8_0 products and a float16 cache, over 300 positions: past 256 keys
// the attention of a few rows splits the keys by ranges of 256 between threads, and a sliding layer skips the ranges
// below its window.
TEST(LlamaArchs, PackedForwardWithOptionsIsBatchInvariant) {
  for (auto c : {gemma3_config(), qwen2_config(), qwen3_config(), gemma3_config(2, 1, 256)}) {
    SCOPED_TRACE(c.architecture + " head_dim " + std::to_string(c.head_dim));
    if (c.sliding_window > 0) c.sliding_window = 40;
    sm::LlamaOptions o;
    o.quantize_float_weights = true;
    o.num_threads = 2;
    sm::LlamaModel m = sm::LlamaModel::random(c, 31, o);
    ASSERT_NE(m.kernel_name(), "float32");
    const auto tokens = some_tokens(300, c.vocab_size, 3);
    const std::int64_t a = m.allocate_sequence(), b = m.allocate_sequence(), d = m.allocate_sequence();
    std::vector<at::Tensor> alone;
    for (auto t : tokens) alone.push_back(specdec::torch::tensor_of(run(m, b, {t}).logits)[0].clone());
    // The prompt in two chunks (the blocked attention, over an empty and over a cached prefix).
    const std::vector<std::int64_t> first(tokens.begin(), tokens.begin() + 270), rest(tokens.begin() + 270, tokens.end() - 6);
    const at::Tensor p1 = specdec::torch::tensor_of(run(m, a, first).logits), p2 = specdec::torch::tensor_of(run(m, a, rest).logits);
    for (std::int64_t i = 0; i < 270; ++i) ASSERT_TRUE(p1[i].equal(alone[static_cast<std::size_t>(i)])) << "prompt row " << i;
    for (std::int64_t i = 0; i < p2.size(0); ++i)
      ASSERT_TRUE(p2[i].equal(alone[static_cast<std::size_t>(270 + i)])) << "second chunk row " << i;
    // A 6-token verification.
    const std::vector<std::int64_t> block(tokens.end() - 6, tokens.end());
    const std::int64_t len = m.sequence_length(a);
    const at::Tensor chain = specdec::torch::tensor_of(run(m, a, block).logits);
    for (std::int64_t i = 0; i < 6; ++i) EXPECT_TRUE(chain[i].equal(alone[static_cast<std::size_t>(294 + i)])) << "chain row " << i;
    // A tree whose path 0-1-3 is block[0..2], beside sequence d's 2-token chain (the first two prompt tokens).
    m.truncate(a, len);
    sm::ForwardBatch both;
    both.slots = {d, a};
    both.token_ids = {tokens[0], tokens[1], block[0], block[1], block[4], block[2], block[5]};
    both.cu_num_tokens = {0, 2, 7};
    both.parents = {{}, {-1, 0, 0, 1, 2}};
    const at::Tensor mixed = specdec::torch::tensor_of(m.forward(both).logits);
    EXPECT_TRUE(mixed[0].equal(alone[0]) && mixed[1].equal(alone[1])) << "the chain beside a tree";
    EXPECT_TRUE(mixed[2].equal(alone[294]) && mixed[3].equal(alone[295]) && mixed[5].equal(alone[296])) << "tree nodes";
  }
}

// Every layer slides with window W over L layers: the last position P sees, through the layers, positions down to
// P - L (W - 1) and no further. Changing the token just beyond leaves P's logits bit-identical; changing the farthest one
// it sees changes them. A window one too wide fails the first check, one too narrow the second (in both forwards).
TEST(LlamaArchs, SlidingLayersIgnoreKeysBeyondTheWindow) {
  auto c = gemma3_config();
  c.num_layers = 2;
  c.sliding_window = 3;
  c.sliding_layers = {true, true};
  const std::int64_t P = 20, reach = c.num_layers * (c.sliding_window - 1);  // P sees positions >= P - reach
  const auto weights = sm::random_llama_weights(c, 41);
  sm::LlamaOptions packed;
  packed.quantize_float_weights = true;
  packed.num_threads = 2;
  sm::LlamaModel m(c, weights, packed);
  sm::AtenLlamaModel ref(c, weights);
  const auto tokens = some_tokens(P + 1, c.vocab_size, 9);
  auto last_logits = [&](auto& model, std::vector<std::int64_t> t, bool one_by_one) {
    const std::int64_t s = model.allocate_sequence();
    at::Tensor out;
    if (one_by_one) {
      for (auto id : t) out = specdec::torch::tensor_of(run(model, s, {id}).logits)[0].clone();
    } else {
      out = specdec::torch::tensor_of(run(model, s, t).logits)[P].clone();
    }
    model.free_sequence(s);
    return out;
  };
  auto changed_at = [&](std::int64_t pos) {
    auto t = tokens;
    t[static_cast<std::size_t>(pos)] = (t[static_cast<std::size_t>(pos)] + 1) % c.vocab_size;
    return t;
  };
  for (bool one_by_one : {false, true}) {
    SCOPED_TRACE(one_by_one ? "decoded token by token" : "one prompt");
    const at::Tensor base = last_logits(m, tokens, one_by_one);
    for (std::int64_t pos = 0; pos < P - reach; ++pos)
      EXPECT_TRUE(last_logits(m, changed_at(pos), one_by_one).equal(base)) << "a token at position " << pos << " mattered";
    EXPECT_GT(max_diff(last_logits(m, changed_at(P - reach), one_by_one), base), 1e-3)
        << "the token at position " << P - reach << " (inside the receptive field) did not matter";
  }
  const at::Tensor rbase = last_logits(ref, tokens, false);
  EXPECT_EQ(max_diff(last_logits(ref, changed_at(P - reach - 1), false), rbase), 0.0);
  EXPECT_GT(max_diff(last_logits(ref, changed_at(P - reach), false), rbase), 1e-3);
}

// The ATen reference in bfloat16 (what a GPU runs) with every option: the same function at bfloat16's 8-bit mantissa,
// whose rounding over 3 layers leaves logits within a few percent of their range of the float32 ones.
TEST(LlamaArchs, AtenBfloat16RunsTheOptions) {
  for (const auto& [name, c] : option_configs()) {
    SCOPED_TRACE(name);
    const auto weights = sm::random_llama_weights(c, 23);
    sm::AtenLlamaModel f32(c, weights);
    sm::AtenLlamaOptions o;
    o.dtype = at::kBFloat16;
    sm::AtenLlamaModel bf16(c, weights, o);
    const auto prompt = some_tokens(12, c.vocab_size, 5);
    const at::Tensor a = specdec::torch::tensor_of(run(f32, f32.allocate_sequence(), prompt).logits);
    const at::Tensor b = specdec::torch::tensor_of(run(bf16, bf16.allocate_sequence(), prompt).logits);
    ASSERT_EQ(b.scalar_type(), at::kFloat);
    EXPECT_LT(max_diff(a, b), 0.05 * a.abs().max().item<double>());
  }
}

TEST(LlamaArchs, ModelsRefuseNormWeightsPlusOne) {
  auto c = base_config();
  c.norm_weight_plus_one = true;
  const auto weights = sm::random_llama_weights(c, 1);
  EXPECT_THROW(sm::LlamaModel(c, weights), std::exception);
  EXPECT_THROW(sm::AtenLlamaModel(c, weights), std::exception);
}

// The files tests/models/write_gguf_models.py writes with llama.cpp's GGUF writer: random Q8_0 matrices, F32 norms and
// biases, q/k rows as llama.cpp's converter leaves them. The packed forward (16-bit activations) against the float
// reference loading the same file (every tensor dequantised): the activations' quantisation keeps logits within ~1e-2 of
// a float forward (docs/cpu-forward.md), and these logits are O(1-10); a wrong option or row order moves them by O(1).
std::filesystem::path model_fixtures() {
  const char* dir = std::getenv("SPECDEC_GGUF_MODEL_FIXTURES");
  return dir != nullptr ? std::filesystem::path(dir) : std::filesystem::path();
}

TEST(LlamaArchsGguf, PackedForwardMatchesTheReferenceOnEachFile) {
  const auto dir = model_fixtures();
  if (dir.empty() || !std::filesystem::exists(dir / "gemma3-model.gguf"))
    GTEST_SKIP() << "SPECDEC_GGUF_MODEL_FIXTURES unset or empty (ctest runs write_gguf_models.py first)";
  for (const char* arch : {"llama", "qwen2", "qwen3", "gemma3", "gemma3-softcap"}) {
    SCOPED_TRACE(arch);
    const auto path = dir / (std::string(arch) + "-model.gguf");
    sm::LlamaOptions o;
    o.num_threads = 2;
    o.kv_cache_half = false;
    sm::LlamaModel m = sm::load_llama_gguf(path, o);
    sm::AtenLlamaModel ref = sm::load_aten_llama_gguf(path);
    ASSERT_EQ(m.config().architecture, std::string(arch).substr(0, std::string(arch).find('-')));
    const auto prompt = some_tokens(24, m.vocab_size(), 11);
    const std::int64_t ms = m.allocate_sequence(), rs = ref.allocate_sequence();
    const at::Tensor a = specdec::torch::tensor_of(run(m, ms, prompt).logits), b = specdec::torch::tensor_of(run(ref, rs, prompt).logits);
    EXPECT_GT(b.abs().max().item<double>(), 1.0);
    for (std::int64_t i = 0; i < a.size(0); ++i) EXPECT_LT(max_diff(a[i], b[i]), 2e-2) << "position " << i;
    // Greedy decoding: 16 tokens from each model, the same.
    std::int64_t next_m = a[-1].argmax().item<std::int64_t>(), next_r = b[-1].argmax().item<std::int64_t>();
    std::vector<std::int64_t> gm, gr;
    for (int step = 0; step < 16; ++step) {
      gm.push_back(next_m);
      gr.push_back(next_r);
      next_m = specdec::torch::tensor_of(run(m, ms, {next_m}).logits)[0].argmax().item<std::int64_t>();
      next_r = specdec::torch::tensor_of(run(ref, rs, {next_r}).logits)[0].argmax().item<std::int64_t>();
    }
    EXPECT_EQ(gm, gr);
  }
}

}  // namespace
