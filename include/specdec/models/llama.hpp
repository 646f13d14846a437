// LlamaModel: a libtorch (CPU, float32) Llama-family decoder — RMSNorm, rotary embeddings (plain, linear or llama3
// scaling), grouped-query attention, SwiGLU MLP, tied or untied output projection — with a KV cache of several sequences.
// It satisfies specdec::models::CausalLM.
//
// Weights are float32 and follow the Hugging Face layout (nn.Linear [out, in]; q/k rows in "rotate_half" order, i.e. the
// rotary pairs are (j, j + head_dim/2)). The GGUF loader un-permutes llama.cpp's interleaved q/k rows at load, so one RoPE
// serves both formats. q/k/v and gate/up are fused into one matrix each so a layer runs four matrix products.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "specdec/models/causal_lm.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/llama_config.hpp"

namespace specdec::models {

struct LlamaOptions {
  /// Positions per KV-cache slot before the first growth (the cache doubles beyond it).
  std::int64_t initial_cache_capacity = 256;
  /// KV-cache slots before the first growth.
  std::int64_t initial_cache_slots = 1;
  /// Threads the model's own kernels use for products over 2-16 token rows (single-row products are memory-bound and stay
  /// on the calling thread). 0: at::get_num_threads() at construction. BLAS calls (prompts over 16 tokens) follow the BLAS
  /// library's own setting.
  int num_threads = 0;
};

/// Returns the float32 tensor stored under a Hugging Face parameter name (e.g. "model.layers.3.self_attn.q_proj.weight",
/// "model.norm.weight", "lm_head.weight"), or an undefined tensor when absent (only "lm_head.weight" may be absent, meaning
/// tied embeddings). Shapes: embed/lm_head [V, hidden]; q_proj [heads*head_dim, hidden]; k/v_proj [kv_heads*head_dim, hidden];
/// o_proj [hidden, heads*head_dim]; gate/up_proj [intermediate, hidden]; down_proj [hidden, intermediate]; norms [hidden].
using WeightGetter = std::function<at::Tensor(const std::string& name)>;

class LlamaModel {
 public:
  /// Builds the model from `config` (validated) and the weights `get` returns. Throws specdec::error when a weight is missing
  /// or has the wrong shape (naming the weight, the expected and the received shape).
  LlamaModel(const LlamaConfig& config, const WeightGetter& get, const LlamaOptions& options = {});
  /// A model with seeded random weights (for tests and benchmarks of the code path).
  static LlamaModel random(const LlamaConfig& config, std::uint64_t seed, const LlamaOptions& options = {});

  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;
  ~LlamaModel();

  const LlamaConfig& config() const noexcept;
  std::int64_t vocab_size() const noexcept;
  std::int64_t hidden_size() const noexcept;

  /// See ForwardBatch / ForwardOutput (causal_lm.hpp). Runs without autograd (results are ordinary tensors); validates the whole batch before
  /// touching the cache.
  ForwardOutput forward(const ForwardBatch& batch);

  std::int64_t allocate_sequence();
  void free_sequence(std::int64_t slot);
  std::int64_t sequence_length(std::int64_t slot) const;
  void truncate(std::int64_t slot, std::int64_t length);
  void keep_path(std::int64_t slot, std::int64_t prefix_length, std::span<const std::int64_t> path);

  const KvCache& cache() const noexcept;
  /// Bytes of weights one forward reads (every layer matrix and norm, plus the output projection; the embedding rows read are
  /// negligible and not counted).
  std::int64_t weight_bytes_per_forward() const noexcept;
  /// Bytes of all weights held (the embedding counted once when tied).
  std::int64_t weight_bytes() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Loads a llama-architecture GGUF file (F32/F16/BF16/Q8_0/Q4_0/Q4_1/... as the GGUF reader dequantises them) into a float32
/// model. Throws specdec::error on a missing file, an unsupported architecture or missing tensors.
LlamaModel load_llama_gguf(const std::filesystem::path& path, const LlamaOptions& options = {});

/// Loads a Hugging Face checkpoint directory (config.json + *.safetensors, sharded or not) into a float32 model.
LlamaModel load_llama_safetensors(const std::filesystem::path& dir, const LlamaOptions& options = {});

/// Writes named CPU tensors as one safetensors file (metadata {"format": "pt"}): floating tensors as `float_type`
/// (at::kFloat, at::kHalf or at::kBFloat16), int64 and bool tensors as they are. Throws specdec::error on failure.
void write_tensors_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                               at::ScalarType float_type = at::kFloat);

/// Reorders the rows of a llama.cpp GGUF attn_q/attn_k weight ([n_heads*head_dim, in], rotary pairs adjacent: (2j, 2j+1))
/// into the Hugging Face order (pairs (j, j + head_dim/2)). `n_heads` is the number of heads of that projection.
at::Tensor unpermute_gguf_qk(const at::Tensor& weight, std::int64_t n_heads);

}  // namespace specdec::models
