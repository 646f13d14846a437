// The Llama-family block's shared pieces (detail/llama_block.hpp): a product's weights and the product over the model's
// pool, RMSNorm, the rotary embedding, the weight loaders and the process's pools. Moved out of the Llama forward so that
// the drafts (the EAGLE head) run on the same code as the target.
#include "specdec/models/detail/llama_block.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/models/detail/errors.hpp"
#include "specdec/models/output_ids.hpp"

namespace specdec::models::detail {

std::shared_ptr<RowPool> shared_row_pool(int threads) {
  static std::mutex mutex;
  static std::map<int, std::weak_ptr<RowPool>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<RowPool> p = pools[threads].lock();
  if (!p) {
    p = std::make_shared<RowPool>(threads);
    pools[threads] = p;
  }
  return p;
}

namespace {

// out[n, rows] (+)= x[n, in] @ w[rows, in]^T for float32 weights; x and w contiguous, out rows ldo apart. Up to
// kMaxRowsForStreamingKernel token rows at a time (a longer prompt in chunks of that many, so each row's sums are the
// ones it gets in any batch). The pool shares the output rows for every token count: a single token row is
// memory-bound, and two cores read more than one (the autoregressive baseline gets the same bandwidth as the verify
// forward, so speedups are not measured against a handicapped baseline).
void linear_dense(RowPool& pool, const float* x, std::int64_t n, std::int64_t in, const float* w, std::int64_t rows,
                  float* out, std::int64_t ldo, bool accumulate) {
  // About 8 chunks per thread, whole 12-row blocks (tiles of 2, 3, 4 and 6 rows), at least 48 rows.
  const std::int64_t target = (rows + 8 * pool.size() - 1) / (8 * pool.size());
  const std::int64_t chunk = std::max<std::int64_t>(48, (target + 11) / 12 * 12);
  for (std::int64_t t0 = 0; t0 < n; t0 += kMaxRowsForStreamingKernel) {
    const std::int64_t nt = std::min(kMaxRowsForStreamingKernel, n - t0);
    const float* xp = x + t0 * in;
    float* yp = out + t0 * ldo;
    if (pool.size() == 1) {
      linear_rows(xp, nt, in, w, 0, rows, yp, ldo, accumulate);
      continue;
    }
    pool.run((rows + chunk - 1) / chunk, [&](std::int64_t c) {
      linear_rows(xp, nt, in, w, c * chunk, std::min(rows, (c + 1) * chunk), yp, ldo, accumulate);
    });
  }
}

}  // namespace

std::int64_t BlockLinear::bytes() const {
  std::int64_t n = 0;
  for (const auto& p : parts) n += p.dense.defined() ? p.dense.numel() * 4 : p.packed.bytes();
  return n;
}

bool BlockLinear::any_packed() const {
  for (const auto& p : parts)
    if (!p.dense.defined()) return true;
  return false;
}

void BlockLinear::row(std::int64_t r, float* out) const {
  for (const auto& p : parts) {
    if (r < p.offset || r >= p.offset + p.rows) continue;
    if (p.dense.defined())
      std::copy_n(p.dense.data() + (r - p.offset) * cols, cols, out);
    else
      p.packed.dequantize_row(r - p.offset, out);
    return;
  }
}

// The row step runs inside the first packed part's quantisation, so a verification's few rows share it over the pool
// instead of leaving the workers waiting.
void block_linear(RowPool& pool, const BlockLinear& w, const float* x, std::int64_t n, float* out, std::int64_t ldo,
                  bool accumulate, QuantizedRows& q, std::int64_t planes, const RowPrep& prep) {
  // Row-wise steps over the pool's threads (one row a chunk for a few rows, 16 for a prompt); each row is computed
  // alone, so the split changes no byte.
  auto for_rows = [&](const RowPrep& fn) {
    const std::int64_t per = n >= 32 ? 16 : 1;
    if (n >= 2 && pool.size() > 1)
      pool.run((n + per - 1) / per, [&](std::int64_t c) { fn(c * per, std::min(n, (c + 1) * per)); });
    else
      fn(0, n);
  };
  bool prepared = !prep;
  for (const auto& p : w.parts) {
    if (p.dense.defined()) {
      if (!prepared) for_rows(prep);
      prepared = true;
      linear_dense(pool, x, n, w.cols, p.dense.data(), p.rows, out + p.offset, ldo, accumulate);
      continue;
    }
    static const RowPrep kNone;
    const RowPrep& rows_prep = prepared ? kNone : prep;  // the first part's quantisation runs the step
    prepared = true;
    pooled_packed_linear(pool, p.packed, x, n, planes, q, out + p.offset, ldo, accumulate, rows_prep);
  }
}

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w
// The sum of squares goes in 16 lanes (lane j: the squares of elements j, j + 16, ... in order; then the lanes in a fixed
// tree) instead of one serial chain of dim dependent additions (0.46 us a row of 576 on its own, most of a 6-token
// product's prologue). One compiled version (this file's baseline flags, no
// contracted multiply-adds), so the bits do not depend on the machine.
void rms_norm(const float* x, const float* w, float* y, std::int64_t rows, std::int64_t dim, float eps) {
  using v16 = float __attribute__((vector_size(64)));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    v16 acc{};
    std::int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
      v16 v;
      std::memcpy(&v, xr + i, sizeof v);
      const v16 sq = v * v;
      acc = acc + sq;
    }
    float lanes[16];
    std::memcpy(lanes, &acc, sizeof lanes);
    for (int width = 8; width >= 1; width /= 2)
      for (int j = 0; j < width; ++j) lanes[j] = lanes[j] + lanes[j + width];
    float ss = lanes[0];
    for (; i < dim; ++i) ss += xr[i] * xr[i];
    const float scale = 1.f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (i = 0; i < dim; ++i) yr[i] = (xr[i] * scale) * w[i];
  }
}


void rope_rotate(const float* in, float* out, const float* cos, const float* sin, std::int64_t half, float scale) {
  for (std::int64_t j = 0; j < half; ++j) {
    const float a = in[j], b = in[j + half];
    out[j] = (a * cos[j] - b * sin[j]) * scale;
    out[j + half] = (b * cos[j] + a * sin[j]) * scale;
  }
}

namespace {

std::string described(const std::string& name, const StoredWeight& w) {
  return w.file_name.empty() || w.file_name == name ? name : fmt::format("{} (tensor {} in the file)", name, w.file_name);
}

// Reads a weight, checking presence and shape.
StoredWeight fetch_stored(const StoredWeightGetter& get, const std::string& name, const std::vector<std::int64_t>& shape) {
  StoredWeight w = get(name);
  if (!w.present()) fail(fmt::format("LlamaModel: weight {}: expected a tensor of shape {}, got none", name, shape_str(shape)));
  const std::vector<std::int64_t> got = w.dense.defined() ? w.dense.shape() : w.shape;
  if (got != shape)
    fail(fmt::format("LlamaModel: weight {}: expected shape {}, got {}", described(name, w), shape_str(shape), shape_str(got)));
  return w;
}

// A float32 copy of a stored weight (dense, or dequantised from its file type), q/k rows un-permuted when asked.
FloatTensor to_dense(const std::string& name, StoredWeight& w) {
  FloatTensor t;
  if (w.dense.defined()) {
    t = w.dense;
  } else {
    if (!can_dequantize(w.type))
      fail(fmt::format("LlamaModel: weight {}: type {} is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, "
                       "Q6_K)",
                       described(name, w), to_string(w.type)));
    t = FloatTensor(w.shape);
    dequantize(w.type, w.data, std::span<float>(t.mutable_data(), static_cast<std::size_t>(t.numel())));
    if (w.unpermute_heads > 0) t = unpermute_gguf_qk(t, w.unpermute_heads);
  }
  if (w.release) w.release();
  return t;
}

// Matrices [rows_i, cols] stacked by rows into one.
FloatTensor stack_rows(const std::vector<FloatTensor>& parts) {
  if (parts.size() == 1) return parts[0];
  std::int64_t rows = 0;
  for (const auto& p : parts) rows += p.size(0);
  FloatTensor out({rows, parts[0].size(1)});
  float* dst = out.mutable_data();
  for (const auto& p : parts) dst = std::copy_n(p.data(), p.numel(), dst);
  return out;
}

}  // namespace

FloatTensor fetch_vector(const StoredWeightGetter& get, const std::string& name, std::int64_t n) {
  StoredWeight w = fetch_stored(get, name, {n});
  return to_dense(name, w);
}

StoredWeight gather_rows(const StoredWeightGetter& get, const std::string& name, std::int64_t rows, std::int64_t cols,
                         std::span<const std::int64_t> ids, std::vector<std::byte>& storage) {
  if (const std::int64_t j = first_invalid_output_id(ids, rows); j >= 0) {
    const std::int64_t r = ids[static_cast<std::size_t>(j)];
    if (r < 0 || r >= rows)
      fail(fmt::format("LlamaModel: options.output_ids[{}]: expected a token id in [0, {}), got {}", j, rows, r));
    fail(fmt::format("LlamaModel: options.output_ids[{}]: token {} appears twice; expected distinct ids", j, r));
  }
  StoredWeight w = fetch_stored(get, name, {rows, cols});
  const auto n = static_cast<std::int64_t>(ids.size());
  StoredWeight out;
  out.file_name = w.file_name;
  if (w.dense.defined() || w.unpermute_heads > 0) {
    const FloatTensor t = to_dense(name, w);
    FloatTensor g({n, cols});
    for (std::int64_t j = 0; j < n; ++j) std::copy_n(t.data() + ids[static_cast<std::size_t>(j)] * cols, cols, g.mutable_data() + j * cols);
    out.dense = std::move(g);
  } else {
    // Whole rows of blocks, copied as stored (a row's blocks never straddle rows).
    const auto traits = ggml_type_traits(static_cast<std::uint32_t>(w.type));
    if (!traits || cols % traits->block_elements != 0)
      fail(fmt::format("LlamaModel: weight {}: type {} with {} columns cannot be split into rows", described(name, w),
                       to_string(w.type), cols));
    const std::int64_t row_bytes = cols / traits->block_elements * traits->block_bytes;
    if (static_cast<std::int64_t>(w.data.size()) != rows * row_bytes)
      fail(fmt::format("LlamaModel: weight {}: expected {} bytes, got {}", described(name, w), rows * row_bytes, w.data.size()));
    storage.resize(static_cast<std::size_t>(n * row_bytes));
    for (std::int64_t j = 0; j < n; ++j)
      std::copy_n(w.data.data() + ids[static_cast<std::size_t>(j)] * row_bytes, row_bytes,
                  storage.data() + j * row_bytes);
    out.type = w.type;
    out.data = storage;
    out.shape = {n, cols};
  }
  return out;
}

BlockLinear fetch_linear(const StoredWeightGetter& get, const std::vector<std::pair<std::string, std::int64_t>>& names,
                         std::int64_t cols, GgmlType quantize_float, WeightArena& arena) {
  if (quantize_float != GgmlType::kF32 && quantize_float != GgmlType::kQ8_0 && quantize_float != GgmlType::kQ4_0)
    fail(fmt::format("quantised float weights (LlamaOptions::quantized_float_type, EagleHeadOptions::quantized_type): "
                     "expected Q8_0 or Q4_0, got {}", to_string(quantize_float)));
  BlockLinear lin;
  lin.cols = cols;
  std::vector<StoredWeight> pending;  // raw block-format sources of the current packed run
  std::vector<std::string> pending_names;
  std::vector<std::vector<std::byte>> quantized;  // blocks made here, alive until packed
  std::vector<FloatTensor> dense_run;
  auto flush = [&] {
    if (!pending.empty()) {
      std::vector<PackedMatrix::Source> src;
      std::int64_t rows = 0;
      for (std::size_t i = 0; i < pending.size(); ++i) {
        const StoredWeight& w = pending[i];
        PackedMatrix::Source s{described(pending_names[i], w), w.type, w.data, w.shape[0], w.shape[1], {}};
        if (w.unpermute_heads > 0) {
          // HF row (h, s, j) = GGUF row h * hd + 2 j + s (see unpermute_gguf_qk).
          const std::int64_t hd = s.rows / w.unpermute_heads, half = hd / 2;
          if (s.rows % (2 * w.unpermute_heads) != 0)
            fail(fmt::format("LlamaModel: weight {}: expected rows divisible by 2 * {} heads, got {}", s.name,
                             w.unpermute_heads, s.rows));
          s.row_order.resize(static_cast<std::size_t>(s.rows));
          for (std::int64_t r = 0; r < s.rows; ++r)
            s.row_order[static_cast<std::size_t>(r)] = (r / hd) * hd + 2 * (r % half) + (r % hd) / half;
        }
        rows += s.rows;
        src.push_back(std::move(s));
      }
      BlockLinear::Part part;
      try {
        part.packed = PackedMatrix::pack(src, &arena);
      } catch (const specdec::error& e) {
        fail(fmt::format("LlamaModel: {}", e.what()));
      }
      part.offset = lin.rows;
      part.rows = rows;
      lin.rows += rows;
      lin.parts.push_back(std::move(part));
      for (auto& w : pending)
        if (w.release) w.release();
      pending.clear();
      pending_names.clear();
      quantized.clear();
    }
    if (!dense_run.empty()) {
      BlockLinear::Part part;
      part.dense = stack_rows(dense_run);
      part.offset = lin.rows;
      part.rows = part.dense.size(0);
      lin.rows += part.rows;
      lin.parts.push_back(std::move(part));
      dense_run.clear();
    }
  };
  for (const auto& [name, rows] : names) {
    StoredWeight w = fetch_stored(get, name, {rows, cols});
    const bool packable = !w.dense.defined() && can_pack(w.type);
    if (!packable && quantize_float != GgmlType::kF32 && cols % 32 == 0) {
      StoredWeight q;
      q.file_name = w.file_name.empty() ? name : w.file_name;
      const FloatTensor t = to_dense(name, w);  // float32, rows un-permuted
      const bool q4 = quantize_float == GgmlType::kQ4_0;
      quantized.push_back(q4 ? quantize_q4_0(t.data(), t.numel()) : quantize_q8_0(t.data(), t.numel()));
      q.type = quantize_float;
      q.data = quantized.back();
      q.shape = {rows, cols};
      w = std::move(q);
    }
    if (!w.dense.defined() && can_pack(w.type)) {
      if (!dense_run.empty() || (!pending.empty() && pending.front().type != w.type)) flush();
      pending.push_back(std::move(w));
      pending_names.push_back(name);
    } else {
      if (!pending.empty()) flush();
      dense_run.push_back(to_dense(name, w));
    }
  }
  flush();
  return lin;
}

}  // namespace specdec::models::detail
