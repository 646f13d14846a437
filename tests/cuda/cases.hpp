// specdec tests — random verification batches and the CPU reference per request, shared by the host emulation
// test and the device tests. The reference is the torch-free core (sampling/chain.hpp, tree.hpp) run on the
// probabilities after rounding to the kernel's element type, with the per-request status convention of the
// kernels: range/stride/position problems -> kInvalidArgument, then the draft kind (has_draft_probs set for a
// request with drafts while there are no draft probs -> kInvalidArgument), then ids, then (trees) parents, then the
// walk; a failed request's outputs are -1, its count 0 and its flags 0.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/cuda/common.cuh"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/tree.hpp"

namespace specdec::cuda::testing {

/// A batch with float values already rounded to the element type under test.
struct Batch {
  std::int64_t B = 0, V = 0, N = 0, stride = 0;
  std::vector<std::int64_t> cu, ids, parents;
  bool has_q = false;
  std::vector<float> q, p;  ///< [N, V], [N + B, V]
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> positions;
  std::vector<std::uint8_t> greedy;
  std::vector<std::uint8_t> has_q_req;  ///< [B] per-request draft kind (has_draft_probs), or empty (none passed)
  float lenience = 1.0f;
  const std::uint8_t* has_draft_probs() const { return has_q_req.empty() ? nullptr : has_q_req.data(); }
  /// Whether request b's drafts are verified with their probabilities.
  bool request_has_q(std::int64_t b) const { return has_q && (has_q_req.empty() || has_q_req[b] != 0); }
};

template <class T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}
template <class T>
float round_to(float v) { return detail::to_float(from_float<T>(v)); }

template <class T>
std::vector<T> convert(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = from_float<T>(v[i]);
  return r;
}
template <class IdT>
std::vector<IdT> convert_ids(const std::vector<std::int64_t>& v) {
  return std::vector<IdT>(v.begin(), v.end());
}

/// One random distribution row of one of several shapes (values rounded to T).
template <class T>
void fill_row(std::mt19937_64& rng, float* row, std::int64_t V, int shape) {
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::fill(row, row + V, 0.0f);
  const std::int64_t last_begin = (V - 1) / kTileSize * kTileSize;
  switch (shape) {
    case 0:  // dense, heavy-tailed
      for (std::int64_t x = 0; x < V; ++x) { const float u = U(rng); row[x] = u * u * u * u; }
      break;
    case 1: {  // sparse
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) row[rng() % V] = U(rng) + 0.01f;
      break;
    }
    case 2:  // mass only in the last (possibly partial) tile
      for (std::int64_t x = last_begin; x < V; ++x) row[x] = U(rng) < 0.3f ? U(rng) : 0.0f;
      row[V - 1] += 0.5f;
      break;
    default: {  // ties at the maximum
      for (std::int64_t x = 0; x < V; ++x) row[x] = U(rng) < 0.5f ? 0.25f : 0.0f;
      row[rng() % V] = 0.25f;
      break;
    }
  }
  float sum = 0.0f;
  for (std::int64_t x = 0; x < V; ++x) sum += row[x];
  for (std::int64_t x = 0; x < V; ++x) row[x] = round_to<T>(row[x] / sum);
}

/// A random batch. `tree` draws parent arrays; `greedy_frac` of the requests are greedy. With `no_probs_frac` >= 0
/// (and has_q) the batch passes per-request draft kinds: that fraction of the requests are flagged 0 (deterministic
/// drafts), and their draft_probs rows are filled with NaN, which the verifiers must never read.
template <class T>
Batch make_batch(std::mt19937_64& rng, std::int64_t V, int B, int max_k, bool has_q, bool tree, double greedy_frac,
                 double no_probs_frac = -1.0) {
  Batch c;
  c.B = B;
  c.V = V;
  c.has_q = has_q;
  c.cu.push_back(0);
  std::int64_t max_seen = 0;
  for (int b = 0; b < B; ++b) {
    const std::int64_t k = static_cast<std::int64_t>(rng() % (max_k + 1));
    max_seen = std::max(max_seen, k);
    c.cu.push_back(c.cu.back() + k);
  }
  c.N = c.cu.back();
  c.stride = max_seen + 1 + static_cast<std::int64_t>(rng() % 2);
  c.p.assign(static_cast<std::size_t>((c.N + B) * V), 0.0f);
  if (has_q) c.q.assign(static_cast<std::size_t>(c.N * V), 0.0f);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (int b = 0; b < B; ++b) {
    c.seeds.push_back(rng());
    c.positions.push_back(static_cast<std::int64_t>(rng() % 100000));
    c.greedy.push_back(U(rng) < greedy_frac ? 1 : 0);
    const std::int64_t start = c.cu[b], k = c.cu[b + 1] - start;
    const int shape = static_cast<int>(rng() % 4);
    for (std::int64_t r = 0; r <= k; ++r) fill_row<T>(rng, &c.p[(start + b + r) * V], V, shape);
    for (std::int64_t j = 0; j < k; ++j) {
      const float* p = &c.p[(start + b + (tree ? 0 : j)) * V];
      float* q = has_q ? &c.q[(start + j) * V] : nullptr;
      const int mode = static_cast<int>(rng() % 4);
      if (q) {
        if (mode == 0) std::copy(p, p + V, q);  // p == q: zero residual, fallback draw from p
        else fill_row<T>(rng, q, V, static_cast<int>(rng() % 4));
        if (mode == 1 && shape == 2) {  // residual mass only in the last tile
          std::copy(p, p + V, q);
          for (std::int64_t x = (V - 1) / kTileSize * kTileSize; x < V; ++x) q[x] = round_to<T>(q[x] * 0.5f);
        }
      }
      // Draft token: argmax of p (likely accepted), or a random token, or the argmax of q.
      std::int64_t x = static_cast<std::int64_t>(rng() % V);
      if (mode >= 2) x = std::max_element(p, p + V) - p;
      if (q && mode == 3) x = std::max_element(q, q + V) - q;
      c.ids.push_back(x);
      c.parents.push_back(tree ? static_cast<std::int64_t>(rng() % (j + 1)) * (rng() % 3 == 0 ? 0 : 1) : j);
    }
    if (has_q && no_probs_frac >= 0.0) {
      c.has_q_req.push_back(U(rng) < no_probs_frac ? 0 : 1);
      if (!c.has_q_req.back()) std::fill(&c.q[start * V], &c.q[(start + k) * V], __builtin_nanf(""));
    }
  }
  return c;
}

/// The per-request draft kind check of the kernels (check_request_draft_kind).
inline Status draft_kind_status(const Batch& c, std::int64_t b, std::int64_t k) {
  return k > 0 && !c.has_q_req.empty() && c.has_q_req[b] && !c.has_q ? Status::kInvalidArgument : Status::kSuccess;
}

/// CPU reference for chain request b: fills out_row [stride], nacc, flags (global [N] array) and returns the status.
template <class IdT>
Status cpu_chain(const Batch& c, std::int64_t b, IdT* out_row, std::int32_t& nacc, std::uint8_t* flags) {
  const std::vector<IdT> cu = convert_ids<IdT>(c.cu), ids = convert_ids<IdT>(c.ids);
  std::int64_t start = 0, k = -1;
  std::fill(out_row, out_row + c.stride, static_cast<IdT>(-1));
  nacc = 0;
  Status s = detail::check_request_range(cu.data(), b, c.B, c.N, c.stride, c.positions.data(), start, k);
  if (k >= 0) std::fill(flags + start, flags + start + k, 0);
  if (s == Status::kSuccess) s = draft_kind_status(c, b, k);
  if (s != Status::kSuccess) return s;
  for (std::int64_t i = 0; i < k; ++i)
    if (ids[start + i] < 0 || ids[start + i] >= c.V) return Status::kInvalidTokenId;
  std::vector<float> tm(static_cast<std::size_t>(num_tiles(c.V)));
  s = verify_chain_request<IdT>(c.V, k, ids.data() + start, c.request_has_q(b) ? c.q.data() + start * c.V : nullptr,
                                c.p.data() + (start + b) * c.V, c.seeds[b], c.positions[b], c.greedy[b] != 0,
                                c.lenience, out_row, &nacc, flags + start, tm.data());
  if (s != Status::kSuccess) {
    std::fill(out_row, out_row + c.stride, static_cast<IdT>(-1));
    nacc = 0;
    std::fill(flags + start, flags + start + k, 0);
  }
  return s;
}

/// CPU reference for tree request b.
template <class IdT>
Status cpu_tree(const Batch& c, std::int64_t b, IdT* out_row, IdT* nodes_row, std::int32_t& nacc) {
  const std::vector<IdT> cu = convert_ids<IdT>(c.cu), ids = convert_ids<IdT>(c.ids),
                         parents = convert_ids<IdT>(c.parents);
  std::int64_t start = 0, k = -1;
  std::fill(out_row, out_row + c.stride, static_cast<IdT>(-1));
  std::fill(nodes_row, nodes_row + c.stride, static_cast<IdT>(-1));
  nacc = 0;
  Status s = detail::check_request_range(cu.data(), b, c.B, c.N, c.stride, c.positions.data(), start, k);
  if (s == Status::kSuccess) s = draft_kind_status(c, b, k);
  if (s != Status::kSuccess) return s;
  for (std::int64_t i = 0; i < k; ++i)
    if (ids[start + i] < 0 || ids[start + i] >= c.V) return Status::kInvalidTokenId;
  std::vector<float> tm(static_cast<std::size_t>(num_tiles(c.V)));
  s = verify_tree_request<IdT>(c.V, k, ids.data() + start, parents.data() + start,
                               c.request_has_q(b) ? c.q.data() + start * c.V : nullptr, c.p.data() + (start + b) * c.V,
                               c.seeds[b], c.positions[b], c.greedy[b] != 0, out_row, nodes_row, &nacc, tm.data());
  if (s != Status::kSuccess) {
    std::fill(out_row, out_row + c.stride, static_cast<IdT>(-1));
    std::fill(nodes_row, nodes_row + c.stride, static_cast<IdT>(-1));
    nacc = 0;
  }
  return s;
}

/// Corrupts request b of a batch in one of several ways (bad input reporting). Returns the kind used.
inline int corrupt(std::mt19937_64& rng, Batch& c, std::int64_t b, bool tree) {
  const std::int64_t start = c.cu[b], k = c.cu[b + 1] - start, V = c.V;
  const float nan = __builtin_nanf("");
  const int kind = static_cast<int>(rng() % 6);
  switch (kind) {
    case 0:  // NaN / inf / negative anywhere in the first target row
      c.p[(start + b) * V + static_cast<std::int64_t>(rng() % V)] =
          rng() % 3 == 0 ? nan : (rng() % 2 ? -0.5f : __builtin_inff());
      break;
    case 1:  // id out of range
      if (k > 0) c.ids[start + static_cast<std::int64_t>(rng() % k)] = rng() % 2 ? V : -1;
      break;
    case 2:  // zero mass everywhere
      for (std::int64_t r = 0; r <= k; ++r) std::fill(&c.p[(start + b + r) * V], &c.p[(start + b + r + 1) * V], 0.0f);
      break;
    case 3:  // bad parent (trees) or NaN in a draft row (chains)
      if (tree && k > 0) c.parents[start + static_cast<std::int64_t>(rng() % k)] = rng() % 2 ? -1 : k + 1;
      else if (c.has_q && k > 0) c.q[start * V + static_cast<std::int64_t>(rng() % (k * V))] = nan;
      break;
    case 4:  // negative position
      c.positions[b] = -1;
      break;
    default:  // NaN at the drafted token of the first row
      if (k > 0 && c.ids[start] >= 0 && c.ids[start] < V) c.p[(start + b) * V + c.ids[start]] = nan;
      break;
  }
  return kind;
}

}  // namespace specdec::cuda::testing
