// LlamaModel built from block-format weights (LlamaModel::from_stored, as the GGUF loader does): its logits against the
// same model built from the dequantised float32 weights, the GGUF q/k row un-permutation on packed rows, and load-time
// errors for tensors the model cannot take.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "specdec/torch/float_tensor.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/torch/rows.hpp"

namespace sm = specdec::models;

namespace {

sm::LlamaConfig packed_config() {
  sm::LlamaConfig c;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  return c;
}

struct RawTensor {
  sm::GgmlType type;
  std::vector<std::byte> data;
  std::vector<std::int64_t> shape;
};

// Well-formed random blocks: Q4_1 (block 32: half d in [2^-7, 2^-5), half m in (-2^-3, 0]) or Q8_0 (half d in [2^-9, 2^-7)).
RawTensor random_tensor(sm::GgmlType type, std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  const std::int64_t bytes = type == sm::GgmlType::kQ4_1 ? 20 : 34, blocks = rows * cols / 32;
  RawTensor t{type, std::vector<std::byte>(static_cast<std::size_t>(blocks * bytes)), {rows, cols}};
  std::uniform_int_distribution<int> byte(0, 255), mant(0, 1023);
  for (auto& b : t.data) b = static_cast<std::byte>(byte(rng));
  for (std::int64_t i = 0; i < blocks; ++i) {
    std::byte* blk = t.data.data() + i * bytes;
    if (type == sm::GgmlType::kQ4_1) {
      const auto d = static_cast<std::uint16_t>((8 << 10) | mant(rng));           // 2^-7 .. 2^-6
      const auto m = static_cast<std::uint16_t>(0x8000 | (10 << 10) | mant(rng));  // -(2^-5 .. 2^-4)
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &m, 2);
    } else {
      const auto d = static_cast<std::uint16_t>((10 << 10) | mant(rng));  // 2^-5 .. 2^-4
      std::memcpy(blk, &d, 2);
    }
  }
  return t;
}

// Raw tensors under Hugging Face names (q/k stored in GGUF's permuted row order), plus float norms.
struct Checkpoint {
  std::map<std::string, RawTensor> raw;
  std::map<std::string, at::Tensor> norms;
  std::map<std::string, std::int64_t> unpermute;  // q/k: heads
};

Checkpoint make_checkpoint(const sm::LlamaConfig& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Checkpoint ck;
  const std::int64_t H = c.hidden_size, hd = H / c.num_heads, F = c.intermediate_size;
  ck.raw["model.embed_tokens.weight"] = random_tensor(sm::GgmlType::kQ8_0, c.vocab_size, H, rng);
  ck.norms["model.norm.weight"] = at::ones({H}) + 0.1 * at::randn({H}, at::TensorOptions().dtype(at::kFloat));
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ck.norms[p + "input_layernorm.weight"] = at::ones({H});
    ck.norms[p + "post_attention_layernorm.weight"] = at::ones({H});
    ck.raw[p + "self_attn.q_proj.weight"] = random_tensor(sm::GgmlType::kQ4_1, c.num_heads * hd, H, rng);
    ck.raw[p + "self_attn.k_proj.weight"] = random_tensor(sm::GgmlType::kQ4_1, c.num_kv_heads * hd, H, rng);
    ck.raw[p + "self_attn.v_proj.weight"] = random_tensor(sm::GgmlType::kQ4_1, c.num_kv_heads * hd, H, rng);
    ck.raw[p + "self_attn.o_proj.weight"] = random_tensor(sm::GgmlType::kQ4_1, H, c.num_heads * hd, rng);
    ck.raw[p + "mlp.gate_proj.weight"] = random_tensor(sm::GgmlType::kQ4_1, F, H, rng);
    ck.raw[p + "mlp.up_proj.weight"] = random_tensor(sm::GgmlType::kQ4_1, F, H, rng);
    ck.raw[p + "mlp.down_proj.weight"] = random_tensor(sm::GgmlType::kQ8_0, H, F, rng);
    ck.unpermute[p + "self_attn.q_proj.weight"] = c.num_heads;
    ck.unpermute[p + "self_attn.k_proj.weight"] = c.num_kv_heads;
  }
  return ck;
}

sm::LlamaModel packed_model(const sm::LlamaConfig& c, const Checkpoint& ck, sm::ActivationBits bits = 16,
                            std::vector<std::int64_t> output_ids = {}) {
  sm::LlamaOptions o;
  o.num_threads = 2;
  o.activation_bits = bits;
  o.output_ids = std::move(output_ids);
  return sm::LlamaModel::from_stored(c, [&](const std::string& name) {
    sm::StoredWeight w;
    if (auto it = ck.norms.find(name); it != ck.norms.end()) {
      w.dense = specdec::torch::float_tensor_of(it->second);
    } else if (auto r = ck.raw.find(name); r != ck.raw.end()) {
      w.file_name = name;
      w.type = r->second.type;
      w.data = r->second.data;
      w.shape = r->second.shape;
      if (auto u = ck.unpermute.find(name); u != ck.unpermute.end()) w.unpermute_heads = u->second;
    }
    return w;
  }, o);
}

// The checkpoint's matrices dequantised to float32 (the drafts' float16 weights stand-in), q/k rows as stored or
// un-permuted as whole tensors; norms as they are.
sm::WeightGetter float_weights(const Checkpoint& ck, bool unpermute = false) {
  return [&ck, unpermute](const std::string& name) -> sm::FloatTensor {
    if (auto it = ck.norms.find(name); it != ck.norms.end()) return specdec::torch::float_tensor_of(it->second);
    auto r = ck.raw.find(name);
    if (r == ck.raw.end()) return {};
    sm::FloatTensor t(r->second.shape);
    sm::dequantize(r->second.type, r->second.data, std::span<float>(t.mutable_data(), static_cast<std::size_t>(t.numel())));
    if (auto u = ck.unpermute.find(name); unpermute && u != ck.unpermute.end()) t = sm::unpermute_gguf_qk(t, u->second);
    return t;
  };
}

// The reference: the same weights dequantised to float32 (q/k un-permuted as whole tensors).
sm::LlamaModel dense_model(const sm::LlamaConfig& c, const Checkpoint& ck) { return sm::LlamaModel(c, float_weights(ck, true)); }

TEST(LlamaPacked, LogitsMatchTheDequantisedFloatModel) {
  const sm::LlamaConfig c = packed_config();
  const Checkpoint ck = make_checkpoint(c, 7);
  sm::LlamaModel packed = packed_model(c, ck), dense = dense_model(c, ck);
  EXPECT_NE(packed.kernel_name(), "float32");
  EXPECT_EQ(dense.kernel_name(), "float32");
  EXPECT_LT(packed.weight_bytes_per_forward(), dense.weight_bytes_per_forward() / 4);
  const std::vector<std::int64_t> prompt = {3, 17, 42, 5, 88, 11, 60, 29, 1, 77, 64, 90, 33, 8, 19, 50, 2, 71, 45, 12};
  const std::int64_t a = packed.allocate_sequence(), b = dense.allocate_sequence();
  // A prompt (the long-prompt path), then a 6-token chain and single tokens (the few-token path).
  at::Tensor pa = specdec::torch::tensor_of(packed.forward(sm::make_chain_batch(a, prompt)).logits), pb = specdec::torch::tensor_of(dense.forward(sm::make_chain_batch(b, prompt)).logits);
  at::Tensor ca = specdec::torch::tensor_of(packed.forward(sm::make_chain_batch(a, {4, 9, 16, 25, 36, 49})).logits);
  at::Tensor cb = specdec::torch::tensor_of(dense.forward(sm::make_chain_batch(b, {4, 9, 16, 25, 36, 49})).logits);
  for (const auto& [x, y] : {std::pair{pa, pb}, std::pair{ca, cb}}) {
    // Two activation planes: about 15-bit activations, so the logits agree to ~1e-4 of their range.
    const double scale = y.abs().max().item<double>();
    EXPECT_LT((x - y).abs().max().item<double>(), 2e-3 * scale);
    EXPECT_TRUE(x.argmax(1).equal(y.argmax(1)));
  }
}

TEST(LlamaPacked, ActivationBitsParseAndNameEveryKind) {
  EXPECT_EQ(sm::ActivationBits::parse("16"), sm::ActivationBits(16));
  EXPECT_EQ(sm::ActivationBits::parse("8"), sm::ActivationBits(8));
  sm::ActivationBits b = sm::ActivationBits::parse("16,attn_out=8,lm_head=8");
  EXPECT_EQ(b.qkv, 16);
  EXPECT_EQ(b.attn_out, 8);
  EXPECT_EQ(b.gate_up, 16);
  EXPECT_EQ(b.down, 16);
  EXPECT_EQ(b.lm_head, 8);
  EXPECT_EQ(b.to_string(), "qkv=16,attn_out=8,gate_up=16,down=16,lm_head=8");
  EXPECT_EQ(sm::ActivationBits::parse(b.to_string()), b);
  EXPECT_EQ(sm::ActivationBits(8).to_string(), "8");
  for (const char* bad : {"", "12", "16,", "16,mlp=8", "qkv=4", "down"}) {
    try {
      (void)sm::ActivationBits::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find("activation bits"), std::string::npos) << e.what();
    }
  }
  sm::LlamaConfig c = packed_config();
  sm::ActivationBits wrong(16);
  wrong.down = 12;
  EXPECT_THROW(packed_model(c, make_checkpoint(c, 7), wrong), specdec::error);
}

TEST(LlamaPacked, ActivationBitsApplyToTheirKindOfMatrix) {
  const sm::LlamaConfig c = packed_config();
  const Checkpoint ck = make_checkpoint(c, 7);
  const std::vector<std::int64_t> tokens = {3, 17, 42, 5, 88, 11};
  auto logits = [&](sm::ActivationBits bits) {
    sm::LlamaModel m = packed_model(c, ck, bits);
    return specdec::torch::tensor_of(m.forward(sm::make_chain_batch(m.allocate_sequence(), tokens)).logits);
  };
  sm::LlamaModel dense = dense_model(c, ck);
  const at::Tensor exact = specdec::torch::tensor_of(dense.forward(sm::make_chain_batch(dense.allocate_sequence(), tokens)).logits);
  const at::Tensor all16 = logits(16), all8 = logits(8);
  const double scale = exact.abs().max().item<double>();
  const double err16 = (all16 - exact).abs().max().item<double>(), err8 = (all8 - exact).abs().max().item<double>();
  EXPECT_LT(err16, 2e-3 * scale);
  EXPECT_GT(err8, 4 * err16);  // one plane: int8 activations, far coarser
  // Each kind alone at 8 bits changes the logits (so the setting reaches its matrices), by no more than a model with every
  // kind at 8 bits errs; every kind at 8 through the list form equals ActivationBits(8).
  for (int sm::ActivationBits::*kind : {&sm::ActivationBits::qkv, &sm::ActivationBits::attn_out, &sm::ActivationBits::gate_up,
                                        &sm::ActivationBits::down, &sm::ActivationBits::lm_head}) {
    sm::ActivationBits bits(16);
    bits.*kind = 8;
    const at::Tensor y = logits(bits);
    EXPECT_FALSE(y.equal(all16)) << bits.to_string();
    EXPECT_LT((y - exact).abs().max().item<double>(), 2 * err8) << bits.to_string();
  }
  EXPECT_TRUE(logits(sm::ActivationBits::parse("16,qkv=8,attn_out=8,gate_up=8,down=8,lm_head=8")).equal(all8));
}

TEST(LlamaPacked, FloatWeightsQuantisedToQ8_0ForDrafts) {
  // LlamaOptions::quantize_float_weights: float matrices become Q8_0 blocks on the packed products (for draft models).
  const sm::LlamaConfig c = packed_config();
  const Checkpoint ck = make_checkpoint(c, 12);
  sm::LlamaModel dense = dense_model(c, ck);
  const sm::WeightGetter floats = float_weights(ck);
  sm::LlamaOptions o;
  o.quantize_float_weights = true;
  o.quantized_float_type = sm::GgmlType::kQ8_0;
  sm::LlamaModel q8(c, floats, o);
  EXPECT_EQ(dense.kernel_name(), "float32");
  EXPECT_NE(q8.kernel_name(), "float32");
  // Q8_0: 34 bytes per 32 values against float32's 128 (norms stay float).
  EXPECT_LT(q8.weight_bytes_per_forward(), dense.weight_bytes_per_forward() * 30 / 100);
  const std::vector<std::int64_t> prompt = {3, 17, 42, 5, 88, 11, 60, 29};
  at::Tensor a = specdec::torch::tensor_of(dense.forward(sm::make_chain_batch(dense.allocate_sequence(), prompt)).logits);
  at::Tensor b = specdec::torch::tensor_of(q8.forward(sm::make_chain_batch(q8.allocate_sequence(), prompt)).logits);
  // 8-bit weights (a step of max|w| / 127 per block of 32): logits within a few percent of their range.
  EXPECT_LT((a - b).abs().max().item<double>(), 0.05 * a.abs().max().item<double>());

  // quantized_float_type Q4_0: 18 bytes per 32 values, coarser (a step of max|w| / 8), still near the float logits and
  // further from them than Q8_0's.
  o.quantized_float_type = sm::GgmlType::kQ4_0;
  sm::LlamaModel q4(c, floats, o);
  EXPECT_LT(q4.weight_bytes_per_forward(), q8.weight_bytes_per_forward() * 60 / 100);
  at::Tensor d4 = specdec::torch::tensor_of(q4.forward(sm::make_chain_batch(q4.allocate_sequence(), prompt)).logits);
  EXPECT_LT((a - d4).abs().max().item<double>(), 0.3 * a.abs().max().item<double>());
  EXPECT_GT((a - d4).abs().mean().item<double>(), (a - b).abs().mean().item<double>());
  o.quantized_float_type = sm::GgmlType::kQ6_K;
  EXPECT_THROW(sm::LlamaModel(c, floats, o), specdec::error);
}

// Two sequences' chains in one forward, every row's logits.
at::Tensor batch_logits(sm::LlamaModel& m) {
  const std::int64_t a = m.allocate_sequence(), b = m.allocate_sequence();
  sm::ForwardBatch fb;
  fb.slots = {a, b};
  fb.token_ids = {3, 17, 42, 5, 88, 11, 60, 29, 95, 0, 7};
  fb.cu_num_tokens = {0, 6, 11};
  at::Tensor l = specdec::torch::tensor_of(m.forward(fb).logits);
  m.free_sequence(a);
  m.free_sequence(b);
  return l;
}

TEST(LlamaPacked, OutputIdsScoreTheirColumnsBitForBit) {
  // LlamaOptions::output_ids (a draft's reduced output vocabulary): the logits hold just those tokens' columns, each
  // bit-identical to the whole vocabulary's, from block-format rows (tied Q8_0 embedding; an untied Q4_1 lm_head) and
  // from float rows quantised at load; inputs still take every token.
  const std::vector<std::int64_t> ids = {90, 3, 0, 41, 17, 95, 64, 2, 33, 58, 71, 12, 88, 5, 27, 49, 80};
  const at::Tensor cols = at::tensor(ids, at::kLong);
  sm::LlamaConfig c = packed_config();
  Checkpoint ck = make_checkpoint(c, 21);
  for (const bool tied : {true, false}) {
    c.tie_word_embeddings = tied;
    std::mt19937 rng(5);
    if (!tied) ck.raw["lm_head.weight"] = random_tensor(sm::GgmlType::kQ4_1, c.vocab_size, c.hidden_size, rng);
    for (const int bits : {16, 8}) {
      SCOPED_TRACE(::testing::Message() << "tied " << tied << ", activation bits " << bits);
      sm::LlamaModel whole = packed_model(c, ck, bits), part = packed_model(c, ck, bits, ids);
      EXPECT_EQ(part.vocab_size(), c.vocab_size);
      EXPECT_EQ(part.output_size(), static_cast<std::int64_t>(ids.size()));
      EXPECT_EQ(whole.output_size(), c.vocab_size);
      const at::Tensor w = batch_logits(whole), p = batch_logits(part);
      ASSERT_EQ(p.size(1), static_cast<std::int64_t>(ids.size()));
      EXPECT_TRUE(at::equal(p, w.index_select(1, cols)));
    }
  }
  // Float weights quantised to Q4_0 at load (how the CLI holds a draft model).
  c.tie_word_embeddings = true;
  const sm::WeightGetter floats = float_weights(ck);
  sm::LlamaOptions o;
  o.quantize_float_weights = true;
  o.quantized_float_type = sm::GgmlType::kQ4_0;
  sm::LlamaModel whole(c, floats, o);
  o.output_ids = ids;
  sm::LlamaModel part(c, floats, o);
  EXPECT_TRUE(at::equal(batch_logits(part), batch_logits(whole).index_select(1, cols)));
  EXPECT_LT(part.weight_bytes_per_forward(), whole.weight_bytes_per_forward());
  // Bad ids: errors naming the option, before any forward.
  for (const auto& bad : {std::vector<std::int64_t>{4, 96}, std::vector<std::int64_t>{4, -1}, std::vector<std::int64_t>{4, 9, 4}}) {
    o.output_ids = bad;
    try {
      sm::LlamaModel m(c, floats, o);
      ADD_FAILURE() << "no error for bad output_ids";
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find("output_ids"), std::string::npos) << e.what();
    }
  }
}

std::string load_error(const sm::LlamaConfig& c, const Checkpoint& ck) {
  try {
    (void)packed_model(c, ck);
  } catch (const specdec::error& e) {
    return e.what();
  }
  return "no error";
}

TEST(LlamaPacked, LoadRejectsTensorsTheModelCannotTake) {
  const sm::LlamaConfig c = packed_config();
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  {
    Checkpoint ck = make_checkpoint(c, 8);
    ck.raw[q].type = sm::GgmlType::kIQ2_XXS;  // parsed by the reader, no product for it
    const std::string e = load_error(c, ck);
    EXPECT_NE(e.find(q), std::string::npos) << e;
    EXPECT_NE(e.find("IQ2_XXS"), std::string::npos) << e;
  }
  {
    Checkpoint ck = make_checkpoint(c, 9);
    ck.raw[q].data.pop_back();  // truncated
    const std::string e = load_error(c, ck);
    EXPECT_NE(e.find(q), std::string::npos) << e;
    EXPECT_NE(e.find("expected 2560 bytes of block data, got 2559"), std::string::npos) << e;
  }
  {
    Checkpoint ck = make_checkpoint(c, 10);
    ck.raw["model.layers.0.mlp.up_proj.weight"].shape = {64, 96};  // disagrees with the config
    const std::string e = load_error(c, ck);
    EXPECT_NE(e.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("expected shape [96, 64], got [64, 96]"), std::string::npos) << e;
  }
  {
    Checkpoint ck = make_checkpoint(c, 11);
    ck.raw.erase("model.layers.0.mlp.down_proj.weight");
    EXPECT_NE(load_error(c, ck).find("model.layers.0.mlp.down_proj.weight: expected a tensor of shape [64, 96], got none"),
              std::string::npos);
  }
}

}  // namespace
