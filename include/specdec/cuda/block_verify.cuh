// specdec — block verification on the GPU: the rule of sampling/block.hpp, bit for bit, on raw device pointers.
//
// Usage (no hidden allocation, capturable in a CUDA graph), as chain_verify.cuh:
//   BlockVerifyParams<float, std::int32_t> a{...};                    // device pointers, host sizes
//   if (Status s = block_verify_can_implement(a); s != Status::kSuccess) ...
//   std::size_t bytes = block_verify_workspace_size(a.batch_size, a.num_draft_tokens, a.vocab_size);
//   Status s = block_verify(a, ws, bytes, stream);                    // kSuccess or a launch/argument error
//   ... a.status[b] (device) holds each request's own Status once the stream reaches it ...
// or the CUTLASS-style BlockVerify<ProbT, IdT> (can_implement / get_workspace_size / initialize / run).
//
// Every request is verified by sampling/block.hpp's rule: greedy rows and requests without draft probabilities
// (draft_probs null, or has_draft_probs[b] = 0) by the chain rule, sampled requests with draft probabilities by block
// verification. There is no lenience (block verification is lossless only).
//
// Design. Two kernels, both on `stream`:
//  1. block_tiles_kernel, grid (G, B), 256 threads. Thread 0 of every CTA plans its request (block_plan, SPECDEC_HD):
//     range, draft-kind and id checks; greedy; deterministic drafts: the chain accept tests up to the first rejection;
//     block requests: w_K from the drafted tokens' probabilities (every one checked) and the bonus test
//     eta_K <= w_K. The CTA then reduces its share of the vocabulary tiles with 16-byte loads, in residual.hpp's
//     lane order: greedy rows: the (max, lowest index) of every row 0..K; p without the rejected draft (and p) or the
//     bonus row: as the chain kernel; block requests whose bonus test failed: the tile masses of r_i for every row
//     i = 0..K-1 (row 0 also p's, for the zero-mass fallback), w_i computed on the way as the CPU does.
//  2. block_finish_kernel, grid B, 256 threads: thread 0 walks i = K-1, ..., 1 (block_stop, SPECDEC_HD): S_i is the
//     sum of row i's tile masses in tile order, h_i, the test eta_i <= h_i; then every thread joins the draw from
//     r_tau (tile race over its masses, token race in the winning tile) or from the bonus row; greedy, deterministic
//     and bonus requests as the chain kernel. Writes outputs, flags and the request's status.
//  Block requests read all 2K rows in pass 1 (the CPU reads rows K-1 down to tau only); a bad value in a row the rule
//  does not read is not reported, as on the CPU: the masses carry NaN and block_stop looks only at rows it reaches.
//
// Bad input is reported per request in `status` (kInvalidArgument: cu/positions/stride, or has_draft_probs set for a
// request with drafts while draft_probs is null; kInvalidTokenId, kInvalidProbability, kZeroMass) without any
// out-of-bounds access; a failed request's outputs are -1, its count 0 and its flags 0. Requests are independent: one
// bad request never changes another's tokens. Host-checkable arguments are checked before any launch
// (block_verify_check_arguments names the argument, what was expected and what was received).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/common.cuh"
#include "specdec/cuda/verify_api.hpp"
#include "specdec/sampling/block.hpp"

namespace specdec::cuda {

// BlockVerifyParams, block_verify_workspace_size (defined in kernels/verify_workspace.cu), block_verify_can_implement
// and the instantiations compiled into specdec::cuda are declared in verify_api.hpp.

namespace detail {

/// The plan kind of a block request whose bonus test failed (the chain kinds of chain_verify.cuh serve the others).
inline constexpr std::int32_t kPlanBlock = 5;

/// r_i = max(w P - Q, 0) (NaN where P or Q is invalid): specdec::detail::BlockResidualWeight; with kOutN = 2, weight 1
/// is P itself (the zero-mass fallback of row 0).
template <class T, int kOutN>
struct BlockResidualSource {
  static constexpr int kOut = kOutN;
  static constexpr int kVec = kVecOf<T>;
  const T* p;
  const T* q;
  float w;
  SPECDEC_HD void weights(float a, float b, float* out) const {
    out[0] = specdec::detail::block_residual(w, a, b);
    if constexpr (kOut > 1) out[1] = valid_probability(a) ? a : nan_value();
  }
  SPECDEC_HD void load_vec(std::int64_t x0, float (&out)[kOut][kVec]) const {
    float a[kVec], b[kVec];
    detail::load_vec<T>(p + x0, a);
    detail::load_vec<T>(q + x0, b);
SPECDEC_UNROLL
    for (int c = 0; c < kVec; ++c) {
      float o[kOut];
      weights(a[c], b[c], o);
SPECDEC_UNROLL
      for (int k = 0; k < kOut; ++k) out[k][c] = o[k];
    }
  }
  SPECDEC_HD void load_one(std::int64_t x, float (&out)[kOut]) const { weights(to_float(p[x]), to_float(q[x]), out); }
};

/// Whether request b's drafts come with probabilities (the per-request draft kind of sampling/chain.hpp).
template <class ProbT, class IdT>
SPECDEC_HD bool block_has_q(const BlockVerifyParams<ProbT, IdT>& a, std::int64_t b) {
  return a.draft_probs != nullptr && (a.has_draft_probs == nullptr || a.has_draft_probs[b] != 0);
}

/// w_i of a block request (drafted tokens' probabilities already checked by block_plan).
template <class ProbT, class IdT>
SPECDEC_HD float block_weight_at(const BlockVerifyParams<ProbT, IdT>& a, std::int64_t b, std::int64_t start,
                                 std::int64_t i) {
  const std::int64_t V = a.vocab_size;
  float w = 1.0f;
  for (std::int64_t j = 0; j < i; ++j) {
    const auto x = static_cast<std::int64_t>(a.draft_token_ids[start + j]);
    w = specdec::detail::block_weight_step(w, to_float(a.target_probs[(start + b + j) * V + x]),
                                           to_float(a.draft_probs[(start + j) * V + x]));
  }
  return w;
}

/// The plan of request b (one thread): what sampling/block.hpp decides from scalars only.
template <class ProbT, class IdT>
SPECDEC_HD ChainPlan block_plan(const BlockVerifyParams<ProbT, IdT>& a, std::int64_t b) {
  ChainPlan plan;
  plan.kind = kPlanFailed;
  plan.row = -1;
  plan.status = check_request_range(a.cu_num_draft_tokens, b, a.batch_size, a.num_draft_tokens, a.output_stride,
                                    a.positions, plan.start, plan.num_drafts);
  if (plan.status == Status::kSuccess)
    plan.status = check_request_draft_kind(a.draft_probs, a.has_draft_probs, b, plan.num_drafts);
  if (plan.status != Status::kSuccess) return plan;
  const std::int64_t K = plan.num_drafts, V = a.vocab_size, start = plan.start;
  for (std::int64_t i = 0; i < K; ++i)
    if (!id_in_range(a.draft_token_ids[start + i], V)) {
      plan.status = Status::kInvalidTokenId;
      return plan;
    }
  if (a.greedy && a.greedy[b]) {
    plan.kind = kPlanGreedy;
    return plan;
  }
  const std::uint64_t seed = a.seeds[b];
  const std::int64_t P = a.positions[b];
  if (!block_has_q(a, b)) {  // deterministic drafts: chain.hpp's rule, u_i < p_i(x_i)
    for (std::int64_t i = 0; i < K; ++i) {
      const auto x = static_cast<std::int64_t>(a.draft_token_ids[start + i]);
      const float px = to_float(a.target_probs[(start + b + i) * V + x]);
      if (!valid_probability(px)) {
        plan.status = Status::kInvalidProbability;
        return plan;
      }
      if (!(uniform(seed, P + i, Purpose::kAccept, 0) < px)) {
        plan.kind = kPlanRemoved;
        plan.row = i;
        return plan;
      }
    }
    plan.kind = kPlanBonus;
    plan.row = K;
    return plan;
  }
  float w = 1.0f;
  for (std::int64_t i = 0; i < K; ++i) {
    const auto x = static_cast<std::int64_t>(a.draft_token_ids[start + i]);
    const float px = to_float(a.target_probs[(start + b + i) * V + x]);
    const float qx = to_float(a.draft_probs[(start + i) * V + x]);
    if (!valid_probability(px) || !valid_probability(qx)) {
      plan.status = Status::kInvalidProbability;
      return plan;
    }
    w = specdec::detail::block_weight_step(w, px, qx);
  }
  if (K == 0 || specdec::detail::block_eta(seed, P, K) <= w) {
    plan.kind = kPlanBonus;
    plan.row = K;
  } else {
    plan.kind = kPlanBlock;
  }
  return plan;
}

/// The stop of a kPlanBlock request (one thread): i = K-1, ..., 1 until eta_i <= h_i, S_i from `masses` (row i's
/// tile masses at masses + i * T). Sets tau (0 when no i stops) and w_tau; kInvalidProbability for a bad mass or S_i.
template <class ProbT, class IdT>
SPECDEC_HD Status block_stop(const BlockVerifyParams<ProbT, IdT>& a, std::int64_t b, const ChainPlan& plan,
                             const float* masses, std::int64_t tiles, std::int64_t& tau, float& w_tau) {
  const std::uint64_t seed = a.seeds[b];
  const std::int64_t P = a.positions[b];
  for (std::int64_t i = plan.num_drafts - 1; i >= 1; --i) {
    const float w = block_weight_at(a, b, plan.start, i);
    float mass = 0.0f;
    for (std::int64_t t = 0; t < tiles; ++t) {
      const float m = masses[i * tiles + t];
      if (!valid_probability(m)) return Status::kInvalidProbability;
      mass += m;
    }
    if (!valid_probability(mass)) return Status::kInvalidProbability;
    if (specdec::detail::block_eta(seed, P, i) <= specdec::detail::block_stop_probability(mass, w)) {
      tau = i;
      w_tau = w;
      return Status::kSuccess;
    }
  }
  tau = 0;
  w_tau = 1.0f;
  return Status::kSuccess;
}

/// Workspace of the block kernels.
struct BlockWorkspace {
  ChainPlan* plans;          ///< [B]
  float* mass;               ///< [N + B, T] tile masses per target row (row start + b + i of request b)
  float* p_mass;             ///< [B, T] tile masses of p for the zero-mass fallback (row 0 or the removed row)
  GreedyPartial* partials;   ///< [N + B, T] greedy partials per row and CTA group
};

inline BlockWorkspace carve_block_workspace(void* base, std::int64_t batch_size, std::int64_t num_draft_tokens,
                                            std::int64_t vocab_size, std::size_t* bytes) {
  WorkspaceCarver c(base);
  const auto B = static_cast<std::size_t>(batch_size), T = static_cast<std::size_t>(num_tiles(vocab_size));
  const auto rows = static_cast<std::size_t>(num_draft_tokens) + B;
  BlockWorkspace ws;
  ws.plans = c.take<ChainPlan>(B);
  ws.mass = c.take<float>(rows * T);
  ws.p_mass = c.take<float>(B * T);
  ws.partials = c.take<GreedyPartial>(rows * T);
  if (bytes) *bytes = c.size();
  return ws;
}

#if defined(__CUDACC__)

template <class ProbT, class IdT>
__global__ void __launch_bounds__(kChainThreads)
    block_tiles_kernel(BlockVerifyParams<ProbT, IdT> a, BlockWorkspace ws, std::int64_t tiles_per_group, bool vec_ok) {
  __shared__ ChainPlan plan_s;
  __shared__ Candidate scratch[kChainThreads / 32];
  const std::int64_t b = blockIdx.y, g = blockIdx.x;
  if (threadIdx.x == 0) plan_s = block_plan(a, b);
  __syncthreads();
  const ChainPlan plan = plan_s;
  if (g == 0 && threadIdx.x == 0) ws.plans[b] = plan;
  if (plan.kind == kPlanFailed) return;

  const std::int64_t V = a.vocab_size, T = num_tiles(V);
  const std::int64_t t_lo = g * tiles_per_group;
  const std::int64_t t_hi = t_lo + tiles_per_group < T ? t_lo + tiles_per_group : T;
  if (t_lo >= t_hi) return;
  const std::int64_t first_row = plan.start + b;  // request b's row 0 in target_probs and in ws.mass
  switch (plan.kind) {
    case kPlanGreedy: {
      const std::int64_t lo = t_lo * kTileSize, hi = t_hi * kTileSize < V ? t_hi * kTileSize : V;
      for (std::int64_t r = 0; r <= plan.num_drafts; ++r) {
        const std::int64_t row = first_row + r;
        bool ok;
        const Candidate best = row_argmax<kChainThreads>(a.target_probs + row * V, lo, hi, vec_ok, ok, scratch);
        if (threadIdx.x == 0)
          ws.partials[row * T + g] =
              ok ? GreedyPartial{best.key, static_cast<std::int32_t>(best.index)} : GreedyPartial{0.0f, -1};
      }
      break;
    }
    case kPlanRemoved: {
      RemovedSource<ProbT> src{a.target_probs + (first_row + plan.row) * V,
                               static_cast<std::int64_t>(a.draft_token_ids[plan.start + plan.row])};
      tile_masses_pass<kChainThreads>(src, t_lo, t_hi, V, vec_ok, ws.mass + (first_row + plan.row) * T,
                                      ws.p_mass + b * T);
      break;
    }
    case kPlanBonus: {
      RowSource<ProbT> src{a.target_probs + (first_row + plan.row) * V};
      tile_masses_pass<kChainThreads>(src, t_lo, t_hi, V, vec_ok, ws.mass + (first_row + plan.row) * T, nullptr);
      break;
    }
    default: {  // kPlanBlock: r_i for every row i < K
      float w = 1.0f;
      for (std::int64_t i = 0; i < plan.num_drafts; ++i) {
        const ProbT* p = a.target_probs + (first_row + i) * V;
        const ProbT* q = a.draft_probs + (plan.start + i) * V;
        if (i == 0) {
          BlockResidualSource<ProbT, 2> src{p, q, w};
          tile_masses_pass<kChainThreads>(src, t_lo, t_hi, V, vec_ok, ws.mass + first_row * T, ws.p_mass + b * T);
        } else {
          BlockResidualSource<ProbT, 1> src{p, q, w};
          tile_masses_pass<kChainThreads>(src, t_lo, t_hi, V, vec_ok, ws.mass + (first_row + i) * T, nullptr);
        }
        const auto x = static_cast<std::int64_t>(a.draft_token_ids[plan.start + i]);
        w = specdec::detail::block_weight_step(w, to_float(p[x]), to_float(q[x]));
      }
      break;
    }
  }
}

template <class ProbT, class IdT>
__global__ void __launch_bounds__(kChainThreads)
    block_finish_kernel(BlockVerifyParams<ProbT, IdT> a, BlockWorkspace ws, std::int64_t groups) {
  __shared__ Candidate scratch[kChainThreads / 32];
  __shared__ Status stop_status_s;
  __shared__ std::int64_t tau_s;
  __shared__ float w_tau_s;
  const std::int64_t b = blockIdx.x;
  const ChainPlan plan = ws.plans[b];
  const std::int64_t V = a.vocab_size, T = num_tiles(V);
  Status s = plan.status;
  std::int64_t n_acc = 0, token = -1;
  const std::uint64_t seed = a.seeds[b];
  const std::int64_t pos = a.positions[b];
  const std::int64_t first_row = plan.start + b;  // only used by the kinds that passed the range checks
  switch (plan.kind) {
    case kPlanFailed: break;
    case kPlanGreedy: {
      for (std::int64_t r = 0; r <= plan.num_drafts; ++r) {
        const std::int64_t row = first_row + r;
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
        if (!(best.key > 0.0f)) {  // a row with no positive value has no argmax to emit (chain.hpp's argmax_row)
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
    case kPlanRemoved: {
      RemovedSource<ProbT> src{a.target_probs + (first_row + plan.row) * V,
                               static_cast<std::int64_t>(a.draft_token_ids[plan.start + plan.row])};
      s = finish_draw(src, ws.mass + (first_row + plan.row) * T, ws.p_mass + b * T, V, seed, pos + plan.row,
                      kResidualRace, token, scratch);
      n_acc = plan.row;
      break;
    }
    case kPlanBonus: {
      RowSource<ProbT> src{a.target_probs + (first_row + plan.row) * V};
      s = finish_draw(src, ws.mass + (first_row + plan.row) * T, nullptr, V, seed, pos + plan.row, kBonusRace, token,
                      scratch);
      n_acc = plan.row;
      break;
    }
    default: {  // kPlanBlock
      if (threadIdx.x == 0) {
        std::int64_t tau = 0;
        float w_tau = 1.0f;
        stop_status_s = block_stop(a, b, plan, ws.mass + first_row * T, T, tau, w_tau);
        tau_s = tau;
        w_tau_s = w_tau;
      }
      __syncthreads();
      s = stop_status_s;
      if (s != Status::kSuccess) break;
      const std::int64_t tau = tau_s;
      const ProbT* p = a.target_probs + (first_row + tau) * V;
      const ProbT* q = a.draft_probs + (plan.start + tau) * V;
      if (tau == 0) {
        BlockResidualSource<ProbT, 2> src{p, q, 1.0f};
        s = finish_draw(src, ws.mass + first_row * T, ws.p_mass + b * T, V, seed, pos, kResidualRace, token, scratch);
      } else {
        BlockResidualSource<ProbT, 1> src{p, q, w_tau_s};
        s = finish_draw(src, ws.mass + (first_row + tau) * T, nullptr, V, seed, pos + tau, kResidualRace, token,
                        scratch);
      }
      n_acc = tau;
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

}  // namespace detail

/// Host-side argument checks (no device access): sizes, required pointers, the optional buffer element counts. The
/// result names the argument, what was expected and what was received (specdec::to_string).
template <class ProbT, class IdT>
VerifyResult block_verify_check_arguments(const BlockVerifyParams<ProbT, IdT>& a) {
  const specdec::detail::BatchSizes sizes{a.draft_token_ids_size, -1, a.draft_probs_size, a.target_probs_size};
  VerifyResult r = detail::check_shape(a.batch_size, 65535, a.vocab_size, a.num_draft_tokens, a.output_stride,
                                       a.draft_probs != nullptr, sizes);
  if (!r.ok() || a.batch_size == 0) return r;
  return detail::check_required_pointers(a);
}

#if defined(__CUDACC__)

/// Launches the block verification on `stream`. Returns kSuccess once launched (per-request results land in
/// a.status), kInvalidArgument / kWorkspaceTooSmall for host-checkable problems, kCudaError if a launch failed.
template <class ProbT, class IdT>
Status block_verify(const BlockVerifyParams<ProbT, IdT>& a, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  if (Status s = block_verify_can_implement(a); s != Status::kSuccess) return s;
  if (a.batch_size == 0) return Status::kSuccess;
  std::size_t need = 0;
  const detail::BlockWorkspace ws =
      detail::carve_block_workspace(workspace, a.batch_size, a.num_draft_tokens, a.vocab_size, &need);
  if (!workspace || workspace_bytes < need || !detail::aligned16(workspace)) return Status::kWorkspaceTooSmall;
  int sms = 0;
  if (Status s = detail::current_device_sms(&sms); s != Status::kSuccess) return s;
  const std::int64_t T = num_tiles(a.vocab_size);
  const std::int64_t groups = detail::chain_groups(a.batch_size, a.vocab_size, sms);
  const std::int64_t per = (T + groups - 1) / groups;
  const bool vec_ok = detail::vector_loads_ok(a.vocab_size, a.target_probs, a.draft_probs);
  detail::block_tiles_kernel<ProbT, IdT>
      <<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(a.batch_size)), kChainThreads, 0, stream>>>(
          a, ws, per, vec_ok);
  if (cudaGetLastError() != cudaSuccess) return Status::kCudaError;
  detail::block_finish_kernel<ProbT, IdT>
      <<<static_cast<unsigned>(a.batch_size), kChainThreads, 0, stream>>>(a, ws, groups);
  if (cudaGetLastError() != cudaSuccess) return Status::kCudaError;
  return Status::kSuccess;
}

/// CUTLASS-style operator: can_implement / get_workspace_size / initialize / run.
template <class ProbT, class IdT>
struct BlockVerifyTraits {
  using Params = BlockVerifyParams<ProbT, IdT>;
  static VerifyResult check(const Params& a) { return block_verify_check_arguments(a); }
  static std::size_t workspace_size(std::int64_t b, std::int64_t n, std::int64_t v) {
    return block_verify_workspace_size(b, n, v);
  }
  static Status launch(const Params& a, void* ws, std::size_t bytes, cudaStream_t stream) {
    return block_verify(a, ws, bytes, stream);
  }
};
template <class ProbT, class IdT>
using BlockVerify = detail::VerifyOperator<BlockVerifyTraits<ProbT, IdT>>;

#endif  // __CUDACC__

}  // namespace specdec::cuda
