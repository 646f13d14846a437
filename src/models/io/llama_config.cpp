// LlamaConfig loaders: GGUF metadata and Hugging Face config.json.
#include "specdec/models/llama_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <fstream>
#include <limits>
#include <iterator>
#include <numbers>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/models/gguf.hpp"
#include "specdec/sampling/status.hpp"
#include "json_excerpt.hpp"

namespace specdec::models {

namespace {
[[noreturn]] void fail(const std::string& msg) { throw specdec::error(msg); }

/// A token id read as a wider integer: outside int32 it cannot be an id (and must not be truncated into one).
std::int32_t token_id_of(std::int64_t v, std::string_view what) {
  if (v < 0 || v > std::numeric_limits<std::int32_t>::max())
    fail(fmt::format("llama config: {} {} is not a valid token id (expected 0 to {})", what, v,
                     std::numeric_limits<std::int32_t>::max()));
  return static_cast<std::int32_t>(v);
}
}  // namespace

const char* to_string(FfnActivation activation) noexcept {
  switch (activation) {
    case FfnActivation::kSilu: return "silu";
    case FfnActivation::kGeluTanh: return "gelu_tanh";
  }
  return "unknown";
}

const char* to_string(RopeScalingType type) noexcept {
  switch (type) {
    case RopeScalingType::kNone: return "none";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kLlama3: return "llama3";
  }
  return "unknown";
}

void LlamaConfig::validate() const {
  const auto positive = [](const char* name, std::int64_t v) {
    if (v <= 0) fail(fmt::format("llama config: {} must be positive, got {}", name, v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("num_kv_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  if (num_heads % num_kv_heads != 0)
    fail(fmt::format("llama config: num_heads ({}) must be a multiple of num_kv_heads ({})", num_heads, num_kv_heads));
  if (!(rms_norm_eps > 0.0)) fail(fmt::format("llama config: rms_norm_eps must be positive, got {}", rms_norm_eps));
  if (!(rope_theta > 0.0)) fail(fmt::format("llama config: rope_theta must be positive, got {}", rope_theta));
  if (rope_scaling.type != RopeScalingType::kNone && !(rope_scaling.factor > 0.0))
    fail(fmt::format("llama config: rope_scaling.factor must be positive, got {}", rope_scaling.factor));
  if (rope_scaling.type == RopeScalingType::kLlama3) {
    if (rope_scaling.original_max_position_embeddings <= 0)
      fail("llama config: llama3 rope scaling needs original_max_position_embeddings > 0");
    if (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor))
      fail(fmt::format("llama config: llama3 rope scaling needs high_freq_factor ({}) > low_freq_factor ({})",
                       rope_scaling.high_freq_factor, rope_scaling.low_freq_factor));
  }
  const auto finite_non_negative = [](const char* name, double v) {
    if (!(std::isfinite(v) && v >= 0.0)) fail(fmt::format("llama config: {} must be finite and >= 0, got {}", name, v));
  };
  if (!(std::isfinite(embedding_scale) && embedding_scale > 0.0))
    fail(fmt::format("llama config: embedding_scale must be finite and positive, got {}", embedding_scale));
  finite_non_negative("final_logit_softcap", final_logit_softcap);
  finite_non_negative("attention_scale", attention_scale);
  finite_non_negative("sliding_rope_theta", sliding_rope_theta);
  if (sliding_window < 0) fail(fmt::format("llama config: sliding_window must be >= 0, got {}", sliding_window));
  if (sliding_window > 0) {
    if (sliding_layers.size() != static_cast<std::size_t>(num_layers))
      fail(fmt::format("llama config: sliding_layers has {} entries for {} layers", sliding_layers.size(), num_layers));
    if (!(sliding_rope_theta > 0.0))
      fail(fmt::format("llama config: sliding_rope_theta must be positive with a sliding window, got {}", sliding_rope_theta));
  } else if (!sliding_layers.empty()) {
    fail("llama config: sliding_layers is set without a sliding_window");
  }
  if (!rope_freq_factors.empty()) {
    if (rope_freq_factors.size() != static_cast<std::size_t>(head_dim / 2))
      fail(fmt::format("llama config: rope_freq_factors has {} entries, expected head_dim / 2 = {}", rope_freq_factors.size(),
                       head_dim / 2));
    for (float f : rope_freq_factors)
      if (!(std::isfinite(f) && f > 0.0f)) fail(fmt::format("llama config: rope_freq_factors holds {}, expected > 0", f));
  }
  if (bos_token_id && (*bos_token_id < 0 || *bos_token_id >= vocab_size))
    fail(fmt::format("llama config: bos_token_id {} is outside [0, {})", *bos_token_id, vocab_size));
  for (auto id : eos_token_ids)
    if (id < 0 || id >= vocab_size) fail(fmt::format("llama config: eos_token_id {} is outside [0, {})", id, vocab_size));
}

namespace {

/// The architecture's options (see LlamaConfig), from the metadata keys with prefix `p` and the tensor names.
void read_gguf_options(const GgufFile& f, const std::string& p, LlamaConfig& c) {
  const std::string& arch = c.architecture;
  // A file of metadata alone (a tokenizer shipped without weights) shows no tensors: the architecture's options are
  // taken as implied, and checked against the tensors only where there are some.
  const bool has_tensors = !f.tensors().empty();
  const auto has = [&](const char* name) { return f.find_tensor(fmt::format("blk.0.{}", name)) != nullptr; };
  const auto option = [&](bool implied, std::initializer_list<const char*> names, const char* what) {
    bool any = false, all = true;
    for (const char* n : names) {
      if (has(n)) any = true;
      else all = false;
    }
    if (!has_tensors) return implied;
    if (any && !all) {
      std::string list;
      for (const char* n : names) list += fmt::format("{}blk.0.{}{}", list.empty() ? "" : ", ", n, has(n) ? "" : " (missing)");
      fail(fmt::format("llama config: '{}' has only some of the tensors of {}: {}", arch, what, list));
    }
    if (implied && !all)
      fail(fmt::format("llama config: architecture '{}' has {}, but the file has no tensor blk.0.{}", arch, what,
                       *names.begin()));
    return all;
  };
  const bool qwen2 = arch == "qwen2", qwen3 = arch == "qwen3", gemma3 = arch == "gemma3";
  c.attention_bias = option(qwen2, {"attn_q.bias", "attn_k.bias", "attn_v.bias"}, "q/k/v biases");
  c.qk_norm = option(qwen3 || gemma3, {"attn_q_norm.weight", "attn_k_norm.weight"}, "QK-norm");
  c.post_attention_norm = option(gemma3, {"post_attention_norm.weight"}, "a post-attention norm");
  c.post_ffn_norm = option(gemma3, {"post_ffw_norm.weight"}, "a post-FFN norm");
  // Tensors that no option accounts for would be ignored: refuse rather than run different math.
  for (const char* name : {"attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias", "attn_qkv.weight",
                           "ffn_gate_inp.weight", "ffn_gate_exps.weight", "attn_sinks.weight"})
    if (has(name)) fail(fmt::format("llama config: tensor blk.0.{} ('{}') is not supported", name, arch));
  if (f.find_tensor("output.bias") != nullptr) fail(fmt::format("llama config: tensor output.bias ('{}') is not supported", arch));
  c.gguf_qk_permuted = arch == "llama";
  if (gemma3) {
    c.ffn_activation = FfnActivation::kGeluTanh;
    c.embedding_scale = static_cast<double>(std::sqrt(static_cast<float>(c.hidden_size)));
    // As llama.cpp: 27B (62 layers) scales by 1 / sqrt(hidden / heads), the others by 1 / sqrt(head_dim).
    if (c.num_layers == 62 && c.num_heads > 0) c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.hidden_size / c.num_heads));
    const std::int64_t window = f.get_integer_optional(p + "attention.sliding_window").value_or(0);
    if (window > 0) {
      c.sliding_window = window;
      c.sliding_rope_theta = f.get_double_optional(p + "rope.freq_base_swa").value_or(10000.0);
      const std::string key = p + "attention.sliding_window_pattern";
      const auto* v = f.find(key);
      if (v != nullptr && v->type == GgufType::kArray) {
        const auto& a = f.get_array(key);
        if (a.element_type != GgufType::kBool || a.elements.size() != static_cast<std::size_t>(c.num_layers))
          fail(fmt::format("llama config: {} must be {} bools (one per layer), got {} of type {}", key, c.num_layers,
                           a.elements.size(), to_string(a.element_type)));
        for (const auto& e : a.elements) c.sliding_layers.push_back(std::get<bool>(e.data));
      } else {
        const std::int64_t n = v != nullptr ? f.get_integer(key) : 6;  // every n-th layer global; 0 = all sliding
        if (n < 0) fail(fmt::format("llama config: {} must be >= 0, got {}", key, n));
        for (std::int64_t il = 0; il < c.num_layers; ++il) c.sliding_layers.push_back(n == 0 || il % n < n - 1);
      }
    }
  }
  if (auto cap = f.get_double_optional(p + "final_logit_softcapping")) c.final_logit_softcap = *cap;
  // Llama 3.x RoPE scaling: the converter writes the per-frequency factors as a tensor.
  if (const auto* t = f.find_tensor("rope_freqs.weight")) {
    if (t->num_elements != c.head_dim / 2)
      fail(fmt::format("llama config: rope_freqs.weight has {} elements, expected head_dim / 2 = {}", t->num_elements,
                       c.head_dim / 2));
    c.rope_freq_factors = f.dequantize(*t);
  }
}

}  // namespace

LlamaConfig llama_config_from_gguf(const GgufFile& f) {
  LlamaConfig c;
  const std::string& arch = f.get_string("general.architecture");
  if (std::find(std::begin(kGgufArchitectures), std::end(kGgufArchitectures), arch) == std::end(kGgufArchitectures)) {
    std::string list;
    for (auto a : kGgufArchitectures) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", a);
    fail(fmt::format("llama config: general.architecture is '{}', which specdec does not run (supported: {})", arch, list));
  }
  c.architecture = arch;
  const std::string p = arch + ".";
  c.hidden_size = f.get_integer(p + "embedding_length");
  c.intermediate_size = f.get_integer(p + "feed_forward_length");
  c.num_layers = f.get_integer(p + "block_count");
  c.num_heads = f.get_integer(p + "attention.head_count");
  c.num_kv_heads = f.get_integer_optional(p + "attention.head_count_kv").value_or(c.num_heads);
  if (auto kl = f.get_integer_optional(p + "attention.key_length")) {
    c.head_dim = *kl;
    if (auto vl = f.get_integer_optional(p + "attention.value_length"); vl && *vl != *kl)
      fail(fmt::format("llama config: {}attention.value_length {} differs from key_length {} (not supported)", p, *vl, *kl));
  } else {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0)
      fail(fmt::format("llama config: embedding_length {} is not a multiple of head_count {}", c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.rms_norm_eps = f.get_double(p + "attention.layer_norm_rms_epsilon");
  c.rope_theta = f.get_double_optional(p + "rope.freq_base").value_or(10000.0);
  c.max_position_embeddings = f.get_integer_optional(p + "context_length").value_or(2048);
  if (auto v = f.get_integer_optional(p + "vocab_size")) {
    c.vocab_size = *v;
  } else if (f.contains("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<std::int64_t>(f.get_array("tokenizer.ggml.tokens").elements.size());
  } else if (const auto* t = f.find_tensor("token_embd.weight"); t != nullptr && !t->shape.empty()) {
    c.vocab_size = t->shape.front();
  }
  if (const auto* st = f.find(p + "rope.scaling.type")) {
    const std::string& type = f.get_string(p + "rope.scaling.type");
    (void)st;
    if (type == "linear") {
      c.rope_scaling.type = RopeScalingType::kLinear;
      c.rope_scaling.factor = f.get_double(p + "rope.scaling.factor");
    } else if (type != "none") {
      fail(fmt::format("llama config: {}rope.scaling.type '{}' is not supported (expected none or linear)", p, type));
    }
  } else if (auto factor = f.get_double_optional(p + "rope.scale_linear")) {
    c.rope_scaling.type = RopeScalingType::kLinear;
    c.rope_scaling.factor = *factor;
  }
  if (auto o = f.get_integer_optional(p + "rope.scaling.original_context_length"))
    c.rope_scaling.original_max_position_embeddings = *o;
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  read_gguf_options(f, p, c);
  if (auto b = f.get_integer_optional("tokenizer.ggml.bos_token_id")) c.bos_token_id = token_id_of(*b, "tokenizer.ggml.bos_token_id");
  if (auto e = f.get_integer_optional("tokenizer.ggml.eos_token_id"))
    c.eos_token_ids.push_back(token_id_of(*e, "tokenizer.ggml.eos_token_id"));
  if (auto e = f.get_integer_optional("tokenizer.ggml.eot_token_id")) {
    const auto id = token_id_of(*e, "tokenizer.ggml.eot_token_id");
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) c.eos_token_ids.push_back(id);
  }
  c.validate();
  return c;
}

std::vector<std::string> unsupported_block_options(const LlamaConfig& c) {
  // Every option of the GGUF architectures runs (LlamaModel and AtenLlamaModel); only Gemma's own (1 + w) norm weights,
  // which no loader produces (GGUF files hold 1 + w already), do not.
  std::vector<std::string> out;
  if (c.norm_weight_plus_one) out.emplace_back("(1 + w) RMSNorm");
  return out;
}

std::vector<std::string> block_options_beyond_llama(const LlamaConfig& c) {
  std::vector<std::string> out;
  if (c.attention_bias) out.emplace_back("q/k/v biases");
  if (c.qk_norm) out.emplace_back("QK-norm");
  if (c.post_attention_norm) out.emplace_back("a post-attention norm");
  if (c.post_ffn_norm) out.emplace_back("a post-FFN norm");
  if (c.ffn_activation != FfnActivation::kSilu) out.emplace_back(fmt::format("{} gating", to_string(c.ffn_activation)));
  if (c.embedding_scale != 1.0) out.emplace_back(fmt::format("embeddings scaled by {}", c.embedding_scale));
  if (c.norm_weight_plus_one) out.emplace_back("(1 + w) RMSNorm");
  if (c.sliding_window > 0) out.emplace_back(fmt::format("a {}-token sliding window", c.sliding_window));
  if (c.final_logit_softcap > 0.0) out.emplace_back(fmt::format("a final logit soft-cap of {}", c.final_logit_softcap));
  if (c.attention_scale > 0.0) out.emplace_back(fmt::format("an attention scale of {}", c.attention_scale));
  return out;
}

std::string_view pre_ffn_norm_name(const LlamaConfig& c) noexcept {
  return c.post_attention_norm ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
}

void require_block_support(const LlamaConfig& c, std::string_view who) {
  const auto missing = unsupported_block_options(c);
  if (missing.empty()) return;
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  fail(fmt::format("{}: '{}' needs {}, which the Llama block does not support yet", who, c.architecture, list));
}

LlamaConfig llama_config_from_hf_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("llama config: cannot open '{}'", path.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(fmt::format("llama config: reading '{}' failed", path.string()));
  return llama_config_from_hf_json_text(text, path.string());
}

LlamaConfig llama_config_from_hf_json_text(std::string_view text, std::string_view source) {
  const std::string where(source);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("llama config: '{}' is not valid JSON: {}", where, e.what()));
  }
  if (!j.is_object()) fail(fmt::format("llama config: '{}' must hold a JSON object", where));
  // An integer key: a JSON integer that fits int64 (a larger unsigned one must not wrap around to a negative value).
  const auto int_of = [&](const nlohmann::json& v, const char* key) -> std::int64_t {
    if (!v.is_number_integer())
      fail(fmt::format("llama config: '{}' key '{}' must be an integer, got {}", where, key, detail::json_excerpt(v)));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(fmt::format("llama config: '{}' key '{}' is {}, larger than any integer it can hold", where, key, v.get<std::uint64_t>()));
    return v.get<std::int64_t>();
  };
  const auto req_int = [&](const char* key) -> std::int64_t {
    const auto it = j.find(key);
    if (it == j.end()) fail(fmt::format("llama config: '{}' is missing key '{}'", where, key));
    return int_of(*it, key);
  };
  const auto opt_int = [&](const char* key) -> std::optional<std::int64_t> {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    return int_of(*it, key);
  };
  const auto opt_num = [&](const nlohmann::json& obj, const char* key) -> std::optional<double> {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) fail(fmt::format("llama config: '{}' key '{}' must be a number, got {}", where, key, detail::json_excerpt(*it)));
    return it->get<double>();
  };

  LlamaConfig c;
  std::string model_type = "llama";
  if (const auto it = j.find("model_type"); it != j.end()) {
    if (!it->is_string())
      fail(fmt::format("llama config: '{}' key 'model_type' must be a string, got {}", where, detail::json_excerpt(*it)));
    model_type = it->get<std::string>();
  }
  if (model_type != "llama" && model_type != "mistral")
    fail(fmt::format("llama config: '{}' has model_type '{}', expected 'llama' or 'mistral'", where, model_type));
  c.vocab_size = req_int("vocab_size");
  c.hidden_size = req_int("hidden_size");
  c.intermediate_size = req_int("intermediate_size");
  c.num_layers = req_int("num_hidden_layers");
  c.num_heads = req_int("num_attention_heads");
  c.num_kv_heads = opt_int("num_key_value_heads").value_or(c.num_heads);
  if (auto hd = opt_int("head_dim")) {
    c.head_dim = *hd;
  } else {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0)
      fail(fmt::format("llama config: hidden_size {} is not a multiple of num_attention_heads {}", c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.rms_norm_eps = opt_num(j, "rms_norm_eps").value_or(1e-6);
  c.rope_theta = opt_num(j, "rope_theta").value_or(10000.0);
  c.max_position_embeddings = opt_int("max_position_embeddings").value_or(2048);
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) fail(fmt::format("llama config: '{}' key 'tie_word_embeddings' must be a bool", where));
    c.tie_word_embeddings = it->get<bool>();
  }
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) fail(fmt::format("llama config: '{}' key 'rope_scaling' must be an object or null", where));
    std::string type;
    if (auto t = it->find("rope_type"); t != it->end() && t->is_string()) type = t->get<std::string>();
    else if (auto t2 = it->find("type"); t2 != it->end() && t2->is_string()) type = t2->get<std::string>();
    auto& rs = c.rope_scaling;
    rs.factor = opt_num(*it, "factor").value_or(1.0);
    if (auto o = opt_num(*it, "original_max_position_embeddings")) {
      // Written as an integer, but any number is accepted as long as it is a whole one that fits (converting a double
      // outside int64 is undefined behaviour).
      if (!(*o >= 0.0 && *o <= 9.0e18 && std::floor(*o) == *o))
        fail(fmt::format("llama config: '{}' rope_scaling.original_max_position_embeddings must be a non-negative whole number, "
                         "got {}", where, *o));
      rs.original_max_position_embeddings = static_cast<std::int64_t>(*o);
    }
    if (type == "llama3") {
      rs.type = RopeScalingType::kLlama3;
      rs.low_freq_factor = opt_num(*it, "low_freq_factor").value_or(1.0);
      rs.high_freq_factor = opt_num(*it, "high_freq_factor").value_or(4.0);
    } else if (type == "linear") {
      rs.type = RopeScalingType::kLinear;
    } else if (type == "default" || type.empty()) {
      rs.type = RopeScalingType::kNone;
    } else {
      fail(fmt::format("llama config: '{}' rope_scaling type '{}' is not supported (expected linear or llama3)", where, type));
    }
  }
  if (auto b = opt_int("bos_token_id")) c.bos_token_id = token_id_of(*b, "bos_token_id");
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(token_id_of(int_of(*it, "eos_token_id"), "eos_token_id"));
    } else if (it->is_array()) {
      for (const auto& e : *it) {
        if (!e.is_number_integer()) fail(fmt::format("llama config: '{}' eos_token_id entries must be integers", where));
        c.eos_token_ids.push_back(token_id_of(int_of(e, "eos_token_id"), "eos_token_id"));
      }
    } else {
      fail(fmt::format("llama config: '{}' key 'eos_token_id' must be an integer or a list, got {}", where, detail::json_excerpt(*it)));
    }
  }
  c.validate();
  return c;
}

std::vector<float> rope_inverse_frequencies(const LlamaConfig& c, std::int64_t head_dim) {
  const std::int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (std::int64_t j = 0; j < half; ++j)
    inv[static_cast<std::size_t>(j)] =
        static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(2 * j) / static_cast<double>(head_dim)));
  if (!c.rope_freq_factors.empty() && c.rope_freq_factors.size() == inv.size())
    for (std::size_t j = 0; j < inv.size(); ++j) inv[j] = static_cast<float>(inv[j] / c.rope_freq_factors[j]);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kLinear) {
    for (auto& f : inv) f = static_cast<float>(f / s.factor);
  } else if (s.type == RopeScalingType::kLlama3) {
    // Llama 3.1: keep high frequencies, divide low frequencies by `factor`, interpolate smoothly in between.
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    for (auto& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);
      } else {
        const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
      }
    }
  }
  return inv;
}

std::vector<float> sliding_rope_inverse_frequencies(const LlamaConfig& c, std::int64_t head_dim) {
  LlamaConfig plain;
  plain.rope_theta = c.sliding_rope_theta > 0.0 ? c.sliding_rope_theta : c.rope_theta;
  return rope_inverse_frequencies(plain, head_dim);  // no scaling, no frequency factors
}

}  // namespace specdec::models
