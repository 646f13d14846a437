// Loaders: GGUF (llama.cpp; block formats kept) and Hugging Face safetensors checkpoints into a LlamaModel.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <regex>

#include "specdec/models/detail/errors.hpp"
#include "specdec/models/aten_llama.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
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
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
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
  std::smatch m;
  if (std::regex_match(hf, m, layer)) {
    const std::string part = m[2].str();
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
      return {fmt::format("blk.{}.{}", m[1].str(), gguf), heads};
    }
  }
  return {"", 0};
}

}  // namespace

LlamaModel load_llama_gguf(const std::filesystem::path& path, const LlamaOptions& options) {
  GgufFile file(path);
  LlamaConfig config = llama_config_from_gguf(file);
  config.validate();
  require_block_support(config, "load_llama_gguf");
  c10::NoGradGuard guard;
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

  // Float32 tensors by Hugging Face name (undefined when absent).
  WeightGetter getter() const {
    return [this](const std::string& name) -> at::Tensor {
      auto it = index.find(name);
      if (it == index.end()) return {};
      const auto& [f, t] = it->second;
      at::Tensor out = at::empty(t->shape, at::TensorOptions().dtype(at::kFloat));
      files[f].to_float(*t, std::span<float>(out.data_ptr<float>(), static_cast<std::size_t>(out.numel())));
      return out;
    };
  }
};

}  // namespace

LlamaModel load_llama_safetensors(const std::filesystem::path& dir, const LlamaOptions& options) {
  const Checkpoint ck(dir, "load_llama_safetensors");
  c10::NoGradGuard guard;
  return LlamaModel(ck.config, ck.getter(), options);
}

AtenLlamaModel load_aten_llama_safetensors(const std::filesystem::path& dir, const AtenLlamaOptions& options) {
  const Checkpoint ck(dir, "load_aten_llama_safetensors");
  c10::NoGradGuard guard;
  return AtenLlamaModel(ck.config, ck.getter(), options);
}

AtenLlamaModel load_aten_llama_gguf(const std::filesystem::path& path, const AtenLlamaOptions& options) {
  GgufFile file(path);
  LlamaConfig config = llama_config_from_gguf(file);
  config.validate();
  require_block_support(config, "load_aten_llama_gguf");
  c10::NoGradGuard guard;
  return AtenLlamaModel(config, [&](const std::string& hf) -> at::Tensor {
    const GgufName g = gguf_name(hf, config);
    const TensorInfo* info = g.name.empty() ? nullptr : file.find_tensor(g.name);
    if (!info) return {};
    if (!can_dequantize(info->type))
      fail(fmt::format("load_aten_llama_gguf: tensor {}: type {} is not supported (supported: {})", info->name,
                       to_string(info->type), dequantizable_type_names()));
    at::Tensor t = at::empty(info->shape, at::TensorOptions().dtype(at::kFloat));
    file.dequantize(*info, std::span<float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel())));
    // llama.cpp's converter permutes q/k rows for its interleaved-pair RoPE; the model uses the rotate_half order.
    return g.unpermute_heads > 0 ? unpermute_gguf_qk(t, g.unpermute_heads) : t;
  }, options);
}

void write_tensors_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                               at::ScalarType float_type) {
  SafetensorsDtype float_dtype = SafetensorsDtype::kF32;
  if (float_type == at::kHalf) float_dtype = SafetensorsDtype::kF16;
  else if (float_type == at::kBFloat16) float_dtype = SafetensorsDtype::kBF16;
  else if (float_type != at::kFloat)
    fail(fmt::format("write_tensors_safetensors: float_type: expected Float, Half or BFloat16, got {}",
                                     c10::toString(float_type)));
  std::vector<at::Tensor> data;  // keeps the converted tensors alive until written
  std::vector<SafetensorsWriteTensor> out;
  for (const auto& [name, t0] : tensors) {
    at::Tensor t = t0.detach().contiguous();
    SafetensorsDtype dtype = float_dtype;
    if (t.scalar_type() == at::kLong) dtype = SafetensorsDtype::kI64;
    else if (t.scalar_type() == at::kBool) dtype = SafetensorsDtype::kBool;
    else t = t.to(float_type).contiguous();
    data.push_back(t);
    out.push_back({name, dtype, t.sizes().vec(),
                   {static_cast<const std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.numel() * t.element_size())}});
  }
  write_safetensors(path, out, {{"format", "pt"}});
}

}  // namespace specdec::models
