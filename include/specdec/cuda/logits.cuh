// specdec — logits processing on the GPU: the rule of sampling/logits.hpp, bit for bit, on raw device pointers.
// The raw API is declared host-only in cuda/logits_api.hpp (LogitsToProbsArgs, logits_to_probs_workspace_size,
// logits_to_probs_check_arguments, logits_to_probs) and defined in kernels/logits.cu; this header holds the kernel.
//
// Design. One kernel, one CTA of 512 threads (16 warps) per row (grid max(R, B): CTAs b < B also write the request's
// greedy flag). Every value that decides a probability comes from the SPECDEC_HD functions of
// sampling/logits_core.hpp; the threads only move values (shuffles, shared memory, the workspace):
//  1. parameters of the row's request (logits_row_request), checked (kInvalidArgument);
//  2. a strided pass: validity (NaN/+inf -> kInvalidProbability) and the (max, lowest id) argmax (a block reduction
//     of common.cuh's Candidate, a total order, so any tree gives the CPU's scan); all -inf -> kZeroMass; T = 0 writes
//     the one-hot row and stops;
//  3. the weights e_x = logit_weight(l_x, max, inverse_temperature(T)) into probs (the row's scratch), counting the
//     positive ones for top-k;
//  4. top-k: the count digit search, a 16-bin shared histogram of cut_digit per pass (integer atomics: exact);
//  5. top-p: the mass digit search: warp w takes tiles w, w + 16, ..; lane l of a tile runs cut_lane_sums (the 16
//     masked lane sums), a shuffle-down halving per threshold gives the tile's masses (the operand order of
//     reduce_lanes), lane 0 stores them in the workspace [tiles][16], and the pairwise combine runs level by level
//     (combine_pair, one thread per pair, a barrier per level), exactly combine_tiles;
//  6. min-p, then M(floor) the same way and probs_x = e_x * (1 / M) or 0 (inverse_mass, normalised_weight).
// Cost: the row is read once from the logits and a few times from probs (L2-resident for V up to ~10^6 per SM
// share); top-k adds <= 13 counting passes, top-p <= 13 summing passes (8 for the weight digits, ceil(bits(V-1) / 4)
// for the id digits), each a full pass over the row's V floats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/cuda/common.cuh"
#include "specdec/cuda/logits_api.hpp"
#include "specdec/sampling/logits_core.hpp"

namespace specdec::cuda {
namespace detail {

inline constexpr int kLogitsWarps = kLogitsThreads / 32;

/// The typed arguments of one instantiation.
template <class LogitT, class IdT>
struct LogitsKernelArgs {
  std::int64_t num_rows, vocab_size, logits_stride, num_requests;
  const LogitT* logits;
  float* probs;
  const float* temperature;
  const std::int32_t* top_k;
  const float* top_p;
  const float* min_p;
  const IdT* cu;
  std::int32_t rows_extra;
  Status* status;
  std::uint8_t* greedy;
};

/// Workspace floats per row: 16 masses per tile.
SPECDEC_INLINE std::int64_t logits_workspace_floats(std::int64_t vocab_size) {
  return num_tiles(vocab_size) * specdec::detail::kCutDigitValues;
}

#if defined(__CUDACC__)

/// Sum of the 32 lanes' values in the order of reduce_lanes; lane 0 holds the result.
__device__ inline float warp_reduce_lanes(float v) {
SPECDEC_UNROLL
  for (int off = kTileLanes / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

/// combine_tiles over column c < columns of ws [tiles][16], every thread of the CTA calls it; the totals land in
/// ws[c] (tile 0).
__device__ inline void block_combine(float* ws, std::int64_t tiles, int columns) {
  for (std::int64_t s = 1; s < tiles; s *= 2) {
    const std::int64_t pairs = (tiles + 2 * s - 1) / (2 * s);
    for (std::int64_t w = threadIdx.x; w < pairs * columns; w += kLogitsThreads)
      specdec::detail::combine_pair(ws + w % columns, tiles, specdec::detail::kCutDigitValues, s, w / columns);
    __syncthreads();
  }
}

/// M(floor) of the row (every thread calls it; every thread gets the result).
__device__ inline float block_masked_mass(const float* w, std::int64_t V, std::uint64_t floor, float* ws,
                                          float* result) {
  const std::int64_t tiles = num_tiles(V);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (std::int64_t t = warp; t < tiles; t += kLogitsWarps) {
    const float m = warp_reduce_lanes(specdec::detail::masked_lane_sum(w, t, lane, V, floor));
    if (lane == 0) ws[t * specdec::detail::kCutDigitValues] = m;
  }
  __syncthreads();
  block_combine(ws, tiles, 1);
  if (threadIdx.x == 0) *result = ws[0];
  __syncthreads();
  const float r = *result;
  __syncthreads();
  return r;
}

/// The 16 masses M(max(floor, base | c << shift)) of one digit pass into mass[0..15] (every thread gets them).
__device__ inline void block_digit_masses(const float* w, std::int64_t V, std::uint64_t floor, std::uint64_t base,
                                          int shift, float* ws, float* shared_mass,
                                          float (&mass)[specdec::detail::kCutDigitValues]) {
  constexpr int kC = specdec::detail::kCutDigitValues;
  const std::int64_t tiles = num_tiles(V);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (std::int64_t t = warp; t < tiles; t += kLogitsWarps) {
    float acc[kC];
    specdec::detail::cut_lane_sums(w, t, lane, V, floor, base, shift, acc);
SPECDEC_UNROLL
    for (int c = 0; c < kC; ++c) {
      const float m = warp_reduce_lanes(acc[c]);
      if (lane == 0) ws[t * kC + c] = m;
    }
  }
  __syncthreads();
  block_combine(ws, tiles, kC);
  if (threadIdx.x < kC) shared_mass[threadIdx.x] = ws[threadIdx.x];
  __syncthreads();
SPECDEC_UNROLL
  for (int c = 0; c < kC; ++c) mass[c] = shared_mass[c];
  __syncthreads();
}

template <class LogitT, class IdT>
__global__ void __launch_bounds__(kLogitsThreads) logits_to_probs_kernel(LogitsKernelArgs<LogitT, IdT> a, float* ws_all) {
  namespace sd = specdec::detail;
  constexpr int kC = sd::kCutDigitValues;
  __shared__ Candidate scratch[kLogitsWarps];
  __shared__ unsigned int hist[kC];
  __shared__ unsigned int positive;
  __shared__ float shared_mass[kC];
  __shared__ float shared_result;
  const std::int64_t r = blockIdx.x;
  if (a.greedy && r < a.num_requests && threadIdx.x == 0) {
    const LogitsParams gp = sd::request_logits_params(a.temperature, a.top_k, a.top_p, a.min_p, r);
    a.greedy[r] = gp.temperature == 0.0f ? 1 : 0;
  }
  if (r >= a.num_rows) return;
  const std::int64_t V = a.vocab_size;
  const LogitT* in = a.logits + r * a.logits_stride;
  float* out = a.probs + r * V;
  float* ws = ws_all + r * logits_workspace_floats(V);
  auto fail = [&](Status s) {
    for (std::int64_t x = threadIdx.x; x < V; x += kLogitsThreads) out[x] = 0.0f;
    if (threadIdx.x == 0) a.status[r] = s;
  };
  // 1. Parameters.
  const std::int64_t b = sd::logits_row_request(a.cu, a.num_requests, a.rows_extra, r);
  LogitsParams p;
  if (b >= 0) p = sd::request_logits_params(a.temperature, a.top_k, a.top_p, a.min_p, b);
  if (b < 0 || !sd::logits_params_ok(p)) return fail(Status::kInvalidArgument);
  // 2. Validity and argmax.
  Candidate best = no_candidate();
  bool valid = true;
  for (std::int64_t x = threadIdx.x; x < V; x += kLogitsThreads) {
    const float v = to_float(in[x]);
    if (sd::logit_invalid(v)) valid = false;
    else best = better(best, Candidate{v, x});
  }
  const bool all_valid = __syncthreads_and(valid) != 0;
  best = block_best<kLogitsThreads>(best, scratch);
  if (!all_valid) return fail(Status::kInvalidProbability);
  if (best.key < -FLT_MAX) return fail(Status::kZeroMass);  // the max is -inf: every logit is
  const std::int64_t argmax = best.index;
  if (p.temperature == 0.0f) {
    for (std::int64_t x = threadIdx.x; x < V; x += kLogitsThreads) out[x] = x == argmax ? 1.0f : 0.0f;
    if (threadIdx.x == 0) a.status[r] = Status::kSuccess;
    return;
  }
  // 3. Weights.
  const sd::CutSteps steps = sd::cut_steps(p, V);
  const float inverse_t = sd::inverse_temperature(p.temperature);
  if (threadIdx.x == 0) positive = 0;
  __syncthreads();
  unsigned int my_positive = 0;
  for (std::int64_t x = threadIdx.x; x < V; x += kLogitsThreads) {
    const float e = sd::logit_weight(to_float(in[x]), best.key, inverse_t);
    out[x] = e;
    my_positive += e > 0.0f;
  }
  if (steps.top_k) atomicAdd(&positive, my_positive);
  __syncthreads();
  int shifts[sd::kMaxCutDigits];
  const int digits = sd::cut_digit_shifts(V, shifts);
  std::uint64_t floor = 0;
  // 4. Top-k.
  if (steps.top_k && static_cast<std::int64_t>(p.top_k) < static_cast<std::int64_t>(positive)) {
    std::uint64_t base = 0;
    for (int i = 0; i < digits; ++i) {
      if (threadIdx.x < kC) hist[threadIdx.x] = 0;
      __syncthreads();
      unsigned int local[kC] = {};
      for (std::int64_t x = threadIdx.x; x < V; x += kLogitsThreads) {
        const float e = out[x];
        if (!(e > 0.0f)) continue;
        const int d = sd::cut_digit(sd::cut_key(e, x, V), base, shifts[i]);
SPECDEC_UNROLL
        for (int c = 0; c < kC; ++c) local[c] += d == c;
      }
SPECDEC_UNROLL
      for (int c = 0; c < kC; ++c)
        if (local[c]) atomicAdd(&hist[c], local[c]);
      __syncthreads();
      std::int64_t h[kC];
SPECDEC_UNROLL
      for (int c = 0; c < kC; ++c) h[c] = hist[c];
      base |= static_cast<std::uint64_t>(sd::pick_count_digit(h, p.top_k)) << shifts[i];
      __syncthreads();
    }
    floor = base;
  }
  // 5. Top-p.
  if (steps.top_p) {
    const float target = p.top_p * block_masked_mass(out, V, floor, ws, &shared_result);
    float mass[kC];
    std::uint64_t base = 0;
    for (int i = 0; i < digits; ++i) {
      block_digit_masses(out, V, floor, base, shifts[i], ws, shared_mass, mass);
      base |= static_cast<std::uint64_t>(sd::pick_mass_digit(mass, target)) << shifts[i];
    }
    const std::uint64_t front = sd::cut_key(out[argmax], argmax, V);
    floor = floor > (base < front ? base : front) ? floor : (base < front ? base : front);
  }
  // 6. Min-p, normalisation.
  const std::uint64_t min_p_key = sd::min_p_floor(p.min_p, out[argmax]);
  if (min_p_key > floor) floor = min_p_key;
  const float inverse = sd::inverse_mass(block_masked_mass(out, V, floor, ws, &shared_result));
  for (std::int64_t x = threadIdx.x; x < V; x += kLogitsThreads) {
    const float e = out[x];
    out[x] = e > 0.0f && sd::cut_key(e, x, V) >= floor ? sd::normalised_weight(e, inverse) : 0.0f;
  }
  if (threadIdx.x == 0) a.status[r] = Status::kSuccess;
}

/// Launches one instantiation (arguments already checked on the host).
template <class LogitT, class IdT>
Status launch_logits_to_probs(const LogitsToProbsArgs& a, float* ws, cudaStream_t stream) {
  LogitsKernelArgs<LogitT, IdT> k;
  k.num_rows = a.num_rows;
  k.vocab_size = a.vocab_size;
  k.logits_stride = a.logits_stride == 0 ? a.vocab_size : a.logits_stride;
  k.num_requests = a.num_requests;
  k.logits = static_cast<const LogitT*>(a.logits);
  k.probs = a.probs;
  k.temperature = a.temperature;
  k.top_k = a.top_k;
  k.top_p = a.top_p;
  k.min_p = a.min_p;
  k.cu = static_cast<const IdT*>(a.cu);
  k.rows_extra = a.rows_extra;
  k.status = a.status;
  k.greedy = a.greedy;
  const std::int64_t grid = a.num_rows > a.num_requests ? a.num_rows : a.num_requests;
  if (grid == 0) return Status::kSuccess;
  logits_to_probs_kernel<LogitT, IdT><<<static_cast<unsigned>(grid), kLogitsThreads, 0, stream>>>(k, ws);
  return cudaGetLastError() == cudaSuccess ? Status::kSuccess : Status::kCudaError;
}

#endif  // __CUDACC__

}  // namespace detail
}  // namespace specdec::cuda
