// specdec::train — The trainable modules: shared Llama-block pieces, the EAGLE head (EAGLE-1 / EAGLE-3) and the distilled draft model, their losses and savers.
#pragma once

#include "specdec/train/records.hpp"
#include "specdec/train/corpus.hpp"
#include "specdec/train/data.hpp"

namespace specdec::train {

// --- shared pieces of the trainable modules ---------------------------------------------------------------------------------

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);

/// cos/sin tables [T, hd/2] for positions 0..T-1 (plain RoPE, base theta), as the library's models compute them.
std::pair<torch::Tensor, torch::Tensor> rope_tables(std::int64_t T, std::int64_t hd, double theta);

/// x [T, heads, hd] rotated in the rotate_half convention.
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

/// Weights of one Llama block (Hugging Face names relative to the block prefix).
struct BlockWeights {
  torch::Tensor input_norm;  // undefined for EAGLE-1's first layer
  torch::Tensor post_norm, wq, wk, wv, wo, gate, up, down;
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    std::vector<std::pair<std::string, torch::Tensor>> v;
    if (input_norm.defined()) v.emplace_back("input_layernorm.weight", input_norm);
    v.emplace_back("post_attention_layernorm.weight", post_norm);
    v.emplace_back("self_attn.q_proj.weight", wq);
    v.emplace_back("self_attn.k_proj.weight", wk);
    v.emplace_back("self_attn.v_proj.weight", wv);
    v.emplace_back("self_attn.o_proj.weight", wo);
    v.emplace_back("mlp.gate_proj.weight", gate);
    v.emplace_back("mlp.up_proj.weight", up);
    v.emplace_back("mlp.down_proj.weight", down);
    return v;
  }
};

struct BlockShape {
  std::int64_t H, nh, nkv, hd, F;
  double eps, theta;
};

BlockWeights init_block(const BlockShape& s, bool with_input_norm, std::int64_t num_layers, torch::Generator* gen = nullptr);

/// One causal Llama block over a single sequence x [T, H].
torch::Tensor block_forward(const BlockWeights& w, const BlockShape& s, const torch::Tensor& x, const torch::Tensor& cos,
                                   const torch::Tensor& sin, const torch::Tensor& causal_mask);

torch::Tensor causal_mask(std::int64_t T);

/// Soft cross-entropy of logits [T, V] against the top-k target distribution (ids [T, K], probs [T, K], renormalised).
torch::Tensor soft_ce(const torch::Tensor& logits, const torch::Tensor& ids, const torch::Tensor& probs);

/// A reduced vocabulary (an EAGLE head's draft vocabulary, a draft model's output vocabulary): ids [Vd] target ids,
/// ascending; t2d [V] the column of a target id, or -1.
struct VocabularyIndex {
  torch::Tensor ids, t2d;
};
/// The index of `ids` (target ids of a `vocab`-token vocabulary, distinct; sorted here). Throws naming `who` otherwise.
VocabularyIndex vocabulary_index(std::vector<std::int64_t> ids, std::int64_t vocab, const char* who);
/// The target's top-k (ids, probs [T, K]) as columns of a reduced vocabulary (t2d of its VocabularyIndex): entries
/// outside it get probability 0 (and column 0).
void to_vocabulary_columns(const torch::Tensor& t2d, torch::Tensor& ids, torch::Tensor& probs);

// --- safetensors (float16) writer ------------------------------------------------------------------------------------------

void write_safetensors_f16(const fs::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors);

/// The trainable tensors of a module, in the order of its named() list (the order checkpoints store them in).
template <class Module>
struct Trainable {
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> v;
    for (auto& [n, t] : static_cast<const Module&>(*this).named()) v.push_back(t);
    return v;
  }
  void set_requires_grad() {
    for (auto& t : parameters()) t.set_requires_grad(true);
  }
};

// --- the EAGLE head as a trainable module -----------------------------------------------------------------------------------

/// An EAGLE head, exactly the math of EagleHead::forward for a chain from position 0:
///   EAGLE-1: x = fc([embed(x_{i+1}); f_i]) + bias, the first layer without input norm, any later layers plain Llama
///            blocks (with input norm), logits = the target's LM head rows.
///   EAGLE-3: x = fc(fused_i) (3H -> H, the outputs of three target blocks), the midlayer attends over
///            [input_layernorm(embed); hidden_norm(x)] with x as the residual, logits = its own lm_head(norm(out)).
struct EagleTrainable : Trainable<EagleTrainable> {
  proposers::EagleVersion version = proposers::EagleVersion::kEagle1;
  BlockShape shape;
  torch::Tensor fc_w, fc_b;
  BlockWeights layer;
  std::vector<BlockWeights> more_layers;  // EAGLE-1: the layers after the first ("layers.1." ...)
  torch::Tensor hidden_norm, final_norm;  // EAGLE-3 only
  torch::Tensor embed, lm_head;  // the target's, frozen
  // Draft vocabulary (all of the target's when draft_ids is undefined): the head scores lm_head rows draft_ids [Vd];
  // t2d_index [V] is the draft index of a target id or -1. EAGLE-3 trains lm_head_d (its own LM head, started from those
  // rows of the target's); EAGLE-1 keeps it frozen.
  torch::Tensor draft_ids, t2d_index, lm_head_d;
  models::LlamaConfig layer_config;
  std::vector<std::int64_t> feature_layers;  // EAGLE-3: the target blocks whose outputs the fused feature concatenates

  /// layers_n: decoder layers (EAGLE-1: >= 1; EAGLE-3: 1).
  EagleTrainable(const models::LlamaConfig& target, const proposers::EagleTargetWeights& tw, std::uint64_t seed,
                 proposers::EagleVersion v = proposers::EagleVersion::kEagle1, std::int64_t layers_n = 1) : version(v) {
    if (layers_n < 1 || (v == proposers::EagleVersion::kEagle3 && layers_n != 1))
      fail(fmt::format("EagleTrainable: layers: expected {}, got {}", v == proposers::EagleVersion::kEagle3 ? "1 for EAGLE-3" : ">= 1",
                       layers_n));
    torch::manual_seed(seed);
    layer_config = target;
    layer_config.num_layers = layers_n;
    const std::int64_t H = target.hidden_size;
    const std::int64_t hd = target.head_dim ? target.head_dim : H / target.num_heads;
    shape = {H, target.num_heads, target.num_kv_heads ? target.num_kv_heads : target.num_heads, hd, target.intermediate_size,
             target.rms_norm_eps, target.rope_theta};
    embed = tensor_of_values(tw.embed_tokens);
    lm_head = tensor_of_values(tw.lm_head);
    if (eagle3()) {
      // fc starts as [0.02 randn | 0.02 randn | I]: the fused feature starts as the highest of the three target layers.
      fc_w = torch::cat({torch::randn({H, 2 * H}) * 0.02, torch::eye(H)}, 1);
      BlockShape wide = shape;
      wide.H = 2 * H;  // q/k/v read [norm(embed); norm(x)]
      BlockWeights in = init_block(wide, false, 1);
      layer = init_block(shape, true, 1);
      layer.wq = in.wq, layer.wk = in.wk, layer.wv = in.wv;
      hidden_norm = torch::ones({H});
      final_norm = torch::ones({H});
      lm_head_d = lm_head.clone();
      feature_layers = proposers::eagle3_default_feature_layers(target.num_layers);
    } else {
      // fc starts as [0 | I]: the fused input is the target feature plus a small learned share of the token embedding.
      fc_w = torch::cat({torch::randn({H, H}) * 0.02, torch::eye(H)}, 1);
      fc_b = torch::zeros({H});
      layer = init_block(shape, false, layers_n);
      for (std::int64_t i = 1; i < layers_n; ++i) more_layers.push_back(init_block(shape, true, layers_n));
      lm_head_d = lm_head;
    }
  }
  bool eagle3() const { return version == proposers::EagleVersion::kEagle3; }
  /// Width of one row of the training features: EAGLE-1 the target's final hidden state, EAGLE-3 three layers' outputs.
  std::int64_t feature_width() const { return eagle3() ? 3 * shape.H : shape.H; }
  std::int64_t vocab() const { return lm_head.size(0); }
  std::int64_t draft_vocab() const { return lm_head_d.size(0); }
  /// Restricts the scored vocabulary to `ids` (target ids, distinct), kept in ascending order.
  void set_draft_vocabulary(std::vector<std::int64_t> ids) {
    auto index = vocabulary_index(std::move(ids), vocab(), "EagleTrainable::set_draft_vocabulary");
    draft_ids = index.ids;
    t2d_index = index.t2d;
    lm_head_d = lm_head.index_select(0, draft_ids).contiguous();
  }
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    if (eagle3()) {
      std::vector<std::pair<std::string, torch::Tensor>> v = {{"fc.weight", fc_w}, {"midlayer.hidden_norm.weight", hidden_norm}};
      for (auto& [n, t] : layer.named()) v.emplace_back("midlayer." + n, t);
      v.emplace_back("norm.weight", final_norm);
      v.emplace_back("lm_head.weight", lm_head_d);
      return v;
    }
    std::vector<std::pair<std::string, torch::Tensor>> v = {{"fc.weight", fc_w}, {"fc.bias", fc_b}};
    for (auto& [n, t] : layer.named()) v.emplace_back("layers.0." + n, t);
    for (std::size_t i = 0; i < more_layers.size(); ++i)
      for (auto& [n, t] : more_layers[i].named()) v.emplace_back(fmt::format("layers.{}.{}", i + 1, n), t);
    return v;
  }
  /// Draft-vocabulary logits of layer outputs [n, H] (EAGLE-3 applies its final norm first).
  torch::Tensor logits(const torch::Tensor& out) const {
    return torch::linear(eagle3() ? rms_norm(out, final_norm, shape.eps) : out, lm_head_d);
  }
  /// tokens_next [T] (x_{i+1}), features [T, feature_width()] -> layer outputs [T, H] (EAGLE-1: the predicted f_{i+1}).
  torch::Tensor forward(const torch::Tensor& tokens_next, const torch::Tensor& features) const {
    return forward_steps(tokens_next, features, 1).front();
  }
  /// Training-time test (as EAGLE-3 trains): `steps` unrolled draft steps over one sequence. Step 1 is forward(); at step
  /// k >= 2 row i reads the head's own step-(k-1) output of row i-1 in place of f_i (row 0 keeps f_0; EAGLE-3 feeds it
  /// straight in as x, skipping fc, as at inference) and attends exactly as the k-th draft of a chain does at inference: to
  /// the step-1 rows j <= i-k+1 (built from true features), to the step-m row i-k+m for 2 <= m < k (the earlier drafts of
  /// its chain) and to itself. Returns [steps] x [T, H].
  std::vector<torch::Tensor> forward_steps(const torch::Tensor& tokens_next, const torch::Tensor& features, int steps) const {
    const std::int64_t T = features.size(0), group = shape.nh / shape.nkv;
    auto emb = embed.index_select(0, tokens_next);
    auto [c, s] = rope_tables(T, shape.hd, shape.theta);
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape.hd));
    // keys[l], values[l]: layer l's keys and values of steps 1..k, [nh, T, hd] each.
    std::vector<std::vector<torch::Tensor>> keys(1 + more_layers.size()), values(1 + more_layers.size());
    std::vector<torch::Tensor> outs;
    torch::Tensor in_f = features;
    const auto ninf = -std::numeric_limits<float>::infinity();
    torch::Tensor x1, emb_n;  // EAGLE-3: fc(fused) of step 1, the normalised embedding
    if (eagle3()) {
      x1 = torch::linear(features, fc_w);
      emb_n = rms_norm(emb, layer.input_norm, shape.eps);
    }
    for (int k = 1; k <= steps; ++k) {
      torch::Tensor x, a_in;
      if (eagle3()) {
        x = k == 1 ? x1 : torch::cat({x1.narrow(0, 0, 1), outs.back().narrow(0, 0, T - 1)}, 0);
        a_in = torch::cat({emb_n, rms_norm(x, hidden_norm, shape.eps)}, 1);
      } else {
        if (k >= 2) in_f = torch::cat({features.narrow(0, 0, 1), outs.back().narrow(0, 0, T - 1)}, 0);
        x = torch::linear(torch::cat({emb, in_f}, 1), fc_w, fc_b);
        a_in = x;
      }
      // Mask over the keys of steps 1..k: [T, k*T].
      std::vector<torch::Tensor> blocks;
      blocks.push_back(torch::full({T, T}, ninf).triu(-(k - 1) + 1));  // step 1: j <= i-k+1
      for (int m = 2; m <= k; ++m) {
        // step m: only row i-k+m (the diagonal shifted by k-m)
        auto eye = torch::full({T, T}, ninf);
        eye.diagonal(-(k - m)).fill_(0);
        blocks.push_back(eye);
      }
      auto mask = torch::cat(blocks, 1);
      // One layer: attention over a_in (its input, normalised) with residual x, then the MLP.
      auto block = [&](const BlockWeights& w, std::size_t l, const torch::Tensor& in, const torch::Tensor& res) {
        auto q = rope(torch::linear(in, w.wq).view({T, shape.nh, shape.hd}), c, s).transpose(0, 1);  // [nh, T, hd]
        auto kk = rope(torch::linear(in, w.wk).view({T, shape.nkv, shape.hd}), c, s).transpose(0, 1);
        auto vv = torch::linear(in, w.wv).view({T, shape.nkv, shape.hd}).transpose(0, 1);
        if (group > 1) {
          kk = kk.repeat_interleave(group, 0);
          vv = vv.repeat_interleave(group, 0);
        }
        keys[l].push_back(kk);
        values[l].push_back(vv);
        auto K = torch::cat(keys[l], 1), Vv = torch::cat(values[l], 1);  // [nh, k*T, hd]
        auto scores = torch::matmul(q, K.transpose(1, 2)) * scale + mask;  // every row sees at least itself
        auto o = torch::matmul(torch::softmax(scores, -1), Vv).transpose(0, 1).reshape({T, shape.nh * shape.hd});
        torch::Tensor h = res + torch::linear(o, w.wo);
        auto n = rms_norm(h, w.post_norm, shape.eps);
        return h + torch::linear(torch::silu(torch::linear(n, w.gate)) * torch::linear(n, w.up), w.down);
      };
      torch::Tensor h = block(layer, 0, a_in, x);
      for (std::size_t l = 0; l < more_layers.size(); ++l)
        h = block(more_layers[l], l + 1, rms_norm(h, more_layers[l].input_norm, shape.eps), h);
      outs.push_back(h);
    }
    return outs;
  }
  proposers::EagleHeadConfig head_config() const {
    proposers::EagleHeadConfig c;
    c.version = version;
    c.layer = layer_config;
    c.fc_bias = !eagle3();
    c.feature = proposers::EagleFeature::kPostNorm;
    c.draft_vocab_size = draft_vocab();
    if (eagle3()) {
      c.target_hidden_size = shape.H;
      c.feature_layers = feature_layers;
    }
    return c;
  }
  /// The library's EagleHead holding these weights (copied).
  proposers::EagleHead to_head(const proposers::EagleTargetWeights& tw) const {
    std::map<std::string, at::Tensor> w;
    for (auto& [n, t] : named()) w[n] = t.detach().clone();
    if (draft_ids.defined()) w["d2t"] = draft_ids - torch::arange(draft_vocab(), torch::kLong);
    else if (eagle3()) w["d2t"] = torch::zeros({draft_vocab()}, torch::kLong);
    return proposers::EagleHead(head_config(), weights_of(w), tw);
  }
  /// Copies the weights (and the draft vocabulary) of a saved head of the same version and shape.
  void load_from(const fs::path& dir, const proposers::EagleTargetWeights& tw) {
    const proposers::EagleHead head = proposers::load_eagle_head(dir, tw);
    if (head.version() != version)
      fail(fmt::format("--init: '{}' is an {} head, expected {}", dir.string(), proposers::to_string(head.version()),
                       proposers::to_string(version)));
    // First, so that EAGLE-3's own LM head (one of named()) has the saved rows' shape when the loop copies it.
    if (head.draft_vocab_size() < head.vocab_size()) set_draft_vocabulary(head.draft_to_target());
    std::map<std::string, at::Tensor> w;
    for (auto& [n, t] : head.named_weights()) w[n] = tensor_of_values(t);
    // A head with fewer layers starts this one: its layers are copied, and each further layer starts as the identity
    // (its attention-output and down projections zero, so the residual passes through), so training starts from the
    // saved head's outputs.
    const std::int64_t saved_layers = head.config().layer.num_layers;
    if (saved_layers > layer_config.num_layers)
      fail(fmt::format("--init: '{}' has {} layers, more than the {} trained", dir.string(), saved_layers, layer_config.num_layers));
    torch::NoGradGuard ng;
    std::set<std::string> fresh;  // the further layers' weights
    for (std::size_t i = static_cast<std::size_t>(saved_layers) - 1; i < more_layers.size(); ++i) {
      for (auto& [n, t] : more_layers[i].named()) fresh.insert(fmt::format("layers.{}.{}", i + 1, n));
      more_layers[i].wo.zero_();
      more_layers[i].down.zero_();
    }
    for (auto& [n, t] : named()) {
      if (fresh.count(n) != 0) continue;
      auto it = w.find(n);
      if (it == w.end() || it->second.sizes() != t.sizes())
        fail(fmt::format("--init: '{}': weight '{}' is missing or has another shape", dir.string(), n));
      t.copy_(it->second);
    }
    if (eagle3()) feature_layers = head.config().feature_layers.empty() ? feature_layers : head.config().feature_layers;
  }
  /// Writes config.json (EagleHead::save) and float16 weights.
  void save(const fs::path& dir, const proposers::EagleTargetWeights& tw) const {
    proposers::EagleHead head = to_head(tw);
    head.save(dir, models::SafetensorsDtype::kF16);
  }
};

struct EagleLosses {
  torch::Tensor total, reg, ce;
  double top1 = 0;  // fraction of rows whose head argmax equals the target's argmax
  std::int64_t rows = 0;
};

/// The EAGLE objective on one record: rows i = 0..T-2 read (f_i, x_{i+1}) and predict f_{i+1} and the target's distribution
/// at i+1. `ce_fraction` of the rows (at random) get the cross-entropy term (the LM head product dominates the cost),
/// weighted `ce_weight` beside the feature regression's Smooth-L1 (EAGLE's 0.1). EAGLE-3 drops the feature regression
/// (its records carry fused features, not the next final state) and trains on the cross-entropy alone, weight 1. With
/// `steps` > 1 the unrolled draft steps of forward_steps() add the same objective on their rows (i >= k-1), weighted
/// `step_weight`^(k-1) (EAGLE-3's training-time test). The cross-entropy is over the draft vocabulary: the target's top-k
/// entries outside it are dropped and the rest renormalised.
EagleLosses eagle_loss(const EagleTrainable& m, const Record& r, std::int64_t max_len, const torch::Tensor& noise, double ce_fraction,
                              std::mt19937_64& rng, int steps = 1, double step_weight = 0.8, bool answers_only = false,
                              double ce_weight = 0.1);

// --- the distilled draft model -----------------------------------------------------------------------------------------------

struct DraftTrainable : Trainable<DraftTrainable> {
  models::LlamaConfig config;
  BlockShape shape;
  torch::Tensor embed, final_norm;
  std::vector<BlockWeights> layers;
  // The reduced output vocabulary (set_output_vocabulary): draft_ids [Vd] target ids, ascending; t2d_index [V] the
  // column of a target id or -1. Undefined: the logits score the whole vocabulary.
  torch::Tensor draft_ids, t2d_index;

  /// A small Llama with the target's vocabulary; the embedding starts as the target's embedding projected on its top
  /// `hidden` principal directions (so related tokens start close), rescaled to an element RMS of 1/sqrt(hidden) (tied
  /// output logits of order 1 at the start).
  DraftTrainable(const models::LlamaConfig& target, const at::Tensor& target_embed, std::int64_t hidden, std::int64_t layers_n,
                 std::int64_t heads, std::int64_t kv_heads, std::int64_t intermediate, std::uint64_t seed) {
    torch::manual_seed(seed);
    config = target;
    config.hidden_size = hidden;
    config.num_layers = layers_n;
    config.num_heads = heads;
    config.num_kv_heads = kv_heads;
    config.head_dim = hidden / heads;
    config.intermediate_size = intermediate;
    config.tie_word_embeddings = true;
    shape = {hidden, heads, kv_heads, hidden / heads, intermediate, target.rms_norm_eps, target.rope_theta};
    {
      torch::NoGradGuard ng;
      auto E = target_embed.to(torch::kFloat);
      auto Ec = E - E.mean(0, true);
      auto C = torch::matmul(Ec.t(), Ec);
      auto [evals, evecs] = torch::linalg_eigh(C, "L");
      auto P = evecs.narrow(1, evecs.size(1) - std::min(hidden, evecs.size(1)), std::min(hidden, evecs.size(1)));
      auto e = torch::matmul(Ec, P);
      if (e.size(1) < hidden) e = torch::cat({e, torch::randn({e.size(0), hidden - e.size(1)}) * 0.02}, 1);
      embed = (e / e.pow(2).mean().sqrt() / std::sqrt(static_cast<double>(hidden))).contiguous();
    }
    for (std::int64_t i = 0; i < layers_n; ++i) layers.push_back(init_block(shape, true, layers_n));
    final_norm = torch::ones({hidden});
  }
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    std::vector<std::pair<std::string, torch::Tensor>> v = {{"model.embed_tokens.weight", embed}};
    for (std::size_t i = 0; i < layers.size(); ++i)
      for (auto& [n, t] : layers[i].named()) v.emplace_back(fmt::format("model.layers.{}.{}", i, n), t);
    v.emplace_back("model.norm.weight", final_norm);
    return v;
  }
  /// Scores only the target ids `ids` (distinct; kept ascending): the tied output rows of those tokens. The inputs still
  /// take every token. Saved as the checkpoint's d2t (models::read_output_ids).
  void set_output_vocabulary(std::vector<std::int64_t> ids) {
    auto index = vocabulary_index(std::move(ids), config.vocab_size, "DraftTrainable::set_output_vocabulary");
    draft_ids = index.ids;
    t2d_index = index.t2d;
  }
  std::int64_t output_size() const { return draft_ids.defined() ? draft_ids.size(0) : config.vocab_size; }
  /// The output projection's rows: the embedding, or its rows of the output vocabulary.
  torch::Tensor output_rows() const { return draft_ids.defined() ? embed.index_select(0, draft_ids) : embed; }
  /// tokens [T] -> final normed hidden [T, H] (logits = hidden @ output_rows()^T).
  torch::Tensor hidden(const torch::Tensor& tokens) const {
    const std::int64_t T = tokens.size(0);
    auto x = embed.index_select(0, tokens);
    auto [c, s] = rope_tables(T, shape.hd, shape.theta);
    auto mask = causal_mask(T);
    for (const auto& l : layers) x = block_forward(l, shape, x, c, s, mask);
    return rms_norm(x, final_norm, shape.eps);
  }
  void save(const fs::path& dir) const {
    fs::create_directories(dir);
    nlohmann::ordered_json j;
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["hidden_act"] = "silu";
    j["hidden_size"] = config.hidden_size;
    j["intermediate_size"] = config.intermediate_size;
    j["num_hidden_layers"] = config.num_layers;
    j["num_attention_heads"] = config.num_heads;
    j["num_key_value_heads"] = config.num_kv_heads;
    j["head_dim"] = config.head_dim;
    j["vocab_size"] = config.vocab_size;
    j["rms_norm_eps"] = config.rms_norm_eps;
    j["rope_theta"] = config.rope_theta;
    j["max_position_embeddings"] = config.max_position_embeddings;
    j["tie_word_embeddings"] = true;
    if (config.bos_token_id) j["bos_token_id"] = *config.bos_token_id;
    if (!config.eos_token_ids.empty()) j["eos_token_id"] = config.eos_token_ids.front();
    j["torch_dtype"] = "float16";
    std::ofstream out(dir / "config.json", std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) fail(fmt::format("DraftTrainable::save: writing '{}' failed", (dir / "config.json").string()));
    auto tensors = named();
    if (draft_ids.defined()) tensors.emplace_back("d2t", draft_ids - torch::arange(output_size(), torch::kLong));
    write_safetensors_f16(dir / "model.safetensors", tensors);
  }
};

struct DraftLosses {
  torch::Tensor total;
  double top1 = 0;
  std::int64_t rows = 0;
};

/// Cross-entropy of the draft's next-token distribution against the target's top-k distribution at every position;
/// with an output vocabulary, over its tokens (the target's top-k entries outside it dropped, the rest renormalised).
/// `answers_only`: only the rows that predict the answer's tokens (at least the last row).
DraftLosses draft_loss(const DraftTrainable& m, const Record& r, std::int64_t max_len, bool answers_only = false);

}  // namespace specdec::train
