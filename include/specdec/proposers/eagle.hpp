// EAGLE proposers: a small autoregressive head that drafts from the target's own hidden states.
//
// EAGLE-1 (Li et al., 2024): the head reads, at sequence position i, the target's feature f_i (its final hidden state; the
// public code feeds the state after the final RMSNorm, i.e. the LM head's input) together with the embedding of the NEXT
// token x_{i+1}: x = fc([embed(x_{i+1}); f_i]) (2H -> H, with bias), then one (or more) Llama decoder layers — the first one
// without input_layernorm — and the target's own LM head on the layer output (no final norm) predicts x_{i+2}. When drafting
// further than one token, the head's own output stands in for the target feature it does not have yet.
//
// EAGLE-3 (Li et al., 2025): the feature is the concatenation of three target layers' hidden states (low, mid, high; the
// residual stream entering blocks 2, L/2 and L-3, i.e. after blocks 1, L/2 - 1 and L - 4), fused by fc (3H_t -> H, no bias).
// The single decoder layer ("midlayer") normalises the embedding (input_layernorm) and the fused feature (hidden_norm)
// separately and attends over their concatenation (q/k/v take 2H inputs); the residual is the fused feature. Its own final
// norm and LM head score a draft vocabulary (often smaller than the target's); draft id d is target id d + d2t[d], and t2d
// marks the target ids the draft vocabulary covers.
//
// EAGLE-2 dynamic trees (Li et al., 2024b): from the root, expand the top-k children of the top-k frontier nodes ranked by
// path probability (the product of the head's probabilities along the path) for `depth` steps, then keep the best
// `num_nodes` nodes overall. The drafts are deterministic (no probs); the tree verifier's without-replacement rule keeps the
// output distributed exactly as the target's.
//
// Checkpoints (Hugging Face layout, safetensors + config.json, as the public EAGLE / EAGLE-3 heads and vLLM read them):
//   EAGLE-1: fc.weight [H, 2H], fc.bias [H] (absent when config "bias" is false), layers.{i}.self_attn.{q,k,v,o}_proj.weight,
//            layers.{i}.mlp.{gate,up,down}_proj.weight, layers.{i}.post_attention_layernorm.weight,
//            layers.{i}.input_layernorm.weight (i >= 1 only), embed_tokens.weight [V, H] (optional: else the target's),
//            d2t [V_d] int64 and t2d [V] bool (optional, with config "draft_vocab_size": a draft vocabulary, the target
//            LM head's rows it names score the drafts; a specdec extension).
//   EAGLE-3: fc.weight [H, 3H_t], midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight,
//            midlayer.self_attn.{q,k,v}_proj.weight [*, 2H], midlayer.self_attn.o_proj.weight, midlayer.mlp.*,
//            norm.weight [H], lm_head.weight [V_d, H], d2t [V_d] (int64), t2d [V] (bool), embed_tokens.weight (optional).
//   config.json: a Llama config (model_type "llama", hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//   num_key_value_heads, head_dim, vocab_size = the target's, rms_norm_eps, rope_theta, rope_scaling, max_position_embeddings)
//   plus "bias" (EAGLE-1), "draft_vocab_size", "target_hidden_size" (EAGLE-3) and, optionally,
//   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [l0, l1, l2]} (vLLM's convention: the layers whose INPUT is read).
//   A checkpoint is EAGLE-3 when it holds midlayer.* tensors, EAGLE-1 otherwise. Keys ending in rotary_emb.inv_freq are
//   ignored; any other unknown key is an error (as the public loader's strict load).
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "specdec/models/float_tensor.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/safetensors.hpp"
#include "specdec/models/llama_config.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/params.hpp"

namespace specdec::proposers {

enum class EagleVersion : std::uint8_t { kEagle1, kEagle3 };
const char* to_string(EagleVersion version) noexcept;

/// Which final hidden state of the target EAGLE-1 reads. The public EAGLE code and checkpoints use the state after the final
/// norm (the LM head's input); kPreNorm is for heads trained on the residual stream before it.
enum class EagleFeature : std::uint8_t { kPostNorm, kPreNorm };

struct EagleHeadConfig {
  EagleVersion version = EagleVersion::kEagle1;
  /// The head's decoder layer(s): hidden_size, intermediate_size, num_layers (EAGLE-1: >= 1; EAGLE-3: 1), num_heads,
  /// num_kv_heads, head_dim, rms_norm_eps, rope_theta, rope_scaling, max_position_embeddings; vocab_size is the TARGET's.
  models::LlamaConfig layer;
  /// EAGLE-1: fc has a bias (config.json "bias", default true). EAGLE-3's fc never has one.
  bool fc_bias = true;
  /// EAGLE-3: width of one target hidden state (fc reads 3 of them); 0 = layer.hidden_size.
  std::int64_t target_hidden_size = 0;
  /// The draft vocabulary size (rows of the logits the head computes); 0 = layer.vocab_size (then d2t is all zeros).
  /// EAGLE-3: its own lm_head has these rows. EAGLE-1: the head scores only the rows d2t names of the target's LM head
  /// (a frequent-token subset makes a draft step several times cheaper; tokens outside it get draft probability 0).
  std::int64_t draft_vocab_size = 0;
  /// EAGLE-3: the target blocks whose output (models::ForwardBatch::hidden_layers numbering) are the low, mid and high
  /// features. Empty = eagle3_default_feature_layers(target layers), resolved when the proposer is built.
  std::vector<std::int64_t> feature_layers;
  /// EAGLE-1 only.
  EagleFeature feature = EagleFeature::kPostNorm;
};

/// EAGLE-3's default feature layers for a target with `num_target_layers` blocks: the outputs of blocks 1, L/2 - 1 and L - 4
/// (the inputs of blocks 2, L/2, L - 3 as the public code reads them), each clamped into [0, L - 1].
std::vector<std::int64_t> eagle3_default_feature_layers(std::int64_t num_target_layers);

/// The target weights a head shares: the token embedding [V, H] (used when the checkpoint has no embed_tokens.weight) and,
/// for EAGLE-1, the LM head [V, H] (the embedding itself for tied targets). Float32 host values; shared, not copied.
struct EagleTargetWeights {
  models::FloatTensor embed_tokens;
  models::FloatTensor lm_head;
};

/// Reads the embedding and the LM head of a Hugging Face target checkpoint directory (config.json + *.safetensors):
/// model.embed_tokens.weight and lm_head.weight (the embedding when tied or absent).
EagleTargetWeights eagle_target_weights_from_safetensors(const std::filesystem::path& dir);
/// The same from a llama GGUF file (token_embd.weight, output.weight or the embedding when absent), dequantised to float32.
EagleTargetWeights eagle_target_weights_from_gguf(const std::filesystem::path& path);

struct EagleHeadOptions {
  std::int64_t initial_cache_capacity = 256;  ///< positions per cache slot before the first growth
  std::int64_t initial_cache_slots = 1;
  /// Quantise every matrix of the head (fc, the layers' q/k/v, o, gate/up and down, the LM head's draft-vocabulary rows)
  /// to Q8_0 at load and run it on the models' packed integer products: about a quarter of float32's bytes per draft
  /// step, and no longer the checkpoint's exact weights. The drafts may change slightly; the decoded distribution does
  /// not (the verifier keeps the target's). A matrix whose input width is not a multiple of 32 stays float32. Off: the
  /// checkpoint's float32 weights on the streaming float kernel (the reference the trainer's modules are checked against).
  bool quantize_weights = false;
  /// The format quantize_weights quantises to: models::GgmlType::kQ8_0 (the default) or kQ4_0 (half the bytes a draft
  /// step reads, coarser weights).
  models::GgmlType quantized_type = models::GgmlType::kQ8_0;
  /// Precision of the activations that meet quantised weights (models::ActivationBits): 16 (two int8 planes) or 8 (one,
  /// half the integer work of a product).
  int activation_bits = 16;
  /// Threads of the pool the head runs on: the process's pool of this many threads, the one a models::LlamaModel of the
  /// same count (its LlamaOptions::num_threads) runs on, so the target and its head take turns on the same workers.
  /// 0: every CPU the process may run on (models::available_cpus(), LlamaModel's default).
  int num_threads = 0;
};

/// One head forward over a ragged batch: for each of B slots, n_b rows (feature_i, token_i) appended after what the slot
/// caches. Row r attends to the slot's committed prefix, to its ancestors among the slot's uncommitted positions and to
/// itself; it sits at rotary position committed + depth.
struct EagleHeadBatch {
  std::vector<std::int64_t> slots;          ///< [B] distinct allocated slots
  std::vector<std::int64_t> cu_num_tokens;  ///< [B + 1] prefix sums, >= 1 row per slot
  std::vector<std::int64_t> token_ids;      ///< [N] TARGET token ids (the embedding input of each row)
  /// [N, feature_size()] target features (EAGLE-1: [N, H]; EAGLE-3: [N, 3 H_t], fused by fc), or, when
  /// features_are_head_hidden, [N, H] outputs of earlier head rows (EAGLE-3 skips fc for those, as the public code).
  /// Float32 rows in host memory.
  Rows features;
  bool features_are_head_hidden = false;
  /// Empty: every slot's rows form a chain continuing from its last position. Otherwise [B] arrays of absolute cache
  /// positions: the row's parent among the slot's uncommitted positions, or -1 for a child of the committed prefix.
  std::vector<std::vector<std::int64_t>> parents;
  /// Make the new rows part of the committed prefix (chains only; the slot must have no uncommitted positions).
  bool commit = false;
  /// Logits only for the last row of each slot ([B, V_d]) instead of every row.
  bool last_logits_only = false;
};

/// Float32 host rows the output owns.
struct EagleHeadOutput {
  Rows hidden;  ///< [N, H] the last layer's output (before EAGLE-3's final norm): the feature of the rows' children
  Rows logits;  ///< [N or B, V_d] over the DRAFT vocabulary (draft_to_target() maps its columns)
};

/// The head: weights plus its own KV cache of numbered slots (one per request). CPU: its products, RMSNorms, rotary
/// embedding and attention are the Llama block's (models/detail/llama_block.hpp, detail::attention_rows) on the target's
/// thread pool; each row's result is computed alone in a fixed order, so a request's drafts are bit-identical alone or
/// beside others.
class EagleHead {
 public:
  /// Builds the head from `config` and the weights `get` returns under the checkpoint names above. Throws specdec::error
  /// naming the key, the expected and the received shape on a missing or mis-shaped weight.
  EagleHead(const EagleHeadConfig& config, const models::WeightGetter& get, const EagleTargetWeights& target,
            const EagleHeadOptions& options = {});
  /// Seeded random weights (for tests). EAGLE-3 with draft_vocab_size < vocab_size maps draft id d to target id
  /// d * vocab_size / draft_vocab_size (a spread-out injective map).
  static EagleHead random(const EagleHeadConfig& config, std::uint64_t seed, const EagleTargetWeights& target,
                          const EagleHeadOptions& options = {});

  EagleHead(EagleHead&&) noexcept;
  EagleHead& operator=(EagleHead&&) noexcept;
  ~EagleHead();

  const EagleHeadConfig& config() const noexcept;
  EagleVersion version() const noexcept;
  std::int64_t hidden_size() const noexcept;
  std::int64_t vocab_size() const noexcept;        ///< the target's
  std::int64_t draft_vocab_size() const noexcept;  ///< rows of the head's logits
  /// Width of one target feature row the head reads: H (EAGLE-1) or 3 H_t (EAGLE-3).
  std::int64_t feature_size() const noexcept;
  /// draft id -> target id ([V_d]).
  const std::vector<std::int64_t>& draft_to_target() const noexcept;
  /// Whether embed_tokens.weight belongs to the head (loaded from its checkpoint) rather than to the target.
  bool owns_embedding() const noexcept;

  /// The weights under their checkpoint names (what save() writes), as float32 values; d2t and t2d (EAGLE-3, or a draft
  /// vocabulary) hold their integer and 0/1 values, which save() writes as int64 and bool.
  std::vector<std::pair<std::string, models::FloatTensor>> named_weights() const;
  /// Writes config.json and model.safetensors to `dir` (created if needed) in the layout load_eagle_head reads: the
  /// float weights as `float_dtype` (kF32, kF16 or kBF16; rounded to nearest even), d2t int64, t2d bool.
  void save(const std::filesystem::path& dir, models::SafetensorsDtype float_dtype = models::SafetensorsDtype::kF32) const;

  EagleHeadOutput forward(const EagleHeadBatch& batch);

  std::int64_t allocate_sequence();
  void free_sequence(std::int64_t slot);
  std::int64_t sequence_length(std::int64_t slot) const;
  std::int64_t committed_length(std::int64_t slot) const;
  /// Drops positions >= length (committed ones too when length is below the committed prefix).
  void truncate(std::int64_t slot, std::int64_t length);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Loads a head checkpoint directory (config.json + *.safetensors). Throws specdec::error on a missing file, a missing or
/// mis-shaped key (naming it) or an unknown key.
EagleHead load_eagle_head(const std::filesystem::path& dir, const EagleTargetWeights& target, const EagleHeadOptions& options = {});
/// Reads only the head's configuration (config.json + the tensor names, to tell EAGLE-1 from EAGLE-3).
EagleHeadConfig load_eagle_head_config(const std::filesystem::path& dir);

// --- EAGLE-2 dynamic tree -------------------------------------------------------------------------------------------------

struct DynamicTreeParams {
  std::int32_t top_k = 8;       ///< children per expanded node, and expanded nodes per step
  std::int32_t num_nodes = 24;  ///< drafts kept after reranking (the tree's size without the root)
  /// Expansion steps after the root's children; 0 = max_drafts - 1 of the step (so the tree depth is at most max_drafts).
  std::int32_t depth = 0;
  /// Nodes whose path probability (the product of the head's probabilities along the path) is below this are neither
  /// kept nor expanded: a tree as large as the head's confidence, empty where it is unsure of every first token. 0 = off
  /// (EAGLE-2's fixed num_nodes). EagleProposer uses the larger of this and EagleProposerOptions::min_path_prob.
  double min_path_prob = 0.0;
};

/// The candidate tree of one request, grown level by level. Candidates are numbered in creation order (parents first).
class DynamicTreeBuilder {
 public:
  struct Candidate {
    std::int64_t token = -1;   ///< id in the scored vocabulary (mapped to target ids by the caller)
    std::int64_t parent = -1;  ///< candidate index, -1 = the root
    float score = 0.f;         ///< log path probability
    std::int32_t depth = 1;    ///< 1 for the root's children
  };

  /// Starts from the root's log-probabilities (one row over the scored vocabulary). top_k is clamped to the vocabulary.
  DynamicTreeBuilder(const DynamicTreeParams& params, std::int32_t max_depth, std::span<const float> root_logprobs);

  /// Candidates to expand next: the best top_k of the newest level by score (ties to the earlier candidate), less those
  /// that can no longer reach the kept set (a score below the num_nodes-th best so far: a child scores at most its
  /// parent, so none of their descendants could be kept either; the kept set is the same as with every one expanded).
  /// Empty when the tree has reached max_depth or no candidate is worth expanding.
  const std::vector<std::int64_t>& frontier() const noexcept { return frontier_; }
  /// Adds the children of every frontier node: `logprobs` holds one row per frontier node, in frontier() order.
  void expand(std::span<const float> logprobs);
  const std::vector<Candidate>& candidates() const noexcept { return candidates_; }
  /// The best num_nodes candidates by score (ties to the earlier candidate), closed under ancestors, in creation order
  /// (so topological). Returns candidate indices; parents of the kept tree via `tree_parents`.
  std::vector<std::int64_t> select() const;
  /// Parent node index (0 = root, j + 1 = selected[j]) for each selected candidate.
  std::vector<std::int64_t> tree_parents(std::span<const std::int64_t> selected) const;

 private:
  void add_children(std::int64_t parent, std::span<const float> logprobs, float base, std::int32_t depth);
  /// The num_nodes-th best score among the candidates so far (-inf while there are fewer).
  float kept_bound() const;
  DynamicTreeParams params_;
  float min_score_ = -std::numeric_limits<float>::infinity();  // log(min_path_prob)
  std::int32_t max_depth_ = 1;
  std::int64_t vocab_ = 0;
  std::vector<Candidate> candidates_;
  std::vector<std::int64_t> frontier_;
  std::int64_t level_begin_ = 0;  // first candidate of the newest level
};

// --- the proposer ---------------------------------------------------------------------------------------------------------

enum class EagleDraftMode : std::uint8_t {
  kChain,  ///< max_drafts tokens in a row
  kTree,   ///< an EAGLE-2 dynamic tree of depth <= max_drafts (deterministic drafts)
};

/// How chain drafts are chosen. kSample: drawn from the head's distribution processed with the request's SamplingParams
/// (probs passed; greedy requests still take the argmax, without probs). kArgmax: always the argmax (deterministic drafts);
/// a sampled request's draft then reports as its confidence the head's top probability at the request's temperature
/// (the target accepts it with its own probability of it there), and the decoder may cut such chains
/// (AdaptiveSpeculation::confidence_cut).
enum class EagleChainSampling : std::uint8_t { kSample, kArgmax };

struct EagleProposerOptions {
  EagleDraftMode mode = EagleDraftMode::kChain;
  EagleChainSampling chain_sampling = EagleChainSampling::kSample;
  DynamicTreeParams tree{};
  /// Chains: a request's chain stops at the first step whose head distribution has no probability >= this, and that
  /// step's draft is dropped (greedy rows: the head's softmax; sampled rows: the distribution processed with the
  /// request's params). 0 = always max_drafts drafts. The decision looks at the distribution, never at the drawn token
  /// (which would bias the kept drafts), so the output stays distributed as the target's; a weak head then verifies the
  /// drafts it is sure of instead of paying for g that are rejected.
  double min_draft_prob = 0.0;
  /// Chains: a request's chain also stops at the first step where the product of the largest probabilities so far (this
  /// step's included) falls below this, the chance the head gives the whole chain down to here; that step's draft is
  /// dropped. The same kind of rule as min_draft_prob (each factor is a function of the distribution, not of the drawn
  /// token), so the output keeps the target's law. It bounds what a proposal at the bound costs under the adaptive
  /// policy's confidence cut, which would cut such drafts anyway. 0 = off.
  double min_path_prob = 0.0;
  /// Target blocks for EAGLE-3 features when the head config leaves feature_layers empty (needs the target's layer count).
  std::int64_t target_num_layers = 0;
};

/// A Proposer (proposer.hpp) around an EagleHead: one head cache slot per request; it wants target features and supports
/// trees. The head only ever keeps rows built from real target features: the rows of a propose() call are dropped at its
/// end, and the features of accepted tokens that observe() receives are run through the head at the next propose().
class EagleProposer {
 public:
  static constexpr bool supports_trees = true;

  explicit EagleProposer(EagleHead head, const EagleProposerOptions& options = {});
  EagleProposer(EagleProposer&&) noexcept;
  EagleProposer& operator=(EagleProposer&&) noexcept;
  ~EagleProposer();

  TargetFeatureSpec target_feature_spec() const;
  std::int64_t vocab_size() const;
  /// Chains fill DraftBatch::confidence with the head's largest probability at each step (its top-1 probability over the
  /// draft vocabulary at temperature 1, whichever token was drafted); trees with each node's probability under the head
  /// given its parent's path, so the product along a path is the node's path probability. Trees are ranked, bounded
  /// (min_path_prob) and reported by the head's law at temperature 1 for greedy requests (the chance a token is the
  /// target's argmax) and at the request's temperature for sampled ones (the chance the target accepts a deterministic
  /// child).
  bool reports_confidence() const noexcept;

  void begin_request(const RequestContext& ctx);
  void end_request(RequestId id);
  DraftBatch propose(std::span<const ProposeRequest> requests);
  void observe(std::span<const StepFeedback> feedback);

  EagleHead& head() noexcept;
  const EagleHead& head() const noexcept;
  const EagleProposerOptions& options() const noexcept;
  void set_mode(EagleDraftMode mode) noexcept;
  /// Feature rows of a request not yet run through the head (for tests and diagnostics).
  std::int64_t pending_rows(RequestId id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

static_assert(Proposer<EagleProposer>);
static_assert(wants_target_features<EagleProposer>);
static_assert(supports_trees<EagleProposer>);
static_assert(has_vocab_size<EagleProposer>);

}  // namespace specdec::proposers
