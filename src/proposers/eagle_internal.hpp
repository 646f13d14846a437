// Private to the EAGLE sources of specdec::proposers: the helpers the head, its checkpoint I/O and the proposer share, and
// the head's state (EagleHead::Impl). Not installed.
#pragma once

#include "specdec/models/detail/errors.hpp"
#include "specdec/proposers/eagle.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
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

namespace eagle_internal {
// y = x w^T (+ bias) for the head's float32 weights, through the models' streaming kernel: a draft step multiplies 1-6 rows
// by every matrix, where BLAS gemm (packing the weight on every call) reads it at a fraction of memory bandwidth. Output
// columns are split over the intra-op threads in whole 6-row tiles; each output's value depends neither on the number of
// rows nor on the split, so drafts are the same for a request alone or in a batch.
inline at::Tensor stream_linear(const at::Tensor& x0, const at::Tensor& w, const at::Tensor& bias = {}) {
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
inline at::Tensor packed_linear(const at::Tensor& x0, const sm::detail::PackedMatrix& w) {
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

using models::detail::fail;

using models::detail::shape_str;

inline const at::TensorOptions kF32 = at::TensorOptions().dtype(at::kFloat);
inline const at::TensorOptions kI64 = at::TensorOptions().dtype(at::kLong);

inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// x: [N, heads, hd]; cos/sin: [N, 1, hd/2]. Pairs (j, j + hd/2).
inline at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(2) / 2;
  at::Tensor a = x.narrow(2, 0, half), b = x.narrow(2, half, half);
  return at::cat({a * cos - b * sin, b * cos + a * sin}, 2);
}

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

}  // namespace specdec::proposers
