// Loaders: GGUF (llama.cpp; block formats kept) and Hugging Face safetensors checkpoints into a LlamaModel, and both as
// float32 weights by Hugging Face name for other implementations of the block (the torch layer's AtenLlamaModel).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <map>

#include "specdec/models/detail/errors.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/output_ids.hpp"
#include "specdec/models/safetensors.hpp"

namespace specdec::models {

namespace {

using detail::fail;

// Hugging Face parameter name -> llama.cpp GGUF tensor name (+ the number of heads to un-permute with, 0 for none).
struct GgufName {
  std::string name;
  std::int64_t unpermute_heads = 0;
};

GgufName gguf_name(const std::string& hf, const LlamaConfig& c) {
  static const std::map<std::string, std::string> globals = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  if (auto it = globals.find(hf); it != globals.end()) return {it->second, 0};

  static const std::map<std::string, std::string> per_layer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},       {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},       {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},           {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},  {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},        {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  // model.layers.<digits>.<part>
  static constexpr std::string_view kLayers = "model.layers.";
  const std::string_view name = hf;
  std::size_t digits_end = kLayers.size();
  while (digits_end < name.size() && name[digits_end] >= '0' && name[digits_end] <= '9') ++digits_end;
  if (name.starts_with(kLayers) && digits_end > kLayers.size() && digits_end + 1 < name.size() && name[digits_end] == '.') {
    const std::string_view layer = name.substr(kLayers.size(), digits_end - kLayers.size());
    const std::string part(name.substr(digits_end + 1));
    std::string gguf;
    // The norm before the MLP is llama.cpp's ffn_norm; Hugging Face calls it post_attention_layernorm in Llama's block and
    // pre_feedforward_layernorm in Gemma's, where post_attention_layernorm is the attention output's norm.
    if (part == pre_ffn_norm_name(c)) gguf = "ffn_norm.weight";
    else if (part == "post_attention_layernorm.weight") gguf = "post_attention_norm.weight";
    else if (auto it = per_layer.find(part); it != per_layer.end()) gguf = it->second;
    if (!gguf.empty()) {
      // Only 'llama' files hold q/k rows (and their biases) in llama.cpp's interleaved RoPE order; qwen2, qwen3 and gemma3
      // keep the rotate_half order of their checkpoints.
      std::int64_t heads = 0;
      if (c.gguf_qk_permuted && (part == "self_attn.q_proj.weight" || part == "self_attn.q_proj.bias")) heads = c.num_heads;
      if (c.gguf_qk_permuted && (part == "self_attn.k_proj.weight" || part == "self_attn.k_proj.bias"))
        heads = c.num_kv_heads ? c.num_kv_heads : c.num_heads;
      return {fmt::format("blk.{}.{}", layer, gguf), heads};
    }
  }
  return {"", 0};
}

}  // namespace

LlamaModel load_llama_gguf(const std::filesystem::path& path, const LlamaOptions& options) {
  const GgufFile file(path);
  return load_llama_gguf(file, options);
}

LlamaModel load_llama_gguf(const GgufFile& file, const LlamaOptions& options) {
  LlamaConfig config = llama_config_from_gguf(file);
  config.validate();
  require_block_support(config, "load_llama_gguf");
  return LlamaModel::from_stored(config, [&](const std::string& hf) -> StoredWeight {
    StoredWeight w;
    const GgufName g = gguf_name(hf, config);
    if (g.name.empty()) return w;
    const TensorInfo* info = file.find_tensor(g.name);
    if (!info) return w;
    w.file_name = info->name;
    w.type = info->type;
    w.data = file.tensor_data(*info);
    w.shape = info->shape;
    // llama.cpp's converter permutes q/k rows for its interleaved-pair RoPE; the model restores the rotate_half order.
    w.unpermute_heads = g.unpermute_heads;
    w.release = [&file, info] { file.release(*info); };
    return w;
  }, options);
}

namespace {

// A Hugging Face checkpoint directory: its config and every tensor of its *.safetensors files by name.
struct Checkpoint {
  LlamaConfig config;
  std::vector<SafetensorsFile> files;
  std::map<std::string, std::pair<std::size_t, const SafetensorsTensor*>, std::less<>> index;

  explicit Checkpoint(const std::filesystem::path& dir, const char* who) {
    if (!std::filesystem::is_directory(dir))
      fail(fmt::format("{}: dir: expected a checkpoint directory, got '{}'", who, dir.string()));
    config = llama_config_from_hf_json(dir / "config.json");
    config.validate();
    std::vector<std::filesystem::path> paths;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path());
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) fail(fmt::format("{}: dir: expected *.safetensors files in '{}', got none", who, dir.string()));
    files.reserve(paths.size());
    for (const auto& p : paths) files.emplace_back(p);
    for (std::size_t f = 0; f < files.size(); ++f)
      for (const auto& t : files[f].tensors()) index[t.name] = {f, &t};
  }

  // Float32 tensors by Hugging Face name (undefined when absent), keeping `self` (this checkpoint) alive.
  static WeightGetter getter(std::shared_ptr<const Checkpoint> self) {
    return [self](const std::string& name) -> FloatTensor {
      auto it = self->index.find(name);
      if (it == self->index.end()) return {};
      const auto& [f, t] = it->second;
      FloatTensor out(t->shape);
      self->files[f].to_float(*t, std::span<float>(out.mutable_data(), static_cast<std::size_t>(out.numel())));
      return out;
    };
  }
};

}  // namespace

LlamaModel load_llama_safetensors(const std::filesystem::path& dir, const LlamaOptions& options) {
  const FloatCheckpoint ck = read_float_safetensors(dir, "load_llama_safetensors");
  return LlamaModel(ck.config, ck.get, options);
}

std::vector<std::int64_t> read_output_ids(const std::filesystem::path& dir) {
  const Checkpoint ck(dir, "read_output_ids");
  auto it = ck.index.find("d2t");
  if (it == ck.index.end()) return {};
  const auto& [f, t] = it->second;
  if (t->dtype != SafetensorsDtype::kI64 || t->shape.size() != 1 || t->num_elements < 1)
    fail(fmt::format("read_output_ids: '{}': tensor d2t: expected int64 [draft_vocab_size], got {} {}", dir.string(),
                     to_string(t->dtype), detail::shape_str(t->shape)));
  const std::span<const std::byte> bytes = ck.files[f].tensor_data(*t);
  const std::int64_t n = t->num_elements, V = ck.config.vocab_size;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t d = 0; d < n; ++d) {
    std::int64_t offset = 0;
    std::memcpy(&offset, bytes.data() + d * 8, 8);  // little-endian int64, as safetensors stores it
    ids[static_cast<std::size_t>(d)] = d + offset;
  }
  if (const std::int64_t d = first_invalid_output_id(ids, V); d >= 0)
    fail(fmt::format("read_output_ids: '{}': tensor d2t: draft id {} maps to token {}; expected distinct ids in [0, {})",
                     dir.string(), d, ids[static_cast<std::size_t>(d)], V));
  return ids;
}

FloatCheckpoint read_float_safetensors(const std::filesystem::path& dir, const char* who) {
  auto ck = std::make_shared<const Checkpoint>(dir, who);
  return {ck->config, Checkpoint::getter(ck)};
}

FloatCheckpoint read_float_gguf(const std::filesystem::path& path, const char* who) {
  auto file = std::make_shared<GgufFile>(path);
  LlamaConfig config = llama_config_from_gguf(*file);
  config.validate();
  require_block_support(config, who);
  const std::string name = who;
  return {config, [file, config, name](const std::string& hf) -> FloatTensor {
            const GgufName g = gguf_name(hf, config);
            const TensorInfo* info = g.name.empty() ? nullptr : file->find_tensor(g.name);
            if (!info) return {};
            if (!can_dequantize(info->type))
              fail(fmt::format("{}: tensor {}: type {} is not supported (supported: {})", name, info->name,
                               to_string(info->type), dequantizable_type_names()));
            FloatTensor t(info->shape);
            file->dequantize(*info, std::span<float>(t.mutable_data(), static_cast<std::size_t>(t.numel())));
            // llama.cpp's converter permutes q/k rows for its interleaved-pair RoPE; the block uses the rotate_half order.
            return g.unpermute_heads > 0 ? unpermute_gguf_qk(t, g.unpermute_heads) : t;
          }};
}

}  // namespace specdec::models
