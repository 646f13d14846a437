// LlamaConfig: the hyper-parameters of a Llama-family decoder (Llama 2/3, SmolLM2, Mistral-style GQA models, and the
// options of Qwen2, Qwen3 and Gemma 3), read from a GGUF file's metadata and tensor names or from a Hugging Face
// config.json. Plain data, no torch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specdec::models {

class GgufFile;

/// How rotary position embeddings are rescaled for long contexts.
enum class RopeScalingType : std::uint8_t {
  kNone,    ///< plain RoPE with base `rope_theta`
  kLinear,  ///< positions divided by `factor` (HF "linear")
  kLlama3,  ///< Llama 3.1 frequency-dependent scaling (HF "llama3"): uses factor, low/high_freq_factor, original_max_position_embeddings
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3 only
  double high_freq_factor = 4.0;  // llama3 only
  std::int64_t original_max_position_embeddings = 0;  // llama3 (and linear, where given); 0 = unknown
};

/// The activation of the MLP's gate: down(act(gate(x)) * up(x)).
enum class FfnActivation : std::uint8_t {
  kSilu,      ///< Llama, Qwen
  kGeluTanh,  ///< Gemma: GELU with the tanh approximation
};

/// The general.architecture values llama_config_from_gguf reads, in the order its errors list them.
inline constexpr std::string_view kGgufArchitectures[] = {"llama", "qwen2", "qwen3", "gemma3"};

struct LlamaConfig {
  std::string architecture = "llama";  ///< GGUF general.architecture: llama, qwen2, qwen3 or gemma3
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;          ///< embedding width (GGUF llama.embedding_length)
  std::int64_t intermediate_size = 0;    ///< MLP width (GGUF llama.feed_forward_length)
  std::int64_t num_layers = 0;           ///< decoder blocks (GGUF llama.block_count)
  std::int64_t num_heads = 0;            ///< query heads
  std::int64_t num_kv_heads = 0;         ///< key/value heads (== num_heads without GQA)
  std::int64_t head_dim = 0;             ///< per-head width; hidden_size / num_heads unless given explicitly
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling{};
  std::int64_t max_position_embeddings = 2048;  ///< GGUF llama.context_length
  bool tie_word_embeddings = false;              ///< output projection shares the token embedding matrix
  std::optional<std::int32_t> bos_token_id;
  std::vector<std::int32_t> eos_token_ids;       ///< HF allows several; GGUF gives one (plus optional eot)

  // Options of the block beyond Llama's; the defaults are Llama's. From a GGUF: implied by the architecture or found by
  // tensor name (blk.0.*), as llama.cpp loads them. Every block has an RMSNorm before attention and before the MLP.
  bool attention_bias = false;       ///< q, k and v projections add a bias (qwen2; llama where attn_q.bias exists)
  bool qk_norm = false;              ///< RMSNorm over each head of q and of k before RoPE (qwen3, gemma3: attn_q_norm/attn_k_norm)
  bool post_attention_norm = false;  ///< RMSNorm on the attention output before the residual add (gemma3: post_attention_norm)
  bool post_ffn_norm = false;        ///< RMSNorm on the MLP output before the residual add (gemma3: post_ffw_norm)
  FfnActivation ffn_activation = FfnActivation::kSilu;
  double embedding_scale = 1.0;      ///< token embeddings are multiplied by this (gemma3: sqrt(hidden_size), in float32)
  /// RMSNorm multiplies by (1 + w) rather than w (Gemma's own checkpoints). Always false from a GGUF: llama.cpp's converter
  /// stores 1 + w in Gemma's norm weights.
  bool norm_weight_plus_one = false;
  /// Sliding-window attention: 0 = none; otherwise a query at position p of a sliding layer attends to the keys at
  /// positions p - sliding_window < q <= p (llama.cpp's "standard" window, gemma3.attention.sliding_window).
  std::int64_t sliding_window = 0;
  /// Per layer: whether it uses the sliding window (empty when sliding_window == 0). gemma3: every layer but each sixth
  /// (layers 5, 11, 17, ... attend globally) unless gemma3.attention.sliding_window_pattern says otherwise.
  std::vector<bool> sliding_layers;
  /// RoPE base of the sliding layers, which take no rope scaling (gemma3: gemma3.rope.freq_base_swa, else 10000); 0 when
  /// there are none. rope_theta and rope_scaling are the global layers'.
  double sliding_rope_theta = 0.0;
  double final_logit_softcap = 0.0;  ///< 0 = none; else logits = cap * tanh(logits / cap) (<arch>.final_logit_softcapping)
  double attention_scale = 0.0;      ///< scores scale; 0 = 1 / sqrt(head_dim) (gemma3 27B: 1 / sqrt(hidden_size / num_heads))
  /// Llama 3.x RoPE scaling as a GGUF stores it (the tensor rope_freqs.weight, head_dim / 2 factors): inverse frequency j
  /// is divided by factor j. Empty = none. rope_inverse_frequencies applies it.
  std::vector<float> rope_freq_factors;
  /// The q and k rows of a GGUF are in llama.cpp's interleaved-pair RoPE order: its converter permutes them for 'llama'
  /// (the loaders restore rotate_half order), not for qwen2, qwen3 and gemma3, whose RoPE is rotate_half already.
  bool gguf_qk_permuted = false;

  /// Whether layer `layer` uses the sliding window.
  bool is_sliding_layer(std::int64_t layer) const noexcept {
    return sliding_window > 0 && layer >= 0 && static_cast<std::size_t>(layer) < sliding_layers.size() &&
           sliding_layers[static_cast<std::size_t>(layer)];
  }

  /// Throws specdec::error if a field is missing or inconsistent (e.g. num_heads not dividing hidden_size when head_dim is unset,
  /// num_kv_heads not dividing num_heads). Called by both loaders.
  void validate() const;
};

/// Reads the `<architecture>.*` metadata keys (llama, qwen2, qwen3, gemma3), the tokenizer ids and the options the tensor
/// names show. tie_word_embeddings is true when the file has no `output.weight` tensor. Throws specdec::error for another
/// architecture (naming it and the supported ones), missing keys, or tensors no option accounts for (biases beyond q/k/v).
LlamaConfig llama_config_from_gguf(const GgufFile& file);

/// What `config` needs that the Llama block of this build does not run yet, one entry per option; empty when the block runs
/// it as it is. The models (LlamaModel, AtenLlamaModel) and their loaders refuse a config with any (never running
/// different math). Every option a GGUF gives runs; left is norm_weight_plus_one (Gemma's own checkpoints' (1 + w) norms).
std::vector<std::string> unsupported_block_options(const LlamaConfig& config);
/// Throws specdec::error "`who`: <architecture> needs ... which the Llama block does not support yet" when
/// unsupported_block_options(config) is not empty.
void require_block_support(const LlamaConfig& config, std::string_view who);

/// The options of `config` that Llama's own block lacks, one entry per option ("q/k/v biases", "QK-norm", ...); empty
/// for a Llama block. For code that builds Llama blocks of its own from a target's config (specdec-train's heads and
/// drafts), which must refuse the others until it takes their options.
std::vector<std::string> block_options_beyond_llama(const LlamaConfig& config);

/// The Hugging Face name, under "model.layers.N.", of the RMSNorm before the MLP: "post_attention_layernorm.weight" in
/// Llama's block, "pre_feedforward_layernorm.weight" in Gemma's (post_attention_norm set), whose
/// "post_attention_layernorm.weight" normalises the attention's output instead (and "post_feedforward_layernorm.weight"
/// the MLP's). The GGUF loaders map these names to ffn_norm, post_attention_norm and post_ffw_norm.
std::string_view pre_ffn_norm_name(const LlamaConfig& config) noexcept;

/// Parses a Hugging Face config.json (model_type "llama" or "mistral"-like). Throws specdec::error on a missing/invalid file or key.
LlamaConfig llama_config_from_hf_json(const std::filesystem::path& config_json);
/// The same from the text of a config.json; `source` names it in errors.
LlamaConfig llama_config_from_hf_json_text(std::string_view json_text, std::string_view source = "config.json");

/// RoPE inverse frequencies theta^(-2j/head_dim), j < head_dim / 2, with the config's scaling (linear, or Llama 3.1's
/// smooth low-frequency division, or a GGUF's rope_freq_factors) applied; rotate_half convention. Shared by every model
/// that applies RoPE. These are the global layers'; sliding layers use sliding_rope_theta without scaling.
std::vector<float> rope_inverse_frequencies(const LlamaConfig& config, std::int64_t head_dim);

/// The sliding layers' RoPE inverse frequencies: base sliding_rope_theta (rope_theta where it is 0), no scaling.
std::vector<float> sliding_rope_inverse_frequencies(const LlamaConfig& config, std::int64_t head_dim);

const char* to_string(RopeScalingType type) noexcept;
const char* to_string(FfnActivation activation) noexcept;

}  // namespace specdec::models
