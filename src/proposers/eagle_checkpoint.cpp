// EAGLE head checkpoints: named weights, save / load of config.json + model.safetensors, and the target weights a head
// borrows (embedding, LM head) from a GGUF file or a safetensors checkpoint (see eagle.hpp).
#include "eagle_internal.hpp"

namespace specdec::proposers {

using namespace eagle_internal;

std::vector<std::pair<std::string, FloatTensor>> EagleHead::named_weights() const {
  const Impl& m = *impl_;
  std::vector<std::pair<std::string, FloatTensor>> out;
  const bool e3 = m.cfg.version == EagleVersion::kEagle3;
  if (m.own_embed) out.emplace_back("embed_tokens.weight", m.embed);
  out.emplace_back("fc.weight", m.fc_w);
  if (m.fc_b.defined()) out.emplace_back("fc.bias", m.fc_b);
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const Impl::Layer& L = m.layers[i];
    const std::string p = e3 ? "midlayer." : fmt::format("layers.{}.", i);
    if (L.hidden_norm.defined()) out.emplace_back(p + "hidden_norm.weight", L.hidden_norm);
    if (L.input_norm.defined()) out.emplace_back(p + "input_layernorm.weight", L.input_norm);
    out.emplace_back(p + "post_attention_layernorm.weight", L.post_norm);
    out.emplace_back(p + "self_attn.q_proj.weight", L.wq);
    out.emplace_back(p + "self_attn.k_proj.weight", L.wk);
    out.emplace_back(p + "self_attn.v_proj.weight", L.wv);
    out.emplace_back(p + "self_attn.o_proj.weight", L.wo);
    out.emplace_back(p + "mlp.gate_proj.weight", L.gate);
    out.emplace_back(p + "mlp.up_proj.weight", L.up);
    out.emplace_back(p + "mlp.down_proj.weight", L.down);
  }
  if (e3) {
    out.emplace_back("norm.weight", m.final_norm);
    out.emplace_back("lm_head.weight", m.lm_head);
  }
  if (e3 || m.Vd < m.V) {
    FloatTensor d2t({m.Vd}), t2d({m.V});
    for (std::int64_t d = 0; d < m.Vd; ++d) d2t.mutable_data()[d] = static_cast<float>(m.d2t_ids[static_cast<std::size_t>(d)] - d);
    for (std::int64_t t = 0; t < m.V; ++t) t2d.mutable_data()[t] = m.t2d[static_cast<std::size_t>(t)] ? 1.f : 0.f;
    out.emplace_back("d2t", d2t);
    out.emplace_back("t2d", t2d);
  }
  return out;
}

namespace {

// float32 -> bfloat16 bits, rounded to nearest even (a NaN stays a quiet NaN).
std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// The head's weights into one safetensors file: floats as `float_dtype`, d2t as int64, t2d as bool; errors name
// EagleHead::save.
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, FloatTensor>>& tensors,
                       sm::SafetensorsDtype float_dtype) {
  if (float_dtype != sm::SafetensorsDtype::kF32 && float_dtype != sm::SafetensorsDtype::kF16 &&
      float_dtype != sm::SafetensorsDtype::kBF16)
    fail(fmt::format("EagleHead::save: float_dtype: expected F32, F16 or BF16, got {}", sm::to_string(float_dtype)));
  std::vector<std::vector<std::byte>> bytes;  // alive until written
  std::vector<sm::SafetensorsWriteTensor> out;
  for (const auto& [name, t] : tensors) {
    const std::size_t n = static_cast<std::size_t>(t.numel());
    sm::SafetensorsDtype dtype = float_dtype;
    std::vector<std::byte>& b = bytes.emplace_back();
    if (name == "d2t") {
      dtype = sm::SafetensorsDtype::kI64;
      b.resize(n * 8);
      for (std::size_t i = 0; i < n; ++i) {
        const auto v = static_cast<std::int64_t>(t.data()[i]);
        std::memcpy(b.data() + i * 8, &v, 8);
      }
    } else if (name == "t2d") {
      dtype = sm::SafetensorsDtype::kBool;
      b.resize(n);
      for (std::size_t i = 0; i < n; ++i) b[i] = std::byte{t.data()[i] != 0.f ? std::uint8_t{1} : std::uint8_t{0}};
    } else if (float_dtype == sm::SafetensorsDtype::kF32) {
      b.resize(n * 4);
      std::memcpy(b.data(), t.data(), n * 4);
    } else {
      b.resize(n * 2);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h =
            float_dtype == sm::SafetensorsDtype::kF16 ? sm::float_to_half(t.data()[i]) : float_to_bf16(t.data()[i]);
        std::memcpy(b.data() + i * 2, &h, 2);
      }
    }
    out.push_back({name, dtype, t.shape(), {b.data(), b.size()}});
  }
  try {
    sm::write_safetensors(path, out, {{"format", "pt"}});
  } catch (const specdec::error& e) {
    throw specdec::error(e.status(), std::string("EagleHead::save: ") + e.what());
  }
}

}  // namespace

void EagleHead::save(const std::filesystem::path& dir, sm::SafetensorsDtype float_dtype) const {
  const Impl& m = *impl_;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(fmt::format("EagleHead::save: cannot create directory '{}': {}", dir.string(), ec.message()));
  const sm::LlamaConfig& l = m.cfg.layer;
  const bool e3 = m.cfg.version == EagleVersion::kEagle3;
  nlohmann::ordered_json j;
  j["architectures"] = {e3 ? "LlamaForCausalLMEagle3" : "LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  j["hidden_size"] = l.hidden_size;
  j["intermediate_size"] = l.intermediate_size;
  j["num_hidden_layers"] = l.num_layers;
  j["num_attention_heads"] = l.num_heads;
  j["num_key_value_heads"] = l.num_kv_heads;
  j["head_dim"] = l.head_dim;
  j["vocab_size"] = l.vocab_size;
  j["rms_norm_eps"] = l.rms_norm_eps;
  j["rope_theta"] = l.rope_theta;
  j["max_position_embeddings"] = l.max_position_embeddings;
  j["tie_word_embeddings"] = false;
  if (l.rope_scaling.type == sm::RopeScalingType::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    nlohmann::ordered_json rs;
    rs["rope_type"] = sm::to_string(l.rope_scaling.type);
    rs["factor"] = l.rope_scaling.factor;
    if (l.rope_scaling.type == sm::RopeScalingType::kLlama3) {
      rs["low_freq_factor"] = l.rope_scaling.low_freq_factor;
      rs["high_freq_factor"] = l.rope_scaling.high_freq_factor;
    }
    if (l.rope_scaling.original_max_position_embeddings > 0)
      rs["original_max_position_embeddings"] = l.rope_scaling.original_max_position_embeddings;
    j["rope_scaling"] = rs;
  }
  if (l.bos_token_id) j["bos_token_id"] = *l.bos_token_id;
  if (!l.eos_token_ids.empty()) j["eos_token_id"] = l.eos_token_ids.size() == 1 ? nlohmann::ordered_json(l.eos_token_ids[0])
                                                                                : nlohmann::ordered_json(l.eos_token_ids);
  if (e3) {
    j["draft_vocab_size"] = m.Vd;
    j["target_hidden_size"] = m.Ht;
    if (!m.cfg.feature_layers.empty()) {
      std::vector<std::int64_t> ids;
      for (auto f : m.cfg.feature_layers) ids.push_back(f + 1);  // vLLM numbers the layer whose input is read
      j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", ids}};
    }
  } else {
    j["bias"] = m.fc_b.defined();
    if (m.Vd < m.V) j["draft_vocab_size"] = m.Vd;
    if (m.cfg.feature == EagleFeature::kPreNorm) j["specdec_feature"] = "pre_norm";
  }
  {
    std::ofstream out(dir / "config.json", std::ios::trunc);
    if (!out) fail(fmt::format("EagleHead::save: cannot open '{}' for writing", (dir / "config.json").string()));
    out << j.dump(2) << "\n";
    if (!out) fail(fmt::format("EagleHead::save: writing '{}' failed", (dir / "config.json").string()));
  }
  write_safetensors(dir / "model.safetensors", named_weights(), float_dtype);
}

namespace {

struct CheckpointIndex {
  std::vector<sm::SafetensorsFile> files;
  std::map<std::string, std::pair<std::size_t, const sm::SafetensorsTensor*>, std::less<>> index;
};

CheckpointIndex open_checkpoint(const std::filesystem::path& dir, const char* who) {
  if (!std::filesystem::is_directory(dir)) fail(fmt::format("{}: dir: expected a checkpoint directory, got '{}'", who, dir.string()));
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) {
    const bool bin = std::filesystem::exists(dir / "pytorch_model.bin");
    fail(fmt::format("{}: dir: expected *.safetensors files in '{}', got none{}", who, dir.string(),
                     bin ? " (pytorch_model.bin is not read: convert it to safetensors)" : ""));
  }
  CheckpointIndex ci;
  ci.files.reserve(paths.size());
  for (const auto& p : paths) ci.files.emplace_back(p);
  for (std::size_t f = 0; f < ci.files.size(); ++f)
    for (const auto& t : ci.files[f].tensors()) ci.index[t.name] = {f, &t};
  return ci;
}

// A checkpoint tensor as float32 values: floats converted exactly, integers and bools as their values (d2t's offsets
// and t2d's 0/1 are exact in float32).
FloatTensor read_tensor(const CheckpointIndex& ci, const std::string& name) {
  auto it = ci.index.find(name);
  if (it == ci.index.end()) return {};
  const auto& [f, t] = it->second;
  FloatTensor out(t->shape);
  switch (t->dtype) {
    case sm::SafetensorsDtype::kF32:
    case sm::SafetensorsDtype::kF16:
    case sm::SafetensorsDtype::kBF16:
      ci.files[f].to_float(*t, std::span<float>(out.mutable_data(), static_cast<std::size_t>(out.numel())));
      return out;
    default: {
      const auto v = to_int64_vector(ci.files[f], *t, name);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] <= -16777216 || v[i] >= 16777216)
          fail(fmt::format("load_eagle_head: tensor '{}': value {} at {} is too large to hold exactly", name, v[i], i));
        out.mutable_data()[i] = static_cast<float>(v[i]);
      }
      return out;
    }
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

EagleHeadConfig load_eagle_head_config(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    fail(fmt::format("load_eagle_head: dir: expected a checkpoint directory, got '{}'", dir.string()));
  const std::filesystem::path cfg_path = dir / "config.json";
  if (!std::filesystem::is_regular_file(cfg_path))
    fail(fmt::format("load_eagle_head: expected a config.json in '{}', got none", dir.string()));
  EagleHeadConfig c;
  c.layer = sm::llama_config_from_hf_json(cfg_path);
  std::ifstream in(cfg_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  bool has_midlayer = false;
  {
    const CheckpointIndex ci = open_checkpoint(dir, "load_eagle_head_config");
    for (const auto& [name, _] : ci.index)
      if (name.rfind("midlayer.", 0) == 0) has_midlayer = true;
  }
  c.version = has_midlayer ? EagleVersion::kEagle3 : EagleVersion::kEagle1;
  const std::string where = cfg_path.string();
  auto opt_int = [&](const nlohmann::json& obj, const char* key) -> std::optional<std::int64_t> {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer()) fail(fmt::format("load_eagle_head: '{}' key '{}': expected an integer, got {}", where, key, it->dump()));
    return it->get<std::int64_t>();
  };
  if (c.version == EagleVersion::kEagle1) {
    if (auto it = j.find("bias"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean()) fail(fmt::format("load_eagle_head: '{}' key 'bias': expected a bool, got {}", where, it->dump()));
      c.fc_bias = it->get<bool>();
    }
    if (auto it = j.find("specdec_feature"); it != j.end() && it->is_string()) {
      const std::string f = it->get<std::string>();
      if (f == "pre_norm") c.feature = EagleFeature::kPreNorm;
      else if (f == "post_norm") c.feature = EagleFeature::kPostNorm;
      else fail(fmt::format("load_eagle_head: '{}' key 'specdec_feature': expected \"pre_norm\" or \"post_norm\", got {}", where, it->dump()));
    }
    c.draft_vocab_size = opt_int(j, "draft_vocab_size").value_or(0);
  } else {
    c.draft_vocab_size = opt_int(j, "draft_vocab_size").value_or(0);
    c.target_hidden_size = opt_int(j, "target_hidden_size").value_or(0);
    const nlohmann::json* ids = nullptr;
    if (auto e = j.find("eagle_config"); e != j.end() && e->is_object())
      if (auto it = e->find("eagle_aux_hidden_state_layer_ids"); it != e->end() && !it->is_null()) ids = &*it;
    if (auto it = j.find("eagle_aux_hidden_state_layer_ids"); !ids && it != j.end() && !it->is_null()) ids = &*it;
    if (ids) {
      if (!ids->is_array() || ids->size() != 3)
        fail(fmt::format("load_eagle_head: '{}' key 'eagle_aux_hidden_state_layer_ids': expected 3 integers, got {}", where, ids->dump()));
      for (const auto& e : *ids) {
        if (!e.is_number_integer() || e.get<std::int64_t>() < 1)
          fail(fmt::format("load_eagle_head: '{}' key 'eagle_aux_hidden_state_layer_ids': expected integers >= 1, got {}", where, ids->dump()));
        c.feature_layers.push_back(e.get<std::int64_t>() - 1);
      }
    }
  }
  return c;
}

EagleHead load_eagle_head(const std::filesystem::path& dir, const EagleTargetWeights& target, const EagleHeadOptions& options) {
  const EagleHeadConfig config = load_eagle_head_config(dir);
  const CheckpointIndex ci = open_checkpoint(dir, "load_eagle_head");
  std::set<std::string, std::less<>> used;
  auto get = [&](const std::string& name) {
    used.insert(name);
    return read_tensor(ci, name);
  };
  try {
    EagleHead head(config, get, target, options);
    for (const auto& [name, _] : ci.index) {
      if (used.count(name) || ends_with(name, "rotary_emb.inv_freq")) continue;
      fail(fmt::format("load_eagle_head: tensor '{}' in '{}': not part of an {} head with {} layer(s)", name, dir.string(),
                       config.version == EagleVersion::kEagle1 ? "EAGLE-1" : "EAGLE-3", config.layer.num_layers));
    }
    return head;
  } catch (const specdec::error& e) {
    const std::string what = e.what();
    if (what.rfind("load_eagle_head", 0) == 0) throw;
    throw specdec::error(e.status(), fmt::format("load_eagle_head: '{}': {}", dir.string(), what));
  }
}

EagleTargetWeights eagle_target_weights_from_safetensors(const std::filesystem::path& dir) {
  const CheckpointIndex ci = open_checkpoint(dir, "eagle_target_weights_from_safetensors");
  EagleTargetWeights w;
  w.embed_tokens = read_tensor(ci, "model.embed_tokens.weight");
  if (!w.embed_tokens.defined())
    fail(fmt::format("eagle_target_weights_from_safetensors: tensor 'model.embed_tokens.weight' is missing in '{}'", dir.string()));
  w.lm_head = read_tensor(ci, "lm_head.weight");
  if (!w.lm_head.defined()) w.lm_head = w.embed_tokens;
  return w;
}

EagleTargetWeights eagle_target_weights_from_gguf(const std::filesystem::path& path) {
  sm::GgufFile file(path);
  auto read = [&](const char* name) -> FloatTensor {
    const sm::TensorInfo* info = file.find_tensor(name);
    if (!info) return {};
    FloatTensor t(info->shape);
    file.dequantize(*info, std::span<float>(t.mutable_data(), static_cast<std::size_t>(t.numel())));
    return t;
  };
  EagleTargetWeights w;
  w.embed_tokens = read("token_embd.weight");
  if (!w.embed_tokens.defined())
    fail(fmt::format("eagle_target_weights_from_gguf: tensor 'token_embd.weight' is missing in '{}'", path.string()));
  w.lm_head = read("output.weight");
  if (!w.lm_head.defined()) w.lm_head = w.embed_tokens;
  return w;
}

}  // namespace specdec::proposers
