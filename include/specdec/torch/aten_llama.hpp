// AtenLlamaModel: the Llama-family forward on ATen ops, for any device ATen runs on (CPU, CUDA).
//
// The second of the project's two Llama-block implementations: LlamaModel (llama.hpp) is the CPU one, with weights kept in
// their block formats and hand-written integer kernels; this one holds every weight dequantised to one floating dtype on
// one device (float32, float16 or bfloat16; norms, rotary tables, softmax and the logits in float32) and runs the block as
// ATen matrix products, so a GPU runs the whole target. It satisfies CausalLM with every capability LlamaModel has: chains
// and trees (TreeCausalLM), a KV cache per slot with O(1) truncate and keep_path, the hidden states EAGLE heads read
// (HasHiddenStates) and a context window (HasMaxSequenceLength). Same weights, same config, same files (GGUF or a
// safetensors checkpoint) as LlamaModel; its float32 CPU logits agree with LlamaModel's float path to float rounding.
//
// Results are not bit-identical across batch shapes (ATen's products choose their kernels by shape), so greedy
// speculative output equals plain decoding except where two logits tie within rounding; LlamaModel is the batch-invariant
// one.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include "specdec/models/causal_lm.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/llama_config.hpp"

namespace specdec::models {

struct AtenLlamaOptions {
  /// Where weights, caches and activations live; logits and hidden states come back on it too.
  c10::Device device = c10::kCPU;
  /// Weights and activations: at::kFloat, at::kHalf or at::kBFloat16.
  c10::ScalarType dtype = c10::kFloat;
  /// Most tokens a sequence may hold; 0 = the config's max_position_embeddings.
  std::int64_t context_length = 0;
};

class AtenLlamaModel {
 public:
  /// Builds the model from `config` (validated) and the float weights `get` returns under Hugging Face names (see
  /// WeightGetter in llama.hpp). Throws specdec::error naming a missing or misshapen weight or a bad option.
  AtenLlamaModel(const LlamaConfig& config, const WeightGetter& get, const AtenLlamaOptions& options = {});
  AtenLlamaModel(AtenLlamaModel&&) noexcept;
  AtenLlamaModel& operator=(AtenLlamaModel&&) noexcept;
  ~AtenLlamaModel();

  const LlamaConfig& config() const noexcept;
  const AtenLlamaOptions& options() const noexcept;
  std::int64_t vocab_size() const noexcept;
  std::int64_t hidden_size() const noexcept;
  std::int64_t max_sequence_length() const noexcept;

  /// See ForwardBatch / ForwardOutput (causal_lm.hpp): logits and hidden states float32 on options().device. Validates the
  /// whole batch before touching a cache.
  ForwardOutput forward(const ForwardBatch& batch);
  /// forward(batch)'s seconds on the model's device: CUDA events around it on a GPU (then one wait for the end event),
  /// the host clock on the CPU (HasTimedForward).
  double timed_forward(const ForwardBatch& batch);
  std::int64_t allocate_sequence();
  void free_sequence(std::int64_t slot);
  std::int64_t sequence_length(std::int64_t slot) const;
  void truncate(std::int64_t slot, std::int64_t length);
  void keep_path(std::int64_t slot, std::int64_t prefix_length, std::span<const std::int64_t> path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A GGUF file (llama, qwen2, qwen3 or gemma3) with every tensor dequantised (any type dequantize() converts).
AtenLlamaModel load_aten_llama_gguf(const std::filesystem::path& path, const AtenLlamaOptions& options = {});
/// A Hugging Face checkpoint directory (config.json + *.safetensors, F32/F16/BF16, sharded or not).
AtenLlamaModel load_aten_llama_safetensors(const std::filesystem::path& dir, const AtenLlamaOptions& options = {});

static_assert(TreeCausalLM<AtenLlamaModel> && HasSequenceLength<AtenLlamaModel> && HasHiddenStates<AtenLlamaModel> &&
              HasMaxSequenceLength<AtenLlamaModel>);

}  // namespace specdec::models
