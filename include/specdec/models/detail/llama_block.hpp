// Internal: the pieces of the Llama-family block that every CPU forward shares (src/models/llama_block.cpp): the target
// (LlamaModel, src/models/llama.cpp) and the drafts that run beside it on the same kernels and thread pool (distilled draft
// models are LlamaModels; the EAGLE head, src/proposers/eagle_head.cpp, runs its fc, layers and LM head through these).
// A product's weights (runs of a block format packed for the integer products, or float32), the product over a pool,
// RMSNorm, the rotary embedding, and the process's pools. Not a stable API.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/models/detail/packed_matrix.hpp"
#include "specdec/models/detail/pooled_linear.hpp"
#include "specdec/models/detail/row_pool.hpp"
#include "specdec/models/detail/weight_arena.hpp"
#include "specdec/models/llama.hpp"

namespace specdec::models::detail {

/// Token rows a float32 product streams the weights once for (linear_rows); more rows go in chunks of this many, so a
/// row gets the same bits in any batch. Also the most new tokens the few-token attention kernel takes in one call.
inline constexpr std::int64_t kMaxRowsForStreamingKernel = 16;

/// The process's pool of `threads` threads (made on first use, kept while something holds it): models of the same thread
/// count share it (a target and its drafts take turns, so neither finds the other's workers spinning on its cores).
std::shared_ptr<RowPool> shared_row_pool(int threads);

/// A product's weights: one or more parts stacked by output rows, each packed (a GGUF block format) or float32.
struct BlockLinear {
  struct Part {
    PackedMatrix packed;
    FloatTensor dense;  // [rows, cols] float32 when not packed
    std::int64_t offset = 0, rows = 0;
  };
  std::vector<Part> parts;
  std::int64_t rows = 0, cols = 0;

  /// Bytes a product over every row reads.
  std::int64_t bytes() const;
  bool any_packed() const;
  /// Row r as float32 (the embedding lookup).
  void row(std::int64_t r, float* out) const;
};

/// out (+)= x @ w^T over every part of w; x [n, w.cols] contiguous float32, out n rows of >= w.rows values, row r at
/// out + r * ldo. Packed parts quantise x's rows into `q` in `planes` planes (1 or 2) and run on the pool
/// (pooled_packed_linear); float parts go through linear_rows on the pool, kMaxRowsForStreamingKernel rows at a time.
/// `prep`, when given, first fills x's rows (an RMSNorm or SiLU step), each row just before it is quantised and on the
/// same thread. Every output is summed in a fixed order whatever the other rows, so results are batch-invariant.
void block_linear(RowPool& pool, const BlockLinear& w, const float* x, std::int64_t n, float* out, std::int64_t ldo,
                  bool accumulate, QuantizedRows& q, std::int64_t planes, const RowPrep& prep = {});

/// A float32 workspace of rows x cols values, 64-byte aligned and not zeroed; grow() keeps nothing.
class FloatRows {
 public:
  /// Makes room for `rows` rows of `cols` (reallocating only to grow).
  void grow(std::int64_t rows, std::int64_t cols) {
    const std::int64_t need = rows * cols;
    if (need > capacity_) {
      const auto bytes = static_cast<std::size_t>((need * 4 + 63) / 64 * 64);
      data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!data_) throw std::bad_alloc();
      capacity_ = need;
    }
    cols_ = cols;
  }
  float* data() const noexcept { return data_.get(); }
  float* row(std::int64_t r) const noexcept { return data_.get() + r * cols_; }
  std::int64_t cols() const noexcept { return cols_; }

 private:
  struct Free {
    void operator()(float* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  std::int64_t capacity_ = 0, cols_ = 0;
};

/// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w for rows [0, rows) of `dim` values; each row alone, in a fixed order.
void rms_norm(const float* x, const float* w, float* y, std::int64_t rows, std::int64_t dim, float eps);

/// Rotary embedding of one head in the rotate_half convention (pairs (j, j + half)), times `scale`.
void rope_rotate(const float* in, float* out, const float* cos, const float* sin, std::int64_t half, float scale);

/// A float32 copy of a vector weight `[n]`, checking presence and shape (errors name the weight).
FloatTensor fetch_vector(const StoredWeightGetter& get, const std::string& name, std::int64_t n);

/// The rows `ids` (distinct, in [0, rows); errors name LlamaOptions::output_ids) of the matrix `name` ([rows, cols],
/// checked), in that order and as stored: float rows as float32, block-format rows as their raw blocks, copied into
/// `storage` (which the result's data points into).
StoredWeight gather_rows(const StoredWeightGetter& get, const std::string& name, std::int64_t rows, std::int64_t cols,
                         std::span<const std::int64_t> ids, std::vector<std::byte>& storage);

/// Builds a product's weights from matrices stacked by output rows ([rows_i, cols] each, checked): runs of one packable
/// block format become one packed part; float ones (F32/F16/BF16) become one float32 part, or with `quantize_float`
/// kQ8_0 or kQ4_0 (and cols a multiple of 32) blocks of that format (llama.cpp's quantisers), packed like a file's;
/// kF32 keeps them float. Packed tiles go into `arena`.
BlockLinear fetch_linear(const StoredWeightGetter& get, const std::vector<std::pair<std::string, std::int64_t>>& names,
                         std::int64_t cols, GgmlType quantize_float, WeightArena& arena);

}  // namespace specdec::models::detail
