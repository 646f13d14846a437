// EAGLE-1 / EAGLE-3 heads, their checkpoint I/O, the EAGLE-2 dynamic tree and the EagleProposer (see eagle.hpp).
//
// The head runs on CPU in float32 with plain ATen ops: its one or two layers are tiny next to the target, so clarity wins
// over the hand-written loops of LlamaModel. Its KV cache (models::KvCache) holds, per slot, a committed prefix (rows built
// from real target features) followed by uncommitted rows (drafting); every uncommitted row records its parent position
// and depth, so the rows of a tree grown over several calls each attend to the prefix and to their own ancestors only.
#include "specdec/proposers/eagle.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <unordered_set>

#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/safetensors.hpp"
#include "specdec/models/detail/packed_matrix.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

namespace sm = specdec::models;

namespace {

// y = x w^T (+ bias) for the head's float32 weights, through the models' streaming kernel: a draft step multiplies 1-6 rows
// by every matrix, where BLAS gemm (packing the weight on every call) reads it at a fraction of memory bandwidth. Output
// columns are split over the intra-op threads in whole 6-row tiles; each output's value depends neither on the number of
// rows nor on the split, so drafts are the same for a request alone or in a batch.
at::Tensor stream_linear(const at::Tensor& x0, const at::Tensor& w, const at::Tensor& bias = {}) {
  const at::Tensor x = x0.to(at::kFloat).contiguous();
  const std::int64_t n = x.size(0), in = x.size(1), rows = w.size(0);
  at::Tensor y = at::empty({n, rows}, x.options());
  if (bias.defined()) y.copy_(bias.expand({n, rows}));  // (a fresh buffer: expand().contiguous() may alias the bias)
  if (n == 0 || rows == 0) return y;
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool accumulate = bias.defined();
  constexpr std::int64_t kTile = 6, kGrainTiles = 64;
  at::parallel_for(0, (rows + kTile - 1) / kTile, kGrainTiles, [&](std::int64_t tb, std::int64_t te) {
    sm::detail::linear_rows(xp, n, in, wp, tb * kTile, std::min(rows, te * kTile), yp, rows, accumulate);
  });
  return y;
}

// y = x w^T for a packed block-format w (one int8 activation plane), tiles split over the intra-op threads; each output
// is summed in a fixed order (see packed_matrix.hpp), so drafts do not depend on the batch.
at::Tensor packed_linear(const at::Tensor& x0, const sm::detail::PackedMatrix& w) {
  const at::Tensor x = x0.to(at::kFloat).contiguous();
  const std::int64_t n = x.size(0);
  at::Tensor y = at::empty({n, w.rows()}, x.options());
  if (n == 0) return y;
  sm::detail::QuantizedRows q;
  sm::detail::quantize_rows(x.data_ptr<float>(), n, w.cols(), w.cols(), w.block(), q);
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, w.tiles(), 16, [&](std::int64_t tb, std::int64_t te) { w.linear(q, tb, te, yp, w.rows(), false); });
  return y;
}

[[noreturn]] void fail(const std::string& msg) { throw specdec::error(Status::kInvalidArgument, msg); }

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const at::TensorOptions kF32 = at::TensorOptions().dtype(at::kFloat);
const at::TensorOptions kI64 = at::TensorOptions().dtype(at::kLong);

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// x: [N, heads, hd]; cos/sin: [N, 1, hd/2]. Pairs (j, j + hd/2).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(2) / 2;
  at::Tensor a = x.narrow(2, 0, half), b = x.narrow(2, half, half);
  return at::cat({a * cos - b * sin, b * cos + a * sin}, 2);
}

// A stable 64-bit mix (splitmix64's finaliser).
std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of EAGLE's draft-sampling stream: derived from the request's seed, distinct from the verifier's key (the seed).
std::uint64_t draft_key(std::uint64_t seed) { return mix64(seed ^ 0x4541474C45445246ull /* "EAGLEDRF" */); }

std::vector<std::int64_t> to_int64_vector(const sm::SafetensorsFile& f, const sm::SafetensorsTensor& t, const std::string& name) {
  const auto bytes = f.tensor_data(t);
  std::vector<std::int64_t> out(static_cast<std::size_t>(t.num_elements));
  for (std::int64_t i = 0; i < t.num_elements; ++i) {
    const std::byte* p = bytes.data() + static_cast<std::size_t>(i) * sm::element_size(t.dtype);
    switch (t.dtype) {
      case sm::SafetensorsDtype::kI64: { std::int64_t v; std::memcpy(&v, p, 8); out[i] = v; break; }
      case sm::SafetensorsDtype::kI32: { std::int32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case sm::SafetensorsDtype::kI16: { std::int16_t v; std::memcpy(&v, p, 2); out[i] = v; break; }
      case sm::SafetensorsDtype::kI8: { std::int8_t v; std::memcpy(&v, p, 1); out[i] = v; break; }
      case sm::SafetensorsDtype::kU8:
      case sm::SafetensorsDtype::kBool: { std::uint8_t v; std::memcpy(&v, p, 1); out[i] = v; break; }
      default:
        fail(fmt::format("load_eagle_head: tensor '{}': expected an integer or bool dtype, got {}", name, sm::to_string(t.dtype)));
    }
  }
  return out;
}

}  // namespace

const char* to_string(EagleVersion version) noexcept {
  switch (version) {
    case EagleVersion::kEagle1: return "eagle1";
    case EagleVersion::kEagle3: return "eagle3";
  }
  return "unknown";
}

std::vector<std::int64_t> eagle3_default_feature_layers(std::int64_t n) {
  if (n < 1) fail(fmt::format("eagle3_default_feature_layers: num_target_layers: expected >= 1, got {}", n));
  auto clamp = [&](std::int64_t l) { return std::clamp<std::int64_t>(l, 0, n - 1); };
  return {clamp(1), clamp(n / 2 - 1), clamp(n - 4)};
}

// --- the head ---------------------------------------------------------------------------------------------------------

struct EagleHead::Impl {
  struct Layer {
    at::Tensor input_norm;   // [H] EAGLE-1 layers >= 1 and EAGLE-3 (embedding norm); undefined for EAGLE-1 layer 0
    at::Tensor hidden_norm;  // [H] EAGLE-3 only
    at::Tensor post_norm;    // [H]
    at::Tensor wq, wk, wv;   // [nh*hd, in], [nkv*hd, in] (in = H, or 2H for EAGLE-3)
    at::Tensor wo;           // [H, nh*hd]
    at::Tensor gate, up;     // [F, H]
    at::Tensor down;         // [H, F]
  };
  struct SlotState {
    std::int64_t committed = 0;
    std::vector<std::int64_t> parent;  // per uncommitted position (pos - committed): parent position or -1
    std::vector<std::int64_t> depth;   // per uncommitted position: 0 for a child of the prefix
  };

  EagleHeadConfig cfg;
  EagleHeadOptions opts;
  std::int64_t H = 0, nh = 0, nkv = 0, hd = 0, F = 0, V = 0, Vd = 0, Ht = 0, group = 0;
  double eps = 1e-6;
  at::Tensor embed;     // [V, H]
  bool own_embed = false;
  at::Tensor fc_w, fc_b;  // [H, 2H] / [H, 3Ht]; bias [H] or undefined
  std::vector<Layer> layers;
  at::Tensor final_norm;  // EAGLE-3 [H]
  at::Tensor lm_head;     // EAGLE-1: the target's rows of the draft vocabulary [Vd, H]; EAGLE-3: its own [Vd, H]
  sm::detail::PackedMatrix lm_head_q8;  // lm_head as Q8_0 when options.quantize_lm_head
  std::vector<std::int64_t> d2t_ids;  // draft id -> target id
  at::Tensor t2d;                     // [V] bool
  std::vector<double> inv_freq;
  sm::KvCache cache;
  std::vector<SlotState> slots;

  std::int64_t feature_size() const { return cfg.version == EagleVersion::kEagle1 ? H : 3 * Ht; }
  SlotState& state(std::int64_t slot) {
    if (!cache.is_allocated(slot)) fail(fmt::format("EagleHead: slot: expected an allocated sequence slot, got {}", slot));
    if (slot >= static_cast<std::int64_t>(slots.size())) slots.resize(static_cast<std::size_t>(slot + 1));
    return slots[static_cast<std::size_t>(slot)];
  }
  EagleHeadOutput forward(const EagleHeadBatch& b);
  void load_draft_vocabulary(const sm::WeightGetter& get);
};

namespace {

// Resolves defaults and checks the config; returns the normalised copy.
EagleHeadConfig normalise(const EagleHeadConfig& in) {
  EagleHeadConfig c = in;
  sm::LlamaConfig& l = c.layer;
  if (l.num_kv_heads == 0) l.num_kv_heads = l.num_heads;
  if (l.head_dim == 0 && l.num_heads > 0 && l.hidden_size % l.num_heads == 0) l.head_dim = l.hidden_size / l.num_heads;
  try {
    l.validate();
  } catch (const std::exception& e) {
    fail(fmt::format("EagleHead: config.layer: {}", e.what()));
  }
  if (l.head_dim % 2 != 0) fail(fmt::format("EagleHead: config.layer.head_dim: expected an even number, got {}", l.head_dim));
  if (c.version == EagleVersion::kEagle3) {
    if (l.num_layers != 1)
      fail(fmt::format("EagleHead: config.layer.num_layers: EAGLE-3 heads have exactly 1 layer (midlayer), got {}", l.num_layers));
    if (c.target_hidden_size == 0) c.target_hidden_size = l.hidden_size;
    if (c.target_hidden_size < 1)
      fail(fmt::format("EagleHead: config.target_hidden_size: expected >= 1, got {}", c.target_hidden_size));
    if (!c.feature_layers.empty() && c.feature_layers.size() != 3)
      fail(fmt::format("EagleHead: config.feature_layers: expected 3 target blocks (low, mid, high) or none, got {}",
                       c.feature_layers.size()));
    for (auto f : c.feature_layers)
      if (f < 0) fail(fmt::format("EagleHead: config.feature_layers: expected block indices >= 0, got {}", f));
    c.fc_bias = false;
  } else {
    c.target_hidden_size = l.hidden_size;
    c.feature_layers.clear();
  }
  if (c.draft_vocab_size == 0) c.draft_vocab_size = l.vocab_size;
  if (c.draft_vocab_size < 1 || c.draft_vocab_size > l.vocab_size)
    fail(fmt::format("EagleHead: config.draft_vocab_size: expected in [1, vocab_size = {}], got {}", l.vocab_size,
                     c.draft_vocab_size));
  return c;
}

at::Tensor fetch(const sm::WeightGetter& get, const std::string& name, std::vector<std::int64_t> shape) {
  at::Tensor t = get(name);
  if (!t.defined()) fail(fmt::format("EagleHead: weight '{}': expected a tensor of shape {}, got none", name, shape_str(shape)));
  if (t.sizes() != at::IntArrayRef(shape))
    fail(fmt::format("EagleHead: weight '{}': expected shape {}, got {}", name, shape_str(shape), shape_str(t.sizes())));
  return t.to(at::kFloat).contiguous();
}

}  // namespace

// The draft vocabulary (d2t [Vd] int64: draft id d is target id d + d2t[d]; optional t2d [V] bool, checked against d2t).
// Without d2t the draft vocabulary must be the whole target vocabulary (identity map).
void EagleHead::Impl::load_draft_vocabulary(const sm::WeightGetter& get) {
  Impl& m = *this;
  at::Tensor d2t = get("d2t");
  m.d2t_ids.resize(static_cast<std::size_t>(m.Vd));
  if (d2t.defined()) {
    if (d2t.sizes() != at::IntArrayRef({m.Vd}))
      fail(fmt::format("EagleHead: weight 'd2t': expected shape {}, got {}", shape_str({m.Vd}), shape_str(d2t.sizes())));
    at::Tensor d = d2t.to(at::kLong).contiguous();
    const std::int64_t* dp = d.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < m.Vd; ++i) m.d2t_ids[static_cast<std::size_t>(i)] = i + dp[i];
  } else {
    if (m.Vd != m.V)
      fail(fmt::format("EagleHead: weight 'd2t': expected a tensor of shape {} (draft_vocab_size {} < vocab_size {}), got none",
                       shape_str({m.Vd}), m.Vd, m.V));
    for (std::int64_t i = 0; i < m.Vd; ++i) m.d2t_ids[static_cast<std::size_t>(i)] = i;
  }
  std::vector<bool> seen(static_cast<std::size_t>(m.V), false);
  for (std::int64_t i = 0; i < m.Vd; ++i) {
    const std::int64_t t = m.d2t_ids[static_cast<std::size_t>(i)];
    if (t < 0 || t >= m.V)
      fail(fmt::format("EagleHead: weight 'd2t': draft id {} maps to target id {} + {} = {}, expected in [0, {})", i, i,
                       t - i, t, m.V));
    if (seen[static_cast<std::size_t>(t)])
      fail(fmt::format("EagleHead: weight 'd2t': expected an injective map, target id {} appears twice", t));
    seen[static_cast<std::size_t>(t)] = true;
  }
  m.t2d = at::zeros({m.V}, at::TensorOptions().dtype(at::kBool));
  {
    auto acc = m.t2d.accessor<bool, 1>();
    for (std::int64_t t = 0; t < m.V; ++t) acc[t] = seen[static_cast<std::size_t>(t)];
  }
  if (at::Tensor t2d = get("t2d"); t2d.defined()) {
    if (t2d.sizes() != at::IntArrayRef({m.V}))
      fail(fmt::format("EagleHead: weight 't2d': expected shape {}, got {}", shape_str({m.V}), shape_str(t2d.sizes())));
    if (!at::equal(t2d.to(at::kBool), m.t2d))
      fail("EagleHead: weight 't2d': expected the mask of the target ids d2t maps to, got a different mask");
  }
}

EagleHead::EagleHead(const EagleHeadConfig& config, const sm::WeightGetter& get, const EagleTargetWeights& target,
                     const EagleHeadOptions& options)
    : impl_(std::make_unique<Impl>()) {
  at::NoGradGuard guard;
  Impl& m = *impl_;
  m.cfg = normalise(config);
  m.opts = options;
  const EagleHeadConfig& c = m.cfg;
  const sm::LlamaConfig& l = c.layer;
  m.H = l.hidden_size;
  m.nh = l.num_heads;
  m.nkv = l.num_kv_heads;
  m.hd = l.head_dim;
  m.F = l.intermediate_size;
  m.V = l.vocab_size;
  m.Vd = c.draft_vocab_size;
  m.Ht = c.target_hidden_size;
  m.group = m.nh / m.nkv;
  m.eps = l.rms_norm_eps;
  {
    const std::vector<float> inv = sm::rope_inverse_frequencies(l, m.hd);
    m.inv_freq.assign(inv.begin(), inv.end());
  }
  const bool e3 = c.version == EagleVersion::kEagle3;

  // Embedding: the head's own when the checkpoint has one, else the target's.
  if (at::Tensor own = get("embed_tokens.weight"); own.defined()) {
    m.embed = fetch([&](const std::string&) { return own; }, "embed_tokens.weight", {m.V, m.H});
    m.own_embed = true;
  } else {
    if (!target.embed_tokens.defined())
      fail(fmt::format("EagleHead: weight 'embed_tokens.weight': expected a tensor of shape {} in the checkpoint or "
                       "EagleTargetWeights::embed_tokens, got none", shape_str({m.V, m.H})));
    if (target.embed_tokens.sizes() != at::IntArrayRef({m.V, m.H}))
      fail(fmt::format("EagleHead: target.embed_tokens: expected shape {}, got {}", shape_str({m.V, m.H}),
                       shape_str(target.embed_tokens.sizes())));
    m.embed = target.embed_tokens.to(at::kFloat).contiguous();
  }

  const std::int64_t in = e3 ? 2 * m.H : m.H;
  const std::string prefix = e3 ? "midlayer." : "layers.";
  if (e3) {
    m.fc_w = fetch(get, "fc.weight", {m.H, 3 * m.Ht});
  } else {
    m.fc_w = fetch(get, "fc.weight", {m.H, 2 * m.H});
    if (c.fc_bias) m.fc_b = fetch(get, "fc.bias", {m.H});
  }
  for (std::int64_t i = 0; i < l.num_layers; ++i) {
    const std::string p = e3 ? prefix : fmt::format("layers.{}.", i);
    Impl::Layer L;
    if (e3 || i > 0) L.input_norm = fetch(get, p + "input_layernorm.weight", {m.H});
    if (e3) L.hidden_norm = fetch(get, p + "hidden_norm.weight", {m.H});
    L.post_norm = fetch(get, p + "post_attention_layernorm.weight", {m.H});
    const std::int64_t layer_in = (e3 && i == 0) ? in : m.H;
    L.wq = fetch(get, p + "self_attn.q_proj.weight", {m.nh * m.hd, layer_in});
    L.wk = fetch(get, p + "self_attn.k_proj.weight", {m.nkv * m.hd, layer_in});
    L.wv = fetch(get, p + "self_attn.v_proj.weight", {m.nkv * m.hd, layer_in});
    L.wo = fetch(get, p + "self_attn.o_proj.weight", {m.H, m.nh * m.hd});
    L.gate = fetch(get, p + "mlp.gate_proj.weight", {m.F, m.H});
    L.up = fetch(get, p + "mlp.up_proj.weight", {m.F, m.H});
    L.down = fetch(get, p + "mlp.down_proj.weight", {m.H, m.F});
    m.layers.push_back(std::move(L));
  }
  if (e3) {
    m.final_norm = fetch(get, "norm.weight", {m.H});
    m.lm_head = fetch(get, "lm_head.weight", {m.Vd, m.H});
    m.load_draft_vocabulary(get);
  } else {
    if (!target.lm_head.defined())
      fail(fmt::format("EagleHead: target.lm_head: EAGLE-1 scores with the target's LM head, expected shape {}, got none",
                       shape_str({m.V, m.H})));
    if (target.lm_head.sizes() != at::IntArrayRef({m.V, m.H}))
      fail(fmt::format("EagleHead: target.lm_head: expected shape {}, got {}", shape_str({m.V, m.H}),
                       shape_str(target.lm_head.sizes())));
    m.load_draft_vocabulary(get);
    // A draft vocabulary keeps only its rows of the target's LM head: the draft step scores Vd tokens instead of V.
    at::Tensor lm = target.lm_head.to(at::kFloat);
    if (m.Vd < m.V) lm = at::index_select(lm, 0, at::tensor(m.d2t_ids, kI64));
    m.lm_head = lm.contiguous();
  }

  if (options.quantize_lm_head) {
    if (m.H % 32 != 0)
      fail(fmt::format("EagleHead: options.quantize_lm_head: expected a hidden size that is a multiple of 32, got {}", m.H));
    const std::vector<std::byte> blocks = sm::detail::quantize_q8_0(m.lm_head.data_ptr<float>(), m.lm_head.numel());
    const sm::detail::PackedMatrix::Source src{"lm_head.weight", sm::GgmlType::kQ8_0, blocks, m.Vd, m.H, {}};
    m.lm_head_q8 = sm::detail::PackedMatrix::pack(std::span(&src, 1));
  }

  sm::KvCacheShape shape;
  shape.num_layers = l.num_layers;
  shape.num_kv_heads = m.nkv;
  shape.head_dim = m.hd;
  shape.initial_capacity = std::max<std::int64_t>(options.initial_cache_capacity, 1);
  shape.initial_slots = std::max<std::int64_t>(options.initial_cache_slots, 1);
  m.cache = sm::KvCache(shape);
}

EagleHead EagleHead::random(const EagleHeadConfig& config, std::uint64_t seed, const EagleTargetWeights& target,
                            const EagleHeadOptions& options) {
  const EagleHeadConfig c = normalise(config);
  const sm::LlamaConfig& l = c.layer;
  const bool e3 = c.version == EagleVersion::kEagle3;
  const std::int64_t H = l.hidden_size, F = l.intermediate_size, nh = l.num_heads, nkv = l.num_kv_heads, hd = l.head_dim;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto randn = [&](std::vector<std::int64_t> shape, double mean, double std) {
    return at::normal(mean, std, shape, gen, kF32);
  };
  auto s = [](std::int64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); };
  std::unordered_map<std::string, at::Tensor> w;
  {
    at::NoGradGuard guard;
    const std::int64_t in = e3 ? 2 * H : H;
    if (e3) {
      w["fc.weight"] = randn({H, 3 * c.target_hidden_size}, 0, s(3 * c.target_hidden_size));
      w["norm.weight"] = randn({H}, 1, 0.1);
      w["lm_head.weight"] = randn({c.draft_vocab_size, H}, 0, 2 * s(H));
    } else {
      w["fc.weight"] = randn({H, 2 * H}, 0, s(2 * H));
      if (c.fc_bias) w["fc.bias"] = randn({H}, 0, 0.1);
    }
    if (c.draft_vocab_size < l.vocab_size) {
      at::Tensor d2t = at::empty({c.draft_vocab_size}, kI64);
      std::int64_t* dp = d2t.data_ptr<std::int64_t>();
      for (std::int64_t d = 0; d < c.draft_vocab_size; ++d) dp[d] = d * l.vocab_size / c.draft_vocab_size - d;
      w["d2t"] = d2t;
    }
    for (std::int64_t i = 0; i < l.num_layers; ++i) {
      const std::string p = e3 ? "midlayer." : fmt::format("layers.{}.", i);
      const std::int64_t layer_in = (e3 && i == 0) ? in : H;
      if (e3 || i > 0) w[p + "input_layernorm.weight"] = randn({H}, 1, 0.1);
      if (e3) w[p + "hidden_norm.weight"] = randn({H}, 1, 0.1);
      w[p + "post_attention_layernorm.weight"] = randn({H}, 1, 0.1);
      w[p + "self_attn.q_proj.weight"] = randn({nh * hd, layer_in}, 0, 2 * s(layer_in));
      w[p + "self_attn.k_proj.weight"] = randn({nkv * hd, layer_in}, 0, 2 * s(layer_in));
      w[p + "self_attn.v_proj.weight"] = randn({nkv * hd, layer_in}, 0, s(layer_in));
      w[p + "self_attn.o_proj.weight"] = randn({H, nh * hd}, 0, s(nh * hd));
      w[p + "mlp.gate_proj.weight"] = randn({F, H}, 0, s(H));
      w[p + "mlp.up_proj.weight"] = randn({F, H}, 0, s(H));
      w[p + "mlp.down_proj.weight"] = randn({H, F}, 0, s(F));
    }
    if (!target.embed_tokens.defined()) w["embed_tokens.weight"] = randn({l.vocab_size, H}, 0, 1);
  }
  return EagleHead(c, [&](const std::string& name) {
    auto it = w.find(name);
    return it == w.end() ? at::Tensor() : it->second;
  }, target, options);
}

EagleHead::EagleHead(EagleHead&&) noexcept = default;
EagleHead& EagleHead::operator=(EagleHead&&) noexcept = default;
EagleHead::~EagleHead() = default;

const EagleHeadConfig& EagleHead::config() const noexcept { return impl_->cfg; }
EagleVersion EagleHead::version() const noexcept { return impl_->cfg.version; }
std::int64_t EagleHead::hidden_size() const noexcept { return impl_->H; }
std::int64_t EagleHead::vocab_size() const noexcept { return impl_->V; }
std::int64_t EagleHead::draft_vocab_size() const noexcept { return impl_->Vd; }
std::int64_t EagleHead::feature_size() const noexcept { return impl_->feature_size(); }
const std::vector<std::int64_t>& EagleHead::draft_to_target() const noexcept { return impl_->d2t_ids; }
bool EagleHead::owns_embedding() const noexcept { return impl_->own_embed; }

std::int64_t EagleHead::allocate_sequence() {
  const std::int64_t slot = impl_->cache.allocate();
  if (slot >= static_cast<std::int64_t>(impl_->slots.size())) impl_->slots.resize(static_cast<std::size_t>(slot + 1));
  impl_->slots[static_cast<std::size_t>(slot)] = {};
  return slot;
}
void EagleHead::free_sequence(std::int64_t slot) {
  impl_->cache.free(slot);
  impl_->slots[static_cast<std::size_t>(slot)] = {};
}
std::int64_t EagleHead::sequence_length(std::int64_t slot) const { return impl_->cache.length(slot); }
std::int64_t EagleHead::committed_length(std::int64_t slot) const {
  (void)impl_->cache.length(slot);  // validates the slot
  return impl_->slots[static_cast<std::size_t>(slot)].committed;
}
void EagleHead::truncate(std::int64_t slot, std::int64_t length) {
  impl_->cache.truncate(slot, length);
  auto& st = impl_->slots[static_cast<std::size_t>(slot)];
  if (length <= st.committed) {
    st.committed = length;
    st.parent.clear();
    st.depth.clear();
  } else {
    st.parent.resize(static_cast<std::size_t>(length - st.committed));
    st.depth.resize(static_cast<std::size_t>(length - st.committed));
  }
}

EagleHeadOutput EagleHead::forward(const EagleHeadBatch& batch) { return impl_->forward(batch); }

EagleHeadOutput EagleHead::Impl::forward(const EagleHeadBatch& b) {
  at::NoGradGuard guard;
  const auto B = static_cast<std::int64_t>(b.slots.size());
  const std::int64_t N =
      sm::detail::check_ragged_tokens("EagleHead::forward", "row", B, b.cu_num_tokens, b.token_ids, V);
  const std::int64_t fw = b.features_are_head_hidden ? H : feature_size();
  if (!b.features.defined() || b.features.dim() != 2 || b.features.size(0) != N || b.features.size(1) != fw)
    fail(fmt::format("EagleHead::forward: features: expected [{}, {}] ({}), got {}", N, fw,
                     b.features_are_head_hidden ? "head hidden states" : "target features",
                     b.features.defined() ? shape_str(b.features.sizes()) : std::string("none")));
  if (!b.parents.empty() && static_cast<std::int64_t>(b.parents.size()) != B)
    fail(fmt::format("EagleHead::forward: parents: expected empty or {} arrays (one per sequence), got {}", B, b.parents.size()));
  if (b.commit && !b.parents.empty()) fail("EagleHead::forward: commit: expected chains (no parents) when committing");
  {
    std::unordered_set<std::int64_t> seen;
    for (std::int64_t i = 0; i < B; ++i) {
      const std::int64_t slot = b.slots[i];
      if (!cache.is_allocated(slot))
        fail(fmt::format("EagleHead::forward: slots[{}]: expected an allocated sequence slot, got {}", i, slot));
      if (!seen.insert(slot).second) fail(fmt::format("EagleHead::forward: slots[{}]: expected distinct slots, got {} twice", i, slot));
      const SlotState& st = state(slot);
      const std::int64_t L = cache.length(slot), n = b.cu_num_tokens[i + 1] - b.cu_num_tokens[i];
      if (b.commit && L != st.committed)
        fail(fmt::format("EagleHead::forward: commit: slot {} holds {} uncommitted rows, expected none", slot, L - st.committed));
      if (!b.parents.empty()) {
        const auto& par = b.parents[static_cast<std::size_t>(i)];
        if (static_cast<std::int64_t>(par.size()) != n)
          fail(fmt::format("EagleHead::forward: parents[{}]: expected {} entries (the sequence's rows), got {}", i, n, par.size()));
        for (std::int64_t r = 0; r < n; ++r) {
          const std::int64_t p = par[static_cast<std::size_t>(r)];
          if (p != -1 && (p < st.committed || p >= L + r))
            throw specdec::error(Status::kInvalidTree,
                                 fmt::format("EagleHead::forward: parents[{}][{}]: expected -1 or an uncommitted position in [{}, {}), got {}",
                                             i, r, st.committed, L + r, p));
        }
      }
    }
  }

  // Positions, depths and visibility per sequence.
  struct Plan {
    std::int64_t slot, start, n, L, committed;
    at::Tensor mask;  // [n, L + n] additive, or undefined when every row sees everything before it (chain after a prefix)
  };
  std::vector<Plan> plans(static_cast<std::size_t>(B));
  std::vector<std::int64_t> positions(static_cast<std::size_t>(N));
  std::int64_t max_total = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    Plan& p = plans[static_cast<std::size_t>(i)];
    p.slot = b.slots[i];
    p.start = b.cu_num_tokens[i];
    p.n = b.cu_num_tokens[i + 1] - p.start;
    p.L = cache.length(p.slot);
    SlotState& st = state(p.slot);
    p.committed = st.committed;
    max_total = std::max(max_total, p.L + p.n);
    // Parent and depth of the new rows (absolute positions), appended to the slot's uncommitted list.
    std::vector<std::int64_t> par(static_cast<std::size_t>(p.n));
    for (std::int64_t r = 0; r < p.n; ++r) {
      if (!b.parents.empty()) {
        par[static_cast<std::size_t>(r)] = b.parents[static_cast<std::size_t>(i)][static_cast<std::size_t>(r)];
      } else {
        const std::int64_t prev = p.L + r - 1;
        par[static_cast<std::size_t>(r)] = prev >= p.committed ? prev : -1;
      }
    }
    auto depth_of = [&](std::int64_t pos) -> std::int64_t {  // pos >= committed
      const std::int64_t k = pos - p.committed;
      return k < static_cast<std::int64_t>(st.depth.size()) ? st.depth[static_cast<std::size_t>(k)] : -1;
    };
    std::vector<std::int64_t> new_depth(static_cast<std::size_t>(p.n));
    for (std::int64_t r = 0; r < p.n; ++r) {
      const std::int64_t q = par[static_cast<std::size_t>(r)];
      std::int64_t d = 0;
      if (q >= 0) d = (q < p.L ? depth_of(q) : new_depth[static_cast<std::size_t>(q - p.L)]) + 1;
      new_depth[static_cast<std::size_t>(r)] = d;
      positions[static_cast<std::size_t>(p.start + r)] = p.committed + d;
    }
    // Is every row's visible set exactly [0, L + r]? (a chain continuing a chain of uncommitted rows, or a commit)
    bool plain = true;
    for (std::int64_t r = 0; r < p.n && plain; ++r) {
      const std::int64_t pos = p.L + r, q = par[static_cast<std::size_t>(r)];
      if (q != (pos - 1 >= p.committed ? pos - 1 : -1)) plain = false;
    }
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(st.parent.size()) && plain; ++k) {
      const std::int64_t pos = p.committed + k, q = st.parent[static_cast<std::size_t>(k)];
      if (q != (pos - 1 >= p.committed ? pos - 1 : -1)) plain = false;
    }
    if (!plain || p.n > 1) {
      const std::int64_t width = p.L + p.n;
      p.mask = at::zeros({p.n, width}, kF32);
      float* m = p.mask.data_ptr<float>();
      const float neg_inf = -std::numeric_limits<float>::infinity();
      for (std::int64_t r = 0; r < p.n; ++r) {
        float* row = m + r * width;
        for (std::int64_t c = p.committed; c < width; ++c) row[c] = neg_inf;
        for (std::int64_t a = p.L + r; a >= 0;) {
          row[a] = 0.f;
          a = a >= p.L ? par[static_cast<std::size_t>(a - p.L)] : st.parent[static_cast<std::size_t>(a - p.committed)];
        }
      }
    }
    st.parent.insert(st.parent.end(), par.begin(), par.end());
    st.depth.insert(st.depth.end(), new_depth.begin(), new_depth.end());
  }

  // Rotary tables for the rows.
  const std::int64_t half = hd / 2;
  at::Tensor cos = at::empty({N, 1, half}, kF32), sin = at::empty({N, 1, half}, kF32);
  {
    float* cp = cos.data_ptr<float>();
    float* sp = sin.data_ptr<float>();
    for (std::int64_t t = 0; t < N; ++t)
      for (std::int64_t j = 0; j < half; ++j) {
        const double a = static_cast<double>(positions[static_cast<std::size_t>(t)]) * inv_freq[static_cast<std::size_t>(j)];
        cp[t * half + j] = static_cast<float>(std::cos(a));
        sp[t * half + j] = static_cast<float>(std::sin(a));
      }
  }

  cache.reserve(max_total);
  at::Tensor ids = at::from_blob(const_cast<std::int64_t*>(b.token_ids.data()), {N}, kI64);
  at::Tensor emb = at::index_select(embed, 0, ids);
  at::Tensor feat = b.features.to(at::kFloat).contiguous();
  const bool e3 = cfg.version == EagleVersion::kEagle3;
  at::Tensor x, attn_in0;
  if (e3) {
    x = b.features_are_head_hidden ? feat : stream_linear(feat, fc_w);
    attn_in0 = at::cat({rms_norm(emb, layers[0].input_norm, eps), rms_norm(x, layers[0].hidden_norm, eps)}, 1);
  } else {
    x = stream_linear(at::cat({emb, feat}, 1), fc_w, fc_b);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (std::size_t li = 0; li < layers.size(); ++li) {
    const Layer& Ly = layers[li];
    at::Tensor a_in = e3 ? attn_in0 : (Ly.input_norm.defined() ? rms_norm(x, Ly.input_norm, eps) : x);
    at::Tensor q = apply_rope(stream_linear(a_in, Ly.wq).view({N, nh, hd}), cos, sin);
    at::Tensor k = apply_rope(stream_linear(a_in, Ly.wk).view({N, nkv, hd}), cos, sin);
    at::Tensor v = stream_linear(a_in, Ly.wv).view({N, nkv, hd});
    at::Tensor keys = cache.keys(static_cast<std::int64_t>(li)), values = cache.values(static_cast<std::int64_t>(li));
    at::Tensor out = at::empty({N, nh * hd}, kF32);
    for (const Plan& p : plans) {
      keys.select(0, p.slot).narrow(1, p.L, p.n).copy_(k.narrow(0, p.start, p.n).transpose(0, 1));
      values.select(0, p.slot).narrow(1, p.L, p.n).copy_(v.narrow(0, p.start, p.n).transpose(0, 1));
      const std::int64_t total = p.L + p.n;
      at::Tensor ks = keys.select(0, p.slot).narrow(1, 0, total);    // [nkv, total, hd]
      at::Tensor vs = values.select(0, p.slot).narrow(1, 0, total);  // [nkv, total, hd]
      at::Tensor qs = q.narrow(0, p.start, p.n).view({p.n, nkv, group, hd}).permute({1, 2, 0, 3}).reshape({nkv, group * p.n, hd});
      at::Tensor scores = at::bmm(qs, ks.transpose(1, 2)).mul_(scale);  // [nkv, group * n, total]
      if (p.mask.defined()) scores.view({nkv, group, p.n, total}).add_(p.mask);
      at::Tensor o = at::bmm(at::softmax(scores, -1), vs);  // [nkv, group * n, hd]
      out.narrow(0, p.start, p.n).view({p.n, nkv, group, hd}).copy_(o.view({nkv, group, p.n, hd}).permute({2, 0, 1, 3}));
    }
    x = x + stream_linear(out, Ly.wo);
    at::Tensor h = rms_norm(x, Ly.post_norm, eps);
    x = x + stream_linear(at::silu(stream_linear(h, Ly.gate)) * stream_linear(h, Ly.up), Ly.down);
  }
  for (const Plan& p : plans) {
    cache.set_length(p.slot, p.L + p.n);
    if (b.commit) {
      SlotState& st = state(p.slot);
      st.committed = p.L + p.n;
      st.parent.clear();
      st.depth.clear();
    }
  }

  EagleHeadOutput result;
  result.hidden = x;
  at::Tensor rows = x;
  if (b.last_logits_only) {
    std::vector<std::int64_t> last(static_cast<std::size_t>(B));
    for (std::int64_t i = 0; i < B; ++i) last[static_cast<std::size_t>(i)] = b.cu_num_tokens[i + 1] - 1;
    rows = at::index_select(x, 0, at::tensor(last, kI64));
  }
  const at::Tensor scored = e3 ? rms_norm(rows, final_norm, eps) : rows;
  result.logits = lm_head_q8.empty() ? stream_linear(scored, lm_head) : packed_linear(scored, lm_head_q8);
  return result;
}

// --- checkpoint I/O ------------------------------------------------------------------------------------------------------

std::vector<std::pair<std::string, at::Tensor>> EagleHead::named_weights() const {
  const Impl& m = *impl_;
  std::vector<std::pair<std::string, at::Tensor>> out;
  const bool e3 = m.cfg.version == EagleVersion::kEagle3;
  if (m.own_embed) out.emplace_back("embed_tokens.weight", m.embed);
  out.emplace_back("fc.weight", m.fc_w);
  if (m.fc_b.defined()) out.emplace_back("fc.bias", m.fc_b);
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const Impl::Layer& L = m.layers[i];
    const std::string p = e3 ? "midlayer." : fmt::format("layers.{}.", i);
    if (L.hidden_norm.defined()) out.emplace_back(p + "hidden_norm.weight", L.hidden_norm);
    if (L.input_norm.defined()) out.emplace_back(p + "input_layernorm.weight", L.input_norm);
    out.emplace_back(p + "post_attention_layernorm.weight", L.post_norm);
    out.emplace_back(p + "self_attn.q_proj.weight", L.wq);
    out.emplace_back(p + "self_attn.k_proj.weight", L.wk);
    out.emplace_back(p + "self_attn.v_proj.weight", L.wv);
    out.emplace_back(p + "self_attn.o_proj.weight", L.wo);
    out.emplace_back(p + "mlp.gate_proj.weight", L.gate);
    out.emplace_back(p + "mlp.up_proj.weight", L.up);
    out.emplace_back(p + "mlp.down_proj.weight", L.down);
  }
  if (e3) {
    out.emplace_back("norm.weight", m.final_norm);
    out.emplace_back("lm_head.weight", m.lm_head);
  }
  if (e3 || m.Vd < m.V) {
    at::Tensor d2t = at::empty({m.Vd}, kI64);
    std::int64_t* dp = d2t.data_ptr<std::int64_t>();
    for (std::int64_t d = 0; d < m.Vd; ++d) dp[d] = m.d2t_ids[static_cast<std::size_t>(d)] - d;
    out.emplace_back("d2t", d2t);
    out.emplace_back("t2d", m.t2d);
  }
  return out;
}

namespace {

// The head's tensors as float32 (I64 / BOOL kept); errors name EagleHead::save.
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  try {
    sm::write_tensors_safetensors(path, tensors, at::kFloat);
  } catch (const specdec::error& e) {
    throw specdec::error(e.status(), std::string("EagleHead::save: ") + e.what());
  }
}

}  // namespace

void EagleHead::save(const std::filesystem::path& dir) const {
  const Impl& m = *impl_;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(fmt::format("EagleHead::save: cannot create directory '{}': {}", dir.string(), ec.message()));
  const sm::LlamaConfig& l = m.cfg.layer;
  const bool e3 = m.cfg.version == EagleVersion::kEagle3;
  nlohmann::ordered_json j;
  j["architectures"] = {e3 ? "LlamaForCausalLMEagle3" : "LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  j["hidden_size"] = l.hidden_size;
  j["intermediate_size"] = l.intermediate_size;
  j["num_hidden_layers"] = l.num_layers;
  j["num_attention_heads"] = l.num_heads;
  j["num_key_value_heads"] = l.num_kv_heads;
  j["head_dim"] = l.head_dim;
  j["vocab_size"] = l.vocab_size;
  j["rms_norm_eps"] = l.rms_norm_eps;
  j["rope_theta"] = l.rope_theta;
  j["max_position_embeddings"] = l.max_position_embeddings;
  j["tie_word_embeddings"] = false;
  if (l.rope_scaling.type == sm::RopeScalingType::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    nlohmann::ordered_json rs;
    rs["rope_type"] = sm::to_string(l.rope_scaling.type);
    rs["factor"] = l.rope_scaling.factor;
    if (l.rope_scaling.type == sm::RopeScalingType::kLlama3) {
      rs["low_freq_factor"] = l.rope_scaling.low_freq_factor;
      rs["high_freq_factor"] = l.rope_scaling.high_freq_factor;
    }
    if (l.rope_scaling.original_max_position_embeddings > 0)
      rs["original_max_position_embeddings"] = l.rope_scaling.original_max_position_embeddings;
    j["rope_scaling"] = rs;
  }
  if (l.bos_token_id) j["bos_token_id"] = *l.bos_token_id;
  if (!l.eos_token_ids.empty()) j["eos_token_id"] = l.eos_token_ids.size() == 1 ? nlohmann::ordered_json(l.eos_token_ids[0])
                                                                                : nlohmann::ordered_json(l.eos_token_ids);
  if (e3) {
    j["draft_vocab_size"] = m.Vd;
    j["target_hidden_size"] = m.Ht;
    if (!m.cfg.feature_layers.empty()) {
      std::vector<std::int64_t> ids;
      for (auto f : m.cfg.feature_layers) ids.push_back(f + 1);  // vLLM numbers the layer whose input is read
      j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", ids}};
    }
  } else {
    j["bias"] = m.fc_b.defined();
    if (m.Vd < m.V) j["draft_vocab_size"] = m.Vd;
    if (m.cfg.feature == EagleFeature::kPreNorm) j["specdec_feature"] = "pre_norm";
  }
  {
    std::ofstream out(dir / "config.json", std::ios::trunc);
    if (!out) fail(fmt::format("EagleHead::save: cannot open '{}' for writing", (dir / "config.json").string()));
    out << j.dump(2) << "\n";
    if (!out) fail(fmt::format("EagleHead::save: writing '{}' failed", (dir / "config.json").string()));
  }
  write_safetensors(dir / "model.safetensors", named_weights());
}

namespace {

struct CheckpointIndex {
  std::vector<sm::SafetensorsFile> files;
  std::map<std::string, std::pair<std::size_t, const sm::SafetensorsTensor*>, std::less<>> index;
};

CheckpointIndex open_checkpoint(const std::filesystem::path& dir, const char* who) {
  if (!std::filesystem::is_directory(dir)) fail(fmt::format("{}: dir: expected a checkpoint directory, got '{}'", who, dir.string()));
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) {
    const bool bin = std::filesystem::exists(dir / "pytorch_model.bin");
    fail(fmt::format("{}: dir: expected *.safetensors files in '{}', got none{}", who, dir.string(),
                     bin ? " (pytorch_model.bin is not read: convert it to safetensors)" : ""));
  }
  CheckpointIndex ci;
  ci.files.reserve(paths.size());
  for (const auto& p : paths) ci.files.emplace_back(p);
  for (std::size_t f = 0; f < ci.files.size(); ++f)
    for (const auto& t : ci.files[f].tensors()) ci.index[t.name] = {f, &t};
  return ci;
}

at::Tensor read_tensor(const CheckpointIndex& ci, const std::string& name) {
  auto it = ci.index.find(name);
  if (it == ci.index.end()) return {};
  const auto& [f, t] = it->second;
  switch (t->dtype) {
    case sm::SafetensorsDtype::kF32:
    case sm::SafetensorsDtype::kF16:
    case sm::SafetensorsDtype::kBF16: {
      at::Tensor out = at::empty(t->shape, kF32);
      ci.files[f].to_float(*t, std::span<float>(out.data_ptr<float>(), static_cast<std::size_t>(out.numel())));
      return out;
    }
    case sm::SafetensorsDtype::kBool: {
      const auto v = to_int64_vector(ci.files[f], *t, name);
      return at::tensor(v, kI64).view(t->shape).to(at::kBool);
    }
    default: {
      const auto v = to_int64_vector(ci.files[f], *t, name);
      return at::tensor(v, kI64).view(t->shape);
    }
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

EagleHeadConfig load_eagle_head_config(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    fail(fmt::format("load_eagle_head: dir: expected a checkpoint directory, got '{}'", dir.string()));
  const std::filesystem::path cfg_path = dir / "config.json";
  if (!std::filesystem::is_regular_file(cfg_path))
    fail(fmt::format("load_eagle_head: expected a config.json in '{}', got none", dir.string()));
  EagleHeadConfig c;
  c.layer = sm::llama_config_from_hf_json(cfg_path);
  std::ifstream in(cfg_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  bool has_midlayer = false;
  {
    const CheckpointIndex ci = open_checkpoint(dir, "load_eagle_head_config");
    for (const auto& [name, _] : ci.index)
      if (name.rfind("midlayer.", 0) == 0) has_midlayer = true;
  }
  c.version = has_midlayer ? EagleVersion::kEagle3 : EagleVersion::kEagle1;
  const std::string where = cfg_path.string();
  auto opt_int = [&](const nlohmann::json& obj, const char* key) -> std::optional<std::int64_t> {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer()) fail(fmt::format("load_eagle_head: '{}' key '{}': expected an integer, got {}", where, key, it->dump()));
    return it->get<std::int64_t>();
  };
  if (c.version == EagleVersion::kEagle1) {
    if (auto it = j.find("bias"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean()) fail(fmt::format("load_eagle_head: '{}' key 'bias': expected a bool, got {}", where, it->dump()));
      c.fc_bias = it->get<bool>();
    }
    if (auto it = j.find("specdec_feature"); it != j.end() && it->is_string()) {
      const std::string f = it->get<std::string>();
      if (f == "pre_norm") c.feature = EagleFeature::kPreNorm;
      else if (f == "post_norm") c.feature = EagleFeature::kPostNorm;
      else fail(fmt::format("load_eagle_head: '{}' key 'specdec_feature': expected \"pre_norm\" or \"post_norm\", got {}", where, it->dump()));
    }
    c.draft_vocab_size = opt_int(j, "draft_vocab_size").value_or(0);
  } else {
    c.draft_vocab_size = opt_int(j, "draft_vocab_size").value_or(0);
    c.target_hidden_size = opt_int(j, "target_hidden_size").value_or(0);
    const nlohmann::json* ids = nullptr;
    if (auto e = j.find("eagle_config"); e != j.end() && e->is_object())
      if (auto it = e->find("eagle_aux_hidden_state_layer_ids"); it != e->end() && !it->is_null()) ids = &*it;
    if (auto it = j.find("eagle_aux_hidden_state_layer_ids"); !ids && it != j.end() && !it->is_null()) ids = &*it;
    if (ids) {
      if (!ids->is_array() || ids->size() != 3)
        fail(fmt::format("load_eagle_head: '{}' key 'eagle_aux_hidden_state_layer_ids': expected 3 integers, got {}", where, ids->dump()));
      for (const auto& e : *ids) {
        if (!e.is_number_integer() || e.get<std::int64_t>() < 1)
          fail(fmt::format("load_eagle_head: '{}' key 'eagle_aux_hidden_state_layer_ids': expected integers >= 1, got {}", where, ids->dump()));
        c.feature_layers.push_back(e.get<std::int64_t>() - 1);
      }
    }
  }
  return c;
}

EagleHead load_eagle_head(const std::filesystem::path& dir, const EagleTargetWeights& target, const EagleHeadOptions& options) {
  const EagleHeadConfig config = load_eagle_head_config(dir);
  const CheckpointIndex ci = open_checkpoint(dir, "load_eagle_head");
  std::set<std::string, std::less<>> used;
  auto get = [&](const std::string& name) {
    used.insert(name);
    return read_tensor(ci, name);
  };
  try {
    EagleHead head(config, get, target, options);
    for (const auto& [name, _] : ci.index) {
      if (used.count(name) || ends_with(name, "rotary_emb.inv_freq")) continue;
      fail(fmt::format("load_eagle_head: tensor '{}' in '{}': not part of an {} head with {} layer(s)", name, dir.string(),
                       config.version == EagleVersion::kEagle1 ? "EAGLE-1" : "EAGLE-3", config.layer.num_layers));
    }
    return head;
  } catch (const specdec::error& e) {
    const std::string what = e.what();
    if (what.rfind("load_eagle_head", 0) == 0) throw;
    throw specdec::error(e.status(), fmt::format("load_eagle_head: '{}': {}", dir.string(), what));
  }
}

EagleTargetWeights eagle_target_weights_from_safetensors(const std::filesystem::path& dir) {
  const CheckpointIndex ci = open_checkpoint(dir, "eagle_target_weights_from_safetensors");
  EagleTargetWeights w;
  w.embed_tokens = read_tensor(ci, "model.embed_tokens.weight");
  if (!w.embed_tokens.defined())
    fail(fmt::format("eagle_target_weights_from_safetensors: tensor 'model.embed_tokens.weight' is missing in '{}'", dir.string()));
  w.lm_head = read_tensor(ci, "lm_head.weight");
  if (!w.lm_head.defined()) w.lm_head = w.embed_tokens;
  return w;
}

EagleTargetWeights eagle_target_weights_from_gguf(const std::filesystem::path& path) {
  sm::GgufFile file(path);
  auto read = [&](const char* name) -> at::Tensor {
    const sm::TensorInfo* info = file.find_tensor(name);
    if (!info) return {};
    at::Tensor t = at::empty(info->shape, kF32);
    file.dequantize(*info, std::span<float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel())));
    return t;
  };
  EagleTargetWeights w;
  w.embed_tokens = read("token_embd.weight");
  if (!w.embed_tokens.defined())
    fail(fmt::format("eagle_target_weights_from_gguf: tensor 'token_embd.weight' is missing in '{}'", path.string()));
  w.lm_head = read("output.weight");
  if (!w.lm_head.defined()) w.lm_head = w.embed_tokens;
  return w;
}

// --- EAGLE-2 dynamic tree ------------------------------------------------------------------------------------------------

namespace {

// Indices of the k best of `scores[i]` for i in [0, n) (score descending, ties to the lower index), skipping -inf/NaN.
std::vector<std::int64_t> top_k_indices(std::int64_t n, std::int64_t k, const std::function<float(std::int64_t)>& score) {
  std::vector<std::int64_t> idx;
  idx.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const float s = score(i);
    if (s > -std::numeric_limits<float>::infinity()) idx.push_back(i);  // NaN fails the test too
  }
  auto better = [&](std::int64_t a, std::int64_t b) {
    const float sa = score(a), sb = score(b);
    return sa > sb || (sa == sb && a < b);
  };
  const auto keep = static_cast<std::size_t>(std::min<std::int64_t>(k, static_cast<std::int64_t>(idx.size())));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(), better);
  idx.resize(keep);
  return idx;
}

}  // namespace

DynamicTreeBuilder::DynamicTreeBuilder(const DynamicTreeParams& params, std::int32_t max_depth,
                                       std::span<const float> root_logprobs)
    : params_(params), max_depth_(max_depth), vocab_(static_cast<std::int64_t>(root_logprobs.size())) {
  if (params.top_k < 1) fail(fmt::format("DynamicTreeBuilder: params.top_k: expected >= 1, got {}", params.top_k));
  if (params.num_nodes < 1) fail(fmt::format("DynamicTreeBuilder: params.num_nodes: expected >= 1, got {}", params.num_nodes));
  if (params.depth < 0) fail(fmt::format("DynamicTreeBuilder: params.depth: expected >= 0, got {}", params.depth));
  if (max_depth < 1) fail(fmt::format("DynamicTreeBuilder: max_depth: expected >= 1, got {}", max_depth));
  if (vocab_ < 1) fail("DynamicTreeBuilder: root_logprobs: expected a non-empty row");
  params_.top_k = static_cast<std::int32_t>(std::min<std::int64_t>(params.top_k, vocab_));
  add_children(-1, root_logprobs, 0.f, 1);
  level_begin_ = 0;
  if (max_depth_ > 1) {
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(candidates_.size()); ++i) frontier_.push_back(i);
  }
}

void DynamicTreeBuilder::add_children(std::int64_t parent, std::span<const float> logprobs, float base, std::int32_t depth) {
  const auto best = top_k_indices(vocab_, params_.top_k, [&](std::int64_t t) { return logprobs[static_cast<std::size_t>(t)]; });
  for (const auto t : best)
    candidates_.push_back({t, parent, base + logprobs[static_cast<std::size_t>(t)], depth});
}

void DynamicTreeBuilder::expand(std::span<const float> logprobs) {
  const auto rows = static_cast<std::int64_t>(frontier_.size());
  if (rows == 0) fail("DynamicTreeBuilder::expand: the frontier is empty (the tree is complete)");
  if (static_cast<std::int64_t>(logprobs.size()) != rows * vocab_)
    fail(fmt::format("DynamicTreeBuilder::expand: logprobs: expected {} values ({} frontier rows x {}), got {}", rows * vocab_,
                     rows, vocab_, logprobs.size()));
  const auto begin = static_cast<std::int64_t>(candidates_.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const Candidate& parent = candidates_[static_cast<std::size_t>(frontier_[static_cast<std::size_t>(r)])];
    const float base = parent.score;
    const std::int32_t depth = parent.depth + 1;
    add_children(frontier_[static_cast<std::size_t>(r)], logprobs.subspan(static_cast<std::size_t>(r * vocab_), static_cast<std::size_t>(vocab_)),
                 base, depth);
  }
  level_begin_ = begin;
  frontier_.clear();
  const std::int32_t level_depth = begin < static_cast<std::int64_t>(candidates_.size()) ? candidates_[static_cast<std::size_t>(begin)].depth : max_depth_;
  if (level_depth < max_depth_) {
    const std::int64_t n = static_cast<std::int64_t>(candidates_.size()) - begin;
    for (const auto i : top_k_indices(n, params_.top_k, [&](std::int64_t i) { return candidates_[static_cast<std::size_t>(begin + i)].score; }))
      frontier_.push_back(begin + i);
    std::sort(frontier_.begin(), frontier_.end());
  }
}

std::vector<std::int64_t> DynamicTreeBuilder::select() const {
  const auto n = static_cast<std::int64_t>(candidates_.size());
  std::vector<std::int64_t> order = top_k_indices(n, n, [&](std::int64_t i) { return candidates_[static_cast<std::size_t>(i)].score; });
  std::vector<bool> kept(static_cast<std::size_t>(n), false);
  std::vector<std::int64_t> out;
  for (const auto i : order) {
    if (static_cast<std::int64_t>(out.size()) >= params_.num_nodes) break;
    const std::int64_t p = candidates_[static_cast<std::size_t>(i)].parent;
    if (p >= 0 && !kept[static_cast<std::size_t>(p)]) continue;  // keep the tree closed under ancestors
    kept[static_cast<std::size_t>(i)] = true;
    out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::int64_t> DynamicTreeBuilder::tree_parents(std::span<const std::int64_t> selected) const {
  std::unordered_map<std::int64_t, std::int64_t> node_of;  // candidate -> node index
  std::vector<std::int64_t> parents(selected.size());
  for (std::size_t j = 0; j < selected.size(); ++j) {
    const std::int64_t p = candidates_.at(static_cast<std::size_t>(selected[j])).parent;
    if (p < 0) {
      parents[j] = 0;
    } else {
      auto it = node_of.find(p);
      if (it == node_of.end())
        fail(fmt::format("DynamicTreeBuilder::tree_parents: candidate {} is selected without its parent {}", selected[j], p));
      parents[j] = it->second;
    }
    node_of[selected[j]] = static_cast<std::int64_t>(j) + 1;
  }
  return parents;
}

// --- the proposer --------------------------------------------------------------------------------------------------------

struct EagleProposer::Impl {
  struct Request {
    std::int64_t slot = -1;
    const SamplingParams* params = nullptr;
    std::vector<at::Tensor> pending_features;     // target feature rows not yet run through the head
    std::vector<std::int64_t> pending_tokens;     // the token following each pending row
    at::Tensor last_hidden;                       // [H] head output of the last committed row
    at::Tensor last_logits;                       // [Vd] its logits
  };

  EagleHead head;
  EagleProposerOptions opts;
  std::vector<std::int64_t> feature_layers;  // EAGLE-3, resolved
  std::unordered_map<RequestId, Request> requests;

  Impl(EagleHead h, const EagleProposerOptions& o) : head(std::move(h)), opts(o) {}

  Request& find(RequestId id, const char* who) {
    auto it = requests.find(id);
    if (it == requests.end()) fail(fmt::format("EagleProposer::{}: id: expected an active request, got {}", who, id));
    return it->second;
  }

  // [rows, feature_size] from the decoder's target features.
  at::Tensor features_of(const TargetFeatures& f, const char* who) const {
    const std::int64_t H = head.hidden_size();
    auto check = [&](const at::Tensor& t, const char* what, std::int64_t width) {
      if (!t.defined() || t.dim() != 2 || t.size(0) != f.rows || t.size(1) != width)
        fail(fmt::format("EagleProposer::{}: features.{}: expected [{}, {}], got {}", who, what, f.rows, width,
                         t.defined() ? shape_str(t.sizes()) : std::string("none")));
    };
    if (head.version() == EagleVersion::kEagle1) {
      const bool pre = head.config().feature == EagleFeature::kPreNorm;
      const at::Tensor& t = pre ? f.hidden_pre_norm : f.hidden_post_norm;
      check(t, pre ? "hidden_pre_norm" : "hidden_post_norm", H);
      return t;
    }
    const std::int64_t Ht = head.config().target_hidden_size;
    if (f.layer_hidden.size() != 3)
      fail(fmt::format("EagleProposer::{}: features.layer_hidden: expected 3 tensors (low, mid, high), got {}", who, f.layer_hidden.size()));
    for (const auto& t : f.layer_hidden) check(t, "layer_hidden[i]", Ht);
    return at::cat({f.layer_hidden[0], f.layer_hidden[1], f.layer_hidden[2]}, 1);
  }

  void add_pending(Request& r, const TargetFeatures& f, std::span<const std::int64_t> context, const char* who) {
    if (f.rows == 0) return;
    if (f.start < 0 || f.start + f.rows >= static_cast<std::int64_t>(context.size()))
      fail(fmt::format("EagleProposer::{}: features: rows [{}, {}) need the following tokens up to index {}, but the context has {}",
                       who, f.start, f.start + f.rows, f.start + f.rows, context.size()));
    at::Tensor t = features_of(f, who).to(at::kFloat);
    r.pending_features.push_back(t);
    for (std::int64_t i = 0; i < f.rows; ++i) r.pending_tokens.push_back(context[static_cast<std::size_t>(f.start + i + 1)]);
  }

  DraftBatch propose(std::span<const ProposeRequest> reqs);
};

EagleProposer::EagleProposer(EagleHead head, const EagleProposerOptions& options)
    : impl_(std::make_unique<Impl>(std::move(head), options)) {
  Impl& m = *impl_;
  if (m.head.version() == EagleVersion::kEagle3) {
    m.feature_layers = m.head.config().feature_layers;
    if (m.feature_layers.empty()) {
      if (options.target_num_layers < 1)
        fail("EagleProposer: options.target_num_layers: the EAGLE-3 head names no feature layers, expected the target's "
             "layer count (>= 1) to pick the defaults, got 0");
      m.feature_layers = eagle3_default_feature_layers(options.target_num_layers);
    }
    for (auto l : m.feature_layers)
      if (options.target_num_layers > 0 && l >= options.target_num_layers)
        fail(fmt::format("EagleProposer: feature layer {}: expected < target_num_layers = {}", l, options.target_num_layers));
  }
  if (!(options.min_draft_prob >= 0.0 && options.min_draft_prob <= 1.0))
    fail(fmt::format("EagleProposer: options.min_draft_prob: expected in [0, 1], got {}", options.min_draft_prob));
  if (options.tree.top_k < 1 || options.tree.num_nodes < 1 || options.tree.depth < 0)
    fail(fmt::format("EagleProposer: options.tree: expected top_k >= 1, num_nodes >= 1, depth >= 0, got {}, {}, {}",
                     options.tree.top_k, options.tree.num_nodes, options.tree.depth));
}
EagleProposer::EagleProposer(EagleProposer&&) noexcept = default;
EagleProposer& EagleProposer::operator=(EagleProposer&&) noexcept = default;
EagleProposer::~EagleProposer() = default;

TargetFeatureSpec EagleProposer::target_feature_spec() const {
  TargetFeatureSpec s;
  if (impl_->head.version() == EagleVersion::kEagle1) s.final_hidden = true;
  else s.layers = impl_->feature_layers;
  return s;
}
std::int64_t EagleProposer::vocab_size() const { return impl_->head.vocab_size(); }
EagleHead& EagleProposer::head() noexcept { return impl_->head; }
const EagleHead& EagleProposer::head() const noexcept { return impl_->head; }
const EagleProposerOptions& EagleProposer::options() const noexcept { return impl_->opts; }
void EagleProposer::set_mode(EagleDraftMode mode) noexcept { impl_->opts.mode = mode; }
std::int64_t EagleProposer::pending_rows(RequestId id) const {
  auto it = impl_->requests.find(id);
  if (it == impl_->requests.end()) fail(fmt::format("EagleProposer::pending_rows: id: expected an active request, got {}", id));
  return static_cast<std::int64_t>(it->second.pending_tokens.size());
}

void EagleProposer::begin_request(const RequestContext& ctx) {
  Impl& m = *impl_;
  if (m.requests.count(ctx.id)) fail(fmt::format("EagleProposer::begin_request: id: request {} is already active", ctx.id));
  if (!ctx.params) fail("EagleProposer::begin_request: params: expected the request's SamplingParams, got null");
  check(*ctx.params);
  if (ctx.context.empty()) fail("EagleProposer::begin_request: context: expected at least one token, got none");
  const auto n = static_cast<std::int64_t>(ctx.context.size());
  if (!ctx.features && n > 1)
    fail("EagleProposer::begin_request: features: expected the target features of context[0 .. n-1) (the proposer wants "
         "target features), got null");
  Impl::Request r;
  r.params = ctx.params;
  if (ctx.features) {
    if (ctx.features->rows != n - 1 || ctx.features->start != 0)
      fail(fmt::format("EagleProposer::begin_request: features: expected rows [0, {}) of the prompt, got [{}, {})", n - 1,
                       ctx.features->start, ctx.features->start + ctx.features->rows));
    m.add_pending(r, *ctx.features, ctx.context, "begin_request");
  }
  r.slot = m.head.allocate_sequence();
  m.requests.emplace(ctx.id, std::move(r));
}

void EagleProposer::end_request(RequestId id) {
  Impl& m = *impl_;
  Impl::Request& r = m.find(id, "end_request");
  m.head.free_sequence(r.slot);
  m.requests.erase(id);
}

void EagleProposer::observe(std::span<const StepFeedback> feedback) {
  Impl& m = *impl_;
  // Validate everything first so a bad entry leaves every request unchanged.
  for (const auto& f : feedback) {
    m.find(f.id, "observe");
    if (!f.features) fail(fmt::format("EagleProposer::observe: request {}: features: expected the rows of [root, accepted drafts], got null", f.id));
    if (f.features->rows != f.num_accepted + 1)
      fail(fmt::format("EagleProposer::observe: request {}: features.rows: expected num_accepted + 1 = {}, got {}", f.id,
                       f.num_accepted + 1, f.features->rows));
    if (f.features->start + f.features->rows != static_cast<std::int64_t>(f.context.size()) - 1)
      fail(fmt::format("EagleProposer::observe: request {}: features: expected rows ending at the emitted token (index {}), got [{}, {})",
                       f.id, f.context.size() - 1, f.features->start, f.features->start + f.features->rows));
    (void)m.features_of(*f.features, "observe");
  }
  for (const auto& f : feedback) m.add_pending(m.find(f.id, "observe"), *f.features, f.context, "observe");
}

DraftBatch EagleProposer::propose(std::span<const ProposeRequest> requests) { return impl_->propose(requests); }

DraftBatch EagleProposer::Impl::propose(std::span<const ProposeRequest> reqs) {
  at::NoGradGuard guard;
  const auto B = static_cast<std::int64_t>(reqs.size());
  std::vector<Request*> rs(static_cast<std::size_t>(B));
  for (std::int64_t i = 0; i < B; ++i) {
    const ProposeRequest& q = reqs[static_cast<std::size_t>(i)];
    rs[static_cast<std::size_t>(i)] = &find(q.id, "propose");
    if (q.max_drafts < 0) fail(fmt::format("EagleProposer::propose: requests[{}].max_drafts: expected >= 0, got {}", i, q.max_drafts));
    const SamplingParams* p = q.params ? q.params : rs[static_cast<std::size_t>(i)]->params;
    check(*p);
  }
  const std::int64_t V = head.vocab_size(), Vd = head.draft_vocab_size();
  const auto& d2t = head.draft_to_target();

  // 1. Run pending target-feature rows through the head (committed) for every request that drafts this step.
  {
    EagleHeadBatch batch;
    std::vector<at::Tensor> feats;
    std::vector<Request*> order;
    batch.cu_num_tokens.push_back(0);
    for (std::int64_t i = 0; i < B; ++i) {
      Request& r = *rs[static_cast<std::size_t>(i)];
      head.truncate(r.slot, head.committed_length(r.slot));
      if (reqs[static_cast<std::size_t>(i)].max_drafts == 0 || r.pending_tokens.empty()) continue;
      if (std::find(order.begin(), order.end(), &r) != order.end())
        fail(fmt::format("EagleProposer::propose: requests[{}].id: request {} appears twice", i, reqs[static_cast<std::size_t>(i)].id));
      batch.slots.push_back(r.slot);
      batch.token_ids.insert(batch.token_ids.end(), r.pending_tokens.begin(), r.pending_tokens.end());
      batch.cu_num_tokens.push_back(static_cast<std::int64_t>(batch.token_ids.size()));
      feats.insert(feats.end(), r.pending_features.begin(), r.pending_features.end());
      order.push_back(&r);
    }
    if (!order.empty()) {
      batch.features = at::cat(feats, 0);
      batch.commit = true;
      batch.last_logits_only = true;
      EagleHeadOutput out = head.forward(batch);
      for (std::size_t k = 0; k < order.size(); ++k) {
        Request& r = *order[k];
        r.last_hidden = out.hidden[batch.cu_num_tokens[k + 1] - 1].clone();
        r.last_logits = out.logits[static_cast<std::int64_t>(k)].clone();
        r.pending_features.clear();
        r.pending_tokens.clear();
      }
    }
  }

  // Requests that draft this step.
  std::vector<std::int64_t> active;
  for (std::int64_t i = 0; i < B; ++i)
    if (reqs[static_cast<std::size_t>(i)].max_drafts > 0 && rs[static_cast<std::size_t>(i)]->last_hidden.defined()) active.push_back(i);

  std::vector<std::vector<std::int64_t>> drafts(static_cast<std::size_t>(B));
  std::vector<std::vector<std::int64_t>> tree_parents(static_cast<std::size_t>(B));
  std::vector<std::vector<float>> probs_rows(static_cast<std::size_t>(B));  // chain sampling: [g * V] per request
  bool any_probs = false;

  if (opts.mode == EagleDraftMode::kChain) {
    // Current head state per active request.
    std::vector<at::Tensor> hidden(active.size()), logits(active.size());
    for (std::size_t a = 0; a < active.size(); ++a) {
      hidden[a] = rs[static_cast<std::size_t>(active[a])]->last_hidden;
      logits[a] = rs[static_cast<std::size_t>(active[a])]->last_logits;
    }
    std::vector<bool> sampled(active.size()), stopped(active.size(), false);
    for (std::size_t a = 0; a < active.size(); ++a) {
      const ProposeRequest& q = reqs[static_cast<std::size_t>(active[a])];
      const SamplingParams& p = q.params ? *q.params : *rs[static_cast<std::size_t>(active[a])]->params;
      sampled[a] = opts.chain_sampling == EagleChainSampling::kSample && !p.greedy();
      any_probs = any_probs || sampled[a];
    }
    std::int32_t max_g = 0;
    for (auto i : active) max_g = std::max(max_g, reqs[static_cast<std::size_t>(i)].max_drafts);
    std::vector<float> target_logits(static_cast<std::size_t>(V)), probs(static_cast<std::size_t>(V));
    for (std::int32_t s = 0; s < max_g; ++s) {
      EagleHeadBatch step;
      std::vector<at::Tensor> feats;
      std::vector<std::size_t> stepping;
      step.cu_num_tokens.push_back(0);
      for (std::size_t a = 0; a < active.size(); ++a) {
        const std::int64_t i = active[a];
        const ProposeRequest& q = reqs[static_cast<std::size_t>(i)];
        if (s >= q.max_drafts || stopped[a]) continue;
        const SamplingParams& p = q.params ? *q.params : *rs[static_cast<std::size_t>(i)]->params;
        at::Tensor lg = logits[a].contiguous();
        const float* lp = lg.data_ptr<float>();
        std::int64_t token = -1;
        double confidence = 1.0;  // the head's probability of this draft (min_draft_prob)
        if (!any_probs || !sampled[a]) {
          std::int64_t best = 0;
          for (std::int64_t d = 1; d < Vd; ++d)
            if (lp[d] > lp[best]) best = d;
          token = d2t[static_cast<std::size_t>(best)];
          if (opts.min_draft_prob > 0) {
            double z = 0.0;
            for (std::int64_t d = 0; d < Vd; ++d) z += std::exp(static_cast<double>(lp[d]) - static_cast<double>(lp[best]));
            confidence = 1.0 / z;
          }
        }
        if (any_probs) {
          // The draft distribution over the target vocabulary, processed with the request's params.
          std::fill(target_logits.begin(), target_logits.end(), -std::numeric_limits<float>::infinity());
          for (std::int64_t d = 0; d < Vd; ++d) target_logits[static_cast<std::size_t>(d2t[static_cast<std::size_t>(d)])] = lp[d];
          const Status st = logits_to_probs(target_logits, p, probs);
          if (st != Status::kSuccess)
            throw specdec::error(st, fmt::format("EagleProposer::propose: request {}: head logits: {}", q.id, to_string(st)));
          if (sampled[a]) {
            const float u = uniform(draft_key(p.seed), q.position + s, Purpose::kAccept, 0);
            double cum = 0.0;
            std::int64_t last_nonzero = -1;
            for (std::int64_t t = 0; t < V; ++t) {
              if (probs[static_cast<std::size_t>(t)] <= 0.f) continue;
              last_nonzero = t;
              cum += probs[static_cast<std::size_t>(t)];
              if (static_cast<double>(u) < cum) {
                token = t;
                break;
              }
            }
            if (token < 0) token = last_nonzero;
            // The distribution's largest probability, not the drawn token's: a stop that looked at the draft itself would
            // keep drafts distributed as q restricted to confident tokens while the verifier divides by q.
            confidence = *std::max_element(probs.begin(), probs.end());
          } else {
            // A deterministic row inside a sampled batch: the verifier treats greedy rows by argmax; give its one-hot.
            std::fill(probs.begin(), probs.end(), 0.f);
            probs[static_cast<std::size_t>(token)] = 1.f;
          }
        }
        if (confidence < opts.min_draft_prob) {  // this chain ends here, without this draft
          stopped[a] = true;
          continue;
        }
        if (any_probs)
          probs_rows[static_cast<std::size_t>(i)].insert(probs_rows[static_cast<std::size_t>(i)].end(), probs.begin(), probs.end());
        drafts[static_cast<std::size_t>(i)].push_back(token);
        if (s + 1 < q.max_drafts) {
          step.slots.push_back(rs[static_cast<std::size_t>(i)]->slot);
          step.token_ids.push_back(token);
          step.cu_num_tokens.push_back(static_cast<std::int64_t>(step.token_ids.size()));
          feats.push_back(hidden[a].view({1, -1}));
          stepping.push_back(a);
        }
      }
      if (stepping.empty()) continue;
      step.features = at::cat(feats, 0);
      step.features_are_head_hidden = true;
      EagleHeadOutput out = head.forward(step);
      for (std::size_t k = 0; k < stepping.size(); ++k) {
        hidden[stepping[k]] = out.hidden[static_cast<std::int64_t>(k)];
        logits[stepping[k]] = out.logits[static_cast<std::int64_t>(k)];
      }
    }
  } else {
    // EAGLE-2 dynamic trees, grown level by level for all requests at once.
    struct TreeState {
      std::int64_t req = 0;
      std::unique_ptr<DynamicTreeBuilder> builder;
      std::unordered_map<std::int64_t, std::int64_t> position;  // candidate -> head cache position
      std::unordered_map<std::int64_t, at::Tensor> hidden;     // candidate -> head output row
    };
    std::vector<TreeState> trees;
    for (const auto i : active) {
      const ProposeRequest& q = reqs[static_cast<std::size_t>(i)];
      const std::int32_t max_depth = opts.tree.depth > 0 ? std::min<std::int32_t>(q.max_drafts, opts.tree.depth + 1) : q.max_drafts;
      at::Tensor lp = at::log_softmax(rs[static_cast<std::size_t>(i)]->last_logits, -1).contiguous();
      TreeState t;
      t.req = i;
      t.builder = std::make_unique<DynamicTreeBuilder>(
          opts.tree, max_depth, std::span<const float>(lp.data_ptr<float>(), static_cast<std::size_t>(Vd)));
      trees.push_back(std::move(t));
    }
    for (;;) {
      EagleHeadBatch step;
      std::vector<at::Tensor> feats;
      std::vector<std::size_t> stepping;
      step.cu_num_tokens.push_back(0);
      for (std::size_t k = 0; k < trees.size(); ++k) {
        TreeState& t = trees[k];
        const auto& front = t.builder->frontier();
        if (front.empty()) continue;
        Request& r = *rs[static_cast<std::size_t>(t.req)];
        const std::int64_t L = head.sequence_length(r.slot);
        std::vector<std::int64_t> par;
        for (std::size_t f = 0; f < front.size(); ++f) {
          const auto& c = t.builder->candidates()[static_cast<std::size_t>(front[f])];
          step.token_ids.push_back(d2t[static_cast<std::size_t>(c.token)]);
          par.push_back(c.parent < 0 ? -1 : t.position.at(c.parent));
          feats.push_back((c.parent < 0 ? r.last_hidden : t.hidden.at(c.parent)).view({1, -1}));
          t.position[front[f]] = L + static_cast<std::int64_t>(f);
        }
        step.slots.push_back(r.slot);
        step.parents.push_back(std::move(par));
        step.cu_num_tokens.push_back(static_cast<std::int64_t>(step.token_ids.size()));
        stepping.push_back(k);
      }
      if (stepping.empty()) break;
      step.features = at::cat(feats, 0);
      step.features_are_head_hidden = true;
      EagleHeadOutput out = head.forward(step);
      at::Tensor lp = at::log_softmax(out.logits, -1).contiguous();
      for (std::size_t s = 0; s < stepping.size(); ++s) {
        TreeState& t = trees[stepping[s]];
        const std::int64_t begin = step.cu_num_tokens[s], n = step.cu_num_tokens[s + 1] - begin;
        const auto front = t.builder->frontier();  // copy: expand() replaces it
        for (std::int64_t f = 0; f < n; ++f) t.hidden[front[static_cast<std::size_t>(f)]] = out.hidden[begin + f];
        t.builder->expand(std::span<const float>(lp.data_ptr<float>() + begin * Vd, static_cast<std::size_t>(n * Vd)));
      }
    }
    for (auto& t : trees) {
      const auto selected = t.builder->select();
      for (const auto c : selected)
        drafts[static_cast<std::size_t>(t.req)].push_back(d2t[static_cast<std::size_t>(t.builder->candidates()[static_cast<std::size_t>(c)].token)]);
      tree_parents[static_cast<std::size_t>(t.req)] = t.builder->tree_parents(selected);
    }
  }

  // Drop every drafting row: the head keeps only rows built from real target features.
  for (std::int64_t i = 0; i < B; ++i) {
    Request& r = *rs[static_cast<std::size_t>(i)];
    head.truncate(r.slot, head.committed_length(r.slot));
  }

  DraftBatch out;
  out.cu_num_drafts.push_back(0);
  for (std::int64_t i = 0; i < B; ++i) {
    if (opts.mode == EagleDraftMode::kTree) out.append(drafts[static_cast<std::size_t>(i)], tree_parents[static_cast<std::size_t>(i)]);
    else out.append(drafts[static_cast<std::size_t>(i)]);
  }
  if (opts.mode == EagleDraftMode::kTree && out.parents.empty()) out.parents.assign(static_cast<std::size_t>(B), {});
  if (any_probs) {
    const std::int64_t N = out.cu_num_drafts.back();
    out.probs = at::empty({N, V}, kF32);
    float* dst = out.probs.data_ptr<float>();
    for (std::int64_t i = 0; i < B; ++i) {
      const auto& rows = probs_rows[static_cast<std::size_t>(i)];
      std::copy(rows.begin(), rows.end(), dst + out.cu_num_drafts[i] * V);
    }
  }
  return out;
}

}  // namespace specdec::proposers
