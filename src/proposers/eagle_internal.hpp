// Private to the EAGLE sources of specdec::proposers: the helpers the head, its checkpoint I/O and the proposer share, and
// the head's state (EagleHead::Impl). Not installed.
#pragma once

#include "specdec/models/detail/errors.hpp"
#include "specdec/proposers/eagle.hpp"
#include "specdec/proposers/process_logits.hpp"

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
#include "specdec/models/detail/llama_block.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/safetensors.hpp"
#include "specdec/models/detail/packed_matrix.hpp"
#include "specdec/models/float16.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

namespace sm = specdec::models;

namespace eagle_internal {
using models::detail::fail;

using models::detail::shape_str;

using models::FloatTensor;

// A stable 64-bit mix (splitmix64's finaliser).
inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of EAGLE's draft-sampling stream: derived from the request's seed, distinct from the verifier's key (the seed).
inline std::uint64_t draft_key(std::uint64_t seed) { return mix64(seed ^ 0x4541474C45445246ull /* "EAGLEDRF" */); }

inline std::vector<std::int64_t> to_int64_vector(const sm::SafetensorsFile& f, const sm::SafetensorsTensor& t, const std::string& name) {
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
}  // namespace eagle_internal

using eagle_internal::fail;
using models::FloatTensor;

struct EagleHead::Impl {
  // The checkpoint's tensors as loaded (float32; named_weights() and save() write them), and the products the forward
  // runs: fused q/k/v and gate/up as in LlamaModel, each Q8_0 on the packed integer kernels (EagleHeadOptions::
  // quantize_weights) or float32 on the streaming kernel.
  struct Layer {
    FloatTensor input_norm;   // [H] EAGLE-1 layers >= 1 and EAGLE-3 (embedding norm); undefined for EAGLE-1 layer 0
    FloatTensor hidden_norm;  // [H] EAGLE-3 only
    FloatTensor post_norm;    // [H]
    FloatTensor wq, wk, wv;   // [nh*hd, in], [nkv*hd, in] (in = H, or 2H for EAGLE-3)
    FloatTensor wo;           // [H, nh*hd]
    FloatTensor gate, up;     // [F, H]
    FloatTensor down;         // [H, F]
    sm::detail::BlockLinear qkv, out, gate_up, down_proj;
  };
  struct SlotState {
    std::int64_t committed = 0;
    std::vector<std::int64_t> parent;  // per uncommitted position (pos - committed): parent position or -1
    std::vector<std::int64_t> depth;   // per uncommitted position: 0 for a child of the prefix
  };

  EagleHeadConfig cfg;
  EagleHeadOptions opts;
  std::int64_t H = 0, nh = 0, nkv = 0, hd = 0, F = 0, V = 0, Vd = 0, Ht = 0, group = 0;
  std::int64_t q_dim = 0, kv_dim = 0, qkv_dim = 0;
  double eps = 1e-6;
  FloatTensor embed;     // [V, H]
  bool own_embed = false;
  FloatTensor fc_w, fc_b;  // [H, 2H] / [H, 3Ht]; bias [H] or undefined
  std::vector<Layer> layers;
  FloatTensor final_norm;  // EAGLE-3 [H]
  FloatTensor lm_head;     // EAGLE-1: the target's rows of the draft vocabulary [Vd, H]; EAGLE-3: its own [Vd, H]
  sm::detail::BlockLinear fc, lm_head_proj;
  std::vector<std::int64_t> d2t_ids;  // draft id -> target id
  std::vector<std::uint8_t> t2d;      // [V]: 1 where a draft id maps to the target id
  std::vector<float> inv_freq;
  std::vector<float> cos_table, sin_table;  // [rope_positions, hd / 2]
  std::int64_t rope_positions = 0;
  sm::KvCache cache;
  std::vector<SlotState> slots;
  // The target's pool (the process's pool of the same thread count) and the forward's buffers.
  std::shared_ptr<sm::detail::RowPool> pool;
  sm::detail::QuantizedRows activations;
  std::int64_t planes = 2;
  std::vector<float> scores;
  // The forward's workspace (ws_features: strided feature rows made contiguous).
  sm::detail::FloatRows ws_features, ws_in, ws_normed, ws_qkv, ws_attn, ws_gu, ws_act, ws_scored;

  std::int64_t feature_size() const { return cfg.version == EagleVersion::kEagle1 ? H : 3 * Ht; }
  SlotState& state(std::int64_t slot) {
    if (!cache.is_allocated(slot)) fail(fmt::format("EagleHead: slot: expected an allocated sequence slot, got {}", slot));
    if (slot >= static_cast<std::int64_t>(slots.size())) slots.resize(static_cast<std::size_t>(slot + 1));
    return slots[static_cast<std::size_t>(slot)];
  }
  // out (+)= x @ w^T over n rows; x contiguous, out's rows w.rows wide.
  void linear(const sm::detail::BlockLinear& w, const float* x, std::int64_t n, float* out, bool accumulate,
              const sm::detail::RowPrep& prep = {}) {
    sm::detail::block_linear(*pool, w, x, n, out, w.rows, accumulate, activations, planes, prep);
  }
  void ensure_rope(std::int64_t positions);
  void build_products();
  EagleHeadOutput forward(const EagleHeadBatch& b);
  void load_draft_vocabulary(const sm::WeightGetter& get);
};

}  // namespace specdec::proposers
