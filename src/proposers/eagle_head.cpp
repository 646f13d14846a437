// The EAGLE-1 / EAGLE-3 head: configuration, weights and its forward (see eagle.hpp; checkpoint I/O in
// eagle_checkpoint.cpp, the EAGLE-2 tree in dynamic_tree.cpp, the proposer in eagle_proposer.cpp).
//
// The head runs on the target's kernels and thread pool: its products are the Llama block's (detail::block_linear: Q8_0
// on the packed integer products, or float32 on the streaming kernel), its norms and rotary embedding the block's, and
// its attention detail::attention_rows, so a draft step costs what its bytes cost and not a few dozen ATen calls. Its KV
// cache (models::KvCache) holds, per slot, a committed prefix (rows built from real target features) followed by
// uncommitted rows (drafting); every uncommitted row records its parent position and depth, so the rows of a tree grown
// over several calls each attend to the prefix and to their own ancestors only (the attention's "new" keys are all the
// uncommitted positions, each row seeing its ancestors among them).
#include "eagle_internal.hpp"

#include <atomic>

namespace specdec::proposers {

using namespace eagle_internal;

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

FloatTensor fetch(const sm::WeightGetter& get, const std::string& name, std::vector<std::int64_t> shape) {
  FloatTensor t = get(name);
  if (!t.defined()) fail(fmt::format("EagleHead: weight '{}': expected a tensor of shape {}, got none", name, shape_str(shape)));
  if (t.shape() != shape)
    fail(fmt::format("EagleHead: weight '{}': expected shape {}, got {}", name, shape_str(shape), shape_str(t.shape())));
  return t;
}

}  // namespace

// The draft vocabulary (d2t [Vd] int64: draft id d is target id d + d2t[d]; optional t2d [V] bool, checked against d2t).
// Without d2t the draft vocabulary must be the whole target vocabulary (identity map).
void EagleHead::Impl::load_draft_vocabulary(const sm::WeightGetter& get) {
  Impl& m = *this;
  const FloatTensor d2t = get("d2t");  // integer offsets, exact in float32 (|offset| < 2^24)
  m.d2t_ids.resize(static_cast<std::size_t>(m.Vd));
  if (d2t.defined()) {
    if (d2t.shape() != std::vector<std::int64_t>{m.Vd})
      fail(fmt::format("EagleHead: weight 'd2t': expected shape {}, got {}", shape_str({m.Vd}), shape_str(d2t.shape())));
    const float* dp = d2t.data();
    for (std::int64_t i = 0; i < m.Vd; ++i) {
      if (dp[i] != std::nearbyint(dp[i]) || std::abs(dp[i]) >= 16777216.f)
        fail(fmt::format("EagleHead: weight 'd2t': expected integer offsets, got {} at {}", dp[i], i));
      m.d2t_ids[static_cast<std::size_t>(i)] = i + static_cast<std::int64_t>(dp[i]);
    }
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
  m.t2d.assign(static_cast<std::size_t>(m.V), 0);
  for (std::int64_t t = 0; t < m.V; ++t) m.t2d[static_cast<std::size_t>(t)] = seen[static_cast<std::size_t>(t)] ? 1 : 0;
  if (const FloatTensor t2d = get("t2d"); t2d.defined()) {
    if (t2d.shape() != std::vector<std::int64_t>{m.V})
      fail(fmt::format("EagleHead: weight 't2d': expected shape {}, got {}", shape_str({m.V}), shape_str(t2d.shape())));
    for (std::int64_t t = 0; t < m.V; ++t)
      if ((t2d.data()[t] != 0.f) != (m.t2d[static_cast<std::size_t>(t)] != 0))
        fail("EagleHead: weight 't2d': expected the mask of the target ids d2t maps to, got a different mask");
  }
}

EagleHead::EagleHead(const EagleHeadConfig& config, const sm::WeightGetter& get, const EagleTargetWeights& target,
                     const EagleHeadOptions& options)
    : impl_(std::make_unique<Impl>()) {
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
  m.inv_freq = sm::rope_inverse_frequencies(l, m.hd);
  const bool e3 = c.version == EagleVersion::kEagle3;

  // Embedding: the head's own when the checkpoint has one, else the target's.
  if (FloatTensor own = get("embed_tokens.weight"); own.defined()) {
    m.embed = fetch([&](const std::string&) { return own; }, "embed_tokens.weight", {m.V, m.H});
    m.own_embed = true;
  } else {
    if (!target.embed_tokens.defined())
      fail(fmt::format("EagleHead: weight 'embed_tokens.weight': expected a tensor of shape {} in the checkpoint or "
                       "EagleTargetWeights::embed_tokens, got none", shape_str({m.V, m.H})));
    if (target.embed_tokens.shape() != std::vector<std::int64_t>{m.V, m.H})
      fail(fmt::format("EagleHead: target.embed_tokens: expected shape {}, got {}", shape_str({m.V, m.H}),
                       shape_str(target.embed_tokens.shape())));
    m.embed = target.embed_tokens;
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
    if (target.lm_head.shape() != std::vector<std::int64_t>{m.V, m.H})
      fail(fmt::format("EagleHead: target.lm_head: expected shape {}, got {}", shape_str({m.V, m.H}),
                       shape_str(target.lm_head.shape())));
    m.load_draft_vocabulary(get);
    // A draft vocabulary keeps only its rows of the target's LM head: the draft step scores Vd tokens instead of V.
    if (m.Vd < m.V) {
      m.lm_head = FloatTensor({m.Vd, m.H});
      for (std::int64_t d = 0; d < m.Vd; ++d)
        std::copy_n(target.lm_head.data() + m.d2t_ids[static_cast<std::size_t>(d)] * m.H, m.H, m.lm_head.mutable_data() + d * m.H);
    } else {
      m.lm_head = target.lm_head;
    }
  }

  if (options.activation_bits != 8 && options.activation_bits != 16)
    fail(fmt::format("EagleHead: options.activation_bits: expected 8 or 16, got {}", options.activation_bits));
  m.planes = options.activation_bits == 8 ? 1 : 2;
  m.pool = sm::detail::shared_row_pool(options.num_threads > 0 ? options.num_threads : sm::available_cpus());
  m.q_dim = m.nh * m.hd;
  m.kv_dim = m.nkv * m.hd;
  m.qkv_dim = m.q_dim + 2 * m.kv_dim;
  m.build_products();

  sm::KvCacheShape shape;
  shape.num_layers = l.num_layers;
  shape.num_kv_heads = m.nkv;
  shape.head_dim = m.hd;
  shape.initial_capacity = std::max<std::int64_t>(options.initial_cache_capacity, 1);
  shape.initial_slots = std::max<std::int64_t>(options.initial_cache_slots, 1);
  m.cache = sm::KvCache(shape);
  m.ensure_rope(std::min<std::int64_t>(std::max<std::int64_t>(l.max_position_embeddings, 1), 4096));
}

// The forward's products from the checkpoint's tensors: q/k/v and gate/up fused as in LlamaModel, Q8_0 when asked.
void EagleHead::Impl::build_products() {
  std::map<std::string, FloatTensor> named;
  auto get = [&](const std::string& name) {
    sm::StoredWeight w;
    if (auto it = named.find(name); it != named.end()) w.dense = it->second;
    return w;
  };
  const sm::GgmlType q8 = opts.quantize_weights ? opts.quantized_type : sm::GgmlType::kF32;
  sm::detail::WeightArena arena;
  named["fc"] = fc_w;
  fc = sm::detail::fetch_linear(get, {{"fc", H}}, fc_w.size(1), q8, arena);
  for (Layer& L : layers) {
    named = {{"q", L.wq}, {"k", L.wk}, {"v", L.wv}, {"o", L.wo}, {"gate", L.gate}, {"up", L.up}, {"down", L.down}};
    L.qkv = sm::detail::fetch_linear(get, {{"q", q_dim}, {"k", kv_dim}, {"v", kv_dim}}, L.wq.size(1), q8, arena);
    L.out = sm::detail::fetch_linear(get, {{"o", H}}, q_dim, q8, arena);
    L.gate_up = sm::detail::fetch_linear(get, {{"gate", F}, {"up", F}}, H, q8, arena);
    L.down_proj = sm::detail::fetch_linear(get, {{"down", H}}, F, q8, arena);
  }
  named = {{"lm_head", lm_head}};
  lm_head_proj = sm::detail::fetch_linear(get, {{"lm_head", Vd}}, H, q8, arena);
}

void EagleHead::Impl::ensure_rope(std::int64_t positions) {
  if (positions <= rope_positions) return;
  std::int64_t n = std::max<std::int64_t>(rope_positions, 256);
  while (n < positions) n *= 2;
  const std::int64_t half = hd / 2;
  cos_table.resize(static_cast<std::size_t>(n * half));
  sin_table.resize(static_cast<std::size_t>(n * half));
  for (std::int64_t p = rope_positions; p < n; ++p)
    for (std::int64_t j = 0; j < half; ++j) {
      const double a = static_cast<double>(p) * static_cast<double>(inv_freq[static_cast<std::size_t>(j)]);
      cos_table[static_cast<std::size_t>(p * half + j)] = static_cast<float>(std::cos(a));
      sin_table[static_cast<std::size_t>(p * half + j)] = static_cast<float>(std::sin(a));
    }
  rope_positions = n;
}

EagleHead EagleHead::random(const EagleHeadConfig& config, std::uint64_t seed, const EagleTargetWeights& target,
                            const EagleHeadOptions& options) {
  const EagleHeadConfig c = normalise(config);
  const sm::LlamaConfig& l = c.layer;
  const bool e3 = c.version == EagleVersion::kEagle3;
  const std::int64_t H = l.hidden_size, F = l.intermediate_size, nh = l.num_heads, nkv = l.num_kv_heads, hd = l.head_dim;
  std::mt19937_64 gen(seed);
  auto randn = [&](std::vector<std::int64_t> shape, double mean, double std) {
    std::normal_distribution<double> normal(mean, std);
    FloatTensor t(std::move(shape));
    for (float* v = t.mutable_data(), *e = v + t.numel(); v != e; ++v) *v = static_cast<float>(normal(gen));
    return t;
  };
  auto s = [](std::int64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); };
  std::unordered_map<std::string, FloatTensor> w;
  {
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
      FloatTensor d2t({c.draft_vocab_size});
      float* dp = d2t.mutable_data();
      for (std::int64_t d = 0; d < c.draft_vocab_size; ++d)
        dp[d] = static_cast<float>(d * l.vocab_size / c.draft_vocab_size - d);
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
    return it == w.end() ? FloatTensor() : it->second;
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
  const auto B = static_cast<std::int64_t>(b.slots.size());
  const std::int64_t N =
      sm::detail::check_ragged_tokens("EagleHead::forward", "row", B, b.cu_num_tokens, b.token_ids, V);
  const std::int64_t fw = b.features_are_head_hidden ? H : feature_size();
  if (!b.features.defined() || b.features.rows() != N || b.features.cols() != fw)
    fail(fmt::format("EagleHead::forward: features: expected [{}, {}] ({}), got {}", N, fw,
                     b.features_are_head_hidden ? "head hidden states" : "target features",
                     b.features.defined() ? shape_str({b.features.rows(), b.features.cols()}) : std::string("none")));
  const float* fp = b.features.host_float32_data("EagleHead::forward: features");
  const std::int64_t ldf = b.features.row_stride();
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

  // Positions, depths and visibility per sequence. The attention's context ("cached" keys, seen by every row) is the
  // slot's committed prefix; its "new" keys are every uncommitted position, the rows of this call last, and a row sees
  // those of its ancestors and itself (ascending), as detail::attention_rows takes a tree's.
  struct Plan {
    std::int64_t slot, start, n, L, committed;
    bool blocks = false;                       // a chain continuing the committed prefix, longer than a block
    std::vector<std::int32_t> visible, count;  // [n, L + n - committed], [n] (unless blocks)
  };
  std::vector<Plan> plans(static_cast<std::size_t>(B));
  std::vector<std::int64_t> positions(static_cast<std::size_t>(N));
  std::int64_t max_total = 0, max_pos = 0;
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
      max_pos = std::max(max_pos, p.committed + d);
    }
    const std::int64_t U = p.L + p.n - p.committed;
    p.blocks = p.L == p.committed && b.parents.empty() && p.n > sm::detail::kMaxRowsForStreamingKernel;
    if (p.blocks) {  // a long chain after the committed prefix: attended in blocks with their own visibility
      st.parent.insert(st.parent.end(), par.begin(), par.end());
      st.depth.insert(st.depth.end(), new_depth.begin(), new_depth.end());
      continue;
    }
    p.visible.assign(static_cast<std::size_t>(p.n * U), 0);
    p.count.assign(static_cast<std::size_t>(p.n), 0);
    for (std::int64_t r = 0; r < p.n; ++r) {
      std::int32_t* row = p.visible.data() + r * U;
      std::int32_t& c = p.count[static_cast<std::size_t>(r)];
      for (std::int64_t a = p.L + r; a >= p.committed;)
        row[c++] = static_cast<std::int32_t>(a - p.committed),
        a = a >= p.L ? par[static_cast<std::size_t>(a - p.L)] : st.parent[static_cast<std::size_t>(a - p.committed)];
      std::reverse(row, row + c);
    }
    st.parent.insert(st.parent.end(), par.begin(), par.end());
    st.depth.insert(st.depth.end(), new_depth.begin(), new_depth.end());
  }
  cache.reserve(max_total);
  ensure_rope(max_pos + 1);

  // The fused input x [N, H]: EAGLE-1 fc([embed(token); feature]) + bias; EAGLE-3 fc(feature), or the head's own hidden
  // state as it is. EAGLE-3's attention reads [input_norm(embed); hidden_norm(x)] (a_in0 [N, 2H]).
  const float* ep = embed.data();
  const bool e3 = cfg.version == EagleVersion::kEagle3;
  const float epsf = static_cast<float>(eps);
  // The features as contiguous rows (the products read contiguous inputs).
  const float* feat = fp;
  if (ldf != fw) {
    ws_features.grow(N, fw);
    for (std::int64_t t = 0; t < N; ++t) std::copy_n(fp + t * ldf, fw, ws_features.row(t));
    feat = ws_features.data();
  }
  const Rows x_rows = Rows::host_float32_for_overwrite(N, H);  // the residual stream, returned as the rows' hidden states
  float* xp = x_rows.mutable_host_float32_data();
  ws_in.grow(N, 2 * H);
  float* a_in0 = ws_in.data();  // EAGLE-3: [norm(embed); norm(x)]; EAGLE-1: [embed; feature]
  if (e3) {
    if (b.features_are_head_hidden) std::copy_n(feat, N * H, xp);
    else linear(fc, feat, N, xp, false);
    float* ap = a_in0;
    const float* in_norm = layers[0].input_norm.data();
    const float* hid_norm = layers[0].hidden_norm.data();
    for (std::int64_t t = 0; t < N; ++t) {
      sm::detail::rms_norm(ep + b.token_ids[static_cast<std::size_t>(t)] * H, in_norm, ap + t * 2 * H, 1, H, epsf);
      sm::detail::rms_norm(xp + t * H, hid_norm, ap + t * 2 * H + H, 1, H, epsf);
    }
  } else {
    float* ip = a_in0;
    for (std::int64_t t = 0; t < N; ++t) {
      std::copy_n(ep + b.token_ids[static_cast<std::size_t>(t)] * H, H, ip + t * 2 * H);
      std::copy_n(feat + t * H, H, ip + t * 2 * H + H);
    }
    if (fc_b.defined())
      for (std::int64_t t = 0; t < N; ++t) std::copy_n(fc_b.data(), H, xp + t * H);
    linear(fc, ip, N, xp, fc_b.defined());
  }

  const std::int64_t half = hd / 2;
  const float q_scale = 1.f / std::sqrt(static_cast<float>(hd));
  ws_normed.grow(N, H);
  ws_qkv.grow(N, qkv_dim);
  ws_attn.grow(N, q_dim);
  ws_gu.grow(N, 2 * F);
  ws_act.grow(N, F);
  std::vector<float> qbuf(static_cast<std::size_t>(N * q_dim));
  float* np = ws_normed.data();
  float* qkvp = ws_qkv.data();
  float* qp = qbuf.data();
  float* attnp = ws_attn.data();

  // Attention tasks: (segment, kv head, up to 3 tokens). A segment is a plan's rows, or, for a chain that continues the
  // committed prefix with nothing uncommitted before it (a commit: a prompt, accepted tokens), blocks of 16 rows each
  // attending as if the rows before it were cached (their keys are, by then): every row's scores, softmax and values go
  // over the keys it sees in the same order either way, so its bits do not depend on the split, and no [n, L + n]
  // scores are made for a prompt.
  struct Segment {
    const Plan* plan;
    std::int64_t t0, n, cached, width;  // rows [t0, t0 + n) of the plan; width: its "new" keys (visible's row stride)
    const std::int32_t *visible, *count;
    std::vector<std::int32_t> own_visible, own_count;  // a block's chain
  };
  constexpr std::int64_t kBlock = sm::detail::kMaxRowsForStreamingKernel;
  std::vector<Segment> segments;
  segments.reserve(static_cast<std::size_t>(N));
  for (const Plan& p : plans) {
    if (!p.blocks) {
      segments.push_back({&p, 0, p.n, p.committed, p.L + p.n - p.committed, p.visible.data(), p.count.data(), {}, {}});
      continue;
    }
    for (std::int64_t t0 = 0; t0 < p.n; t0 += kBlock) {
      const std::int64_t nb = std::min(kBlock, p.n - t0);
      Segment sg{&p, t0, nb, p.L + t0, nb, nullptr, nullptr, {}, {}};
      sg.own_visible.assign(static_cast<std::size_t>(nb * nb), 0);
      sg.own_count.assign(static_cast<std::size_t>(nb), 0);
      for (std::int64_t i = 0; i < nb; ++i) {
        sg.own_count[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i + 1);
        for (std::int64_t a = 0; a <= i; ++a) sg.own_visible[static_cast<std::size_t>(i * nb + a)] = static_cast<std::int32_t>(a);
      }
      segments.push_back(std::move(sg));
    }
  }
  for (Segment& sg : segments)
    if (!sg.own_count.empty()) sg.visible = sg.own_visible.data(), sg.count = sg.own_count.data();
  struct Task {
    const Segment* seg;
    std::int64_t kh, i0, i1;  // kv head, tokens [i0, i1) of the segment
  };
  std::vector<Task> tasks;
  std::int64_t work = 0, max_scores = 0;
  for (const Segment& sg : segments) {
    const std::int64_t total = sg.cached + sg.width, ld = (total + 15) / 16 * 16;
    const std::int64_t piece = sg.n > kBlock ? kBlock : 3;
    for (std::int64_t kh = 0; kh < nkv; ++kh)
      for (std::int64_t i0 = 0; i0 < sg.n; i0 += piece) tasks.push_back({&sg, kh, i0, std::min(sg.n, i0 + piece)});
    work += nh * sg.n * total;
    max_scores = std::max(max_scores, std::min(piece, sg.n) * group * ld);
  }
  const std::int64_t workers = work >= 1024 && tasks.size() > 1 ? pool->size() : 1;
  if (static_cast<std::int64_t>(scores.size()) < workers * max_scores) scores.resize(static_cast<std::size_t>(workers * max_scores));

  const std::int64_t cap = cache.capacity(), slot_stride = nkv * cap * hd;
  for (std::size_t li = 0; li < layers.size(); ++li) {
    const Layer& Ly = layers[li];
    // q/k/v (EAGLE-3: of [norm(embed); norm(x)]; EAGLE-1: of x, normalised from the second layer on)
    if (e3) {
      linear(Ly.qkv, a_in0, N, qkvp, false);
    } else if (Ly.input_norm.defined()) {
      const float* w = Ly.input_norm.data();
      linear(Ly.qkv, np, N, qkvp, false,
             [&](std::int64_t r0, std::int64_t r1) { sm::detail::rms_norm(xp + r0 * H, w, np + r0 * H, r1 - r0, H, epsf); });
    } else {
      linear(Ly.qkv, xp, N, qkvp, false);
    }
    // Rotary embedding: queries (pre-scaled by 1/sqrt(hd)) into qbuf laid out per sequence as [nkv, n, group, hd]; keys
    // and values into the cache at positions L + r (their rotary positions are committed + depth).
    float* kp = cache.key_data(static_cast<std::int64_t>(li));
    float* vp = cache.value_data(static_cast<std::int64_t>(li));
    for (const Plan& p : plans)
      for (std::int64_t r = 0; r < p.n; ++r) {
        const std::int64_t t = p.start + r, pos = positions[static_cast<std::size_t>(t)];
        const float* row = qkvp + t * qkv_dim;
        const float* c = cos_table.data() + pos * half;
        const float* sn = sin_table.data() + pos * half;
        for (std::int64_t h = 0; h < nh; ++h)
          sm::detail::rope_rotate(row + h * hd, qp + p.start * q_dim + ((h / group * p.n + r) * group + h % group) * hd, c, sn,
                                  half, q_scale);
        for (std::int64_t kh = 0; kh < nkv; ++kh) {
          const std::int64_t off = p.slot * slot_stride + (kh * cap + p.L + r) * hd;
          sm::detail::rope_rotate(row + q_dim + kh * hd, kp + off, c, sn, half, 1.f);
          std::copy_n(row + q_dim + kv_dim + kh * hd, hd, vp + off);
        }
      }
    // Attention: tasks from a shared counter, each worker with its own share of the scores.
    std::atomic<std::int64_t> next{0};
    auto run_tasks = [&](std::int64_t w) {
      float* sc = scores.data() + w * max_scores;
      for (std::int64_t k = next.fetch_add(1); k < static_cast<std::int64_t>(tasks.size()); k = next.fetch_add(1)) {
        const Task& tk = tasks[static_cast<std::size_t>(k)];
        const Segment& sg = *tk.seg;
        const Plan& p = *sg.plan;
        const std::int64_t total = sg.cached + sg.width, ld = (total + 15) / 16 * 16;
        const std::int64_t kv = p.slot * slot_stride + tk.kh * cap * hd;
        // The task's tokens i0 .. i1 of the segment as the call's tokens 0 .. (their query rows, visibility and outputs).
        const float* q = qp + p.start * q_dim + ((tk.kh * p.n + sg.t0 + tk.i0) * group) * hd;
        sm::detail::attention_rows(q, 0, (tk.i1 - tk.i0) * group, sg.width, group, hd, kp + kv, vp + kv, total, sg.cached,
                                   sg.visible + tk.i0 * sg.width, sg.count + tk.i0, sc, ld,
                                   attnp + (p.start + sg.t0 + tk.i0) * q_dim + tk.kh * group * hd, q_dim, hd);
      }
    };
    if (workers > 1) pool->run(workers, run_tasks);
    else run_tasks(0);
    linear(Ly.out, attnp, N, xp, true);
    const float* post = Ly.post_norm.data();
    linear(Ly.gate_up, np, N, ws_gu.data(), false,
           [&](std::int64_t r0, std::int64_t r1) { sm::detail::rms_norm(xp + r0 * H, post, np + r0 * H, r1 - r0, H, epsf); });
    const float* gup = ws_gu.data();
    float* actp = ws_act.data();
    linear(Ly.down_proj, actp, N, xp, true,
           [&](std::int64_t r0, std::int64_t r1) { sm::detail::silu_mul(gup + r0 * 2 * F, actp + r0 * F, r1 - r0, F); });
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
  result.hidden = x_rows;
  const float* rp = xp;
  std::int64_t R = N;
  if (b.last_logits_only) {
    R = B;
    ws_normed.grow(B, H);  // the last row of each sequence (the layers are done with the normed rows)
    for (std::int64_t i = 0; i < B; ++i) std::copy_n(xp + (b.cu_num_tokens[i + 1] - 1) * H, H, ws_normed.row(i));
    rp = ws_normed.data();
  }
  result.logits = Rows::host_float32_for_overwrite(R, Vd);
  float* lp = result.logits.mutable_host_float32_data();
  if (e3) {  // the final norm inside the product (a row step before the rows are quantised)
    ws_scored.grow(R, H);
    float* sp = ws_scored.data();
    const float* fn = final_norm.data();
    linear(lm_head_proj, sp, R, lp, false,
           [&](std::int64_t r0, std::int64_t r1) { sm::detail::rms_norm(rp + r0 * H, fn, sp + r0 * H, r1 - r0, H, epsf); });
  } else {
    linear(lm_head_proj, rp, R, lp, false);
  }
  return result;
}

}  // namespace specdec::proposers
