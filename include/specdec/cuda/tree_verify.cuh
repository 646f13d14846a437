// specdec — tree verification on the GPU: the multi-candidate rejection rule of sampling/tree.hpp, bit for bit.
//
// Usage mirrors chain_verify.cuh:
//   TreeVerifyParams<float, std::int32_t> a{...};
//   std::size_t bytes = tree_verify_workspace_size(a.batch_size, a.num_draft_tokens, a.vocab_size);
//   Status s = tree_verify(a, workspace, bytes, stream);   // per-request statuses land in a.status
//
// Design. One CTA of 512 threads per request walks the tree from the root exactly as verify_tree_request does.
// The accept test of a child is a scalar (thread 0). After a rejection the residual r is never materialised: the
// CTA makes one pass over the vocabulary that recomputes, per element y, r(y) from p(y), the rejected children's
// q rows and the Z values recorded at each rejection, with the CPU's operation sequence
//   d = r / Z - q;  r = d > 0 ? d : 0          (draft probs present; Z_0 = 1)
//   r(x_rejected) = 0                         (draft probs absent)
// and reduces the new r into tile masses in the lane order of residual.hpp; thread 0 sums them in tile order into
// the next Z. The residual draw reuses the last pass's tile masses, then recomputes r on the fly inside the winning
// tile. Workspace: the tile masses of each request [B, T] and, per draft, the rejected child and its Z [N] each.
// Cost: k rejections at a node read p and up to k q rows k times (O(k^2) rows); the tree walk is sequential by
// nature, so one CTA per request keeps every step on-chip-synchronised without grid-wide barriers.
//
// Per-request draft kinds (has_draft_probs), greedy zero-mass rows (kZeroMass) and the host-side argument checks
// (tree_verify_check_arguments) follow chain_verify.cuh and sampling/tree.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/cuda/common.cuh"
#include "specdec/cuda/verify_api.hpp"

namespace specdec::cuda {

// TreeVerifyParams, tree_verify_workspace_size (defined in kernels/verify_workspace.cu), tree_verify_can_implement
// and the instantiations compiled into specdec::cuda are declared in verify_api.hpp.

namespace detail {

/// r after `applied` rejections at a node, recomputed per element (weight 0 = RowWeight{r}). With `update`, one
/// more rejection (child rej[applied], Z z[applied]) is applied and `ok` tracks the CPU's validity check of that
/// rejection (q and the previous r valid at every element; draft probs present only).
template <class ProbT, class IdT>
struct TreeResidualSource {
  static constexpr int kOut = 1;
  static constexpr int kVec = kVecOf<ProbT>;
  const ProbT* p;          ///< target row of the node
  const ProbT* q;          ///< the request's draft rows (row j at q + j * V), or nullptr
  const IdT* ids;          ///< the request's draft ids
  const std::int32_t* rej; ///< rejected children (local draft indices), in order
  const float* z;          ///< Z in force at each rejection (Z_0 = 1)
  std::int64_t vocab_size;
  int applied;
  bool update;
  bool ok = true;

  /// One rejection step on the value a of element x (rejection k).
  SPECDEC_HD float step(float a, int k, std::int64_t x, float qv) const {
    if (q) {
      const float d = a / z[k] - qv;
      return d > 0.0f ? d : 0.0f;
    }
    return x == static_cast<std::int64_t>(ids[rej[k]]) ? 0.0f : a;
  }
  SPECDEC_HD float q_at(int k, std::int64_t x) const {
    return q ? to_float(q[static_cast<std::int64_t>(rej[k]) * vocab_size + x]) : 0.0f;
  }
  /// r(x) after `applied` rejections, not poisoned (the accept test reads it raw, as the CPU does).
  SPECDEC_HD float raw_one(std::int64_t x) const {
    float a = to_float(p[x]);
    for (int k = 0; k < applied; ++k) a = step(a, k, x, q_at(k, x));
    return a;
  }
  SPECDEC_HD void load_one(std::int64_t x, float (&w)[1]) {
    float a = raw_one(x);
    if (update) {
      const float qv = q_at(applied, x);
      if (q) ok = ok && valid_probability(qv) && valid_probability(a);
      a = step(a, applied, x, qv);
    }
    w[0] = valid_probability(a) ? a : nan_value();
  }
  SPECDEC_HD void load_vec(std::int64_t x0, float (&w)[1][kVec]) {
    float a[kVec];
    load_vec_row(p + x0, a);
    const int last = applied + (update ? 1 : 0);
    for (int k = 0; k < last; ++k) {
      float qv[kVec];
      if (q) {
        load_vec_row(q + static_cast<std::int64_t>(rej[k]) * vocab_size + x0, qv);
      } else {
SPECDEC_UNROLL
        for (int c = 0; c < kVec; ++c) qv[c] = 0.0f;
      }
SPECDEC_UNROLL
      for (int c = 0; c < kVec; ++c) {
        if (k == applied && q) ok = ok && valid_probability(qv[c]) && valid_probability(a[c]);
        a[c] = step(a[c], k, x0 + c, qv[c]);
      }
    }
SPECDEC_UNROLL
    for (int c = 0; c < kVec; ++c) w[0][c] = valid_probability(a[c]) ? a[c] : nan_value();
  }

 private:
  SPECDEC_HD static void load_vec_row(const ProbT* ptr, float (&a)[kVec]) { detail::load_vec<ProbT>(ptr, a); }
};

/// The tree checks of request b besides the range: every id in range, then every parent in [0, j].
template <class IdT>
SPECDEC_HD Status tree_item_status(const IdT* ids, const IdT* parents, std::int64_t j, std::int64_t vocab_size,
                                   bool check_parent) {
  if (!check_parent) return id_in_range(ids[j], vocab_size) ? Status::kSuccess : Status::kInvalidTokenId;
  const auto par = static_cast<std::int64_t>(parents[j]);
  return par < 0 || par > j ? Status::kInvalidTree : Status::kSuccess;
}

enum TreeDecision : int { kTreeAccept = 0, kTreeReject = 1, kTreeInvalid = 2 };

struct TreePlan {
  Status status;
  std::int64_t start;
  std::int64_t num_drafts;  ///< -1 when cu is invalid for this request
};

struct TreeWorkspace {
  float* mass;         ///< [B, T]
  std::int32_t* rej;   ///< [N] rejected children of the current node, per request slice
  float* z;            ///< [N] Z in force at each of those rejections
};

inline TreeWorkspace carve_tree_workspace(void* base, std::int64_t batch_size, std::int64_t num_draft_tokens,
                                          std::int64_t vocab_size, std::size_t* bytes) {
  WorkspaceCarver c(base);
  const auto B = static_cast<std::size_t>(batch_size), T = static_cast<std::size_t>(num_tiles(vocab_size));
  const auto N = static_cast<std::size_t>(num_draft_tokens);
  TreeWorkspace ws;
  ws.mass = c.take<float>(B * T);
  ws.rej = c.take<std::int32_t>(N > 0 ? N : 1);
  ws.z = c.take<float>(N > 0 ? N : 1);
  if (bytes) *bytes = c.size();
  return ws;
}

#if defined(__CUDACC__)

template <class ProbT, class IdT>
__device__ inline void plan_tree_warp(const TreeVerifyParams<ProbT, IdT>& a, std::int64_t b, TreePlan* out) {
  const int lane = threadIdx.x & 31;
  TreePlan plan;
  plan.status = check_request_range(a.cu_num_draft_tokens, b, a.batch_size, a.num_draft_tokens, a.output_stride,
                                    a.positions, plan.start, plan.num_drafts);
  const std::int64_t k = plan.num_drafts;
  if (plan.status == Status::kSuccess)
    plan.status = check_request_draft_kind(a.draft_probs, a.has_draft_probs, b, k);
  for (int pass = 0; pass < 2 && plan.status == Status::kSuccess; ++pass) {
    bool bad = false;
    for (std::int64_t base = 0; base < k; base += 32) {
      const std::int64_t i = base + lane;
      bad |= i < k && tree_item_status(a.draft_token_ids + plan.start, a.parents + plan.start, i, a.vocab_size,
                                       pass == 1) != Status::kSuccess;
    }
    if (__any_sync(0xffffffffu, bad)) plan.status = pass == 0 ? Status::kInvalidTokenId : Status::kInvalidTree;
  }
  if (lane == 0) *out = plan;
}

template <class ProbT, class IdT>
__global__ void __launch_bounds__(kTreeThreads)
    tree_verify_kernel(TreeVerifyParams<ProbT, IdT> a, TreeWorkspace ws, bool vec_ok) {
  constexpr int kThreads = kTreeThreads;
  __shared__ TreePlan plan_s;
  __shared__ Candidate scratch[kThreads / 32];
  __shared__ int decision_s;
  __shared__ float z_s;
  const std::int64_t b = blockIdx.x;
  if (threadIdx.x < 32) plan_tree_warp(a, b, &plan_s);
  __syncthreads();
  const TreePlan plan = plan_s;
  Status s = plan.status;
  const std::int64_t V = a.vocab_size, T = num_tiles(V), K = plan.num_drafts;
  IdT* out = a.output_token_ids + b * a.output_stride;
  IdT* out_nodes = a.accepted_nodes ? a.accepted_nodes + b * a.output_stride : nullptr;
  std::int64_t depth = 0, token = -1;
  if (s == Status::kSuccess) {
    const std::int64_t start = plan.start;
    const IdT* ids = a.draft_token_ids + start;
    const IdT* parents = a.parents + start;
    const bool has_q = a.draft_probs != nullptr && (a.has_draft_probs == nullptr || a.has_draft_probs[b] != 0);
    const ProbT* q_req = has_q ? a.draft_probs + start * V : nullptr;
    std::int32_t* rej = ws.rej + start;
    float* zs = ws.z + start;
    float* mass = ws.mass + b * T;
    const std::uint64_t seed = a.seeds[b];
    const std::int64_t P = a.positions[b];
    const bool greedy = a.greedy && a.greedy[b];
    std::int64_t node = 0;
    for (;;) {
      const ProbT* p = a.target_probs + (start + b + node) * V;
      const std::int64_t pos = P + depth;
      std::int64_t greedy_token = -1;
      if (greedy) {
        bool ok;
        const Candidate c = row_argmax<kThreads>(p, 0, V, vec_ok, ok, scratch);
        if (!ok) {
          s = Status::kInvalidProbability;
          break;
        }
        if (!(c.key > 0.0f)) {  // an all-zero row has no argmax to emit (chain.hpp's argmax_row)
          s = Status::kZeroMass;
          break;
        }
        greedy_token = c.index;
      }
      int m = 0;
      float z = 1.0f;
      std::uint32_t rank = 0;
      std::int64_t accepted_child = -1;
      bool any_child = false;
      for (std::int64_t j = node; j < K; ++j) {
        if (static_cast<std::int64_t>(parents[j]) != node) continue;
        any_child = true;
        const auto x = static_cast<std::int64_t>(ids[j]);
        if (greedy) {
          if (x == greedy_token) {
            accepted_child = j;
            break;
          }
          continue;
        }
        if (threadIdx.x == 0) {
          TreeResidualSource<ProbT, IdT> src{p, q_req, ids, rej, zs, V, m, false};
          const float rx = src.raw_one(x);
          const float u = uniform(seed, pos, Purpose::kAccept, rank);
          int decision;
          if (q_req) {
            const float qx = to_float(q_req[j * V + x]);
            decision = !valid_probability(rx) || !valid_probability(qx) ? kTreeInvalid
                       : u * qx < rx / z                                 ? kTreeAccept
                                                                         : kTreeReject;
          } else {
            decision = !valid_probability(rx) ? kTreeInvalid : u < rx / z ? kTreeAccept : kTreeReject;
          }
          if (decision == kTreeReject) {
            rej[m] = static_cast<std::int32_t>(j);
            zs[m] = z;
          }
          decision_s = decision;
        }
        ++rank;
        __syncthreads();
        const int decision = decision_s;
        __syncthreads();  // decision_s is rewritten for the next child
        if (decision == kTreeInvalid) {
          s = Status::kInvalidProbability;
          break;
        }
        if (decision == kTreeAccept) {
          accepted_child = j;
          break;
        }
        TreeResidualSource<ProbT, IdT> src{p, q_req, ids, rej, zs, V, m, true};
        tile_masses_pass<kThreads>(src, 0, T, V, vec_ok, mass, static_cast<float*>(nullptr));
        const bool ok = __syncthreads_and(src.ok) != 0;
        if (threadIdx.x == 0) {
          float sum = 0.0f;
          for (std::int64_t t = 0; t < T; ++t) sum += mass[t];
          z_s = sum;
        }
        __syncthreads();
        z = z_s;
        ++m;
        if (!ok || !valid_probability(z)) {
          s = Status::kInvalidProbability;
          break;
        }
      }
      if (s != Status::kSuccess) break;
      if (accepted_child >= 0) {
        if (threadIdx.x == 0) {
          out[depth] = ids[accepted_child];
          if (out_nodes) out_nodes[depth] = static_cast<IdT>(accepted_child + 1);
        }
        node = accepted_child + 1;
        ++depth;
        continue;
      }
      if (greedy) {
        token = greedy_token;
        break;
      }
      bool ok = true;
      Candidate tile = no_candidate();
      const RacePurposes purposes = any_child ? kResidualRace : kBonusRace;
      if (any_child) {  // every child rejected: the residual's tile masses are those of the last pass
        tile = block_race_tiles<kThreads>(mass, T, seed, pos, purposes.tile, ok, scratch);
        if (ok && tile.index >= 0) {
          TreeResidualSource<ProbT, IdT> src{p, q_req, ids, rej, zs, V, m, false};
          token = block_race_tokens<kThreads>(src, tile.index, V, seed, pos, purposes.token, scratch).index;
          break;
        }
      }
      if (ok) {  // a leaf (bonus), or the residual has no mass (draw from p)
        RowSource<ProbT> src{p};
        tile_masses_pass<kThreads>(src, 0, T, V, vec_ok, mass, static_cast<float*>(nullptr));
        __syncthreads();
        tile = block_race_tiles<kThreads>(mass, T, seed, pos, purposes.tile, ok, scratch);
        if (ok && tile.index >= 0)
          token = block_race_tokens<kThreads>(src, tile.index, V, seed, pos, purposes.token, scratch).index;
      }
      if (!ok) s = Status::kInvalidProbability;
      else if (token < 0) s = Status::kZeroMass;
      break;
    }
  }
  __syncthreads();  // path entries written by thread 0 are final
  const bool ok = s == Status::kSuccess;
  for (std::int64_t e = threadIdx.x; e < a.output_stride; e += kThreads) {
    if (ok && e < depth) continue;
    const IdT v = ok && e == depth ? static_cast<IdT>(token) : static_cast<IdT>(-1);
    out[e] = v;
    if (out_nodes) out_nodes[e] = static_cast<IdT>(-1);
  }
  if (threadIdx.x == 0) {
    a.num_accepted[b] = ok ? static_cast<std::int32_t>(depth) : 0;
    a.status[b] = s;
  }
}

#endif  // __CUDACC__

}  // namespace detail

/// Host-side argument checks (no device access), naming the argument at fault (see chain_verify_check_arguments).
template <class ProbT, class IdT>
VerifyResult tree_verify_check_arguments(const TreeVerifyParams<ProbT, IdT>& a) {
  const specdec::detail::BatchSizes sizes{a.draft_token_ids_size, a.parents_size, a.draft_probs_size,
                                          a.target_probs_size};
  VerifyResult r = detail::check_shape(a.batch_size, 0x7fffffffLL, a.vocab_size, a.num_draft_tokens, a.output_stride,
                                       a.draft_probs != nullptr, sizes);
  if (!r.ok() || a.batch_size == 0) return r;
  if (r = detail::check_required_pointers(a); !r.ok()) return r;
  if (a.num_draft_tokens > 0 && !a.parents) return specdec::detail::null_argument("parents");
  return {};
}

#if defined(__CUDACC__)

/// Launches the tree verification on `stream` (see chain_verify for the status contract).
template <class ProbT, class IdT>
Status tree_verify(const TreeVerifyParams<ProbT, IdT>& a, void* workspace, std::size_t workspace_bytes,
                   cudaStream_t stream) {
  if (Status s = tree_verify_can_implement(a); s != Status::kSuccess) return s;
  if (a.batch_size == 0) return Status::kSuccess;
  std::size_t need = 0;
  const detail::TreeWorkspace ws =
      detail::carve_tree_workspace(workspace, a.batch_size, a.num_draft_tokens, a.vocab_size, &need);
  if (!workspace || workspace_bytes < need || !detail::aligned16(workspace)) return Status::kWorkspaceTooSmall;
  const bool vec_ok = detail::vector_loads_ok(a.vocab_size, a.target_probs, a.draft_probs);
  detail::tree_verify_kernel<ProbT, IdT>
      <<<static_cast<unsigned>(a.batch_size), kTreeThreads, 0, stream>>>(a, ws, vec_ok);
  if (cudaGetLastError() != cudaSuccess) return Status::kCudaError;
  return Status::kSuccess;
}

/// CUTLASS-style operator: can_implement / get_workspace_size / initialize / run.
template <class ProbT, class IdT>
struct TreeVerifyTraits {
  using Params = TreeVerifyParams<ProbT, IdT>;
  static VerifyResult check(const Params& a) { return tree_verify_check_arguments(a); }
  static std::size_t workspace_size(std::int64_t b, std::int64_t n, std::int64_t v) {
    return tree_verify_workspace_size(b, n, v);
  }
  static Status launch(const Params& a, void* ws, std::size_t bytes, cudaStream_t stream) {
    return tree_verify(a, ws, bytes, stream);
  }
};
template <class ProbT, class IdT>
using TreeVerify = detail::VerifyOperator<TreeVerifyTraits<ProbT, IdT>>;

#endif  // __CUDACC__

}  // namespace specdec::cuda
