// The EAGLE-1 / EAGLE-3 head: configuration, weights and its forward (see eagle.hpp; checkpoint I/O in
// eagle_checkpoint.cpp, the EAGLE-2 tree in dynamic_tree.cpp, the proposer in eagle_proposer.cpp).
//
// The head runs on CPU in float32 with plain ATen ops: its one or two layers are tiny next to the target, so clarity wins
// over the hand-written loops of LlamaModel. Its KV cache (models::KvCache) holds, per slot, a committed prefix (rows built
// from real target features) followed by uncommitted rows (drafting); every uncommitted row records its parent position
// and depth, so the rows of a tree grown over several calls each attend to the prefix and to their own ancestors only.
#include "eagle_internal.hpp"

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
  c10::NoGradGuard guard;
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
    c10::NoGradGuard guard;
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
  c10::NoGradGuard guard;
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

}  // namespace specdec::proposers
