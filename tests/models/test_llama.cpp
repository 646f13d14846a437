// LlamaModel on small seeded random-weight configs: against an independent full-sequence reference written with plain ATen
// ops (no cache), and for the cache invariants speculation relies on (incremental == batched, truncate and regrow, ragged
// batches, tree masks, tree-path compaction, capacity doubling).
//
// Tolerance: logits are float32 and O(1)-O(10) in magnitude here; two computations of the same logits that differ only in
// summation order (batched vs incremental, BLAS gemm vs gemv) agree to ~1e-5. We require max |a - b| <= 1e-4 * max(1, max|a|).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "specdec/torch/host_threads.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/sampling/status.hpp"
#include "specdec/torch/rows.hpp"
#include "specdec/torch/float_tensor.hpp"

namespace sm = specdec::models;
using Weights = std::map<std::string, at::Tensor>;

namespace {

sm::LlamaConfig small_config() {
  sm::LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = false;
  return c;
}

Weights make_weights(const sm::LlamaConfig& c, std::uint64_t seed) {
  c10::NoGradGuard guard;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto randn = [&](std::vector<std::int64_t> shape, double mean, double std) {
    return at::normal(mean, std, shape, gen, at::TensorOptions().dtype(at::kFloat));
  };
  const std::int64_t H = c.hidden_size, F = c.intermediate_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const double s = 1.0 / std::sqrt(static_cast<double>(H));
  Weights w;
  w["model.embed_tokens.weight"] = randn({c.vocab_size, H}, 0, 1);
  if (!c.tie_word_embeddings) w["lm_head.weight"] = randn({c.vocab_size, H}, 0, s);
  w["model.norm.weight"] = randn({H}, 1, 0.1);
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = randn({H}, 1, 0.1);
    w[p + "post_attention_layernorm.weight"] = randn({H}, 1, 0.1);
    w[p + "self_attn.q_proj.weight"] = randn({q, H}, 0, 2 * s);
    w[p + "self_attn.k_proj.weight"] = randn({kv, H}, 0, 2 * s);
    w[p + "self_attn.v_proj.weight"] = randn({kv, H}, 0, s);
    w[p + "self_attn.o_proj.weight"] = randn({H, q}, 0, 1.0 / std::sqrt(static_cast<double>(q)));
    w[p + "mlp.gate_proj.weight"] = randn({F, H}, 0, s);
    w[p + "mlp.up_proj.weight"] = randn({F, H}, 0, s);
    w[p + "mlp.down_proj.weight"] = randn({H, F}, 0, 1.0 / std::sqrt(static_cast<double>(F)));
  }
  return w;
}

// The weights of `w` by name (undefined when absent), as LlamaModel's WeightGetter.
sm::WeightGetter getter_of(const Weights& w) {
  return specdec::torch::weight_getter([&w](const std::string& n) {
    auto it = w.find(n);
    return it == w.end() ? at::Tensor() : it->second;
  });
}

sm::LlamaModel make_model(const sm::LlamaConfig& c, const Weights& w, std::int64_t capacity = 8, bool half_kv = true) {
  sm::LlamaOptions o;
  o.initial_cache_capacity = capacity;
  o.kv_cache_half = half_kv;
  return sm::LlamaModel(c, getter_of(w), o);
}

// --- independent reference: the Hugging Face modeling_llama forward, whole sequence at once ---------------------------
at::Tensor ref_rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}
at::Tensor ref_rotate_half(const at::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}
at::Tensor ref_inv_freq(const sm::LlamaConfig& c) {
  at::Tensor inv = 1.0 / at::pow(c.rope_theta, at::arange(0, c.head_dim, 2, at::kDouble) / static_cast<double>(c.head_dim));
  const auto& s = c.rope_scaling;
  if (s.type == sm::RopeScalingType::kLinear) inv = inv / s.factor;
  if (s.type == sm::RopeScalingType::kLlama3) {
    const double old = static_cast<double>(s.original_max_position_embeddings);
    at::Tensor wavelen = 2 * std::numbers::pi / inv;
    at::Tensor scaled = at::where(wavelen > old / s.low_freq_factor, inv / s.factor, inv);
    at::Tensor smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= old / s.high_freq_factor) & (wavelen <= old / s.low_freq_factor);
    inv = at::where(medium, smoothed, scaled);
  }
  return inv;
}

// half_kv: keys (after the rotary embedding) and values rounded to IEEE float16, as a float16 KV cache stores them.
at::Tensor reference_logits(const sm::LlamaConfig& c, const Weights& w, const std::vector<std::int64_t>& tokens,
                            bool half_kv = false) {
  c10::NoGradGuard guard;
  const auto T = static_cast<std::int64_t>(tokens.size());
  const std::int64_t nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim;
  at::Tensor ids = at::tensor(tokens, at::kLong);
  at::Tensor x = w.at("model.embed_tokens.weight").index_select(0, ids);
  at::Tensor freqs = at::outer(at::arange(T, at::kDouble), ref_inv_freq(c));
  at::Tensor emb = at::cat({freqs, freqs}, -1).to(at::kFloat);
  at::Tensor cos = emb.cos().view({T, 1, hd}), sin = emb.sin().view({T, 1, hd});
  at::Tensor causal = at::ones({T, T}, at::kBool).triu(1);
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    at::Tensor h = ref_rms(x, w.at(p + "input_layernorm.weight"), c.rms_norm_eps);
    at::Tensor q = at::matmul(h, w.at(p + "self_attn.q_proj.weight").t()).view({T, nh, hd});
    at::Tensor k = at::matmul(h, w.at(p + "self_attn.k_proj.weight").t()).view({T, nkv, hd});
    at::Tensor v = at::matmul(h, w.at(p + "self_attn.v_proj.weight").t()).view({T, nkv, hd});
    q = q * cos + ref_rotate_half(q) * sin;
    k = k * cos + ref_rotate_half(k) * sin;
    if (half_kv) {
      k = k.to(at::kHalf).to(at::kFloat);
      v = v.to(at::kHalf).to(at::kFloat);
    }
    k = k.repeat_interleave(nh / nkv, 1);
    v = v.repeat_interleave(nh / nkv, 1);
    at::Tensor scores = at::einsum("thd,shd->hts", {q, k}) / std::sqrt(static_cast<double>(hd));
    scores = scores.masked_fill(causal, -INFINITY);
    at::Tensor o = at::einsum("hts,shd->thd", {at::softmax(scores, -1), v}).reshape({T, nh * hd});
    x = x + at::matmul(o, w.at(p + "self_attn.o_proj.weight").t());
    h = ref_rms(x, w.at(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    at::Tensor g = at::matmul(h, w.at(p + "mlp.gate_proj.weight").t());
    at::Tensor u = at::matmul(h, w.at(p + "mlp.up_proj.weight").t());
    x = x + at::matmul(at::silu(g) * u, w.at(p + "mlp.down_proj.weight").t());
  }
  const at::Tensor& head = c.tie_word_embeddings ? w.at("model.embed_tokens.weight") : w.at("lm_head.weight");
  return at::matmul(ref_rms(x, w.at("model.norm.weight"), c.rms_norm_eps), head.t());
}

std::vector<std::int64_t> random_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> d(0, vocab - 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (auto& e : t) e = d(rng);
  return t;
}

::testing::AssertionResult logits_close(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << "shapes differ: " << a.sizes() << " vs " << b.sizes();
  const double scale = std::max(1.0, a.abs().max().item<double>());
  const double diff = (a - b).abs().max().item<double>();
  if (diff <= 1e-4 * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |a - b| = " << diff << " > 1e-4 * " << scale;
}

at::Tensor run_chain(sm::LlamaModel& m, std::int64_t slot, const std::vector<std::int64_t>& tokens) {
  return specdec::torch::tensor_of(m.forward(sm::make_chain_batch(slot, tokens)).logits);
}

// Feeds tokens one at a time into a fresh slot; returns [T, V].
at::Tensor run_one_by_one(sm::LlamaModel& m, const std::vector<std::int64_t>& tokens) {
  const std::int64_t s = m.allocate_sequence();
  std::vector<at::Tensor> rows;
  for (auto t : tokens) rows.push_back(run_chain(m, s, {t}));
  m.free_sequence(s);
  return at::cat(rows, 0);
}

}  // namespace

static_assert(sm::CausalLM<sm::LlamaModel>);

struct RefCase {
  const char* name;
  sm::RopeScalingType scaling;
  bool tied;
  std::int64_t kv_heads;
  bool odd_sizes = false;  // hidden, head_dim and MLP widths that are not multiples of 8 (the kernels' scalar tails)
};

void PrintTo(const RefCase& c, std::ostream* os) { *os << c.name; }

class LlamaReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(LlamaReference, MatchesIndependentFullSequenceForward) {
  sm::LlamaConfig c = small_config();
  c.tie_word_embeddings = GetParam().tied;
  c.num_kv_heads = GetParam().kv_heads;
  c.rope_scaling.type = GetParam().scaling;
  if (GetParam().odd_sizes) {
    c.hidden_size = 52;
    c.head_dim = 10;
    c.intermediate_size = 77;
  }
  if (c.rope_scaling.type == sm::RopeScalingType::kLinear) c.rope_scaling.factor = 4.0;
  if (c.rope_scaling.type == sm::RopeScalingType::kLlama3) {
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 64;  // small, so all three frequency bands occur at head_dim 16
    c.rope_theta = 500000.0;
  }
  const Weights w = make_weights(c, 11);
  const auto tokens = random_tokens(40, c.vocab_size, 5);
  // Both KV-cache precisions, each against the reference that stores keys and values the same way; the float16 cache
  // also against the float32 reference, with the error its rounding allows (below).
  for (const bool half_kv : {false, true}) {
    SCOPED_TRACE(half_kv ? "float16 KV cache" : "float32 KV cache");
    sm::LlamaModel m = make_model(c, w, 8, half_kv);
    const std::int64_t s = m.allocate_sequence();
    // Prompt of 25 in one forward, then 15 one at a time: covers the multi-token and the single-token path.
    std::vector<at::Tensor> rows = {run_chain(m, s, {tokens.begin(), tokens.begin() + 25})};
    for (std::size_t i = 25; i < tokens.size(); ++i) rows.push_back(run_chain(m, s, {tokens[i]}));
    const at::Tensor logits = at::cat(rows, 0);
    EXPECT_TRUE(logits_close(logits, reference_logits(c, w, tokens, half_kv)));
    if (half_kv) {
      // Rounding every key and value to 11 significant bits (relative error <= 2^-11) moves these logits by about that
      // fraction of their scale (measured 2.7e-4 to 5.8e-4 over these configs); 4 * 2^-11 leaves room for the configs'
      // spread and still fails a cache that stored something else (a bad conversion, a wrong position).
      const at::Tensor ref = reference_logits(c, w, tokens, false);
      const double scale = std::max(1.0, ref.abs().max().item<double>());
      EXPECT_LE((logits - ref).abs().max().item<double>(), 4.0 * std::ldexp(1.0, -11) * scale);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, LlamaReference,
                         ::testing::Values(RefCase{"gqa_untied", sm::RopeScalingType::kNone, false, 2},
                                           RefCase{"mha_tied", sm::RopeScalingType::kNone, true, 4},
                                           RefCase{"mqa_linear", sm::RopeScalingType::kLinear, false, 1},
                                           RefCase{"gqa_llama3", sm::RopeScalingType::kLlama3, true, 2},
                                           RefCase{"odd_sizes", sm::RopeScalingType::kNone, false, 2, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LlamaModel, MultiTokenForwardEqualsOneTokenAtATime) {
  const auto c = small_config();
  const Weights w = make_weights(c, 1);
  sm::LlamaModel m = make_model(c, w, 4);  // small capacity: the cache grows during the run
  const auto tokens = random_tokens(33, c.vocab_size, 2);
  const std::int64_t s = m.allocate_sequence();
  at::Tensor batched = run_chain(m, s, tokens);
  EXPECT_EQ(m.sequence_length(s), 33);
  EXPECT_TRUE(logits_close(batched, run_one_by_one(m, tokens)));
}

TEST(LlamaModel, TruncateAndRegrowEqualsFreshRun) {
  const auto c = small_config();
  const Weights w = make_weights(c, 3);
  sm::LlamaModel m = make_model(c, w);
  const auto prompt = random_tokens(12, c.vocab_size, 4);
  const auto rejected = random_tokens(7, c.vocab_size, 5);
  const auto accepted = random_tokens(9, c.vocab_size, 6);
  const std::int64_t s = m.allocate_sequence();
  run_chain(m, s, prompt);
  run_chain(m, s, rejected);  // drafts that get rejected
  m.truncate(s, 12);
  EXPECT_EQ(m.sequence_length(s), 12);
  at::Tensor regrown = run_chain(m, s, accepted);
  std::vector<std::int64_t> all = prompt;
  all.insert(all.end(), accepted.begin(), accepted.end());
  at::Tensor fresh = run_one_by_one(m, all);
  EXPECT_TRUE(logits_close(regrown, fresh.narrow(0, 12, 9)));
  // Truncate into the middle of the prompt too.
  m.truncate(s, 5);
  at::Tensor again = run_chain(m, s, {all.begin() + 5, all.end()});
  EXPECT_TRUE(logits_close(again, fresh.narrow(0, 5, 16)));
}

TEST(LlamaModel, RaggedBatchEqualsSeparateRuns) {
  const auto c = small_config();
  const Weights w = make_weights(c, 7);
  sm::LlamaModel m = make_model(c, w);
  // Three sequences with cached lengths 10, 0 and 4 and 1, 6 and 3 new tokens.
  const std::vector<std::vector<std::int64_t>> prefix = {random_tokens(10, c.vocab_size, 8), {}, random_tokens(4, c.vocab_size, 9)};
  const std::vector<std::vector<std::int64_t>> fresh = {random_tokens(1, c.vocab_size, 10), random_tokens(6, c.vocab_size, 11),
                                                        random_tokens(3, c.vocab_size, 12)};
  sm::ForwardBatch batch;
  batch.cu_num_tokens = {0};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::int64_t s = m.allocate_sequence();
    if (!prefix[i].empty()) run_chain(m, s, prefix[i]);
    batch.slots.push_back(s);
    batch.token_ids.insert(batch.token_ids.end(), fresh[i].begin(), fresh[i].end());
    batch.cu_num_tokens.push_back(static_cast<std::int64_t>(batch.token_ids.size()));
  }
  at::Tensor logits = specdec::torch::tensor_of(m.forward(batch).logits);
  ASSERT_EQ(logits.size(0), 10);
  for (std::size_t i = 0; i < 3; ++i) {
    std::vector<std::int64_t> all = prefix[i];
    all.insert(all.end(), fresh[i].begin(), fresh[i].end());
    at::Tensor alone = run_one_by_one(m, all).narrow(0, static_cast<std::int64_t>(prefix[i].size()),
                                                     static_cast<std::int64_t>(fresh[i].size()));
    EXPECT_TRUE(logits_close(logits.narrow(0, batch.cu_num_tokens[i], batch.cu_num_tokens[i + 1] - batch.cu_num_tokens[i]),
                             alone))
        << "sequence " << i;
    EXPECT_EQ(m.sequence_length(batch.slots[i]), static_cast<std::int64_t>(all.size()));
  }
}

namespace {
// node: 0 1 2 3 4 5 6 7      root 0 has children 1, 2, 3; node 1 has children 4, 5; node 3 has child 6; node 4 has
// parent: - 0 0 0 1 1 3 4    child 7. Root-to-leaf paths: 0-1-4-7, 0-1-5, 0-2, 0-3-6.
const std::vector<std::int32_t> kParents = {-1, 0, 0, 0, 1, 1, 3, 4};
std::vector<std::vector<std::int64_t>> root_to_leaf_paths(const std::vector<std::int32_t>& parents) {
  std::vector<bool> has_child(parents.size(), false);
  for (std::size_t i = 1; i < parents.size(); ++i) has_child[static_cast<std::size_t>(parents[i])] = true;
  std::vector<std::vector<std::int64_t>> paths;
  for (std::size_t leaf = 0; leaf < parents.size(); ++leaf) {
    if (has_child[leaf]) continue;
    std::vector<std::int64_t> p;
    for (std::int64_t a = static_cast<std::int64_t>(leaf); a >= 0; a = parents[static_cast<std::size_t>(a)]) p.insert(p.begin(), a);
    paths.push_back(p);
  }
  return paths;
}
}  // namespace

TEST(LlamaModel, TreeForwardEqualsChainForwardPerPath) {
  const auto c = small_config();
  const Weights w = make_weights(c, 13);
  sm::LlamaModel m = make_model(c, w);
  const auto prefix = random_tokens(9, c.vocab_size, 14);
  const auto nodes = random_tokens(static_cast<std::int64_t>(kParents.size()), c.vocab_size, 15);
  // Batch a tree sequence next to a chain sequence so the ragged + tree path is exercised together.
  const std::int64_t t = m.allocate_sequence(), other = m.allocate_sequence();
  run_chain(m, t, prefix);
  run_chain(m, other, random_tokens(5, c.vocab_size, 16));
  sm::ForwardBatch batch;
  batch.slots = {other, t};
  batch.token_ids = random_tokens(2, c.vocab_size, 17);
  batch.token_ids.insert(batch.token_ids.end(), nodes.begin(), nodes.end());
  batch.cu_num_tokens = {0, 2, 2 + static_cast<std::int64_t>(nodes.size())};
  batch.parents = {{}, kParents};
  at::Tensor tree = specdec::torch::tensor_of(m.forward(batch).logits).narrow(0, 2, static_cast<std::int64_t>(nodes.size()));
  EXPECT_EQ(m.sequence_length(t), 9 + static_cast<std::int64_t>(nodes.size()));

  const auto paths = root_to_leaf_paths(kParents);
  ASSERT_EQ(paths.size(), 4u);
  for (const auto& path : paths) {
    std::vector<std::int64_t> chain = prefix;
    for (auto n : path) chain.push_back(nodes[static_cast<std::size_t>(n)]);
    at::Tensor ref = run_one_by_one(m, chain).narrow(0, 9, static_cast<std::int64_t>(path.size()));
    at::Tensor idx = at::tensor(path, at::kLong);
    EXPECT_TRUE(logits_close(tree.index_select(0, idx), ref)) << "path ending in node " << path.back();
  }
}

TEST(LlamaModel, KeepPathThenContinueEqualsChain) {
  const auto c = small_config();
  const Weights w = make_weights(c, 19);
  sm::LlamaModel m = make_model(c, w, 16);
  const auto prefix = random_tokens(6, c.vocab_size, 20);
  const auto nodes = random_tokens(static_cast<std::int64_t>(kParents.size()), c.vocab_size, 21);
  const auto next = random_tokens(4, c.vocab_size, 22);
  for (const auto& path : root_to_leaf_paths(kParents)) {
    // Accept the whole path, or only its first two nodes, or only the root.
    for (std::size_t keep : {path.size(), std::size_t{2}, std::size_t{1}}) {
      const std::int64_t s = m.allocate_sequence();
      run_chain(m, s, prefix);
      sm::ForwardBatch batch = sm::make_chain_batch(s, nodes);
      batch.parents = {kParents};
      m.forward(batch);
      const std::vector<std::int64_t> kept(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(keep));
      m.keep_path(s, 6, kept);
      EXPECT_EQ(m.sequence_length(s), 6 + static_cast<std::int64_t>(keep));
      at::Tensor cont = run_chain(m, s, next);
      m.free_sequence(s);
      std::vector<std::int64_t> chain = prefix;
      for (auto n : kept) chain.push_back(nodes[static_cast<std::size_t>(n)]);
      chain.insert(chain.end(), next.begin(), next.end());
      at::Tensor ref = run_one_by_one(m, chain).narrow(0, 6 + static_cast<std::int64_t>(keep), 4);
      EXPECT_TRUE(logits_close(cont, ref)) << "path ending in node " << path.back() << ", keeping " << keep;
    }
  }
}

TEST(LlamaModel, CacheGrowsByDoublingDuringDecode) {
  const auto c = small_config();
  const Weights w = make_weights(c, 23);
  sm::LlamaModel m = make_model(c, w, 4);
  const std::int64_t s = m.allocate_sequence();
  const std::int64_t before = m.cache().num_reallocations();
  for (std::int64_t i = 0; i < 100; ++i) run_chain(m, s, {i % c.vocab_size});
  // 4 -> 8 -> 16 -> 32 -> 64 -> 128: five reallocations for 100 single-token steps.
  EXPECT_EQ(m.cache().num_reallocations() - before, 5);
  EXPECT_EQ(m.cache().capacity(), 128);
  EXPECT_EQ(m.sequence_length(s), 100);
}

TEST(LlamaModel, HiddenStatesAndLastLogitsOnly) {
  const auto c = small_config();
  const Weights w = make_weights(c, 29);
  sm::LlamaModel m = make_model(c, w);
  const auto a = random_tokens(5, c.vocab_size, 30), b = random_tokens(3, c.vocab_size, 31);
  sm::ForwardBatch batch;
  batch.slots = {m.allocate_sequence(), m.allocate_sequence()};
  batch.token_ids = a;
  batch.token_ids.insert(batch.token_ids.end(), b.begin(), b.end());
  batch.cu_num_tokens = {0, 5, 8};
  batch.return_final_hidden = true;
  batch.hidden_layers = {1, 0};
  sm::ForwardOutput full = m.forward(batch);
  ASSERT_EQ(full.layer_hidden.size(), 2u);
  EXPECT_EQ(specdec::torch::tensor_of(full.hidden_pre_norm).sizes(), (std::vector<std::int64_t>{8, c.hidden_size}));
  EXPECT_TRUE(specdec::torch::tensor_of(full.layer_hidden[0]).equal(specdec::torch::tensor_of(full.hidden_pre_norm))) << "the last layer's output is the pre-norm hidden state";
  EXPECT_FALSE(specdec::torch::tensor_of(full.layer_hidden[1]).equal(specdec::torch::tensor_of(full.hidden_pre_norm)));
  at::Tensor head = w.at("lm_head.weight");
  EXPECT_TRUE(logits_close(specdec::torch::tensor_of(full.logits), at::matmul(specdec::torch::tensor_of(full.hidden_post_norm), head.t())));

  for (auto s : batch.slots) m.truncate(s, 0);
  batch.last_logits_only = true;
  batch.return_final_hidden = false;
  batch.hidden_layers.clear();
  sm::ForwardOutput last = m.forward(batch);
  ASSERT_EQ(specdec::torch::tensor_of(last.logits).size(0), 2);
  EXPECT_TRUE(logits_close(specdec::torch::tensor_of(last.logits)[0], specdec::torch::tensor_of(full.logits)[4]));
  EXPECT_TRUE(logits_close(specdec::torch::tensor_of(last.logits)[1], specdec::torch::tensor_of(full.logits)[7]));
  EXPECT_FALSE(specdec::torch::tensor_of(last.hidden_pre_norm).defined());
}

TEST(LlamaModel, RejectsBadBatchesWithoutChangingState) {
  const auto c = small_config();
  const Weights w = make_weights(c, 37);
  sm::LlamaModel m = make_model(c, w);
  const std::int64_t s = m.allocate_sequence();
  run_chain(m, s, {1, 2, 3});
  auto expect_rejected = [&](const sm::ForwardBatch& b, const char* what) {
    EXPECT_THROW(m.forward(b), specdec::error) << what;
    EXPECT_EQ(m.sequence_length(s), 3) << what;
  };
  expect_rejected(sm::make_chain_batch(s, {1, c.vocab_size}), "token id out of range");
  expect_rejected(sm::make_chain_batch(s + 5, {1}), "unallocated slot");
  sm::ForwardBatch b = sm::make_chain_batch(s, {1, 2});
  b.cu_num_tokens = {0, 3};
  expect_rejected(b, "cu_num_tokens disagrees with token_ids");
  b = sm::make_chain_batch(s, {1, 2, 3});
  b.parents = {{-1, 0, 2}};
  expect_rejected(b, "parent not before child");
  b.parents = {{0, 0, 1}};
  expect_rejected(b, "root without -1");
  b = sm::make_chain_batch(s, {1});
  b.slots = {s, s};
  b.cu_num_tokens = {0, 1, 1};
  expect_rejected(b, "empty sequence");
  b = sm::make_chain_batch(s, {1});
  b.hidden_layers = {c.num_layers};
  expect_rejected(b, "hidden layer out of range");
  EXPECT_THROW(m.truncate(s, 4), specdec::error);
  // The model still works after the rejections.
  EXPECT_EQ(run_chain(m, s, {4}).size(0), 1);
}

TEST(LlamaModel, UnpermuteGgufQkInvertsTheLlamaCppPermutation) {
  c10::NoGradGuard guard;
  const std::int64_t heads = 3, hd = 8, in = 5;
  at::Tensor hf = at::arange(heads * hd * in, at::kFloat).view({heads * hd, in});
  // convert_hf_to_gguf.py: w.reshape(n_head, 2, hd // 2, in).swapaxes(1, 2).reshape(w.shape)
  at::Tensor gguf = hf.reshape({heads, 2, hd / 2, in}).transpose(1, 2).reshape({heads * hd, in});
  EXPECT_TRUE(specdec::torch::tensor_of(sm::unpermute_gguf_qk(specdec::torch::float_tensor_of(gguf), heads)).equal(hf));
  // A bias of those rows is reordered the same way.
  EXPECT_TRUE(specdec::torch::tensor_of(sm::unpermute_gguf_qk(specdec::torch::float_tensor_of(gguf.select(1, 2).contiguous()), heads))
                  .equal(hf.select(1, 2)));
  EXPECT_THROW(sm::unpermute_gguf_qk(specdec::torch::float_tensor_of(gguf), 5), specdec::error);
}

TEST(LlamaModel, FewTokenForwardIsBatchInvariant) {
  // Speculative verification relies on this: with up to 16 new tokens (the streaming kernels), a token's logits are bitwise
  // the same whether it is fed alone or in a chain or tree of others, whatever the thread count and the matrix widths
  // (odd sizes exercise the kernels' partial vectors).
  for (const bool odd : {false, true}) {
    sm::LlamaConfig c = small_config();
    if (odd) {
      c.hidden_size = 52;
      c.head_dim = 10;
      c.intermediate_size = 77;
    }
    const Weights w = make_weights(c, 43);
    const auto prompt = random_tokens(20, c.vocab_size, 44);
    const auto more = random_tokens(16, c.vocab_size, 45);
    for (const int threads : {1, 2}) {
      sm::LlamaOptions o;
      o.num_threads = threads;
      o.initial_cache_capacity = 8;
      sm::LlamaModel m(c, getter_of(w), o);
      const std::int64_t s = m.allocate_sequence();
      run_chain(m, s, prompt);  // prefill (BLAS path), shared by every run below
      std::vector<at::Tensor> alone;
      for (auto t : more) alone.push_back(run_chain(m, s, {t}));
      for (std::int64_t n = 2; n <= 16; ++n) {
        m.truncate(s, 20);
        at::Tensor chained = run_chain(m, s, {more.begin(), more.begin() + n});
        for (std::int64_t i = 0; i < n; ++i)
          EXPECT_TRUE(chained[i].equal(alone[static_cast<std::size_t>(i)][0]))
              << "odd " << odd << " threads " << threads << " chain of " << n << ", token " << i;
      }
      // A tree whose path 0-1-3 is the chain more[0..2]: nodes 0, 1, 3 match the one-by-one logits.
      m.truncate(s, 20);
      sm::ForwardBatch tree = sm::make_chain_batch(s, {more[0], more[1], more[5], more[2], more[6]});
      tree.parents = {{-1, 0, 0, 1, 2}};
      at::Tensor tl = specdec::torch::tensor_of(m.forward(tree).logits);
      EXPECT_TRUE(tl[0].equal(alone[0][0]) && tl[1].equal(alone[1][0]) && tl[3].equal(alone[2][0]))
          << "odd " << odd << " threads " << threads << " tree";
      m.free_sequence(s);
    }
  }
}

TEST(LlamaModel, ThreadCountDoesNotChangeResults) {
  // Threads split output rows only, so every element is summed in the same order: results are bitwise equal.
  const auto c = small_config();
  const Weights w = make_weights(c, 41);
  const sm::WeightGetter getter = getter_of(w);
  const auto tokens = random_tokens(12, c.vocab_size, 42);
  std::vector<at::Tensor> results;
  for (int threads : {1, 3}) {
    sm::LlamaOptions o;
    o.num_threads = threads;
    sm::LlamaModel m(c, getter, o);
    const std::int64_t s = m.allocate_sequence();
    m.forward(sm::make_chain_batch(s, {tokens.begin(), tokens.begin() + 6}));
    results.push_back(specdec::torch::tensor_of(m.forward(sm::make_chain_batch(s, {tokens.begin() + 6, tokens.end()})).logits));
  }
  EXPECT_TRUE(results[0].equal(results[1]));
}

TEST(LlamaModel, LongCacheAttentionSplitChangesNoBit) {
  // Past 256 cached keys the pool splits a kv head's keys (scores by key range, then softmax and values by rows): a
  // verification and a decode over a 300-token cache give the same bits on 1, 2 and 3 threads, and the chain's first row
  // equals the same token decoded alone.
  const auto c = small_config();
  const Weights w = make_weights(c, 45);
  const sm::WeightGetter getter = getter_of(w);
  const auto tokens = random_tokens(306, c.vocab_size, 46);
  const std::vector<std::int64_t> prompt(tokens.begin(), tokens.begin() + 300), chain(tokens.begin() + 300, tokens.end());
  std::vector<at::Tensor> verified, decoded;
  for (int threads : {1, 2, 3}) {
    sm::LlamaOptions o;
    o.num_threads = threads;
    sm::LlamaModel m(c, getter, o);
    for (bool verify : {true, false}) {
      const std::int64_t s = m.allocate_sequence();
      m.forward(sm::make_chain_batch(s, prompt));
      const std::vector<std::int64_t> step = verify ? chain : std::vector<std::int64_t>{chain[0]};
      (verify ? verified : decoded).push_back(specdec::torch::tensor_of(m.forward(sm::make_chain_batch(s, step)).logits));
      m.free_sequence(s);
    }
  }
  for (std::size_t t = 1; t < verified.size(); ++t) {
    EXPECT_TRUE(verified[t].equal(verified[0])) << "threads case " << t;
    EXPECT_TRUE(decoded[t].equal(decoded[0])) << "threads case " << t;
  }
  for (std::size_t t = 0; t < verified.size(); ++t) EXPECT_TRUE(verified[t][0].equal(decoded[t][0])) << "threads case " << t;
}

TEST(LlamaModel, BatchedAttentionInOneDispatchChangesNoBit) {
  // The few-token sequences of a batch share the pool in one dispatch a layer (each its own rows of scores), past 256
  // cached keys with their keys split by range first; a prompt in the same batch goes in blocks. Every sequence's rows
  // have the bits it gets alone, on 1, 2 and 3 threads: a decode and a verification over a 300-token cache, a decode
  // and a verification over 12 tokens, and a 20-token prompt.
  const auto c = small_config();
  const Weights w = make_weights(c, 47);
  const sm::WeightGetter getter = getter_of(w);
  const std::vector<std::int64_t> cached = {300, 300, 12, 12, 0};
  const std::vector<std::int64_t> fresh = {1, 5, 1, 4, 20};
  for (int threads : {1, 2, 3}) {
    sm::LlamaOptions o;
    o.num_threads = threads;
    sm::LlamaModel m(c, getter, o);
    std::vector<std::vector<std::int64_t>> prefix, step;
    std::vector<std::int64_t> slots;
    for (std::size_t i = 0; i < cached.size(); ++i) {
      prefix.push_back(random_tokens(cached[i], c.vocab_size, 48 + static_cast<int>(i)));
      step.push_back(random_tokens(fresh[i], c.vocab_size, 60 + static_cast<int>(i)));
      slots.push_back(m.allocate_sequence());
      if (cached[i] > 0) m.forward(sm::make_chain_batch(slots.back(), prefix.back()));
    }
    std::vector<at::Tensor> alone;
    for (std::size_t i = 0; i < cached.size(); ++i) {
      alone.push_back(specdec::torch::tensor_of(m.forward(sm::make_chain_batch(slots[i], step[i])).logits));
      m.truncate(slots[i], cached[i]);
    }
    sm::ForwardBatch batch;
    batch.cu_num_tokens = {0};
    for (std::size_t i = 0; i < cached.size(); ++i) {
      batch.slots.push_back(slots[i]);
      batch.token_ids.insert(batch.token_ids.end(), step[i].begin(), step[i].end());
      batch.cu_num_tokens.push_back(static_cast<std::int64_t>(batch.token_ids.size()));
    }
    const at::Tensor logits = specdec::torch::tensor_of(m.forward(batch).logits);
    for (std::size_t i = 0; i < cached.size(); ++i)
      EXPECT_TRUE(logits.narrow(0, batch.cu_num_tokens[i], fresh[i]).equal(alone[i]))
          << "threads " << threads << ", sequence " << i;
  }
}

TEST(LlamaModel, PhaseTimesCoverDecodeAndVerifyForwardsOnly) {
  const auto c = small_config();
  const Weights w = make_weights(c, 43);
  const sm::WeightGetter getter = getter_of(w);
  const auto tokens = random_tokens(26, c.vocab_size, 44);
  std::vector<at::Tensor> logits;
  for (bool timed : {false, true}) {
    sm::LlamaOptions o;
    o.time_phases = timed;
    sm::LlamaModel m(c, getter, o);
    const std::int64_t s = m.allocate_sequence();
    m.forward(sm::make_chain_batch(s, {tokens.begin(), tokens.begin() + 20}));  // a prompt of 20 tokens: not timed
    EXPECT_EQ(m.phase_times().forwards, 0);
    m.forward(sm::make_chain_batch(s, {tokens.begin() + 20, tokens.begin() + 21}));
    logits.push_back(specdec::torch::tensor_of(m.forward(sm::make_chain_batch(s, {tokens.begin() + 21, tokens.end()})).logits));
    const sm::ForwardPhaseTimes& t = m.phase_times();
    EXPECT_EQ(t.forwards, timed ? 2 : 0);
    double total = 0;
    for (double x : t.seconds) {
      EXPECT_GE(x, 0.0);
      total += x;
    }
    EXPECT_EQ(total > 0, timed);
    m.reset_phase_times();
    EXPECT_EQ(m.phase_times().forwards, 0);
    EXPECT_EQ(m.phase_times().seconds[sm::ForwardPhaseTimes::kQkv], 0.0);
  }
  EXPECT_TRUE(logits[0].equal(logits[1]));  // timing changes no result
}

namespace {
// Writes `names` of `w` as one float32 safetensors file.
void write_safetensors(const std::filesystem::path& path, const Weights& w, const std::vector<std::string>& names) {
  std::string header = "{";
  std::uint64_t offset = 0;
  for (const auto& n : names) {
    const at::Tensor& t = w.at(n);
    std::ostringstream entry;
    entry << (header.size() > 1 ? "," : "") << '"' << n << "\":{\"dtype\":\"F32\",\"shape\":[";
    for (std::int64_t d = 0; d < t.dim(); ++d) entry << (d ? "," : "") << t.size(d);
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * 4;
    entry << "],\"data_offsets\":[" << offset << "," << offset + bytes << "]}";
    header += entry.str();
    offset += bytes;
  }
  header += "}";
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);  // little-endian on every platform this runs on
  out << header;
  for (const auto& n : names) {
    at::Tensor t = w.at(n).contiguous();
    out.write(reinterpret_cast<const char*>(t.data_ptr<float>()), static_cast<std::streamsize>(t.numel() * 4));
  }
}
}  // namespace

TEST(LlamaModel, LoadsShardedSafetensorsCheckpoint) {
  sm::LlamaConfig c = small_config();
  const Weights w = make_weights(c, 43);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("specdec-test-safetensors-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "vocab_size": 97, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": false})";
  std::vector<std::string> first, second;
  for (const auto& [name, t] : w) (name.find("layers.1.") == std::string::npos ? first : second).push_back(name);
  write_safetensors(dir / "model-00001-of-00002.safetensors", w, first);
  write_safetensors(dir / "model-00002-of-00002.safetensors", w, second);
  sm::LlamaModel loaded = sm::load_llama_safetensors(dir);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(loaded.config().num_kv_heads, 2);
  const auto tokens = random_tokens(9, c.vocab_size, 44);
  sm::LlamaModel direct = make_model(c, w);
  EXPECT_TRUE(run_chain(loaded, loaded.allocate_sequence(), tokens).equal(run_chain(direct, direct.allocate_sequence(), tokens)));
  EXPECT_THROW(sm::load_llama_safetensors(dir), specdec::error) << "a missing directory is an error";
}

TEST(HostLibraryThreads, SetsAtenAndOpenBlasPools) {
  const int aten_before = at::get_num_threads(), blas_before = sm::openblas_threads();
  for (const int n : {1, 2}) {
    const bool openblas = sm::set_host_library_threads(n);
    EXPECT_EQ(at::get_num_threads(), n);
    EXPECT_EQ(openblas, blas_before >= 0);
    if (openblas) {
      EXPECT_EQ(sm::openblas_threads(), n);
    }
  }
  EXPECT_THROW(sm::set_host_library_threads(0), specdec::error);
  sm::set_host_library_threads(aten_before);
  if (blas_before > 0) {
    EXPECT_EQ(sm::openblas_threads(), aten_before);
  }
}
