// LlamaModel: a CPU Llama-family decoder — RMSNorm, rotary embeddings (plain, linear or llama3 scaling), grouped-query
// attention, SwiGLU MLP, tied or untied output projection — with a KV cache of several sequences, and the options of
// Qwen2, Qwen3 and Gemma 3 (LlamaConfig: q/k/v biases, QK-norm, post-attention and post-MLP norms, GELU gating,
// embedding scale, sliding-window layers, attention scale, logit soft-cap; docs/models.md). It satisfies
// specdec::models::CausalLM.
//
// Weights follow the Hugging Face layout (nn.Linear [out, in]; q/k rows in "rotate_half" order, i.e. the rotary pairs
// are (j, j + head_dim/2)). Matrices of a GGUF block format (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) stay in that format,
// repacked once at load into 16-row tiles for integer products with int8 activations (detail::PackedMatrix: AVX-512
// VNNI, AVX2 or portable, chosen at run time, all bit-identical); float weights (F32/F16/BF16, safetensors) are held as
// float32. The GGUF loader un-permutes llama.cpp's interleaved q/k rows of 'llama' files at load, so one RoPE serves
// both formats. q/k/v and gate/up are fused into one matrix each (when their formats agree) so a layer runs four matrix
// products. Every product sums a token row's outputs in a fixed order whatever the other rows of the call, so a token's
// logits are bit-identical decoded alone, in a verification chain, in a tree or beside other sequences (for up to 16
// new tokens of a sequence per call; longer prompts take a batched attention path).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/models/causal_lm.hpp"
#include "specdec/models/float_tensor.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/llama_config.hpp"

namespace specdec::models {

class GgufFile;

/// CPUs this process may run on (its affinity mask; the hardware thread count where that cannot be read): the default
/// thread count of a model's pool.
int available_cpus() noexcept;

/// Precision of the activations that meet block-format weights, per kind of matrix: 16 (two int8 planes, about 15 bits:
/// logits within ~1e-2 of a float forward of the same weights) or 8 (one int8 plane per block, llama.cpp's Q8 activations:
/// half the integer work per token row). Float weights ignore it. Converts from one number for every kind
/// (`options.activation_bits = 8`); parse() reads "16", "8" or a list such as "16,attn_out=8". docs/cpu-forward.md
/// gives each kind's measured effect on the logits.
struct ActivationBits {
  int qkv = 16;      ///< attention q/k/v projections (input: the attention norm's output)
  int attn_out = 16; ///< attention output projection (input: the attention's output)
  int gate_up = 16;  ///< MLP gate and up projections (input: the MLP norm's output)
  int down = 16;     ///< MLP down projection (input: silu(gate) * up)
  int lm_head = 16;  ///< output projection (input: the final norm's output)

  constexpr ActivationBits() = default;
  constexpr ActivationBits(int all) noexcept : qkv(all), attn_out(all), gate_up(all), down(all), lm_head(all) {}  // NOLINT
  /// "16" or "8": every kind; a comma-separated list whose items are a number (every kind) or
  /// kind=number (kinds qkv, attn_out, gate_up, down, lm_head), later items overriding earlier ones. Throws specdec::error
  /// naming the item on anything else.
  static ActivationBits parse(std::string_view spec);
  /// Every field 8 or 16.
  bool valid() const noexcept;
  /// "16", "8" or the list form parse() reads back.
  std::string to_string() const;
  friend bool operator==(const ActivationBits&, const ActivationBits&) = default;
};

struct LlamaOptions {
  /// Positions per KV-cache slot before the first growth (the cache doubles beyond it).
  std::int64_t initial_cache_capacity = 256;
  /// KV-cache slots before the first growth.
  std::int64_t initial_cache_slots = 1;
  /// Threads of the model's one pool (every product and the attention). 0: every hardware thread the process may run on
  /// (its CPU affinity).
  int num_threads = 0;
  /// Precision of the activations that meet block-format weights, per kind of matrix (ActivationBits).
  ActivationBits activation_bits = ActivationBits(16);
  /// Quantise float matrices (F32/F16/BF16; rows a multiple of 32 values) to Q8_0 at load and run them on the packed
  /// products: a quarter of float32's bytes per token, and no longer the checkpoint's exact weights. Meant for draft models,
  /// whose outputs only propose tokens (the verifier keeps the target's distribution whatever the draft computes).
  bool quantize_float_weights = false;
  /// The format quantize_float_weights quantises to: GgmlType::kQ8_0 (the default) or kQ4_0 (llama.cpp's reference
  /// quantisers; Q4_0 reads half Q8_0's bytes per token, at the cost of coarser weights).
  GgmlType quantized_float_type = GgmlType::kQ8_0;
  /// Most tokens a sequence may hold (max_sequence_length()). 0: the config's max_position_embeddings (GGUF
  /// llama.context_length), the window the model was trained on. A forward that would write past it throws; a larger value
  /// runs the rotary embedding past the trained positions (quality is then the caller's risk).
  std::int64_t context_length = 0;
  /// Store the KV cache as IEEE float16 (each key and value rounded to nearest once, when written; attention converts
  /// them back exactly and computes in float32): half the bytes a decode reads per cached position, which is what bounds
  /// a long context's attention, as llama.cpp's default f16 cache. false: float32.
  bool kv_cache_half = true;
  /// Time the steps of every forward of up to 16 new tokens (decode and verification; LlamaModel::phase_times). The clock
  /// is read once per step, about 300 reads per forward.
  bool time_phases = false;
  /// Score only these vocabulary rows (distinct token ids in [0, vocab_size)): the logits then have
  /// output_ids.size() columns, column j holding token output_ids[j]'s logit, bit-identical to that column of the whole
  /// vocabulary's logits. The output projection reads only those rows (a draft model's reduced output vocabulary: the
  /// proposer maps the columns back, DraftModelOptions::output_ids). Inputs still take any token of the vocabulary.
  /// Empty: the whole vocabulary.
  std::vector<std::int64_t> output_ids;
};

/// Wall time the timed forwards spent in each step (LlamaOptions::time_phases), summed: where a decode or verification
/// forward goes. A product's step includes the element-wise step that feeds it and its activations' quantisation: qkv
/// and gate_up their RMSNorm, down the SiLU, lm_head the final norm; kOther is the rest after the layers (the logits'
/// allocation, hidden-state copies).
struct ForwardPhaseTimes {
  enum Phase { kQkv, kRope, kAttention, kAttnOut, kGateUp, kDown, kLmHead, kOther, kCount };
  static constexpr const char* kNames[kCount] = {"qkv", "rope", "attention", "attn_out", "gate_up", "down", "lm_head",
                                                 "other"};
  double seconds[kCount] = {};
  std::int64_t forwards = 0;
};

/// Returns the float32 weight stored under a Hugging Face parameter name (e.g. "model.layers.3.self_attn.q_proj.weight",
/// "model.norm.weight", "lm_head.weight"), or an undefined tensor when absent (only "lm_head.weight" may be absent, meaning
/// tied embeddings). Shapes: embed/lm_head [V, hidden]; q_proj [heads*head_dim, hidden]; k/v_proj [kv_heads*head_dim, hidden];
/// o_proj [hidden, heads*head_dim]; gate/up_proj [intermediate, hidden]; down_proj [hidden, intermediate]; norms [hidden].
using WeightGetter = std::function<FloatTensor(const std::string& name)>;

/// A weight as a loader hands it over: float32 values (`dense`), or a GGUF tensor's raw block data (`data`, valid while
/// the model is being built). Matrices of a packable format (detail::can_pack) stay in that format; other GGUF types are
/// dequantised to float32 when the reader can (F32/F16/BF16), else the load fails naming the tensor and its type.
struct StoredWeight {
  FloatTensor dense;
  std::string file_name;  ///< the tensor's name in its file (for messages)
  GgmlType type = GgmlType::kF32;
  std::span<const std::byte> data;
  std::vector<std::int64_t> shape;    ///< row-major, outermost first
  std::int64_t unpermute_heads = 0;   ///< GGUF attn_q/attn_k: heads to un-permute the rows with (see unpermute_gguf_qk)
  std::function<void()> release;      ///< called once the model holds its own copy (e.g. drops the file's pages)
  bool present() const noexcept { return dense.defined() || !shape.empty(); }
};
/// Seeded random float32 weights for `config` under their Hugging Face names (what LlamaModel::random builds from; also
/// for other implementations of the same block in tests and benchmarks).
WeightGetter random_llama_weights(const LlamaConfig& config, std::uint64_t seed);

/// Returns the stored weight under a Hugging Face parameter name (as WeightGetter), or one that is not present().
using StoredWeightGetter = std::function<StoredWeight(const std::string& name)>;

class LlamaModel {
 public:
  /// Builds the model from `config` (validated) and the weights `get` returns. Throws specdec::error when a weight is missing
  /// or has the wrong shape (naming the weight, the expected and the received shape).
  LlamaModel(const LlamaConfig& config, const WeightGetter& get, const LlamaOptions& options = {});
  /// The same from stored weights (block-format matrices kept in their format).
  static LlamaModel from_stored(const LlamaConfig& config, const StoredWeightGetter& get, const LlamaOptions& options = {});
  /// A model with seeded random weights (for tests and benchmarks of the code path).
  static LlamaModel random(const LlamaConfig& config, std::uint64_t seed, const LlamaOptions& options = {});

  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;
  ~LlamaModel();

  const LlamaConfig& config() const noexcept;
  /// Tokens the model reads (its embedding's rows).
  std::int64_t vocab_size() const noexcept;
  /// Columns of its logits: vocab_size(), or the size of LlamaOptions::output_ids.
  std::int64_t output_size() const noexcept;
  /// The tokens of the logits' columns (LlamaOptions::output_ids); empty when they score the whole vocabulary.
  const std::vector<std::int64_t>& output_ids() const noexcept;
  std::int64_t hidden_size() const noexcept;
  /// Most tokens a sequence may hold: LlamaOptions::context_length, or the config's max_position_embeddings.
  std::int64_t max_sequence_length() const noexcept;

  /// See ForwardBatch / ForwardOutput (causal_lm.hpp): host float32 rows the output owns. Validates the whole batch
  /// before touching the cache.
  ForwardOutput forward(const ForwardBatch& batch);

  std::int64_t allocate_sequence();
  void free_sequence(std::int64_t slot);
  std::int64_t sequence_length(std::int64_t slot) const;
  void truncate(std::int64_t slot, std::int64_t length);
  void keep_path(std::int64_t slot, std::int64_t prefix_length, std::span<const std::int64_t> path);

  const KvCache& cache() const noexcept;
  /// Bytes of weights one forward reads (every layer matrix and norm, plus the output projection, as held: packed block
  /// formats at their size; the embedding rows read are negligible and not counted).
  std::int64_t weight_bytes_per_forward() const noexcept;
  /// Threads of the model's pool.
  int num_threads() const noexcept;
  /// fn(i) for every i in [0, n) on the model's pool (HasParallelFor, causal_lm.hpp); not during a forward.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn);
  /// The instruction set of the packed products ("avx512-vnni", "avx2", "portable"), or "float32" when no weight is packed.
  std::string kernel_name() const;
  /// Bytes of all weights held (the embedding counted once when tied).
  std::int64_t weight_bytes() const noexcept;
  /// Step timings since construction or reset_phase_times() (all zero unless LlamaOptions::time_phases).
  const ForwardPhaseTimes& phase_times() const noexcept;
  void reset_phase_times() noexcept;

 private:
  struct StoredTag {};
  LlamaModel(StoredTag, const LlamaConfig& config, const StoredWeightGetter& get, const LlamaOptions& options);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// LlamaOptions::kv_cache_half from a name: "f16" -> true, "f32" -> false. Throws specdec::error naming the value otherwise.
bool parse_kv_cache_type(std::string_view name);

/// Loads a GGUF file of architecture llama, qwen2, qwen3 or gemma3: Q4_0/Q4_1/Q8_0/Q4_K/Q6_K matrices stay in their
/// block format, F32/F16/BF16 ones become float32. Throws specdec::error on a missing file, an unsupported
/// architecture, missing tensors, or a tensor whose type, size or shape the model cannot take (naming the tensor, its
/// type and what was expected).
LlamaModel load_llama_gguf(const std::filesystem::path& path, const LlamaOptions& options = {});
/// The same from a file already open (its tokenizer read from it too: the file is parsed once). The model keeps nothing
/// of `file`; the pages of the tensors it packed are released from `file`'s mapping as it goes.
LlamaModel load_llama_gguf(const GgufFile& file, const LlamaOptions& options = {});

/// Loads a Hugging Face checkpoint directory (config.json + *.safetensors, F32/F16/BF16, sharded or not) into a float32 model.
LlamaModel load_llama_safetensors(const std::filesystem::path& dir, const LlamaOptions& options = {});

/// A checkpoint directory's reduced output vocabulary (LlamaOptions::output_ids): its tensor "d2t", int64
/// [draft_vocab_size] offsets (EAGLE-3's convention: draft id d is token d + d2t[d]), as token ids; empty when the
/// checkpoint has none (it scores the whole vocabulary). Throws specdec::error naming the directory for a d2t of another
/// type or shape, or one whose ids are not distinct tokens of the config's vocabulary.
std::vector<std::int64_t> read_output_ids(const std::filesystem::path& dir);

/// A checkpoint's config (validated) and its weights as float32 under Hugging Face names, each read (dequantised, GGUF
/// q/k rows un-permuted) when asked for: what another implementation of the block builds from (the torch layer's
/// AtenLlamaModel). The getter keeps the file open; it throws specdec::error naming `who` for a tensor of a type it
/// cannot convert.
struct FloatCheckpoint {
  LlamaConfig config;
  WeightGetter get;
};
/// A GGUF file (llama, qwen2, qwen3 or gemma3; any type dequantize() converts).
FloatCheckpoint read_float_gguf(const std::filesystem::path& path, const char* who = "read_float_gguf");
/// A Hugging Face checkpoint directory (config.json + *.safetensors, F32/F16/BF16, sharded or not).
FloatCheckpoint read_float_safetensors(const std::filesystem::path& dir, const char* who = "read_float_safetensors");

/// Reorders the rows of a llama.cpp GGUF attn_q/attn_k weight ([n_heads*head_dim, in], rotary pairs adjacent: (2j, 2j+1))
/// into the Hugging Face order (pairs (j, j + head_dim/2)). `n_heads` is the number of heads of that projection. A 1-D
/// tensor (a bias of those rows) is reordered the same way. Returns a new tensor.
FloatTensor unpermute_gguf_qk(const FloatTensor& weight, std::int64_t n_heads);

}  // namespace specdec::models
