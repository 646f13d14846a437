// AtenLlamaModel: the Llama block as ATen ops on any device (see aten_llama.hpp).
//
// One forward: embedding rows -> per layer [RMSNorm -> one q/k/v product for all N new tokens -> RoPE at each token's
// position (cached length + depth in its tree) -> keys/values written into each slot's cache -> per sequence, grouped
// attention of its tokens over [cached prefix | its ancestors and itself] (an additive mask) -> output product +
// residual -> RMSNorm -> gate/up product -> SiLU(gate) * up -> down product + residual] -> final RMSNorm -> logits. The
// options of other architectures (LlamaConfig) as LlamaModel runs them: biases and QK-norm before RoPE, sliding layers
// with their own RoPE and a windowed mask, norms of the attention's and the MLP's outputs, GELU, embedding scale, logit
// soft-cap.
#include "specdec/models/detail/errors.hpp"
#include "specdec/torch/aten_llama.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>

#if defined(SPECDEC_TORCH_HAS_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "specdec/sampling/status.hpp"
#include "specdec/torch/device_copy.hpp"
#include "specdec/torch/float_tensor.hpp"
#include "specdec/torch/rows.hpp"

namespace specdec::models {

using detail::fail;
using detail::shape_str;

struct AtenLlamaModel::Impl {
  struct Layer {
    at::Tensor attn_norm, ffn_norm;  // [H] float32
    at::Tensor wqkv;                 // [q_dim + 2 kv_dim, H]
    at::Tensor wo;                   // [H, q_dim]
    at::Tensor wgu;                  // [2F, H]: gate rows then up rows
    at::Tensor wdown;                // [H, F]
    // LlamaConfig's options beyond Llama's block (undefined / false when off).
    at::Tensor qkv_bias;                      // [q_dim + 2 kv_dim] (attention_bias)
    at::Tensor q_norm, k_norm;                // [hd] float32: RMSNorm per head before RoPE (qk_norm)
    at::Tensor post_attn_norm, post_ffn_norm; // [H] float32: norms of the attention's and the MLP's outputs
    bool sliding = false;                     // sliding-window layer (its own RoPE base, keys of the last window positions)
  };
  struct Slot {
    bool used = false;
    std::int64_t length = 0, capacity = 0;
    std::vector<at::Tensor> k, v;  // per layer [capacity, nkv, hd]
  };

  LlamaConfig cfg;
  AtenLlamaOptions opts;
  std::int64_t H = 0, nh = 0, nkv = 0, hd = 0, F = 0, V = 0, q_dim = 0, kv_dim = 0, group = 0, max_len = 0;
  double eps = 1e-5;
  at::Tensor embed, lm_head, final_norm, inv_freq;  // inv_freq [hd / 2] float32
  at::Tensor inv_freq_swa;                          // the sliding layers' [hd / 2] (undefined without them)
  double scale = 1.0;                               // scores' scale: attention_scale, or 1 / sqrt(hd)
  std::vector<Layer> layers;
  std::vector<Slot> slots;

  at::TensorOptions wopts() const { return at::TensorOptions().dtype(opts.dtype).device(opts.device); }
  at::TensorOptions fopts() const { return at::TensorOptions().dtype(at::kFloat).device(opts.device); }

  Slot& slot(std::int64_t s, const char* who) {
    if (s < 0 || s >= static_cast<std::int64_t>(slots.size()) || !slots[static_cast<std::size_t>(s)].used)
      fail(fmt::format("{}: slot: expected an allocated sequence slot, got {}", who, s));
    return slots[static_cast<std::size_t>(s)];
  }

  // RMSNorm in float32, the result in the model's dtype (the Hugging Face order: normalise, then scale).
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) const {
    const at::Tensor xf = x.to(at::kFloat);
    return (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps) * w).to(opts.dtype);
  }

  // Rotates pairs (j, j + hd/2) of x [n, heads, hd] by the angles of cos/sin [n, 1, hd/2] (float32 math).
  at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
    const at::Tensor xf = x.to(at::kFloat);
    const std::int64_t half = hd / 2;
    const at::Tensor a = xf.narrow(2, 0, half), b = xf.narrow(2, half, half);
    return at::cat({a * cos - b * sin, b * cos + a * sin}, 2).to(opts.dtype);
  }

  void reserve(Slot& s, std::int64_t rows) {
    if (rows <= s.capacity) return;
    const std::int64_t grown = std::max<std::int64_t>({rows, 2 * s.capacity, 64});
    for (std::size_t l = 0; l < layers.size(); ++l) {
      for (auto* cache : {&s.k, &s.v}) {
        at::Tensor t = at::empty({grown, nkv, hd}, wopts());
        if (s.length > 0) t.narrow(0, 0, s.length).copy_((*cache)[l].narrow(0, 0, s.length));
        (*cache)[l] = t;
      }
    }
    s.capacity = grown;
  }

  ForwardOutput forward(const ForwardBatch& b);
};

AtenLlamaModel::AtenLlamaModel(const LlamaConfig& config, const WeightGetter& get, const AtenLlamaOptions& options)
    : impl_(std::make_unique<Impl>()) {
  c10::NoGradGuard guard;
  Impl& m = *impl_;
  m.cfg = config;
  m.opts = options;
  LlamaConfig& c = m.cfg;
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_dim == 0 && c.num_heads > 0 && c.hidden_size % c.num_heads == 0) c.head_dim = c.hidden_size / c.num_heads;
  c.validate();
  require_block_support(c, "AtenLlamaModel");
  if (c.head_dim % 2 != 0) fail(fmt::format("AtenLlamaModel: config.head_dim: expected an even number, got {}", c.head_dim));
  if (options.dtype != at::kFloat && options.dtype != at::kHalf && options.dtype != at::kBFloat16)
    fail(fmt::format("AtenLlamaModel: options.dtype: expected Float, Half or BFloat16, got {}", c10::toString(options.dtype)));
  if (options.context_length < 0)
    fail(fmt::format("AtenLlamaModel: options.context_length: expected >= 0 (0 = the config's), got {}",
                     options.context_length));
  m.H = c.hidden_size;
  m.nh = c.num_heads;
  m.nkv = c.num_kv_heads;
  m.hd = c.head_dim;
  m.F = c.intermediate_size;
  m.V = c.vocab_size;
  m.q_dim = m.nh * m.hd;
  m.kv_dim = m.nkv * m.hd;
  m.group = m.nh / m.nkv;
  m.eps = c.rms_norm_eps;
  m.max_len = options.context_length > 0 ? options.context_length : c.max_position_embeddings;
  const std::vector<float> inv = rope_inverse_frequencies(c, m.hd);
  m.inv_freq = at::tensor(inv).to(m.fopts());
  if (c.sliding_window > 0) m.inv_freq_swa = at::tensor(sliding_rope_inverse_frequencies(c, m.hd)).to(m.fopts());
  m.scale = c.attention_scale > 0.0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(m.hd));

  // `read`: the weight when already read (the LM head, read once to learn whether the checkpoint has one).
  auto fetch = [&](const std::string& name, std::vector<std::int64_t> shape, bool norm, const FloatTensor* read = nullptr) {
    at::Tensor t = torch::tensor_of(read != nullptr ? *read : get(name));
    if (!t.defined()) fail(fmt::format("AtenLlamaModel: weight {}: expected a tensor of shape {}, got none", name, shape_str(shape)));
    if (t.sizes().vec() != shape)
      fail(fmt::format("AtenLlamaModel: weight {}: expected shape {}, got {}", name, shape_str(shape), shape_str(t.sizes())));
    return t.to(norm ? m.fopts() : m.wopts()).contiguous();
  };
  m.embed = fetch("model.embed_tokens.weight", {m.V, m.H}, false);
  const FloatTensor head = c.tie_word_embeddings ? FloatTensor() : get("lm_head.weight");
  m.lm_head = head.defined() ? fetch("lm_head.weight", {m.V, m.H}, false, &head) : m.embed;
  m.final_norm = fetch("model.norm.weight", {m.H}, true);
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    Impl::Layer L;
    L.attn_norm = fetch(p + "input_layernorm.weight", {m.H}, true);
    L.ffn_norm = fetch(p + std::string(pre_ffn_norm_name(c)), {m.H}, true);
    L.wqkv = at::cat({fetch(p + "self_attn.q_proj.weight", {m.q_dim, m.H}, false),
                      fetch(p + "self_attn.k_proj.weight", {m.kv_dim, m.H}, false),
                      fetch(p + "self_attn.v_proj.weight", {m.kv_dim, m.H}, false)});
    L.wo = fetch(p + "self_attn.o_proj.weight", {m.H, m.q_dim}, false);
    L.wgu = at::cat({fetch(p + "mlp.gate_proj.weight", {m.F, m.H}, false), fetch(p + "mlp.up_proj.weight", {m.F, m.H}, false)});
    L.wdown = fetch(p + "mlp.down_proj.weight", {m.H, m.F}, false);
    if (c.attention_bias)
      L.qkv_bias = at::cat({fetch(p + "self_attn.q_proj.bias", {m.q_dim}, false), fetch(p + "self_attn.k_proj.bias", {m.kv_dim}, false),
                            fetch(p + "self_attn.v_proj.bias", {m.kv_dim}, false)});
    if (c.qk_norm) {
      L.q_norm = fetch(p + "self_attn.q_norm.weight", {m.hd}, true);
      L.k_norm = fetch(p + "self_attn.k_norm.weight", {m.hd}, true);
    }
    if (c.post_attention_norm) L.post_attn_norm = fetch(p + "post_attention_layernorm.weight", {m.H}, true);
    if (c.post_ffn_norm) L.post_ffn_norm = fetch(p + "post_feedforward_layernorm.weight", {m.H}, true);
    L.sliding = c.is_sliding_layer(i);
    m.layers.push_back(std::move(L));
  }
}

AtenLlamaModel::AtenLlamaModel(AtenLlamaModel&&) noexcept = default;
AtenLlamaModel& AtenLlamaModel::operator=(AtenLlamaModel&&) noexcept = default;
AtenLlamaModel::~AtenLlamaModel() = default;

const LlamaConfig& AtenLlamaModel::config() const noexcept { return impl_->cfg; }
const AtenLlamaOptions& AtenLlamaModel::options() const noexcept { return impl_->opts; }
std::int64_t AtenLlamaModel::vocab_size() const noexcept { return impl_->V; }
std::int64_t AtenLlamaModel::hidden_size() const noexcept { return impl_->H; }
std::int64_t AtenLlamaModel::max_sequence_length() const noexcept { return impl_->max_len; }

std::int64_t AtenLlamaModel::allocate_sequence() {
  auto& slots = impl_->slots;
  std::size_t s = 0;
  while (s < slots.size() && slots[s].used) ++s;
  if (s == slots.size()) slots.emplace_back();
  Impl::Slot& slot = slots[s];
  slot.used = true;
  slot.length = 0;
  slot.k.resize(impl_->layers.size());
  slot.v.resize(impl_->layers.size());
  return static_cast<std::int64_t>(s);
}

void AtenLlamaModel::free_sequence(std::int64_t slot) {
  Impl::Slot& s = impl_->slot(slot, "free_sequence");
  s = Impl::Slot{};
}

std::int64_t AtenLlamaModel::sequence_length(std::int64_t slot) const {
  return const_cast<Impl&>(*impl_).slot(slot, "sequence_length").length;
}

void AtenLlamaModel::truncate(std::int64_t slot, std::int64_t length) {
  Impl::Slot& s = impl_->slot(slot, "truncate");
  if (length < 0 || length > s.length)
    fail(fmt::format("truncate: length: expected a value in [0, {}], got {}", s.length, length));
  s.length = length;
}

void AtenLlamaModel::keep_path(std::int64_t slot, std::int64_t prefix_length, std::span<const std::int64_t> path) {
  Impl::Slot& s = impl_->slot(slot, "keep_path");
  const auto n = static_cast<std::int64_t>(path.size());
  if (prefix_length < 0 || prefix_length > s.length)
    fail(fmt::format("keep_path: prefix_length: expected a value in [0, {}], got {}", s.length, prefix_length));
  for (std::int64_t i = 0; i < n; ++i)
    if (path[i] < 0 || prefix_length + path[i] >= s.length || (i > 0 && path[i] <= path[i - 1]))
      fail(fmt::format("keep_path: path[{}]: expected strictly increasing node indices below {}, got {}", i,
                       s.length - prefix_length, path[i]));
  if (n > 0) {
    c10::NoGradGuard guard;
    const at::Tensor rows = torch::to_device_async(
        at::tensor(std::vector<std::int64_t>(path.begin(), path.end())).add_(prefix_length), impl_->opts.device);
    for (std::size_t l = 0; l < impl_->layers.size(); ++l)
      for (auto* cache : {&s.k, &s.v}) (*cache)[l].narrow(0, prefix_length, n).copy_((*cache)[l].index_select(0, rows));
  }
  s.length = prefix_length + n;
}

ForwardOutput AtenLlamaModel::forward(const ForwardBatch& batch) { return impl_->forward(batch); }

double AtenLlamaModel::timed_forward(const ForwardBatch& batch) {
#if defined(SPECDEC_TORCH_HAS_CUDA)
  if (impl_->opts.device.is_cuda()) {
    at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);  // timing events (the default disables timing)
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(impl_->opts.device.index());
    start.record(stream);
    (void)impl_->forward(batch);
    end.record(stream);
    end.synchronize();
    return static_cast<double>(start.elapsed_time(end)) * 1e-3;
  }
#endif
  const auto t0 = std::chrono::steady_clock::now();
  (void)impl_->forward(batch);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ForwardOutput AtenLlamaModel::Impl::forward(const ForwardBatch& b) {
  c10::NoGradGuard guard;
  const auto B = static_cast<std::int64_t>(b.slots.size());
  const std::int64_t N = detail::check_ragged_tokens("forward", "token", B, b.cu_num_tokens, b.token_ids, V);
  if (!b.parents.empty() && static_cast<std::int64_t>(b.parents.size()) != B)
    fail(fmt::format("forward: parents: expected empty or {} arrays (one per sequence), got {}", B, b.parents.size()));
  for (const auto l : b.hidden_layers)
    if (l < 0 || l >= static_cast<std::int64_t>(layers.size()))
      fail(fmt::format("forward: hidden_layers: expected layer indices in [0, {}), got {}", layers.size(), l));

  // Plan every sequence before touching a cache: positions (cached length + depth) and the attention mask. The ids,
  // positions and masks are written into one host buffer (page-locked when the model is on a device) and go up in one
  // asynchronous copy: the forward never synchronises the host.
  struct Plan {
    Slot* slot;
    std::int64_t start, n, cached;
    std::int64_t mask_offset;  // bytes into the staging buffer of the [n, cached + n] float32 mask
    at::Tensor mask;           // 0 where visible, -inf elsewhere (on the device)
    std::int64_t swa_mask_offset = 0;  // the same for the sliding layers (also -inf beyond the window); with a window only
    at::Tensor swa_mask;
  };
  const std::int64_t window = cfg.sliding_window;
  std::vector<Plan> plans;
  std::unordered_set<std::int64_t> seen;
  std::int64_t staged_bytes = 16 * N;  // ids then positions, int64 each
  for (std::int64_t i = 0; i < B; ++i) {
    Slot& s = slot(b.slots[static_cast<std::size_t>(i)], "forward");
    if (!seen.insert(b.slots[static_cast<std::size_t>(i)]).second)
      fail(fmt::format("forward: slots[{}]: expected distinct slots, got {} twice", i, b.slots[static_cast<std::size_t>(i)]));
    const std::int64_t start = b.cu_num_tokens[static_cast<std::size_t>(i)];
    const std::int64_t n = b.cu_num_tokens[static_cast<std::size_t>(i) + 1] - start, L = s.length;
    if (L + n > max_len)
      fail(fmt::format("forward: slots[{}]: {} cached + {} new tokens exceed the model's context length {}", i, L, n, max_len));
    const std::vector<std::int32_t>* parents =
        b.parents.empty() || b.parents[static_cast<std::size_t>(i)].empty() ? nullptr : &b.parents[static_cast<std::size_t>(i)];
    if (parents) {
      if (static_cast<std::int64_t>(parents->size()) != n)
        fail(fmt::format("forward: parents[{}]: expected {} entries (the sequence's new tokens), got {}", i, n, parents->size()));
      if ((*parents)[0] != -1) fail(fmt::format("forward: parents[{}][0]: expected -1 (the root), got {}", i, (*parents)[0]));
      for (std::int64_t j = 1; j < n; ++j) {
        const std::int32_t p = (*parents)[static_cast<std::size_t>(j)];
        if (p < 0 || p >= j)
          throw specdec::error(Status::kInvalidTree,
                               fmt::format("forward: parents[{}][{}]: expected a parent index in [0, {}), got {}", i, j, j, p));
      }
    }
    plans.push_back({&s, start, n, L, staged_bytes, {}, 0, {}});
    staged_bytes += (4 * n * (L + n) + 7) / 8 * 8;
    if (window > 0) {
      plans.back().swa_mask_offset = staged_bytes;
      staged_bytes += (4 * n * (L + n) + 7) / 8 * 8;
    }
  }
  at::Tensor host = at::empty({staged_bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(!opts.device.is_cpu()));
  std::uint8_t* h = host.data_ptr<std::uint8_t>();
  auto* ids_h = reinterpret_cast<std::int64_t*>(h);
  auto* positions_h = ids_h + N;
  std::copy(b.token_ids.begin(), b.token_ids.end(), ids_h);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const Plan& p = plans[i];
    const std::vector<std::int32_t>* parents = b.parents.empty() || b.parents[i].empty() ? nullptr : &b.parents[i];
    const std::int64_t L = p.cached, n = p.n, T = L + n;
    float* m = reinterpret_cast<float*>(h + p.mask_offset);
    std::fill(m, m + n * T, -std::numeric_limits<float>::infinity());
    std::vector<std::int64_t> depth(static_cast<std::size_t>(n), 0);
    for (std::int64_t j = 0; j < n; ++j) {
      std::fill(m + j * T, m + j * T + L, 0.f);
      const std::int64_t parent = j == 0 ? -1 : parents ? (*parents)[static_cast<std::size_t>(j)] : j - 1;
      if (j > 0) depth[static_cast<std::size_t>(j)] = depth[static_cast<std::size_t>(parent)] + 1;
      for (std::int64_t a = j; a >= 0; a = a == 0 ? -1 : parents ? (*parents)[static_cast<std::size_t>(a)] : a - 1)
        m[j * T + L + a] = 0.f;
      positions_h[p.start + j] = L + depth[static_cast<std::size_t>(j)];
    }
    if (window > 0) {
      // A sliding layer's query at position q sees the visible keys at positions q - window < k <= q: the context key c
      // is at position c, new key a at L + depth[a].
      float* w = reinterpret_cast<float*>(h + p.swa_mask_offset);
      std::copy(m, m + n * T, w);
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t q = L + depth[static_cast<std::size_t>(j)];
        for (std::int64_t c = 0; c < T; ++c) {
          const std::int64_t k = c < L ? c : L + depth[static_cast<std::size_t>(c - L)];
          if (q - k >= window) w[j * T + c] = -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
  const at::Tensor staged = torch::to_device_async(host, opts.device);
  for (auto& p : plans) {
    p.mask = staged.narrow(0, p.mask_offset, 4 * p.n * (p.cached + p.n)).view(at::kFloat).view({p.n, p.cached + p.n});
    if (window > 0)
      p.swa_mask =
          staged.narrow(0, p.swa_mask_offset, 4 * p.n * (p.cached + p.n)).view(at::kFloat).view({p.n, p.cached + p.n});
  }
  const at::Tensor ids = staged.narrow(0, 0, 8 * N).view(at::kLong);
  const at::Tensor angles =
      staged.narrow(0, 8 * N, 8 * N).view(at::kLong).to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // [N, hd/2]
  const at::Tensor cos = angles.cos().unsqueeze(1), sin = angles.sin().unsqueeze(1);                       // [N, 1, hd/2]
  at::Tensor cos_swa, sin_swa;  // the sliding layers'
  if (inv_freq_swa.defined()) {
    const at::Tensor a = staged.narrow(0, 8 * N, 8 * N).view(at::kLong).to(at::kFloat).unsqueeze(1) * inv_freq_swa.unsqueeze(0);
    cos_swa = a.cos().unsqueeze(1);
    sin_swa = a.sin().unsqueeze(1);
  }
  for (auto& p : plans) reserve(*p.slot, p.cached + p.n);

  at::Tensor x = embed.index_select(0, ids);  // [N, H]
  if (cfg.embedding_scale != 1.0) x = x * static_cast<float>(cfg.embedding_scale);  // Gemma: times sqrt(hidden), in float32
  ForwardOutput out;
  std::vector<at::Tensor> saved(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Layer& Ly = layers[l];
    at::Tensor qkv = at::matmul(rms_norm(x, Ly.attn_norm), Ly.wqkv.t());  // [N, q_dim + 2 kv_dim]
    if (Ly.qkv_bias.defined()) qkv = qkv + Ly.qkv_bias;
    at::Tensor q = qkv.narrow(1, 0, q_dim).reshape({N, nh, hd}), k = qkv.narrow(1, q_dim, kv_dim).reshape({N, nkv, hd});
    if (Ly.q_norm.defined()) {  // RMSNorm over each head, before RoPE
      q = rms_norm(q, Ly.q_norm);
      k = rms_norm(k, Ly.k_norm);
    }
    q = Ly.sliding ? rope(q, cos_swa, sin_swa) : rope(q, cos, sin);
    k = Ly.sliding ? rope(k, cos_swa, sin_swa) : rope(k, cos, sin);
    const at::Tensor v = qkv.narrow(1, q_dim + kv_dim, kv_dim).reshape({N, nkv, hd});
    std::vector<at::Tensor> attn;
    attn.reserve(plans.size());
    for (auto& p : plans) {
      Slot& s = *p.slot;
      const std::int64_t T = p.cached + p.n;
      s.k[l].narrow(0, p.cached, p.n).copy_(k.narrow(0, p.start, p.n));
      s.v[l].narrow(0, p.cached, p.n).copy_(v.narrow(0, p.start, p.n));
      // Query head h reads kv head h / group: queries as [nkv, group * n, hd] (rows ordered group member, token).
      const at::Tensor qs = q.narrow(0, p.start, p.n).view({p.n, nkv, group, hd}).permute({1, 2, 0, 3}).reshape({nkv, group * p.n, hd});
      const at::Tensor ks = s.k[l].narrow(0, 0, T).permute({1, 2, 0});  // [nkv, hd, T]
      const at::Tensor vs = s.v[l].narrow(0, 0, T).permute({1, 0, 2});  // [nkv, T, hd]
      at::Tensor scores = at::matmul(qs, ks).to(at::kFloat).mul_(scale).view({nkv, group, p.n, T}).add_(Ly.sliding ? p.swa_mask : p.mask);
      const at::Tensor probs = at::softmax(scores, -1).to(opts.dtype).view({nkv, group * p.n, T});
      const at::Tensor o = at::matmul(probs, vs);  // [nkv, group * n, hd]
      attn.push_back(o.view({nkv, group, p.n, hd}).permute({2, 0, 1, 3}).reshape({p.n, q_dim}));
    }
    at::Tensor attn_out = at::matmul(at::cat(attn), Ly.wo.t());
    if (Ly.post_attn_norm.defined()) attn_out = rms_norm(attn_out, Ly.post_attn_norm);
    x = x + attn_out;
    const at::Tensor gu = at::matmul(rms_norm(x, Ly.ffn_norm), Ly.wgu.t());  // [N, 2F]
    const at::Tensor gate = cfg.ffn_activation == FfnActivation::kGeluTanh ? at::gelu(gu.narrow(1, 0, F), "tanh")
                                                                           : at::silu(gu.narrow(1, 0, F));
    at::Tensor mlp_out = at::matmul(gate * gu.narrow(1, F, F), Ly.wdown.t());
    if (Ly.post_ffn_norm.defined()) mlp_out = rms_norm(mlp_out, Ly.post_ffn_norm);
    x = x + mlp_out;
    if (std::find(b.hidden_layers.begin(), b.hidden_layers.end(), static_cast<std::int64_t>(l)) != b.hidden_layers.end())
      saved[l] = x.to(at::kFloat);
  }
  for (auto& p : plans) p.slot->length = p.cached + p.n;

  for (const auto l : b.hidden_layers) out.layer_hidden.push_back(torch::rows_of(saved[static_cast<std::size_t>(l)]));
  at::Tensor normed = rms_norm(x, final_norm);
  if (b.return_final_hidden) {
    out.hidden_pre_norm = torch::rows_of(x.to(at::kFloat));
    out.hidden_post_norm = torch::rows_of(normed.to(at::kFloat));
  }
  if (b.last_logits_only) {
    std::vector<at::Tensor> last;
    for (const auto& p : plans) last.push_back(normed.narrow(0, p.start + p.n - 1, 1));
    normed = at::cat(last);
  }
  at::Tensor logits = at::matmul(normed, lm_head.t()).to(at::kFloat).contiguous();
  if (cfg.final_logit_softcap > 0.0) {
    const double cap = cfg.final_logit_softcap;
    logits = (logits / cap).tanh() * cap;
  }
  out.logits = torch::rows_of(logits);
  return out;
}

AtenLlamaModel load_aten_llama_safetensors(const std::filesystem::path& dir, const AtenLlamaOptions& options) {
  const FloatCheckpoint ck = read_float_safetensors(dir, "load_aten_llama_safetensors");
  c10::NoGradGuard guard;
  return AtenLlamaModel(ck.config, ck.get, options);
}

AtenLlamaModel load_aten_llama_gguf(const std::filesystem::path& path, const AtenLlamaOptions& options) {
  const FloatCheckpoint ck = read_float_gguf(path, "load_aten_llama_gguf");
  c10::NoGradGuard guard;
  return AtenLlamaModel(ck.config, ck.get, options);
}

}  // namespace specdec::models
