// LlamaConfig: the hyper-parameters of a Llama-family decoder (Llama 2/3, SmolLM2, Mistral-style GQA models),
// read from a GGUF file's metadata or from a Hugging Face config.json. Plain data, no torch.
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

struct LlamaConfig {
  std::string architecture = "llama";  ///< "llama" for every model this struct describes
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

  /// Throws specdec::error if a field is missing or inconsistent (e.g. num_heads not dividing hidden_size when head_dim is unset,
  /// num_kv_heads not dividing num_heads). Called by both loaders.
  void validate() const;
};

/// Reads the `llama.*` (or `general.architecture`-prefixed) metadata keys and the tokenizer ids. tie_word_embeddings is true when
/// the file has no `output.weight` tensor. Throws specdec::error for a non-llama architecture or missing keys.
LlamaConfig llama_config_from_gguf(const GgufFile& file);

/// Parses a Hugging Face config.json (model_type "llama" or "mistral"-like). Throws specdec::error on a missing/invalid file or key.
LlamaConfig llama_config_from_hf_json(const std::filesystem::path& config_json);
/// The same from the text of a config.json; `source` names it in errors.
LlamaConfig llama_config_from_hf_json_text(std::string_view json_text, std::string_view source = "config.json");

/// RoPE inverse frequencies theta^(-2j/head_dim), j < head_dim / 2, with the config's scaling (linear, or Llama 3.1's
/// smooth low-frequency division) applied; rotate_half convention. Shared by every model that applies RoPE.
std::vector<float> rope_inverse_frequencies(const LlamaConfig& config, std::int64_t head_dim);

const char* to_string(RopeScalingType type) noexcept;

}  // namespace specdec::models
