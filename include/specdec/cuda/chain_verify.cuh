// specdec — chain verification on the GPU: the rule of sampling/chain.hpp, bit for bit, on raw device pointers.
//
// Usage (no hidden allocation, capturable in a CUDA graph):
//   ChainVerifyParams<float, std::int32_t> a{...};                    // device pointers, host sizes
//   if (Status s = chain_verify_can_implement(a); s != Status::kSuccess) ...
//   std::size_t bytes = chain_verify_workspace_size(a.batch_size, a.num_draft_tokens, a.vocab_size);
//   ... cudaMallocAsync(&ws, bytes, stream) once, reuse for every step of at most that size ...
//   Status s = chain_verify(a, ws, bytes, stream);                    // kSuccess or a launch/argument error
//   ... a.status[b] (device) holds each request's own Status once the stream reaches it ...
// or the CUTLASS-style ChainVerify<ProbT, IdT> (can_implement / get_workspace_size / initialize / run).
//
// Design. Two kernels, both on `stream`:
//  1. chain_tiles_kernel, grid (G, B), 256 threads. Warp 0 of every CTA plans its request: range and id checks,
//     then the accept tests of all drafts in parallel (lane i computes u_i and the test of draft i; a ballot finds
//     the first rejection), which yields the row to draw from. The CTA then reduces its share of the vocabulary
//     (tiles [g * tpg, (g + 1) * tpg)) with 16-byte loads: for sampled requests the tile masses of the draw's
//     weights (residual max(p - q, 0) or p without the draft token, and p for the zero-mass fallback; bonus: p),
//     in the exact lane order of residual.hpp; for greedy requests the (max, lowest index) of every row 0..K.
//     CTA (0, b) stores the plan. G is chosen so that G * B covers the device about twice (B = 1 spreads a row
//     over up to num_tiles(V) CTAs).
//  2. chain_finish_kernel, grid B, 256 threads: tile race over the masses, token race inside the winning tile
//     (each thread one Philox block = 4 tokens; one more read of that tile), or the greedy decisions row by row;
//     writes the outputs, the flags and the request's status.
//  Only the rows the rule needs are read in full: one row (bonus) or two (residual with draft probs) per sampled
//  request; greedy requests read all K + 1 rows (their argmaxes are computed in parallel, then used in order, so
//  an invalid value in a row after the first mismatch is not reported, as on the CPU).
//
// Bad input is reported per request in `status` (kInvalidArgument: cu/positions/stride, or has_draft_probs set for
// a request with drafts while draft_probs is null; kInvalidTokenId, kInvalidProbability, kZeroMass, greedy rows
// included) without any out-of-bounds access; a failed request's outputs are -1, its count 0 and its flags 0.
// Requests are independent: one bad request never changes another's tokens. (A decreasing cu can leave two
// requests with locally valid but overlapping ranges; both then read the shared draft rows and write the shared
// flag slots of `accepted`, in an unspecified order. Callers that need a verdict on the whole layout check cu on the
// host, as the CPU entries and the torch front on CPU do.) Host-checkable arguments (sizes,
// pointers, lenience, the optional buffer element counts) are checked before any launch:
// chain_verify_check_arguments names the argument, what was expected and what was received.
//
// Per-request draft kinds: has_draft_probs [B] (optional) as in sampling/chain.hpp: draft_probs keeps its [N, V]
// layout and the rows of requests flagged 0 are never read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "specdec/cuda/common.cuh"
#include "specdec/cuda/verify_api.hpp"

namespace specdec::cuda {

// ChainVerifyParams, chain_verify_workspace_size (defined in kernels/verify_workspace.cu), chain_verify_can_implement
// and the instantiations compiled into specdec::cuda are declared in verify_api.hpp.

namespace detail {

enum PlanKind : std::int32_t { kPlanFailed = 0, kPlanGreedy = 1, kPlanResidual = 2, kPlanRemoved = 3, kPlanBonus = 4 };

/// What a request needs, decided from scalars only.
struct ChainPlan {
  Status status;
  std::int32_t kind;
  std::int64_t start;       ///< cu[b]
  std::int64_t num_drafts;  ///< K_b, or -1 when cu is invalid for this request
  std::int64_t row;         ///< draft position of the draw (the first rejection), K_b for the bonus
};

/// A greedy partial: the (max, lowest index) of a row section, index -1 when the section holds an invalid value.
struct GreedyPartial {
  float value;
  std::int32_t index;
};

enum AcceptFlag : int { kAccepted = 0, kRejected = 1, kInvalidValue = 2 };

/// Whether request b's drafts come with probabilities (the per-request draft kind).
template <class ProbT, class IdT>
SPECDEC_HD bool chain_has_q(const ChainVerifyParams<ProbT, IdT>& a, std::int64_t b) {
  return a.draft_probs != nullptr && (a.has_draft_probs == nullptr || a.has_draft_probs[b] != 0);
}

/// The accept test of draft i of a sampled request (ids already checked): the expression of chain.hpp.
template <class ProbT, class IdT>
SPECDEC_HD int chain_accept_flag(const ChainVerifyParams<ProbT, IdT>& a, std::int64_t b, std::int64_t start,
                                 std::int64_t i, bool has_q) {
  const std::int64_t V = a.vocab_size;
  const auto x = static_cast<std::int64_t>(a.draft_token_ids[start + i]);
  const float px = to_float(a.target_probs[(start + b + i) * V + x]);
  const float u = uniform(a.seeds[b], a.positions[b] + i, Purpose::kAccept, 0);
  if (has_q) {
    const float qx = to_float(a.draft_probs[(start + i) * V + x]);
    if (!valid_probability(px) || !valid_probability(qx)) return kInvalidValue;
    return u * qx * a.lenience < px ? kAccepted : kRejected;
  }
  if (!valid_probability(px)) return kInvalidValue;
  return u < px ? kAccepted : kRejected;
}

/// The plan once the first non-accepted draft `first` (or -1) and its flag are known.
SPECDEC_HD inline void plan_from_first(ChainPlan& plan, bool has_q, std::int64_t first, int flag) {
  if (first < 0) {
    plan.kind = kPlanBonus;
    plan.row = plan.num_drafts;
  } else if (flag == kInvalidValue) {
    plan.status = Status::kInvalidProbability;
    plan.kind = kPlanFailed;
  } else {
    plan.kind = has_q ? kPlanResidual : kPlanRemoved;
    plan.row = first;
  }
}

/// Workspace of the chain kernels.
struct ChainWorkspace {
  ChainPlan* plans;          ///< [B]
  float* mass;               ///< [B, T] tile masses of the draw's weights
  float* p_mass;             ///< [B, T] tile masses of p (fallback)
  GreedyPartial* partials;   ///< [N + B, T] greedy partials per row and CTA group
};

inline ChainWorkspace carve_chain_workspace(void* base, std::int64_t batch_size, std::int64_t num_draft_tokens,
                                            std::int64_t vocab_size, std::size_t* bytes) {
  WorkspaceCarver c(base);
  const auto B = static_cast<std::size_t>(batch_size), T = static_cast<std::size_t>(num_tiles(vocab_size));
  ChainWorkspace ws;
  ws.plans = c.take<ChainPlan>(B);
  ws.mass = c.take<float>(B * T);
  ws.p_mass = c.take<float>(B * T);
  ws.partials = c.take<GreedyPartial>((static_cast<std::size_t>(num_draft_tokens) + B) * T);
  if (bytes) *bytes = c.size();
  return ws;
}

#if defined(__CUDACC__)

/// Warp-level plan of request b (called by the 32 threads of one warp; lane 0 writes *out).
template <class ProbT, class IdT>
__device__ inline void plan_chain_warp(const ChainVerifyParams<ProbT, IdT>& a, std::int64_t b, ChainPlan* out) {
  const int lane = threadIdx.x & 31;
  ChainPlan plan;
  plan.kind = kPlanFailed;
  plan.row = -1;
  plan.status = check_request_range(a.cu_num_draft_tokens, b, a.batch_size, a.num_draft_tokens, a.output_stride,
                                    a.positions, plan.start, plan.num_drafts);
  const std::int64_t k = plan.num_drafts;
  if (plan.status == Status::kSuccess)
    plan.status = check_request_draft_kind(a.draft_probs, a.has_draft_probs, b, k);
  if (plan.status == Status::kSuccess) {
    bool bad = false;
    for (std::int64_t base = 0; base < k; base += 32) {
      const std::int64_t i = base + lane;
      bad |= i < k && !id_in_range(a.draft_token_ids[plan.start + i], a.vocab_size);
    }
    if (__any_sync(0xffffffffu, bad)) plan.status = Status::kInvalidTokenId;
  }
  if (plan.status == Status::kSuccess) {
    if (a.greedy && a.greedy[b]) {
      plan.kind = kPlanGreedy;
    } else {
      const bool has_q = chain_has_q(a, b);
      std::int64_t first = -1;
      int first_flag = kAccepted;
      for (std::int64_t base = 0; base < k; base += 32) {
        const std::int64_t i = base + lane;
        const int flag = i < k ? chain_accept_flag(a, b, plan.start, i, has_q) : kAccepted;
        const unsigned mask = __ballot_sync(0xffffffffu, flag != kAccepted);
        if (mask) {
          const int src = __ffs(mask) - 1;
          first = base + src;
          first_flag = __shfl_sync(0xffffffffu, flag, src);
          break;
        }
      }
      plan_from_first(plan, has_q, first, first_flag);
    }
  }
  if (lane == 0) *out = plan;
}

template <class ProbT, class IdT>
__global__ void __launch_bounds__(kChainThreads)
    chain_tiles_kernel(ChainVerifyParams<ProbT, IdT> a, ChainWorkspace ws, std::int64_t tiles_per_group, bool vec_ok) {
  __shared__ ChainPlan plan_s;
  __shared__ Candidate scratch[kChainThreads / 32];
  const std::int64_t b = blockIdx.y, g = blockIdx.x;
  if (threadIdx.x < 32) plan_chain_warp(a, b, &plan_s);
  __syncthreads();
  const ChainPlan plan = plan_s;
  if (g == 0 && threadIdx.x == 0) ws.plans[b] = plan;
  if (plan.kind == kPlanFailed) return;

  const std::int64_t V = a.vocab_size, T = num_tiles(V);
  const std::int64_t t_lo = g * tiles_per_group;
  const std::int64_t t_hi = t_lo + tiles_per_group < T ? t_lo + tiles_per_group : T;
  if (t_lo >= t_hi) return;
  const ProbT* p_row = a.target_probs + (plan.start + b + (plan.kind == kPlanGreedy ? 0 : plan.row)) * V;
  switch (plan.kind) {
    case kPlanGreedy: {
      const std::int64_t lo = t_lo * kTileSize, hi = t_hi * kTileSize < V ? t_hi * kTileSize : V;
      for (std::int64_t r = 0; r <= plan.num_drafts; ++r) {
        const std::int64_t row = plan.start + b + r;
        bool ok;
        const Candidate best = row_argmax<kChainThreads>(a.target_probs + row * V, lo, hi, vec_ok, ok, scratch);
        if (threadIdx.x == 0)
          ws.partials[row * T + g] =
              ok ? GreedyPartial{best.key, static_cast<std::int32_t>(best.index)} : GreedyPartial{0.0f, -1};
      }
      break;
    }
    case kPlanResidual: {
      ResidualSource<ProbT> src{p_row, a.draft_probs + (plan.start + plan.row) * V};
      tile_masses_pass<kChainThreads>(src, t_lo, t_hi, V, vec_ok, ws.mass + b * T, ws.p_mass + b * T);
      break;
    }
    case kPlanRemoved: {
      RemovedSource<ProbT> src{p_row, static_cast<std::int64_t>(a.draft_token_ids[plan.start + plan.row])};
      tile_masses_pass<kChainThreads>(src, t_lo, t_hi, V, vec_ok, ws.mass + b * T, ws.p_mass + b * T);
      break;
    }
    default: {  // kPlanBonus
      RowSource<ProbT> src{p_row};
      tile_masses_pass<kChainThreads>(src, t_lo, t_hi, V, vec_ok, ws.mass + b * T, nullptr);
      break;
    }
  }
}

/// Draw of a sampled request in the finishing CTA: tile race on `mass` (then `p_mass` when the residual has no
/// mass and the plan allows the fallback), token race in the winner. Returns the status; sets `token`.
template <class Src>
__device__ inline Status finish_draw(Src& src, const float* mass, const float* p_mass, std::int64_t vocab_size,
                                     std::uint64_t seed, std::int64_t position, RacePurposes purposes,
                                     std::int64_t& token, Candidate* scratch) {
  const std::int64_t T = num_tiles(vocab_size);
  bool ok;
  Candidate tile = block_race_tiles<kChainThreads>(mass, T, seed, position, purposes.tile, ok, scratch);
  if (!ok) return Status::kInvalidProbability;
  if (tile.index >= 0) {
    const Candidate c = block_race_tokens<kChainThreads>(src, tile.index, vocab_size, seed, position, purposes.token,
                                                         scratch);
    token = c.index;
    return Status::kSuccess;
  }
  if constexpr (Src::kOut > 1) {
    tile = block_race_tiles<kChainThreads>(p_mass, T, seed, position, purposes.tile, ok, scratch);
    if (!ok) return Status::kInvalidProbability;
    if (tile.index >= 0) {
      PickSource<Src, 1> pick{src};
      const Candidate c = block_race_tokens<kChainThreads>(pick, tile.index, vocab_size, seed, position,
                                                           purposes.token, scratch);
      token = c.index;
      return Status::kSuccess;
    }
  }
  return Status::kZeroMass;
}

template <class ProbT, class IdT>
__global__ void __launch_bounds__(kChainThreads)
    chain_finish_kernel(ChainVerifyParams<ProbT, IdT> a, ChainWorkspace ws, std::int64_t groups) {
  __shared__ Candidate scratch[kChainThreads / 32];
  const std::int64_t b = blockIdx.x;
  const ChainPlan plan = ws.plans[b];
  const std::int64_t V = a.vocab_size, T = num_tiles(V);
  Status s = plan.status;
  std::int64_t n_acc = 0, token = -1;
  const std::uint64_t seed = a.seeds[b];
  const std::int64_t pos = a.positions[b];
  // Only dereferenced for the sampled kinds, whose plan has a valid start and row.
  const ProbT* p_row = a.target_probs + (plan.kind >= kPlanResidual ? (plan.start + b + plan.row) * V : 0);
  switch (plan.kind) {
    case kPlanFailed: break;
    case kPlanGreedy: {
      for (std::int64_t r = 0; r <= plan.num_drafts; ++r) {
        const std::int64_t row = plan.start + b + r;
        Candidate best = no_candidate();
        bool valid = true;
        for (std::int64_t g = threadIdx.x; g < groups; g += kChainThreads) {
          const GreedyPartial e = ws.partials[row * T + g];
          valid = valid && e.index >= 0;
          best = better(best, Candidate{e.value, e.index});
        }
        const bool ok = __syncthreads_and(valid) != 0;
        best = block_best<kChainThreads>(best, scratch);
        if (!ok) {
          s = Status::kInvalidProbability;
          break;
        }
        if (!(best.key > 0.0f)) {  // an all-zero row has no argmax to emit (chain.hpp's argmax_row)
          s = Status::kZeroMass;
          break;
        }
        if (r == plan.num_drafts ||
            best.index != static_cast<std::int64_t>(a.draft_token_ids[plan.start + r])) {
          token = best.index;
          n_acc = r;
          break;
        }
      }
      break;
    }
    case kPlanResidual: {
      ResidualSource<ProbT> src{p_row, a.draft_probs + (plan.start + plan.row) * V};
      s = finish_draw(src, ws.mass + b * T, ws.p_mass + b * T, V, seed, pos + plan.row, kResidualRace, token,
                      scratch);
      n_acc = plan.row;
      break;
    }
    case kPlanRemoved: {
      RemovedSource<ProbT> src{p_row, static_cast<std::int64_t>(a.draft_token_ids[plan.start + plan.row])};
      s = finish_draw(src, ws.mass + b * T, ws.p_mass + b * T, V, seed, pos + plan.row, kResidualRace, token,
                      scratch);
      n_acc = plan.row;
      break;
    }
    default: {  // kPlanBonus
      RowSource<ProbT> src{p_row};
      s = finish_draw(src, ws.mass + b * T, nullptr, V, seed, pos + plan.row, kBonusRace, token, scratch);
      n_acc = plan.row;
      break;
    }
  }
  const bool ok = s == Status::kSuccess;
  if (!ok) n_acc = 0;
  IdT* out = a.output_token_ids + b * a.output_stride;
  for (std::int64_t e = threadIdx.x; e < a.output_stride; e += kChainThreads) {
    IdT v = static_cast<IdT>(-1);
    if (ok && e < n_acc) v = a.draft_token_ids[plan.start + e];
    if (ok && e == n_acc) v = static_cast<IdT>(token);
    out[e] = v;
  }
  if (a.accepted && plan.num_drafts >= 0)
    for (std::int64_t e = threadIdx.x; e < plan.num_drafts; e += kChainThreads)
      a.accepted[plan.start + e] = ok && e < n_acc ? 1 : 0;
  if (threadIdx.x == 0) {
    a.num_accepted[b] = static_cast<std::int32_t>(n_acc);
    a.status[b] = s;
  }
}

#endif  // __CUDACC__

/// CTA groups per request: enough CTAs to cover the device about twice, never more than one per tile.
inline std::int64_t chain_groups(std::int64_t batch_size, std::int64_t vocab_size, int num_sms) {
  const std::int64_t T = num_tiles(vocab_size);
  const std::int64_t target = 2 * static_cast<std::int64_t>(num_sms > 0 ? num_sms : 1);
  std::int64_t g = (target + batch_size - 1) / batch_size;
  g = std::max<std::int64_t>(1, std::min(g, T));
  const std::int64_t per = (T + g - 1) / g;
  return (T + per - 1) / per;
}

}  // namespace detail

/// Host-side argument checks (no device access): sizes, required pointers, lenience, the optional buffer element
/// counts. The result names the argument, what was expected and what was received (specdec::to_string).
template <class ProbT, class IdT>
VerifyResult chain_verify_check_arguments(const ChainVerifyParams<ProbT, IdT>& a) {
  const specdec::detail::BatchSizes sizes{a.draft_token_ids_size, -1, a.draft_probs_size, a.target_probs_size};
  VerifyResult r = detail::check_shape(a.batch_size, 65535, a.vocab_size, a.num_draft_tokens, a.output_stride,
                                       a.draft_probs != nullptr, sizes);
  if (!r.ok()) return r;
  if (!(a.lenience > 0.0f && a.lenience <= 1.0f))
    return specdec::detail::bad_argument(Status::kInvalidArgument, "lenience", "a value in (0, 1]", std::nullopt,
                                         static_cast<double>(a.lenience));
  if (a.batch_size == 0) return {};
  return detail::check_required_pointers(a);
}

#if defined(__CUDACC__)

/// Launches the chain verification on `stream`. Returns kSuccess once launched (per-request results land in
/// a.status), kInvalidArgument / kWorkspaceTooSmall for host-checkable problems, kCudaError if a launch failed.
template <class ProbT, class IdT>
Status chain_verify(const ChainVerifyParams<ProbT, IdT>& a, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  if (Status s = chain_verify_can_implement(a); s != Status::kSuccess) return s;
  if (a.batch_size == 0) return Status::kSuccess;
  std::size_t need = 0;
  const detail::ChainWorkspace ws =
      detail::carve_chain_workspace(workspace, a.batch_size, a.num_draft_tokens, a.vocab_size, &need);
  if (!workspace || workspace_bytes < need || !detail::aligned16(workspace)) return Status::kWorkspaceTooSmall;
  int sms = 0;
  if (Status s = detail::current_device_sms(&sms); s != Status::kSuccess) return s;
  const std::int64_t T = num_tiles(a.vocab_size);
  const std::int64_t groups = detail::chain_groups(a.batch_size, a.vocab_size, sms);
  const std::int64_t per = (T + groups - 1) / groups;
  const bool vec_ok = detail::vector_loads_ok(a.vocab_size, a.target_probs, a.draft_probs);
  detail::chain_tiles_kernel<ProbT, IdT>
      <<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(a.batch_size)), kChainThreads, 0, stream>>>(
          a, ws, per, vec_ok);
  if (cudaGetLastError() != cudaSuccess) return Status::kCudaError;
  detail::chain_finish_kernel<ProbT, IdT>
      <<<static_cast<unsigned>(a.batch_size), kChainThreads, 0, stream>>>(a, ws, groups);
  if (cudaGetLastError() != cudaSuccess) return Status::kCudaError;
  return Status::kSuccess;
}

/// CUTLASS-style operator: can_implement / get_workspace_size / initialize / run.
template <class ProbT, class IdT>
struct ChainVerifyTraits {
  using Params = ChainVerifyParams<ProbT, IdT>;
  static VerifyResult check(const Params& a) { return chain_verify_check_arguments(a); }
  static std::size_t workspace_size(std::int64_t b, std::int64_t n, std::int64_t v) {
    return chain_verify_workspace_size(b, n, v);
  }
  static Status launch(const Params& a, void* ws, std::size_t bytes, cudaStream_t stream) {
    return chain_verify(a, ws, bytes, stream);
  }
};
template <class ProbT, class IdT>
using ChainVerify = detail::VerifyOperator<ChainVerifyTraits<ProbT, IdT>>;

#endif  // __CUDACC__

}  // namespace specdec::cuda
