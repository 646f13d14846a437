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
//  - greedy rows: accept the first child equal to argmax p_n.
// An accepted child becomes the current node (depth + 1). When every child of the node is rejected the token is
// drawn from r by the race of residual.hpp (purposes kResidualTile/kResidual at P + d; if r has no mass, from
// p_n); at a leaf the bonus token is drawn from p_n (kBonusTile/kBonus at P + d). mass(r) is the float sum of
// the tile masses in tile order. A chain (parents[j] = j) gives exactly the tokens of verify_chain.
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
  float z = 0.0f;
  for (std::int64_t t = 0; t < tiles; ++t) {
    tile_masses[t] = tile_mass(RowWeight{r}, t, vocab_size);
    z += tile_masses[t];
  }
  return z;
}

}  // namespace detail

/// Verifies one request's tree. Arrays are the request's own slices (drafts, parents, draft rows, K + 1 target
/// rows). Writes the accepted path tokens plus one to `out_tokens`, node indices to `out_nodes` (optional).
template <class IdT>
inline Status verify_tree_request(std::int64_t vocab_size, std::int64_t num_drafts, const IdT* draft_token_ids,
                                  const IdT* parents, const float* draft_probs, const float* target_probs,
                                  std::uint64_t seed, std::int64_t position, bool greedy, IdT* out_tokens,
                                  IdT* out_nodes, std::int32_t* num_accepted, float* tile_masses,
                                  std::int64_t* error_position = nullptr) {
  const std::int64_t V = vocab_size;
  for (std::int64_t j = 0; j < num_drafts; ++j) {
    const auto par = static_cast<std::int64_t>(parents[j]);
    if (par < 0 || par > j) {
      if (error_position) *error_position = j;
      return Status::kInvalidTree;
    }
  }
  std::int64_t node = 0, depth = 0, token = -1;
  detail::TreeResidual res;
  Status s = Status::kSuccess;
  auto fail = [&](Status st, std::int64_t where) {
    if (error_position) *error_position = where;
    return st;
  };
  for (;;) {
    const float* p = target_probs + node * V;
    const std::int64_t pos = position + depth;
    std::int64_t accepted_child = -1;
    bool any_child = false;
    res.z = 1.0f;
    res.materialised = false;
    std::int64_t greedy_token = -1;
    if (greedy && (s = detail::argmax_row(p, V, greedy_token)) != Status::kSuccess) return fail(s, node - 1);
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
      bool accept;
      if (q) {
        const float qx = q[x];
        if (!valid_probability(rx) || !valid_probability(qx)) return fail(Status::kInvalidProbability, j);
        accept = u * qx < rx / res.z;
      } else {
        if (!valid_probability(rx)) return fail(Status::kInvalidProbability, j);
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
        if (!ok) return fail(Status::kInvalidProbability, j);
      } else {
        res.r[x] = 0.0f;
      }
      res.z = detail::residual_mass(res.r.data(), V, tile_masses);
      if (!valid_probability(res.z)) return fail(Status::kInvalidProbability, j);
    }
    if (accepted_child >= 0) {
      out_tokens[depth] = draft_token_ids[accepted_child];
      if (out_nodes) out_nodes[depth] = static_cast<IdT>(accepted_child + 1);
      node = accepted_child + 1;
      ++depth;
      continue;
    }
    if (greedy) {
      token = greedy_token;
    } else if (!any_child) {
      s = detail::draw(detail::RowWeight{p}, V, seed, pos, kBonusRace, tile_masses, token);
    } else {
      const float* r = res.materialised ? res.r.data() : p;
      s = detail::draw_residual(detail::RowWeight{r}, p, V, seed, pos, tile_masses, token);
    }
    if (s != Status::kSuccess) return fail(s, node - 1);
    break;
  }
  out_tokens[depth] = static_cast<IdT>(token);
  *num_accepted = static_cast<std::int32_t>(depth);
  return Status::kSuccess;
}

/// Batched tree verification on the CPU. Validates everything first; on failure returns where, and leaves every
/// output untouched.
template <class IdT, class OffT>
inline VerifyResult verify_tree(const TreeVerifyArgs<IdT, OffT>& a, const TreeVerifyOutputs<IdT>& out) {
  std::int64_t max_k = 0;
  VerifyResult r = detail::check_ragged(a.batch_size, a.vocab_size, a.cu_num_draft_tokens, a.draft_token_ids,
                                        a.target_probs, a.seeds, a.positions, out.output_stride, max_k);
  if (!r.ok()) return r;
  if (!out.output_token_ids || !out.num_accepted || (a.cu_num_draft_tokens[a.batch_size] > 0 && !a.parents))
    return {Status::kInvalidArgument, -1, -1};
  const std::int64_t B = a.batch_size, V = a.vocab_size, stride = out.output_stride;
  std::vector<IdT> tokens(static_cast<std::size_t>(B * stride), static_cast<IdT>(-1));
  std::vector<IdT> nodes(static_cast<std::size_t>(B * stride), static_cast<IdT>(-1));
  std::vector<std::int32_t> counts(static_cast<std::size_t>(B));
  std::vector<float> tile_masses(static_cast<std::size_t>(num_tiles(V)));
  for (std::int64_t b = 0; b < B; ++b) {
    const auto start = static_cast<std::int64_t>(a.cu_num_draft_tokens[b]);
    const auto k = static_cast<std::int64_t>(a.cu_num_draft_tokens[b + 1]) - start;
    std::int64_t pos = -1;
    const Status s = verify_tree_request<IdT>(
        V, k, a.draft_token_ids + start, a.parents + start, a.draft_probs ? a.draft_probs + start * V : nullptr,
        a.target_probs + (start + b) * V, a.seeds[b], a.positions[b], a.greedy && a.greedy[b],
        tokens.data() + b * stride, nodes.data() + b * stride, &counts[b], tile_masses.data(), &pos);
    if (s != Status::kSuccess) return {s, b, pos};
  }
  std::copy(tokens.begin(), tokens.end(), out.output_token_ids);
  std::copy(counts.begin(), counts.end(), out.num_accepted);
  if (out.accepted_nodes) std::copy(nodes.begin(), nodes.end(), out.accepted_nodes);
  return {};
}

}  // namespace specdec
