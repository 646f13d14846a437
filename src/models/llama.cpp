// The Llama-family forward pass on CPU. Products run on block-format weights (detail::PackedMatrix, int8 activations)
// or float32 weights (detail::linear_rows, 16 token rows at a time). Per layer: RMSNorm -> fused q/k/v product -> rotary
// embedding (written straight into the KV cache and into a query buffer laid out for grouped attention) -> attention
// (detail::attention_rows, each row over the keys it sees: up to 16 new tokens or a tree of a sequence in one call, the
// chunks of every such sequence of the batch in one dispatch over the pool's threads; a longer chain, a prompt, in
// blocks of 16 tokens) -> output product accumulated into the residual -> RMSNorm -> fused
// gate/up product -> SiLU(gate) * up -> down product accumulated into the residual. The options of other architectures
// (LlamaConfig) are branches per layer: q/k/v biases and QK-norm after the q/k/v product, a sliding layer's RoPE table
// and window (mask_outside_window), the attention's and the MLP's outputs normalised before the residual add, GELU for
// SiLU, embeddings scaled, logits soft-capped. Element-wise steps are plain loops over raw float pointers into the
// model's own workspace (detail::FloatRows); no tensor library.
#include "specdec/models/detail/errors.hpp"
#include "specdec/models/llama.hpp"

#include <fmt/format.h>

#include <array>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <numbers>
#include <random>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/models/detail/llama_block.hpp"
#include "specdec/models/detail/packed_matrix.hpp"
#include "specdec/models/detail/pooled_linear.hpp"
#include "specdec/models/detail/row_pool.hpp"
#include "specdec/sampling/status.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

namespace specdec::models {

using detail::fail;
using detail::shape_str;


namespace {

using detail::kMaxRowsForStreamingKernel;
// Attention of a sequence's few new tokens goes to the pool's threads from this many (query row x key) scores up.
constexpr std::int64_t kMinParallelAttention = 1024;

using detail::RowPool;
using detail::rms_norm;
using detail::rope_rotate;
using Linear = detail::BlockLinear;

// Activations quantised per block for the packed parts (reused across calls).
struct Activations {
  detail::QuantizedRows q;
};

// Fills rows [begin, end) of a product's input (an element-wise step before the product, run on the same rows).
using detail::RowPrep;

}  // namespace

namespace {
constexpr std::pair<const char*, int ActivationBits::*> kActivationKinds[] = {
    {"qkv", &ActivationBits::qkv},         {"attn_out", &ActivationBits::attn_out}, {"gate_up", &ActivationBits::gate_up},
    {"down", &ActivationBits::down},       {"lm_head", &ActivationBits::lm_head}};

int parse_bits(std::string_view item, std::string_view value) {
  if (value == "8") return 8;
  if (value == "16") return 16;
  fail(fmt::format("activation bits: item '{}': expected 8 or 16, got '{}'", item, value));
}
}  // namespace

bool parse_kv_cache_type(std::string_view name) {
  if (name == "f16") return true;
  if (name == "f32") return false;
  fail(fmt::format("KV cache type: expected f16 or f32, got '{}'", name));
}

ActivationBits ActivationBits::parse(std::string_view spec) {
  if (spec.empty()) fail("activation bits: expected 16, 8 or a list such as 16,attn_out=8, got an empty string");
  ActivationBits b;
  for (bool more = true; more;) {
    const std::size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    more = comma != std::string_view::npos;
    if (more) spec = spec.substr(comma + 1);
    if (item.empty()) fail("activation bits: expected an item (8, 16 or kind=8|16) between commas, got an empty one");
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      b = ActivationBits(parse_bits(item, item));
      continue;
    }
    const std::string_view kind = item.substr(0, eq);
    bool found = false;
    for (const auto& [name, field] : kActivationKinds)
      if (kind == name) {
        b.*field = parse_bits(item, item.substr(eq + 1));
        found = true;
      }
    if (!found)
      fail(fmt::format("activation bits: item '{}': expected a kind among qkv, attn_out, gate_up, down, lm_head, got '{}'",
                       item, kind));
  }
  return b;
}

bool ActivationBits::valid() const noexcept {
  for (const auto& kv : kActivationKinds)
    if (this->*kv.second != 8 && this->*kv.second != 16) return false;
  return true;
}

std::string ActivationBits::to_string() const {
  if (*this == ActivationBits(qkv)) return std::to_string(qkv);
  std::string s;
  for (const auto& [name, field] : kActivationKinds) s += fmt::format("{}{}={}", s.empty() ? "" : ",", name, this->*field);
  return s;
}

int available_cpus() noexcept {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

struct SequencePlan {
  std::int64_t slot = 0;
  std::int64_t start = 0;   // first row in the flattened batch
  std::int64_t n = 0;       // new tokens
  std::int64_t cached = 0;  // L: cache length before the call
  // A tree, or a chain of up to kMaxRowsForStreamingKernel new tokens: new token j sees new tokens visible[j * n + a],
  // a < visible_count[j] (its ancestors and itself, ascending). Empty for a longer chain (attention_blocks).
  std::vector<std::int32_t> visible, visible_count;
};

// A chain of n new tokens in SequencePlan's layout: token i sees new tokens 0 .. i (visible [n, n], count [n]).
void chain_visibility(std::int64_t n, std::vector<std::int32_t>& visible, std::vector<std::int32_t>& count) {
  visible.assign(static_cast<std::size_t>(n * n), 0);
  count.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    count[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i + 1);
    for (std::int64_t a = 0; a <= i; ++a) visible[static_cast<std::size_t>(i * n + a)] = static_cast<std::int32_t>(a);
  }
}

// A sliding layer's window over one query row of scores, in attention_rows' layout before its softmax packs the row (a
// context key at its position, new key a at column cached + a): the keys at positions below p - window + 1 get -inf, so
// the softmax gives them exactly 0 and every key keeps its place. The row therefore gets the bits it gets in any other
// batch (alone, in a chain, in a tree), as the keys of a plain layer do. new_pos: the positions of the call's new keys;
// visible / count: the new keys the row sees. key_begin: the first key column the softmax reads (first_window_block);
// the columns before it are never read, so they are left as they are.
void mask_outside_window(float* row, std::int64_t cached, std::int64_t p, std::int64_t window, const std::int64_t* new_pos,
                         const std::int32_t* visible, std::int32_t count, std::int64_t key_begin) {
  const std::int64_t lo = p - window + 1;
  if (lo <= 0) return;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  std::fill(row + key_begin, row + std::max(key_begin, std::min(lo, cached)), kMasked);
  if (lo > cached)
    for (std::int32_t a = 0; a < count; ++a)
      if (new_pos[visible[a]] < lo) row[cached + visible[a]] = kMasked;
}

// The first key column a sliding layer's rows can see (the lowest p - window + 1 over the positions), rounded down to 16
// (the start of a scores' key block): the columns before it are all masked, so their scores need not be computed.
std::int64_t first_window_block(const std::int64_t* pos, std::int64_t n, std::int64_t window) {
  std::int64_t lo = pos[0];
  for (std::int64_t i = 1; i < n; ++i) lo = std::min(lo, pos[i]);
  return std::max<std::int64_t>(lo - window + 1, 0) / 16 * 16;
}

// A copy of rows x cols contiguous values.
Rows host_copy(const float* src, std::int64_t rows, std::int64_t cols) {
  Rows r = Rows::host_float32_for_overwrite(rows, cols);
  std::copy_n(src, rows * cols, r.mutable_host_float32_data());
  return r;
}

}  // namespace

struct LlamaModel::Impl {
  struct Layer {
    FloatTensor attn_norm;  // [H]
    Linear wqkv;           // [(nh + 2 nkv) * hd, H]
    Linear wo;             // [H, nh * hd]
    FloatTensor ffn_norm;   // [H]
    Linear wgu;            // [2F, H]: gate rows then up rows
    Linear wdown;          // [H, F]
    // The options of LlamaConfig beyond Llama's block (undefined / false when off; checked once per layer).
    FloatTensor qkv_bias;        // [qkv_dim]: q, k and v biases (attention_bias)
    FloatTensor q_norm, k_norm;  // [hd] each: RMSNorm per head before RoPE (qk_norm)
    FloatTensor post_attn_norm;  // [H]: RMSNorm of the attention output before the residual add (post_attention_norm)
    FloatTensor post_ffn_norm;   // [H]: RMSNorm of the MLP output before the residual add (post_ffn_norm)
    bool sliding = false;       // attends to the last cfg.sliding_window positions, RoPE of sliding_rope_theta
  };

  LlamaConfig cfg;
  LlamaOptions opts;
  std::int64_t max_len = 0;  // most tokens a sequence may hold
  std::int64_t H = 0, nh = 0, nkv = 0, hd = 0, F = 0, V = 0, q_dim = 0, kv_dim = 0, qkv_dim = 0, group = 0;
  float eps = 1e-5f;
  Linear embed;           // [V, H] (rows looked up)
  Linear lm_head_own;     // [V_out, H] when not tied or scoring a subset (LlamaOptions::output_ids)
  std::int64_t V_out = 0;  // columns of the logits
  bool tied = false;
  FloatTensor final_norm;  // [H]
  const Linear& lm_head() const { return tied ? embed : lm_head_own; }
  std::vector<Layer> layers;
  std::vector<float> inv_freq;  // [hd / 2]
  std::vector<float> cos_table, sin_table;  // [rope_positions, hd / 2]
  float q_scale = 1.f;      // scores' scale (config attention_scale, or 1 / sqrt(hd)), applied to the queries
  float embed_scale = 1.f;  // config embedding_scale, in float32
  float softcap = 0.f;      // config final_logit_softcap (0: none)
  bool gelu = false;        // the MLP's gate takes GELU (tanh) rather than SiLU
  std::int64_t window = 0;  // config sliding_window (the sliding layers')
  std::vector<float> inv_freq_swa, cos_swa, sin_swa;  // the sliding layers' RoPE (empty without sliding layers)
  std::int64_t rope_positions = 0;
  KvCache cache;
  // Workspace, grown to the largest batch seen: rows x width.
  std::int64_t ws_rows = 0;
  detail::FloatRows x, normed, qkv, qbuf, attn, gu, act;
  ForwardPhaseTimes phase_times;
  std::vector<float> scores_buf;  // attention scores: each few-token sequence's rows, or a prompt block's per thread
  std::vector<float> rope_buf;    // one rotated key before a float16 cache stores it [hd]
  std::shared_ptr<RowPool> pool;
  Activations activations;

  static std::int64_t planes(int bits) { return bits == 8 ? 1 : 2; }
  // out (+)= in @ w^T over n rows; in and out contiguous rows (out's w.rows wide).
  void linear(const float* in, std::int64_t n, const Linear& w, float* out, int bits, const RowPrep& prep = {}) {
    detail::block_linear(*pool, w, in, n, out, w.rows, false, activations.q, planes(bits), prep);
  }
  void linear_accumulate(const float* in, std::int64_t n, const Linear& w, float* acc, int bits, const RowPrep& prep = {}) {
    detail::block_linear(*pool, w, in, n, acc, w.rows, true, activations.q, planes(bits), prep);
  }

  void ensure_rope(std::int64_t positions) {
    if (positions <= rope_positions) return;
    std::int64_t n = std::max<std::int64_t>(rope_positions, 256);
    while (n < positions) n *= 2;
    const std::int64_t half = hd / 2;
    auto fill = [&](const std::vector<float>& inv, std::vector<float>& cos_t, std::vector<float>& sin_t) {
      cos_t.resize(static_cast<std::size_t>(n * half));
      sin_t.resize(static_cast<std::size_t>(n * half));
      for (std::int64_t p = rope_positions; p < n; ++p)
        for (std::int64_t j = 0; j < half; ++j) {
          const double a = static_cast<double>(p) * static_cast<double>(inv[static_cast<std::size_t>(j)]);
          cos_t[static_cast<std::size_t>(p * half + j)] = static_cast<float>(std::cos(a));
          sin_t[static_cast<std::size_t>(p * half + j)] = static_cast<float>(std::sin(a));
        }
    };
    fill(inv_freq, cos_table, sin_table);
    if (!inv_freq_swa.empty()) fill(inv_freq_swa, cos_swa, sin_swa);
    rope_positions = n;
  }

  void ensure_workspace(std::int64_t rows) {
    if (rows <= ws_rows) return;
    std::int64_t n = std::max<std::int64_t>(ws_rows, 8);
    while (n < rows) n *= 2;
    x.grow(n, H);
    normed.grow(n, H);
    qkv.grow(n, qkv_dim);
    qbuf.grow(n, q_dim);
    attn.grow(n, q_dim);
    gu.grow(n, 2 * F);
    act.grow(n, F);
    ws_rows = n;
  }

  std::vector<SequencePlan> plan(const ForwardBatch& b, std::vector<std::int64_t>& positions);
  ForwardOutput forward(const ForwardBatch& b);
  // The attention of every sequence of the batch in layer `layer`; positions: the batch's (flattened like its rows);
  // window: 0, or the sliding window of a sliding layer.
  void attention(std::int64_t layer, const std::vector<SequencePlan>& seqs, const std::int64_t* positions,
                 std::int64_t window);
  // One sequence's few-token attention in a layer (a tree, or a chain of up to kMaxRowsForStreamingKernel tokens).
  struct FewTokenAttention {
    const SequencePlan* s = nullptr;
    const std::int64_t* pos = nullptr;  // the positions of its new tokens
    std::int64_t total = 0, rows = 0, all_rows = 0;  // keys it sees; query rows of one kv head; of all
    std::int64_t ld = 0, scores = 0;  // its rows of scores: width, first float in scores_buf
    std::int64_t k_lo = 0;            // a sliding layer's first key block any of its rows sees (0 otherwise)
    bool split_keys = false;          // scores by key ranges before the rows finish
  };
  std::vector<FewTokenAttention> few;
  std::vector<std::array<std::int64_t, 3>> chunks;
  // Rows [begin, end) of one sequence's few-token attention (kv head major), part `part` of the work.
  void attention_part(std::int64_t layer, const FewTokenAttention& j, std::int64_t window, std::int64_t begin,
                      std::int64_t end, detail::AttentionPart part);
  void attention_blocks(std::int64_t layer, const SequencePlan& s, const std::int64_t* pos, std::int64_t window);
  // Calls fn(keys, values, key_blocks) with layer `layer`'s cache in its element type (float16 or float32); key_blocks
  // is the transposed copy of the keys, or nullptr.
  template <class Fn>
  void with_layer_cache(std::int64_t layer, Fn&& fn) {
    if (cache.half())
      fn(cache.key_data_half(layer), cache.value_data_half(layer), cache.key_block_data_half(layer));
    else
      fn(cache.key_data(layer), cache.value_data(layer), cache.key_block_data(layer));
  }
};

std::vector<SequencePlan> LlamaModel::Impl::plan(const ForwardBatch& b, std::vector<std::int64_t>& positions) {
  const auto B = static_cast<std::int64_t>(b.slots.size());
  const std::int64_t N = detail::check_ragged_tokens("forward", "token", B, b.cu_num_tokens, b.token_ids, V);
  if (!b.parents.empty() && static_cast<std::int64_t>(b.parents.size()) != B)
    fail(fmt::format("forward: parents: expected empty or {} arrays (one per sequence), got {}", B, b.parents.size()));
  for (const auto l : b.hidden_layers)
    if (l < 0 || l >= static_cast<std::int64_t>(layers.size()))
      fail(fmt::format("forward: hidden_layers: expected layer indices in [0, {}), got {}", layers.size(), l));
  std::unordered_set<std::int64_t> seen;
  for (std::int64_t i = 0; i < B; ++i) {
    const std::int64_t slot = b.slots[i];
    if (!cache.is_allocated(slot))
      fail(fmt::format("forward: slots[{}]: expected an allocated sequence slot, got {}", i, slot));
    if (!seen.insert(slot).second) fail(fmt::format("forward: slots[{}]: expected distinct slots, got {} twice", i, slot));
  }

  std::vector<SequencePlan> plans(static_cast<std::size_t>(B));
  positions.assign(static_cast<std::size_t>(N), 0);
  std::vector<std::int64_t> depth;
  for (std::int64_t i = 0; i < B; ++i) {
    SequencePlan& s = plans[static_cast<std::size_t>(i)];
    s.slot = b.slots[i];
    s.start = b.cu_num_tokens[i];
    s.n = b.cu_num_tokens[i + 1] - s.start;
    s.cached = cache.length(s.slot);
    if (s.cached + s.n > max_len)
      fail(fmt::format("forward: slots[{}]: {} cached + {} new tokens exceed the model's context length {} "
                       "(LlamaOptions::context_length; the config's max_position_embeddings by default)",
                       i, s.cached, s.n, max_len));
    const std::vector<std::int32_t>* parents =
        b.parents.empty() || b.parents[i].empty() ? nullptr : &b.parents[static_cast<std::size_t>(i)];
    if (parents) {
      if (static_cast<std::int64_t>(parents->size()) != s.n)
        fail(fmt::format("forward: parents[{}]: expected {} entries (the sequence's new tokens), got {}", i, s.n,
                         parents->size()));
      if ((*parents)[0] != -1) fail(fmt::format("forward: parents[{}][0]: expected -1 (the root), got {}", i, (*parents)[0]));
      for (std::int64_t j = 1; j < s.n; ++j) {
        const std::int32_t p = (*parents)[static_cast<std::size_t>(j)];
        if (p < 0 || p >= j)
          throw specdec::error(Status::kInvalidTree,
                               fmt::format("forward: parents[{}][{}]: expected a parent index in [0, {}), got {}", i, j, j, p));
      }
    }
    depth.assign(static_cast<std::size_t>(s.n), 0);
    for (std::int64_t j = 1; j < s.n; ++j)
      depth[static_cast<std::size_t>(j)] = parents ? depth[static_cast<std::size_t>((*parents)[static_cast<std::size_t>(j)])] + 1 : j;
    for (std::int64_t j = 0; j < s.n; ++j) positions[static_cast<std::size_t>(s.start + j)] = s.cached + depth[static_cast<std::size_t>(j)];
    if (parents) {
      s.visible.assign(static_cast<std::size_t>(s.n * s.n), 0);
      s.visible_count.assign(static_cast<std::size_t>(s.n), 0);
      for (std::int64_t j = 0; j < s.n; ++j) {
        std::int32_t* row = s.visible.data() + j * s.n;
        std::int32_t& count = s.visible_count[static_cast<std::size_t>(j)];
        for (std::int64_t a = j; a >= 0; a = (*parents)[static_cast<std::size_t>(a)])
          row[count++] = static_cast<std::int32_t>(a);
        std::reverse(row, row + count);
      }
    } else if (s.n <= kMaxRowsForStreamingKernel) {
      chain_visibility(s.n, s.visible, s.visible_count);
    }
    // A longer chain (a prompt) needs none: its attention runs in blocks of chains (attention_blocks).
  }
  return plans;
}

// The attention of a long chain of new tokens (a prompt): blocks of kMaxRowsForStreamingKernel tokens, each through
// detail::attention_rows as if its tokens were verified after the ones before them (their keys and values are in the
// cache already), the (kv head, block) chunks over the pool's threads, the last blocks (the most keys) first. Every row
// is computed alone by the streaming kernel, so a prompt token's attention has the bits it gets when decoded alone,
// and no [n, L + n] score or mask tensor is made (a 4096-token prompt's took 600 MB a layer).
void LlamaModel::Impl::attention_blocks(std::int64_t layer, const SequencePlan& s, const std::int64_t* pos,
                                        std::int64_t window) {
  constexpr std::int64_t B = kMaxRowsForStreamingKernel;
  const std::int64_t blocks = (s.n + B - 1) / B;
  // The visibility of a block of B tokens, and of the last, shorter one.
  std::vector<std::int32_t> visible, count, visible_last, count_last;
  chain_visibility(B, visible, count);
  chain_visibility(s.n - (blocks - 1) * B, visible_last, count_last);
  const std::int64_t cap = cache.capacity();
  const std::int64_t seq_offset = s.slot * nkv * cap * hd;
  const std::int64_t head_blocks = cache.key_block_count() * 16 * hd;
  const float* q = qbuf.data() + s.start * q_dim;  // [nkv, n, group, hd]
  float* out = attn.data() + s.start * q_dim;
  // One share of scores_buf per worker slot (B tokens of rows at the whole cache's width), so the pool's threads
  // allocate nothing. (With a thread_local buffer in the workers, the CLI's startup cost profile, timed right after a
  // prefill, priced a 2-row verification at 1.00-1.04 one-row forwards instead of 1.06-1.11 and 9 rows at 1.67-1.81
  // instead of 2.1-2.2, and the adaptive policy drafted about twice as long on chat: 0.93-0.96x plain over 12-run
  // series against 1.00-1.02x.)
  const std::int64_t slots = pool->size();
  const std::int64_t ld_max = (s.cached + s.n + 15) / 16 * 16, share = B * group * ld_max;
  if (static_cast<std::int64_t>(scores_buf.size()) < slots * share) scores_buf.resize(static_cast<std::size_t>(slots * share));
  auto run = [&](const auto* keys, const auto* values, const auto* key_blocks, std::int64_t c, float* scores) {
    const std::int64_t block = blocks - 1 - c / nkv, kh = c % nkv;
    const std::int64_t t0 = block * B, nb = std::min(B, s.n - t0), cached = s.cached + t0, total = cached + nb;
    const std::int64_t rows = nb * group, ld = (total + 15) / 16 * 16;
    detail::AttentionPart part;
    if (key_blocks != nullptr) part.key_blocks = key_blocks + (s.slot * nkv + kh) * head_blocks;
    const std::int64_t kv = seq_offset + kh * cap * hd;
    const std::vector<std::int32_t>& vis = nb == B ? visible : visible_last;
    const std::vector<std::int32_t>& seen = nb == B ? count : count_last;
    auto rows_part = [&](detail::AttentionPart p) {
      detail::attention_rows(q + (kh * s.n + t0) * group * hd, 0, rows, nb, group, hd, keys + kv, values + kv, total,
                             cached, vis.data(), seen.data(), scores, ld, out + t0 * q_dim + kh * group * hd, q_dim,
                             hd, p);
    };
    if (window == 0) {
      rows_part(part);
      return;
    }
    // A sliding layer: the scores from the first key block a row of the block sees, the keys outside each row's window
    // masked, then the softmax and the values.
    part.kind = detail::AttentionPart::kScores;
    part.key_begin = first_window_block(pos + t0, nb, window);
    part.key_end = ld;
    rows_part(part);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r / group;
      mask_outside_window(scores + r * ld, cached, pos[t0 + i], window, pos + t0, vis.data() + i * nb,
                          seen[static_cast<std::size_t>(i)], part.key_begin);
    }
    part.kind = detail::AttentionPart::kFinish;
    rows_part(part);
  };
  // Worker slot `slot` takes (kv head, block) chunks from a shared counter until none is left.
  std::atomic<std::int64_t> next{0};
  auto work = [&](std::int64_t slot) {
    float* scores = scores_buf.data() + slot * share;
    with_layer_cache(layer, [&](const auto* keys, const auto* values, const auto* key_blocks) {
      for (std::int64_t c = next.fetch_add(1); c < nkv * blocks; c = next.fetch_add(1))
        run(keys, values, key_blocks, c, scores);
    });
  };
  if (slots > 1)
    pool->run(slots, work);
  else
    work(0);
}

void LlamaModel::Impl::attention_part(std::int64_t layer, const FewTokenAttention& j, std::int64_t window,
                                      std::int64_t begin, std::int64_t end, detail::AttentionPart part) {
  const SequencePlan& s = *j.s;
  const std::int64_t cap = cache.capacity();
  const std::int64_t seq_offset = s.slot * nkv * cap * hd;
  const float* q = qbuf.data() + s.start * q_dim;
  float* out = attn.data() + s.start * q_dim;
  float* sc = scores_buf.data() + j.scores;
  const std::int64_t head_blocks = cache.key_block_count() * 16 * hd;  // a kv head's key blocks (KvCache::key_block_data)
  const std::int64_t rows = j.rows, ld = j.ld;
  // Rows kh * rows + r of the sequence, with the layer's cache in its element type (float16 or float32); blocks: its
  // key blocks, or nullptr.
  auto run_rows = [&](std::int64_t b, std::int64_t e, detail::AttentionPart p) {
    with_layer_cache(layer, [&](const auto* keys, const auto* values, const auto* blocks) {
      for (std::int64_t kh = b / rows; kh < nkv && kh * rows < e; ++kh) {
        const std::int64_t rb = std::max(b - kh * rows, std::int64_t{0}), re = std::min(e - kh * rows, rows);
        const std::int64_t kv = seq_offset + kh * cap * hd;
        if (blocks != nullptr) p.key_blocks = blocks + (s.slot * nkv + kh) * head_blocks;
        detail::attention_rows(q + kh * rows * hd, rb, re, s.n, group, hd, keys + kv, values + kv, j.total, s.cached,
                               s.visible.data(), s.visible_count.data(), sc + kh * rows * ld, ld, out + kh * group * hd,
                               q_dim, hd, p);
      }
    });
  };
  // A sliding layer runs each part as scores (from the first key block any row sees), the keys outside each row's
  // window masked (mask_outside_window), then the softmax and the values from that block on (the keys before it weigh
  // exactly 0, so skipping them changes no bit); a plain layer runs the part as it is.
  if (window == 0) {
    run_rows(begin, end, part);
    return;
  }
  if (part.kind == detail::AttentionPart::kScores) {
    part.key_begin = std::max(part.key_begin, j.k_lo);
    if (part.key_begin < std::min(part.key_end, ld)) run_rows(begin, end, part);
    return;
  }
  if (part.kind == detail::AttentionPart::kAll) run_rows(begin, end, {detail::AttentionPart::kScores, j.k_lo, ld});
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t i = (r % rows) / group;
    mask_outside_window(sc + r * ld, s.cached, j.pos[i], window, j.pos, s.visible.data() + i * s.n,
                        s.visible_count[static_cast<std::size_t>(i)], j.k_lo);
  }
  run_rows(begin, end, {detail::AttentionPart::kFinish, j.k_lo, 0});
}

void LlamaModel::Impl::attention(std::int64_t layer, const std::vector<SequencePlan>& seqs,
                                 const std::int64_t* positions, std::int64_t window) {
  // A chain of more new tokens than the streaming kernel takes at once (a prompt) goes alone, in blocks.
  for (const auto& s : seqs)
    if (s.visible.empty()) attention_blocks(layer, s, positions + s.start, window);
  // Few new tokens (decode, speculative verify) or a tree of any size: detail::attention_rows over each sequence's
  // cache, the nh * n query rows of a sequence (ordered kv head, token, group member) each in its own share of
  // scores_buf, and the chunks of every sequence's rows shared by the pool's threads in one dispatch when there is
  // enough work. Every row is computed alone, so neither the split nor the batch changes a result.
  few.clear();
  std::int64_t scores = 0, work = 0, all = 0;
  for (const auto& s : seqs) {
    if (s.visible.empty()) continue;
    FewTokenAttention j;
    j.s = &s;
    j.pos = positions + s.start;
    j.total = s.cached + s.n;
    j.rows = group * s.n;  // query rows of one kv head
    j.all_rows = nkv * j.rows;
    j.ld = (j.total + 15) / 16 * 16;
    j.k_lo = window > 0 ? first_window_block(j.pos, s.n, window) : 0;
    j.scores = scores;
    scores += j.all_rows * j.ld;
    work += j.all_rows * j.total;
    all += j.all_rows;
    few.push_back(j);
  }
  if (few.empty()) return;
  if (static_cast<std::int64_t>(scores_buf.size()) < scores) scores_buf.resize(static_cast<std::size_t>(scores * 2));
  // The pool's threads are still spinning from the q/k/v product, so sharing the rows costs little.
  if (pool->size() == 1 || all <= 1 || work < kMinParallelAttention) {
    for (const auto& j : few) attention_part(layer, j, window, 0, j.all_rows, {});
    return;
  }
  // Over a long cache the keys' side goes first, shared by key ranges: every (kv head, 256 keys) chunk transposes its
  // key blocks once and scores all the head's rows against them (kScores), so the threads split a head's keys instead
  // of taking whole heads (3 kv heads on 2 threads) or transposing the same keys once per chunk of rows; then the
  // softmax and the values go by chunks of rows (kFinish). The same steps make every score and row, so the split
  // changes no bit.
  // A decode splits too: its 3 chunks (one a kv head) would leave one of 2 threads two heads' keys and values, so past
  // one key range it shares the keys by range (bench_model BM_Decode at context 1024, three rounds alternated:
  // ms_attention 1.59-1.67 -> 1.46-1.51, finishing row by row) and then finishes in one range of rows per thread.
  constexpr std::int64_t kKeyRange = 256;
  chunks.clear();  // (sequence, kv head, first key)
  for (std::size_t i = 0; i < few.size(); ++i) {
    const std::int64_t ranges = (few[i].total + kKeyRange - 1) / kKeyRange;
    few[i].split_keys = ranges >= 2;
    if (!few[i].split_keys) continue;
    for (std::int64_t c = 0; c < nkv * ranges; ++c)
      chunks.push_back({static_cast<std::int64_t>(i), c / ranges, (c % ranges) * kKeyRange});
  }
  if (!chunks.empty())
    pool->run(static_cast<std::int64_t>(chunks.size()), [&](std::int64_t c) {  // a kv head's rows against 256 keys
      const auto& [i, kh, k0] = chunks[static_cast<std::size_t>(c)];
      const FewTokenAttention& j = few[static_cast<std::size_t>(i)];
      attention_part(layer, j, window, kh * j.rows, kh * j.rows + j.rows,
                     {detail::AttentionPart::kScores, k0, k0 + kKeyRange});
    });
  // Chunks of a kv head's rows: whole tokens with all their group members, at most 3 tokens (9 rows for SmolLM2), so
  // the rows of a chunk share every key block they transpose and every value they load (the members of a token and,
  // over the cached context, every row of the chunk), and a 6-token verification still gives two threads 6 chunks.
  // (bench_model's ms_attention at 6 tokens: one token per chunk was 15-30% slower; whole kv heads, 3 chunks, within
  // noise of 3 tokens.) A split decode's rows go in one contiguous range per thread (9 rows on 2 threads: 4 and 5), so
  // a thread's rows of one kv head share each value load and a head's values are read by one thread, or two at a
  // range's edge, instead of by whichever threads took its single-row chunks (faster in bench_model BM_Decode at
  // context 1024; measured in docs/cpu-forward.md). The chunks of every sequence go in one dispatch: a batch of four
  // 1-token sequences gives two threads 12 chunks instead of 3 each in four dispatches.
  chunks.clear();  // (sequence, first row, end row)
  const std::int64_t threads = pool->size();
  for (std::size_t i = 0; i < few.size(); ++i) {
    const FewTokenAttention& j = few[i];
    const auto si = static_cast<std::int64_t>(i);
    if (j.s->n == 1 && j.split_keys) {
      for (std::int64_t c = 0; c < threads; ++c) chunks.push_back({si, c * j.all_rows / threads, (c + 1) * j.all_rows / threads});
      continue;
    }
    const std::int64_t piece = std::min<std::int64_t>(j.s->n, 3) * group;
    for (std::int64_t kh = 0; kh < nkv; ++kh)
      for (std::int64_t b = kh * j.rows; b < kh * j.rows + j.rows; b += piece)
        chunks.push_back({si, b, std::min(kh * j.rows + j.rows, b + piece)});
  }
  pool->run(static_cast<std::int64_t>(chunks.size()), [&](std::int64_t c) {
    const auto& [i, b, e] = chunks[static_cast<std::size_t>(c)];
    const FewTokenAttention& j = few[static_cast<std::size_t>(i)];
    attention_part(layer, j, window, b, e,
                   {j.split_keys ? detail::AttentionPart::kFinish : detail::AttentionPart::kAll, 0, 0});
  });
}

ForwardOutput LlamaModel::Impl::forward(const ForwardBatch& b) {
  std::vector<std::int64_t> positions;
  std::vector<SequencePlan> plans = plan(b, positions);
  const std::int64_t N = static_cast<std::int64_t>(b.token_ids.size());
  std::int64_t max_total = 0, max_pos = 0;
  for (const auto& s : plans) max_total = std::max(max_total, s.cached + s.n);
  for (const auto p : positions) max_pos = std::max(max_pos, p);
  cache.reserve(max_total);
  ensure_rope(max_pos + 1);
  ensure_workspace(N);

  float* xp = x.data();
  float* np = normed.data();
  float* qkvp = qkv.data();
  float* qp = qbuf.data();
  float* attnp = attn.data();
  for (std::int64_t t = 0; t < N; ++t) embed.row(b.token_ids[static_cast<std::size_t>(t)], xp + t * H);
  if (embed_scale != 1.f)  // Gemma: embeddings times sqrt(hidden), in float32
    for (float* e = xp, *end = e + N * H; e != end; ++e) *e *= embed_scale;

  ForwardOutput out;
  std::vector<Rows> saved(layers.size());
  const std::int64_t half = hd / 2;
  const std::int64_t cap = cache.capacity();
  const std::int64_t slot_stride = nkv * cap * hd;  // in the [slots, nkv, cap, hd] view of one layer's keys or values

  // Step timings (LlamaOptions::time_phases) of decode and verification forwards: the clock is read once per step.
  const bool timed = opts.time_phases && N <= kMaxRowsForStreamingKernel;
  auto last = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  auto mark = [&](ForwardPhaseTimes::Phase phase) {
    if (!timed) return;
    const auto now = std::chrono::steady_clock::now();
    phase_times.seconds[phase] += std::chrono::duration<double>(now - last).count();
    last = now;
  };
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Layer& L = layers[l];
    // RMSNorm, SiLU and the final norm run row by row inside the product that reads them (RowPrep).
    const float* attn_norm = L.attn_norm.data();
    linear(np, N, L.wqkv, qkvp, opts.activation_bits.qkv, [&](std::int64_t r0, std::int64_t r1) {
      rms_norm(xp + r0 * H, attn_norm, np + r0 * H, r1 - r0, H, eps);
    });
    if (L.qkv_bias.defined() || L.q_norm.defined()) {
      // Qwen2's q/k/v biases, then Qwen 3's and Gemma's RMSNorm over each head of q and of k, row by row, before RoPE.
      const float* bias = L.qkv_bias.defined() ? L.qkv_bias.data() : nullptr;
      float* rows = qkvp;
      for (std::int64_t t = 0; t < N; ++t) {
        float* row = rows + t * qkv_dim;
        if (bias != nullptr)
          for (std::int64_t j = 0; j < qkv_dim; ++j) row[j] += bias[j];
        if (L.q_norm.defined()) {
          rms_norm(row, L.q_norm.data(), row, nh, hd, eps);
          rms_norm(row + q_dim, L.k_norm.data(), row + q_dim, nkv, hd, eps);
        }
      }
    }
    mark(ForwardPhaseTimes::kQkv);

    // Rotary embedding: queries (pre-scaled by 1/sqrt(hd)) into qbuf laid out per sequence as [nkv, n, group, hd];
    // keys and values into the cache at positions cached + i.
    float* kp = cache.key_data(static_cast<std::int64_t>(l));
    float* vp = cache.value_data(static_cast<std::int64_t>(l));
    std::uint16_t* kph = cache.key_data_half(static_cast<std::int64_t>(l));
    std::uint16_t* vph = cache.value_data_half(static_cast<std::int64_t>(l));
    for (const auto& s : plans) {
      for (std::int64_t i = 0; i < s.n; ++i) {
        const std::int64_t t = s.start + i;
        const float* row = qkvp + t * qkv_dim;
        const std::int64_t pos = positions[static_cast<std::size_t>(t)];
        const float* c = (L.sliding ? cos_swa : cos_table).data() + pos * half;
        const float* sn = (L.sliding ? sin_swa : sin_table).data() + pos * half;
        for (std::int64_t h = 0; h < nh; ++h) {
          const std::int64_t kh = h / group, g = h % group;
          float* dst = qp + s.start * q_dim + ((kh * s.n + i) * group + g) * hd;
          rope_rotate(row + h * hd, dst, c, sn, half, q_scale);
        }
        for (std::int64_t kh = 0; kh < nkv; ++kh) {
          const std::int64_t off = s.slot * slot_stride + (kh * cap + s.cached + i) * hd;
          if (kph != nullptr) {  // a float16 cache: each key and value rounded once, as it is stored
            float* rotated = rope_buf.data();
            rope_rotate(row + q_dim + kh * hd, rotated, c, sn, half, 1.f);
            detail::floats_to_halves(rotated, kph + off, hd);
            detail::floats_to_halves(row + q_dim + kv_dim + kh * hd, vph + off, hd);
          } else {
            rope_rotate(row + q_dim + kh * hd, kp + off, c, sn, half, 1.f);
            std::copy_n(row + q_dim + kv_dim + kh * hd, hd, vp + off);
          }
          if (cache.has_key_blocks()) cache.write_key_block(static_cast<std::int64_t>(l), s.slot, kh, s.cached + i);
        }
      }
    }
    mark(ForwardPhaseTimes::kRope);
    attention(static_cast<std::int64_t>(l), plans, positions.data(), L.sliding ? window : 0);
    mark(ForwardPhaseTimes::kAttention);
    if (L.post_attn_norm.defined()) {
      // Gemma: the attention's output normalised before the residual add (the normed rows are free until the MLP's norm).
      linear(attnp, N, L.wo, np, opts.activation_bits.attn_out);
      rms_norm(np, L.post_attn_norm.data(), np, N, H, eps);
      for (std::int64_t j = 0; j < N * H; ++j) xp[j] += np[j];
    } else {
      linear_accumulate(attnp, N, L.wo, xp, opts.activation_bits.attn_out);
    }
    mark(ForwardPhaseTimes::kAttnOut);

    const float* ffn_norm = L.ffn_norm.data();
    linear(np, N, L.wgu, gu.data(), opts.activation_bits.gate_up, [&](std::int64_t r0, std::int64_t r1) {
      rms_norm(xp + r0 * H, ffn_norm, np + r0 * H, r1 - r0, H, eps);
    });
    mark(ForwardPhaseTimes::kGateUp);
    const float* gup = gu.data();
    float* actp = act.data();
    const RowPrep act_rows = gelu ? RowPrep([&](std::int64_t r0, std::int64_t r1) {
      detail::gelu_tanh_mul(gup + r0 * 2 * F, actp + r0 * F, r1 - r0, F);
    }) : RowPrep([&](std::int64_t r0, std::int64_t r1) { detail::silu_mul(gup + r0 * 2 * F, actp + r0 * F, r1 - r0, F); });
    if (L.post_ffn_norm.defined()) {
      // Gemma: the MLP's output normalised before the residual add.
      linear(actp, N, L.wdown, np, opts.activation_bits.down, act_rows);
      rms_norm(np, L.post_ffn_norm.data(), np, N, H, eps);
      for (std::int64_t j = 0; j < N * H; ++j) xp[j] += np[j];
    } else {
      linear_accumulate(actp, N, L.wdown, xp, opts.activation_bits.down, act_rows);
    }
    mark(ForwardPhaseTimes::kDown);
    if (std::find(b.hidden_layers.begin(), b.hidden_layers.end(), static_cast<std::int64_t>(l)) != b.hidden_layers.end())
      saved[l] = host_copy(xp, N, H);
  }
  for (const auto& s : plans) cache.set_length(s.slot, s.cached + s.n);

  for (const auto l : b.hidden_layers) out.layer_hidden.push_back(saved[static_cast<std::size_t>(l)]);
  Rows hidden_post_norm;
  if (b.return_final_hidden) {
    out.hidden_pre_norm = host_copy(xp, N, H);
    hidden_post_norm = Rows::host_float32_for_overwrite(N, H);
    rms_norm(xp, final_norm.data(), hidden_post_norm.mutable_host_float32_data(), N, H, eps);
    out.hidden_post_norm = hidden_post_norm;
  }
  // Output projection over the rows whose logits are wanted.
  const float* rows = nullptr;
  std::int64_t R = N;
  Rows last_rows;
  if (b.last_logits_only) {
    R = static_cast<std::int64_t>(plans.size());
    last_rows = Rows::host_float32_for_overwrite(R, H);
    for (std::int64_t i = 0; i < R; ++i) {
      const auto& s = plans[static_cast<std::size_t>(i)];
      rms_norm(xp + (s.start + s.n - 1) * H, final_norm.data(), last_rows.mutable_host_float32_data() + i * H, 1, H, eps);
    }
    rows = last_rows.host_float32_data();
  } else if (b.return_final_hidden) {
    rows = hidden_post_norm.host_float32_data();
  }
  RowPrep final_rows;
  if (rows == nullptr) {  // every row's logits: the final norm runs inside the output product
    rows = np;
    const float* fn = final_norm.data();
    final_rows = [&, fn](std::int64_t r0, std::int64_t r1) { rms_norm(xp + r0 * H, fn, np + r0 * H, r1 - r0, H, eps); };
  }
  const Rows logits = Rows::host_float32_for_overwrite(R, V_out);
  float* lp = logits.mutable_host_float32_data();
  mark(ForwardPhaseTimes::kOther);
  linear(rows, R, lm_head(), lp, opts.activation_bits.lm_head, final_rows);
  if (softcap > 0.f) {  // logits = cap * tanh(logits / cap), element by element
    const float inv_cap = 1.f / softcap;
    for (float* e = lp, *end = e + R * V_out; e != end; ++e) *e = softcap * std::tanh(*e * inv_cap);
  }
  out.logits = logits;
  mark(ForwardPhaseTimes::kLmHead);
  if (timed) ++phase_times.forwards;
  return out;
}

// --- construction ------------------------------------------------------------------------------------------------------

LlamaModel::LlamaModel(const LlamaConfig& config, const WeightGetter& get, const LlamaOptions& options)
    : LlamaModel(StoredTag{}, config,
                 [&](const std::string& name) {
                   StoredWeight w;
                   w.dense = get(name);
                   return w;
                 },
                 options) {}

LlamaModel LlamaModel::from_stored(const LlamaConfig& config, const StoredWeightGetter& get, const LlamaOptions& options) {
  return LlamaModel(StoredTag{}, config, get, options);
}

LlamaModel::LlamaModel(StoredTag, const LlamaConfig& config, const StoredWeightGetter& get, const LlamaOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = config;
  m.opts = options;
  LlamaConfig& c = m.cfg;
  if (c.hidden_size < 1 || c.num_heads < 1 || c.num_layers < 1 || c.vocab_size < 1 || c.intermediate_size < 1)
    fail(fmt::format("LlamaModel: config: expected positive hidden_size, num_heads, num_layers, vocab_size and "
                     "intermediate_size, got {}, {}, {}, {}, {}",
                     c.hidden_size, c.num_heads, c.num_layers, c.vocab_size, c.intermediate_size));
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0)
    fail(fmt::format("LlamaModel: config.num_kv_heads: expected a divisor of num_heads = {}, got {}", c.num_heads,
                     c.num_kv_heads));
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_heads != 0)
      fail(fmt::format("LlamaModel: config.num_heads: expected a divisor of hidden_size = {}, got {}", c.hidden_size,
                       c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim < 2 || c.head_dim % 2 != 0)
    fail(fmt::format("LlamaModel: config.head_dim: expected an even number >= 2, got {}", c.head_dim));
  if (c.rope_scaling.type == RopeScalingType::kLlama3 &&
      (c.rope_scaling.original_max_position_embeddings <= 0 ||
       c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor))
    fail(fmt::format("LlamaModel: config.rope_scaling: llama3 scaling expects original_max_position_embeddings > 0 and "
                     "high_freq_factor > low_freq_factor, got {}, {}, {}",
                     c.rope_scaling.original_max_position_embeddings, c.rope_scaling.low_freq_factor,
                     c.rope_scaling.high_freq_factor));
  if (options.context_length < 0)
    fail(fmt::format("LlamaModel: options.context_length: expected >= 0 (0 = the config's), got {}", options.context_length));
  m.max_len = options.context_length > 0 ? options.context_length : c.max_position_embeddings;
  if (!options.activation_bits.valid())
    fail(fmt::format("LlamaModel: options.activation_bits: expected 8 or 16 for every kind of matrix, got {}",
                     options.activation_bits.to_string()));
  m.pool = detail::shared_row_pool(options.num_threads > 0 ? options.num_threads : available_cpus());

  m.H = c.hidden_size;
  m.nh = c.num_heads;
  m.nkv = c.num_kv_heads;
  m.hd = c.head_dim;
  m.F = c.intermediate_size;
  m.V = c.vocab_size;
  m.q_dim = m.nh * m.hd;
  m.kv_dim = m.nkv * m.hd;
  m.qkv_dim = m.q_dim + 2 * m.kv_dim;
  m.group = m.nh / m.nkv;
  m.eps = static_cast<float>(c.rms_norm_eps);
  m.inv_freq = rope_inverse_frequencies(c, m.hd);
  require_block_support(c, "LlamaModel");
  m.q_scale = c.attention_scale > 0.0 ? static_cast<float>(c.attention_scale) : 1.f / std::sqrt(static_cast<float>(m.hd));
  m.embed_scale = static_cast<float>(c.embedding_scale);
  m.softcap = static_cast<float>(c.final_logit_softcap);
  m.gelu = c.ffn_activation == FfnActivation::kGeluTanh;
  if (c.sliding_window > 0) {
    if (static_cast<std::int64_t>(c.sliding_layers.size()) != c.num_layers)
      fail(fmt::format("LlamaModel: config.sliding_layers: expected {} entries (one per layer), got {}", c.num_layers,
                       c.sliding_layers.size()));
    m.window = c.sliding_window;
    m.inv_freq_swa = sliding_rope_inverse_frequencies(c, m.hd);
  }

  const GgmlType q8 = options.quantize_float_weights ? options.quantized_float_type : GgmlType::kF32;
  // The packed matrices one after another in huge-page slabs, in the order a forward reads them (detail::WeightArena).
  detail::WeightArena arena;
  m.embed = detail::fetch_linear(get, {{"model.embed_tokens.weight", m.V}}, m.H, q8, arena);
  m.tied = c.tie_word_embeddings || !get("lm_head.weight").present();
  m.V_out = m.V;
  if (!options.output_ids.empty()) {
    // The output projection from the chosen rows of the embedding (tied) or of lm_head.weight, gathered as stored.
    const std::string source = m.tied ? "model.embed_tokens.weight" : "lm_head.weight";
    std::vector<std::byte> gathered;  // the rows' raw blocks, alive until packed
    const StoredWeightGetter subset = [&](const std::string& name) {
      return name == "output rows" ? detail::gather_rows(get, source, m.V, m.H, options.output_ids, gathered) : get(name);
    };
    m.V_out = static_cast<std::int64_t>(options.output_ids.size());
    m.lm_head_own = detail::fetch_linear(subset, {{"output rows", m.V_out}}, m.H, q8, arena);
    m.tied = false;
  } else if (!m.tied) {
    m.lm_head_own = detail::fetch_linear(get, {{"lm_head.weight", m.V}}, m.H, q8, arena);
  }
  m.final_norm = detail::fetch_vector(get, "model.norm.weight", m.H);
  m.layers.reserve(static_cast<std::size_t>(c.num_layers));
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    Impl::Layer layer;
    layer.attn_norm = detail::fetch_vector(get, p + "input_layernorm.weight", m.H);
    layer.ffn_norm = detail::fetch_vector(get, p + std::string(pre_ffn_norm_name(c)), m.H);
    if (c.attention_bias) {
      std::vector<float> bias;
      for (const auto& [name, n] : {std::pair{"q_proj", m.q_dim}, std::pair{"k_proj", m.kv_dim}, std::pair{"v_proj", m.kv_dim}}) {
        const FloatTensor t = detail::fetch_vector(get, p + "self_attn." + name + ".bias", n);
        bias.insert(bias.end(), t.data(), t.data() + t.numel());
      }
      layer.qkv_bias = FloatTensor({m.qkv_dim}, std::move(bias));
    }
    if (c.qk_norm) {
      layer.q_norm = detail::fetch_vector(get, p + "self_attn.q_norm.weight", m.hd);
      layer.k_norm = detail::fetch_vector(get, p + "self_attn.k_norm.weight", m.hd);
    }
    if (c.post_attention_norm) layer.post_attn_norm = detail::fetch_vector(get, p + "post_attention_layernorm.weight", m.H);
    if (c.post_ffn_norm) layer.post_ffn_norm = detail::fetch_vector(get, p + "post_feedforward_layernorm.weight", m.H);
    layer.sliding = c.is_sliding_layer(i);
    layer.wqkv = detail::fetch_linear(get, {{p + "self_attn.q_proj.weight", m.q_dim}, {p + "self_attn.k_proj.weight", m.kv_dim},
                                    {p + "self_attn.v_proj.weight", m.kv_dim}},
                              m.H, q8, arena);
    layer.wo = detail::fetch_linear(get, {{p + "self_attn.o_proj.weight", m.H}}, m.q_dim, q8, arena);
    layer.wgu = detail::fetch_linear(get, {{p + "mlp.gate_proj.weight", m.F}, {p + "mlp.up_proj.weight", m.F}}, m.H, q8, arena);
    layer.wdown = detail::fetch_linear(get, {{p + "mlp.down_proj.weight", m.H}}, m.F, q8, arena);
    m.layers.push_back(std::move(layer));
  }
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = m.nkv;
  shape.head_dim = m.hd;
  shape.initial_capacity = std::max<std::int64_t>(options.initial_cache_capacity, 1);
  shape.initial_slots = std::max<std::int64_t>(options.initial_cache_slots, 1);
  // Keys also in transposed blocks where the attention kernel scores from them (KvCacheShape::key_blocks).
  shape.key_blocks = detail::attention_reads_key_blocks(m.hd);
  shape.half = options.kv_cache_half;
  m.cache = KvCache(shape);
  m.rope_buf.resize(static_cast<std::size_t>(m.hd));
  m.ensure_rope(std::min<std::int64_t>(std::max<std::int64_t>(c.max_position_embeddings, 1), 4096));
}

WeightGetter random_llama_weights(const LlamaConfig& config, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto make = [&](std::vector<std::int64_t> shape, float mean, float std) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = mean + std * normal(rng);
    return FloatTensor(std::move(shape), std::move(v));
  };
  const std::int64_t H = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
  const std::int64_t nh = config.num_heads, nkv = config.num_kv_heads ? config.num_kv_heads : nh;
  const std::int64_t hd = config.head_dim ? config.head_dim : (nh ? H / nh : 0);
  const float in_h = 1.f / std::sqrt(static_cast<float>(std::max<std::int64_t>(H, 1)));
  const float in_q = 1.f / std::sqrt(static_cast<float>(std::max<std::int64_t>(nh * hd, 1)));
  const float in_f = 1.f / std::sqrt(static_cast<float>(std::max<std::int64_t>(F, 1)));
  auto weights = std::make_shared<std::unordered_map<std::string, FloatTensor>>();
  auto& w = *weights;
  {
    w["model.embed_tokens.weight"] = make({V, H}, 0.f, 1.f);
    if (!config.tie_word_embeddings) w["lm_head.weight"] = make({V, H}, 0.f, in_h);
    w["model.norm.weight"] = make({H}, 1.f, 0.1f);
    for (std::int64_t i = 0; i < config.num_layers; ++i) {
      const std::string p = fmt::format("model.layers.{}.", i);
      w[p + "input_layernorm.weight"] = make({H}, 1.f, 0.1f);
      w[p + std::string(pre_ffn_norm_name(config))] = make({H}, 1.f, 0.1f);
      // Query/key weights larger than 1/sqrt(in) so attention is far from uniform and mask errors show.
      w[p + "self_attn.q_proj.weight"] = make({nh * hd, H}, 0.f, 2.f * in_h);
      w[p + "self_attn.k_proj.weight"] = make({nkv * hd, H}, 0.f, 2.f * in_h);
      w[p + "self_attn.v_proj.weight"] = make({nkv * hd, H}, 0.f, in_h);
      w[p + "self_attn.o_proj.weight"] = make({H, nh * hd}, 0.f, in_q);
      w[p + "mlp.gate_proj.weight"] = make({F, H}, 0.f, in_h);
      w[p + "mlp.up_proj.weight"] = make({F, H}, 0.f, in_h);
      w[p + "mlp.down_proj.weight"] = make({H, F}, 0.f, in_f);
      // The options' weights after Llama's (a Llama config draws the same numbers as before they existed).
      if (config.attention_bias) {
        w[p + "self_attn.q_proj.bias"] = make({nh * hd}, 0.f, 0.5f);
        w[p + "self_attn.k_proj.bias"] = make({nkv * hd}, 0.f, 0.5f);
        w[p + "self_attn.v_proj.bias"] = make({nkv * hd}, 0.f, 0.5f);
      }
      if (config.qk_norm) {
        w[p + "self_attn.q_norm.weight"] = make({hd}, 1.f, 0.3f);
        w[p + "self_attn.k_norm.weight"] = make({hd}, 1.f, 0.3f);
      }
      if (config.post_attention_norm) w[p + "post_attention_layernorm.weight"] = make({H}, 1.f, 0.1f);
      if (config.post_ffn_norm) w[p + "post_feedforward_layernorm.weight"] = make({H}, 1.f, 0.1f);
    }
  }
  return [weights](const std::string& name) {
    auto it = weights->find(name);
    return it == weights->end() ? FloatTensor() : it->second;
  };
}

LlamaModel LlamaModel::random(const LlamaConfig& config, std::uint64_t seed, const LlamaOptions& options) {
  return LlamaModel(config, random_llama_weights(config, seed), options);
}

LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;
LlamaModel::~LlamaModel() = default;

const LlamaConfig& LlamaModel::config() const noexcept { return impl_->cfg; }
std::int64_t LlamaModel::vocab_size() const noexcept { return impl_->V; }
std::int64_t LlamaModel::output_size() const noexcept { return impl_->V_out; }
const std::vector<std::int64_t>& LlamaModel::output_ids() const noexcept { return impl_->opts.output_ids; }
std::int64_t LlamaModel::hidden_size() const noexcept { return impl_->H; }
std::int64_t LlamaModel::max_sequence_length() const noexcept { return impl_->max_len; }
ForwardOutput LlamaModel::forward(const ForwardBatch& batch) { return impl_->forward(batch); }
std::int64_t LlamaModel::allocate_sequence() { return impl_->cache.allocate(); }
void LlamaModel::free_sequence(std::int64_t slot) { impl_->cache.free(slot); }
std::int64_t LlamaModel::sequence_length(std::int64_t slot) const { return impl_->cache.length(slot); }
void LlamaModel::truncate(std::int64_t slot, std::int64_t length) { impl_->cache.truncate(slot, length); }
void LlamaModel::keep_path(std::int64_t slot, std::int64_t prefix_length, std::span<const std::int64_t> path) {
  impl_->cache.keep_path(slot, prefix_length, path);
}
const KvCache& LlamaModel::cache() const noexcept { return impl_->cache; }

std::int64_t LlamaModel::weight_bytes_per_forward() const noexcept {
  const Impl& m = *impl_;
  std::int64_t n = m.lm_head().bytes() + m.final_norm.numel() * 4;
  const auto vector_bytes = [](const FloatTensor& t) { return t.numel() * 4; };
  for (const auto& l : m.layers)
    n += (l.attn_norm.numel() + l.ffn_norm.numel()) * 4 + l.wqkv.bytes() + l.wo.bytes() + l.wgu.bytes() + l.wdown.bytes() +
         vector_bytes(l.qkv_bias) + vector_bytes(l.q_norm) + vector_bytes(l.k_norm) + vector_bytes(l.post_attn_norm) +
         vector_bytes(l.post_ffn_norm);
  return n;
}

std::int64_t LlamaModel::weight_bytes() const noexcept {
  const Impl& m = *impl_;
  return weight_bytes_per_forward() + (m.tied ? 0 : m.embed.bytes());
}

int LlamaModel::num_threads() const noexcept { return impl_->pool->size(); }

void LlamaModel::parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  if (n > 0) impl_->pool->run(n, fn);
}

const ForwardPhaseTimes& LlamaModel::phase_times() const noexcept { return impl_->phase_times; }
void LlamaModel::reset_phase_times() noexcept { impl_->phase_times = {}; }

std::string LlamaModel::kernel_name() const {
  const Impl& m = *impl_;
  bool packed = m.lm_head().any_packed();
  for (const auto& l : m.layers) packed = packed || l.wqkv.any_packed() || l.wgu.any_packed();
  return packed ? detail::to_string(detail::best_cpu_isa()) : "float32";
}

FloatTensor unpermute_gguf_qk(const FloatTensor& weight, std::int64_t n_heads) {
  const bool vector = weight.dim() == 1;  // a bias: the rows' order
  if ((weight.dim() != 2 && !vector) || n_heads < 1 || weight.size(0) % (2 * n_heads) != 0)
    fail(fmt::format("unpermute_gguf_qk: weight: expected [n_heads * head_dim, in] with n_heads = {} and even head_dim, got {}",
                     n_heads, shape_str(weight.shape())));
  const std::int64_t rows = weight.size(0), in = vector ? 1 : weight.size(1), hd = rows / n_heads, half = hd / 2;
  // GGUF row h*hd + 2j + s holds HF row h*hd + s*half + j.
  FloatTensor out(weight.shape());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t h = r / hd, s = (r % hd) / half, j = r % half;
    std::copy_n(weight.data() + (h * hd + 2 * j + s) * in, in, out.mutable_data() + r * in);
  }
  return out;
}


namespace detail {

std::int64_t check_ragged_tokens(const char* who, const char* unit, std::int64_t B,
                                 std::span<const std::int64_t> cu, std::span<const std::int64_t> ids, std::int64_t V) {
  if (B < 1) fail(fmt::format("{}: slots: expected at least one sequence, got 0", who));
  if (static_cast<std::int64_t>(cu.size()) != B + 1)
    fail(fmt::format("{}: cu_num_tokens: expected {} entries (slots + 1), got {}", who, B + 1, cu.size()));
  if (cu[0] != 0) fail(fmt::format("{}: cu_num_tokens[0]: expected 0, got {}", who, cu[0]));
  for (std::int64_t i = 0; i < B; ++i)
    if (cu[i + 1] <= cu[i])
      fail(fmt::format("{}: cu_num_tokens: expected strictly increasing (>= 1 {} per sequence), got {} then {} at {}", who,
                       unit, cu[i], cu[i + 1], i));
  const std::int64_t N = cu[B];
  if (static_cast<std::int64_t>(ids.size()) != N)
    fail(fmt::format("{}: token_ids: expected {} ids (cu_num_tokens.back()), got {}", who, N, ids.size()));
  for (std::int64_t t = 0; t < N; ++t)
    if (ids[t] < 0 || ids[t] >= V) fail(fmt::format("{}: token_ids[{}]: expected in [0, {}), got {}", who, t, V, ids[t]));
  return N;
}

}  // namespace detail

}  // namespace specdec::models
