// specdec — tree verification with multi-candidate rejection sampling, the CPU reference.
//
// Each request has a draft tree given as a parent-index array. Node 0 is the root (the last accepted token);
// draft token j (0-based, local to the request) is node j + 1 and its parent node parents[j] must lie in [0, j]
// (topological order). The target's rows follow the chain layout: request b's K_b + 1 rows start at
// cu[b] + b and row n is the target's distribution after node n (row 0 after the root). draft_probs row j is the
// distribution draft j was drawn from (its parent's draft distribution), or absent.
//
// The walk, from the root, at depth d (position P + d): with r = p_n the target row of the current node and
// Z = 1, try the children of the node in increasing j; child c (token x, rank k among the node's children, uniform
// u = uniform(s, P + d, kAccept, k)):
//  - children drawn i.i.d. from q (draft probs present): accept iff u * q_c(x) < r(x) / Z, i.e. with probability
//    min(1, p'(x) / q(x)) for the current normalised residual p' = r / Z. On rejection r <- max(r / Z - q_c, 0)
//    and Z <- mass(r) (SpecInfer / Chen et al. multi-draft rejection: lossless);
//  - deterministic children (no draft probs; e.g. the top-k of an argmax head): accept iff u < r(x) / Z; on
//    rejection r(x) <- 0 and Z <- mass(r) (sampling without replacement from p: lossless);
//  - greedy rows: accept the first child equal to argmax p_n (a row with no positive value: kZeroMass).
// An accepted child becomes the current node (depth + 1). When every child of the node is rejected the token is
// drawn from r by the race of residual.hpp (purposes kResidualTile/kResidual at P + d; if r has no mass, from
// p_n); at a leaf the bonus token is drawn from p_n (kBonusTile/kBonus at P + d). mass(r) is the float sum of
// the tile masses in tile order. A chain (parents[j] = j) gives exactly the tokens of verify_chain.
//
// Per-request draft kinds (has_draft_probs [B]) and the validation follow chain.hpp: the batch entry checks sizes,
// pointers, cu, positions, every id and every parent first (errors name the argument, expected and got), the checked
// single-request entry verify_tree_request checks its own arguments, and outputs are written only on success.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specdec/sampling/chain.hpp"

namespace specdec {

/// Inputs of a batched tree verification (chain layout plus parent indices). Nothing is owned.
template <class IdT, class OffT = IdT>
struct TreeVerifyArgs {
  std::int64_t batch_size = 0;
  std::int64_t vocab_size = 0;
  const OffT* cu_num_draft_tokens = nullptr;  ///< [B + 1]
  const IdT* draft_token_ids = nullptr;       ///< [N]
  const IdT* parents = nullptr;               ///< [N] parent node of draft j (node j + 1), in [0, j]
  const float* draft_probs = nullptr;         ///< [N, V] or nullptr
  const float* target_probs = nullptr;        ///< [N + B, V]
  const std::uint64_t* seeds = nullptr;       ///< [B]
  const std::int64_t* positions = nullptr;    ///< [B] sequence index of the root's first child
  const std::uint8_t* greedy = nullptr;       ///< [B] or nullptr
  const std::uint8_t* has_draft_probs = nullptr;  ///< [B] per-request draft kind (see chain.hpp), or nullptr
  // Element counts of the caller's buffers, checked when given (-1 = not given).
  std::int64_t draft_token_ids_size = -1;     ///< N = cu[B]
  std::int64_t parents_size = -1;             ///< N
  std::int64_t draft_probs_size = -1;         ///< N * V (ignored when draft_probs is null)
  std::int64_t target_probs_size = -1;        ///< (N + B) * V
};

/// Outputs of a batched tree verification. Written only when the call succeeds.
template <class IdT>
struct TreeVerifyOutputs {
  IdT* output_token_ids = nullptr;       ///< [B, output_stride], accepted path tokens then one more, -1 padded
  std::int64_t output_stride = 0;        ///< >= max_b K_b + 1
  std::int32_t* num_accepted = nullptr;  ///< [B] accepted path length (nodes below the root)
  IdT* accepted_nodes = nullptr;         ///< [B, output_stride] node indices of the accepted path, -1 padded
};

namespace detail {

/// Working residual of a tree node: r as a dense row plus its mass Z.
struct TreeResidual {
  std::vector<float> r;
  float z = 1.0f;
  bool materialised = false;
};

/// mass(r): tile masses summed in tile order (NaN poisons it).
inline float residual_mass(const float* r, std::int64_t vocab_size, float* tile_masses) {
  const std::int64_t tiles = num_tiles(vocab_size);
  race_tile_masses(RowWeight{r}, vocab_size, tile_masses);
  float z = 0.0f;
  for (std::int64_t t = 0; t < tiles; ++t) z += tile_masses[t];
  return z;
}

}  // namespace detail

namespace detail {

/// Tree verification of one request whose arguments are valid (ids in range, parents in [0, j], pointers set):
/// the walk of the header. Outputs are written only on success; failures carry the draft index whose row or
/// child was bad (-1: the root's row).
template <class IdT>
inline VerifyResult verify_tree_request_unchecked(std::int64_t vocab_size, std::int64_t num_drafts,
                                                  const IdT* draft_token_ids, const IdT* parents,
                                                  const float* draft_probs, const float* target_probs,
                                                  std::uint64_t seed, std::int64_t position, bool greedy,
                                                  IdT* out_tokens, IdT* out_nodes, std::int32_t* num_accepted,
                                                  float* tile_masses) {
  const std::int64_t V = vocab_size;
  std::int64_t node = 0, depth = 0, token = -1;
  std::vector<std::int64_t> path;  // accepted children (local draft indices)
  TreeResidual res;
  Status s = Status::kSuccess;
  for (;;) {
    const float* p = target_probs + node * V;
    const std::int64_t pos = position + depth;
    std::int64_t accepted_child = -1;
    bool any_child = false;
    res.z = 1.0f;
    res.materialised = false;
    std::int64_t greedy_token = -1;
    if (greedy && (s = argmax_row(p, V, greedy_token)) != Status::kSuccess) return row_failure(s, node - 1, false);
    std::uint32_t rank = 0;
    for (std::int64_t j = node; j < num_drafts; ++j) {  // children have j >= node since parents[j] <= j
      if (static_cast<std::int64_t>(parents[j]) != node) continue;
      any_child = true;
      const std::int64_t x = static_cast<std::int64_t>(draft_token_ids[j]);
      if (greedy) {
        if (x == greedy_token) {
          accepted_child = j;
          break;
        }
        continue;
      }
      const float* r = res.materialised ? res.r.data() : p;
      const float rx = r[x];
      const float u = uniform(seed, pos, Purpose::kAccept, rank++);
      const float* q = draft_probs ? draft_probs + j * V : nullptr;
      if (!valid_probability(rx)) return value_failure("target_probs", rx, j);
      bool accept;
      if (q) {
        const float qx = q[x];
        if (!valid_probability(qx)) return value_failure("draft_probs", qx, j);
        accept = u * qx < rx / res.z;
      } else {
        accept = u < rx / res.z;
      }
      if (accept) {
        accepted_child = j;
        break;
      }
      // Rejected: update the residual and its mass.
      if (!res.materialised) {
        res.r.assign(p, p + V);
        res.materialised = true;
      }
      if (q) {
        bool ok = true;
        for (std::int64_t y = 0; y < V; ++y) {
          ok &= valid_probability(q[y]) & valid_probability(res.r[y]);
          const float d = res.r[y] / res.z - q[y];
          res.r[y] = d > 0.0f ? d : 0.0f;
        }
        if (!ok) return row_failure(Status::kInvalidProbability, j, true);
      } else {
        res.r[x] = 0.0f;
      }
      res.z = residual_mass(res.r.data(), V, tile_masses);
      if (!valid_probability(res.z)) return row_failure(Status::kInvalidProbability, j, q != nullptr);
    }
    if (accepted_child >= 0) {
      path.push_back(accepted_child);
      node = accepted_child + 1;
      ++depth;
      continue;
    }
    if (greedy) {
      token = greedy_token;
    } else if (!any_child) {
      s = draw(RowWeight{p}, V, seed, pos, kBonusRace, tile_masses, token);
    } else {
      const float* r = res.materialised ? res.r.data() : p;
      s = draw_residual(RowWeight{r}, p, V, seed, pos, tile_masses, token);
    }
    if (s != Status::kSuccess) return row_failure(s, node - 1, draft_probs != nullptr);
    break;
  }
  for (std::int64_t d = 0; d < depth; ++d) {
    out_tokens[d] = draft_token_ids[path[d]];
    if (out_nodes) out_nodes[d] = static_cast<IdT>(path[d] + 1);
  }
  out_tokens[depth] = static_cast<IdT>(token);
  *num_accepted = static_cast<std::int32_t>(depth);
  return {};
}

}  // namespace detail

/// Verifies one request's tree: the checked single-request entry. Arrays are the request's own slices (drafts,
/// parents, draft rows or nullptr, K + 1 target rows). Writes the accepted path tokens plus one to `out_tokens`
/// (capacity K + 1), node indices to `out_nodes` (optional). Checks vocab_size, num_drafts, the required pointers,
/// position, every draft id (kInvalidTokenId) and every parent (kInvalidTree) before reading a probability. On
/// failure nothing is written except the error reports (`error_position`: the draft index at fault, -1 for the
/// root's row or none; `error`: the VerifyResult naming the argument).
template <class IdT>
inline Status verify_tree_request(std::int64_t vocab_size, std::int64_t num_drafts, const IdT* draft_token_ids,
                                  const IdT* parents, const float* draft_probs, const float* target_probs,
                                  std::uint64_t seed, std::int64_t position, bool greedy, IdT* out_tokens,
                                  IdT* out_nodes, std::int32_t* num_accepted, float* tile_masses,
                                  std::int64_t* error_position = nullptr, VerifyResult* error = nullptr) {
  VerifyResult r = detail::check_chain_request(vocab_size, num_drafts, draft_token_ids, target_probs, position, 1.0f,
                                               out_tokens, num_accepted, tile_masses);
  if (r.ok() && num_drafts > 0 && !parents) r = detail::null_argument("parents");
  for (std::int64_t j = 0; r.ok() && j < num_drafts; ++j) {
    const auto par = static_cast<std::int64_t>(parents[j]);
    if (par < 0 || par > j)
      r = detail::bad_argument(Status::kInvalidTree, "parents", "an earlier node in [0, j] (0 is the root) with j",
                               static_cast<double>(j), static_cast<double>(par), -1, j);
  }
  if (r.ok())
    r = detail::verify_tree_request_unchecked<IdT>(vocab_size, num_drafts, draft_token_ids, parents, draft_probs,
                                                   target_probs, seed, position, greedy, out_tokens, out_nodes,
                                                   num_accepted, tile_masses);
  if (!r.ok()) {
    if (error_position) *error_position = r.position;
    if (error) *error = r;
  }
  return r.status;
}

/// Verifies request `b` of a tree batch into its own rows (the batch must have passed the checks of verify_tree).
template <class IdT, class OffT>
inline VerifyResult verify_tree_one(const TreeVerifyArgs<IdT, OffT>& a, std::int64_t b, IdT* out_row, IdT* nodes_row,
                                    std::int32_t* num_accepted, float* tile_masses) {
  const std::int64_t V = a.vocab_size;
  const auto start = static_cast<std::int64_t>(a.cu_num_draft_tokens[b]);
  const auto k = static_cast<std::int64_t>(a.cu_num_draft_tokens[b + 1]) - start;
  VerifyResult r = detail::verify_tree_request_unchecked<IdT>(
      V, k, a.draft_token_ids + start, a.parents + start,
      detail::request_draft_probs(a.draft_probs, a.has_draft_probs, a.cu_num_draft_tokens, b, V),
      a.target_probs + (start + b) * V, a.seeds[b], a.positions[b], a.greedy && a.greedy[b], out_row, nodes_row,
      num_accepted, tile_masses);
  r.request = r.ok() ? -1 : b;
  return r;
}

/// Batched tree verification on the CPU. Validates everything first (detail::check_batch); on failure returns
/// where and why, and leaves every output untouched.
template <class IdT, class OffT>
inline VerifyResult verify_tree(const TreeVerifyArgs<IdT, OffT>& a, const TreeVerifyOutputs<IdT>& out) {
  std::int64_t max_k = 0;
  const detail::BatchSizes sizes{a.draft_token_ids_size, a.parents_size, a.draft_probs_size, a.target_probs_size};
  VerifyResult r = detail::check_batch<IdT, OffT>(a.batch_size, a.vocab_size, a.cu_num_draft_tokens, a.draft_token_ids,
                                                  a.parents, true, a.draft_probs, a.has_draft_probs, a.target_probs,
                                                  a.seeds, a.positions, out.output_stride, sizes, max_k);
  if (!r.ok()) return r;
  if (!out.output_token_ids) return detail::null_argument("output_token_ids");
  if (!out.num_accepted) return detail::null_argument("num_accepted");
  const std::int64_t B = a.batch_size, V = a.vocab_size, stride = out.output_stride;
  std::vector<IdT> tokens(static_cast<std::size_t>(B * stride), static_cast<IdT>(-1));
  std::vector<IdT> nodes(static_cast<std::size_t>(B * stride), static_cast<IdT>(-1));
  std::vector<std::int32_t> counts(static_cast<std::size_t>(B));
  std::vector<float> tile_masses(static_cast<std::size_t>(num_tiles(V)));
  for (std::int64_t b = 0; b < B; ++b) {
    r = verify_tree_one(a, b, tokens.data() + b * stride, nodes.data() + b * stride, &counts[b], tile_masses.data());
    if (!r.ok()) return r;
  }
  std::copy(tokens.begin(), tokens.end(), out.output_token_ids);
  std::copy(counts.begin(), counts.end(), out.num_accepted);
  if (out.accepted_nodes) std::copy(nodes.begin(), nodes.end(), out.accepted_nodes);
  return {};
}

}  // namespace specdec
