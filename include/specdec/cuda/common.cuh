// specdec — shared pieces of the CUDA verifiers: element types, 16-byte loads, candidates of the argmax races and
// the block-level reductions, and the workspace carving helper.
//
// Everything that decides a value (conversions, comparisons, the lane reduction steps) is SPECDEC_HD, so the host
// emulation test (tests/cuda/test_cuda_emulation.cu) runs exactly this code without a device. Only the thread
// cooperation (shuffles, shared memory, __syncthreads) is device-only; it moves values, never computes them.
//
// Build rules (see kernels/CMakeLists.txt): never --use_fast_math, and -fmad=false for every translation unit
// that compiles these kernels, because nvcc otherwise contracts a multiply followed by an add into one fma in
// log_positive (sampling/philox.hpp), which changes the exponential variates' bits relative to the host. CMake
// consumers that compile these headers link specdec::cuda_headers, which adds the flag to their CUDA sources only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <optional>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/config.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/residual.hpp"
#include "specdec/sampling/status.hpp"

#if defined(__USE_FAST_MATH__)
#error "specdec CUDA kernels must not be compiled with --use_fast_math (host and device must round alike)"
#endif

// Loop unrolling hints for device compilation only (the host pass of nvcc would warn about an unknown pragma).
#if defined(__CUDA_ARCH__)
#define SPECDEC_UNROLL _Pragma("unroll")
#define SPECDEC_UNROLL_8 _Pragma("unroll 8")
#else
#define SPECDEC_UNROLL
#define SPECDEC_UNROLL_8
#endif

namespace specdec::cuda {

/// Threads of one CTA in the chain kernels and the tree kernel.
inline constexpr int kChainThreads = 256;
inline constexpr int kTreeThreads = 512;
/// Alignment of every workspace region and of the workspace itself.
inline constexpr std::size_t kWorkspaceAlignment = 256;

namespace detail {

// ---------------------------------------------------------------------------------------------------------------
// Element types: probabilities are float, __half or __nv_bfloat16; every value is converted to float before any
// arithmetic (exact conversions).

SPECDEC_INLINE float to_float(float v) { return v; }
SPECDEC_INLINE float to_float(__half v) { return __half2float(v); }
SPECDEC_INLINE float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

/// Number of elements of type T in one 16-byte vector.
template <class T>
inline constexpr int kVecOf = static_cast<int>(16 / sizeof(T));

/// A NaN (the poison a weight returns for an invalid input value).
SPECDEC_INLINE float nan_value() {
#if defined(SPECDEC_ON_DEVICE)
  return __int_as_float(0x7fc00000);
#else
  return __builtin_nanf("");
#endif
}

/// Loads 16 bytes at `ptr` (16-byte aligned) and converts them to kVecOf<T> floats.
template <class T>
SPECDEC_INLINE void load_vec(const T* ptr, float (&out)[kVecOf<T>]) {
  constexpr int kVec = kVecOf<T>;
#if defined(SPECDEC_ON_DEVICE)
  const uint4 raw = *reinterpret_cast<const uint4*>(ptr);
  T vals[kVec];
  static_assert(sizeof(vals) == sizeof(raw));
  memcpy(vals, &raw, sizeof raw);
#else
  T vals[kVec];
  std::memcpy(vals, ptr, sizeof vals);
#endif
SPECDEC_UNROLL
  for (int c = 0; c < kVec; ++c) out[c] = to_float(vals[c]);
}

SPECDEC_INLINE bool aligned16(const void* ptr) { return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) == 0; }

// ---------------------------------------------------------------------------------------------------------------
// Candidates of an argmax: the larger key wins, ties go to the lower index, index -1 is "none". This order is
// total on non-NaN keys, so any reduction tree gives the result of the CPU's sequential scan with a strict `>`.

struct Candidate {
  float key;
  std::int64_t index;
};

SPECDEC_INLINE Candidate no_candidate() { return Candidate{0.0f, -1}; }

SPECDEC_INLINE Candidate better(Candidate a, Candidate b) {
  if (b.index < 0) return a;
  if (a.index < 0) return b;
  if (b.key > a.key || (b.key == a.key && b.index < a.index)) return b;
  return a;
}

// ---------------------------------------------------------------------------------------------------------------
// The lane reduction of a tile mass (residual.hpp step 1) with 16-byte loads. A tile's 32 lane sums are held by a
// "tile slot" of kTpt = 32 / kVec consecutive threads: thread t of the slot holds lanes kVec * t + c, c < kVec,
// and adds the elements tile * 1024 + 32 j + kVec * t + c in increasing j (one 16-byte load per j). The halving
// steps off = 16, 8, ..., 1 of detail::reduce_lanes then read lane l + off from thread t + off / kVec (a shuffle)
// while off >= kVec, and from the thread's own register c + off afterwards. Lane l's sum and every step's operands
// are those of reduce_lanes, so the tile mass has the same bits.

/// One halving step for one thread. `other` holds the partner thread's (t + off / kVec) values when off >= kVec.
template <int kVec, int kOut>
SPECDEC_INLINE void lane_step(float (&acc)[kOut][kVec], int off, const float (&other)[kOut][kVec]) {
  if (off >= kVec) {
SPECDEC_UNROLL
    for (int o = 0; o < kOut; ++o)
SPECDEC_UNROLL
      for (int c = 0; c < kVec; ++c) acc[o][c] += other[o][c];
  } else {
SPECDEC_UNROLL
    for (int o = 0; o < kOut; ++o)
SPECDEC_UNROLL
      for (int c = 0; c < kVec; ++c)
        if (c < off) acc[o][c] += acc[o][c + off];
  }
}

/// Lane sums of one thread of a tile slot (thread `t` in [0, 32 / kVec)) over the weights of `src`:
///   src.load_vec(x0, w): w[o][c] = weight o of element x0 + c (c < kVec), x0 a multiple of kVec, all in range;
///   src.load_one(x, w):  w[o]    = weight o of element x.
/// `vec_ok` says 16-byte loads are allowed (rows aligned); the last partial tile always takes the scalar path, which
/// skips elements past V exactly as residual.hpp does.
template <int kVec, int kOut, class Src>
SPECDEC_INLINE void tile_lanes(Src& src, std::int64_t tile, std::int64_t vocab_size, int t, bool vec_ok,
                               float (&acc)[kOut][kVec]) {
SPECDEC_UNROLL
  for (int o = 0; o < kOut; ++o)
SPECDEC_UNROLL
    for (int c = 0; c < kVec; ++c) acc[o][c] = 0.0f;
  const std::int64_t begin = tile * kTileSize;
  if (vec_ok && begin + kTileSize <= vocab_size) {
SPECDEC_UNROLL_8
    for (int j = 0; j < kTileSize / kTileLanes; ++j) {
      float w[kOut][kVec];
      src.load_vec(begin + j * kTileLanes + kVec * t, w);
SPECDEC_UNROLL
      for (int o = 0; o < kOut; ++o)
SPECDEC_UNROLL
        for (int c = 0; c < kVec; ++c) acc[o][c] += w[o][c];
    }
  } else {
    for (int j = 0; j < kTileSize / kTileLanes; ++j) {
SPECDEC_UNROLL
      for (int c = 0; c < kVec; ++c) {
        const std::int64_t x = begin + j * kTileLanes + kVec * t + c;
        if (x < vocab_size) {
          float w[kOut];
          src.load_one(x, w);
SPECDEC_UNROLL
          for (int o = 0; o < kOut; ++o) acc[o][c] += w[o];
        }
      }
    }
  }
}

#if defined(__CUDACC__)
/// Device side of the slot reduction: every thread of the warp calls it (uniform control flow); thread 0 of each
/// slot ends with the tile masses in acc[o][0].
template <int kVec, int kOut>
__device__ inline void reduce_slot(float (&acc)[kOut][kVec]) {
  constexpr int kTpt = kTileLanes / kVec;
SPECDEC_UNROLL
  for (int off = kTileLanes / 2; off > 0; off /= 2) {
    float other[kOut][kVec];
    if (off >= kVec) {
SPECDEC_UNROLL
      for (int o = 0; o < kOut; ++o)
SPECDEC_UNROLL
        for (int c = 0; c < kVec; ++c) other[o][c] = __shfl_down_sync(0xffffffffu, acc[o][c], off / kVec, kTpt);
    }
    lane_step<kVec, kOut>(acc, off, other);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Block-level reductions (values move, nothing is recomputed).

__device__ inline Candidate shfl_down_candidate(Candidate c, int off) {
  Candidate o;
  o.key = __shfl_down_sync(0xffffffffu, c.key, off);
  o.index = __shfl_down_sync(0xffffffffu, c.index, off);
  return o;
}

/// The best candidate of the block, returned to every thread. `scratch` holds one Candidate per warp.
template <int kThreads>
__device__ inline Candidate block_best(Candidate c, Candidate* scratch) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
SPECDEC_UNROLL
  for (int off = 16; off > 0; off /= 2) c = better(c, shfl_down_candidate(c, off));
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = c;
  __syncthreads();
  Candidate r = scratch[0];
SPECDEC_UNROLL
  for (int w = 1; w < kWarps; ++w) r = better(r, scratch[w]);
  return r;
}
#endif  // __CUDACC__

// ---------------------------------------------------------------------------------------------------------------
// Races of residual.hpp, split so that each thread computes whole keys with the shared Philox/log code.

/// Step 2 candidate of tile t (none when its mass is not positive).
SPECDEC_INLINE Candidate tile_candidate(float mass, std::int64_t tile, std::uint64_t seed, std::int64_t position,
                                        Purpose purpose) {
  if (!(mass > 0.0f)) return no_candidate();
  const float key = mass / exponential(seed, position, purpose, static_cast<std::uint32_t>(tile));
  return Candidate{key, tile};
}

/// Step 3 candidates of the 4 tokens x0 .. x0 + 3 (x0 a multiple of 4, one Philox block) under weight 0 of `src`.
template <class Src>
SPECDEC_INLINE Candidate token_candidate4(Src& src, std::int64_t x0, std::int64_t end, std::uint64_t seed,
                                          std::int64_t position, Purpose purpose) {
  Candidate best = no_candidate();
  if (x0 >= end) return best;
  const Philox4x32 block = random_block(seed, position, purpose, static_cast<std::uint32_t>(x0) >> 2);
SPECDEC_UNROLL
  for (int c = 0; c < 4; ++c) {
    const std::int64_t x = x0 + c;
    if (x >= end) break;
    float w[Src::kOut];
    src.load_one(x, w);
    if (!(w[0] > 0.0f)) continue;
    const float u = bits_to_uniform(block.v[c]);
    const float key = w[0] / -log_positive(u);
    best = better(best, Candidate{key, x});
  }
  return best;
}

/// Greedy argmax of one value: valid values compete, any invalid value clears `ok`.
SPECDEC_INLINE void argmax_step(Candidate& best, bool& ok, float v, std::int64_t x) {
  ok = ok && valid_probability(v);
  if (valid_probability(v)) best = better(best, Candidate{v, x});
}

// ---------------------------------------------------------------------------------------------------------------
// Weight sources (the `src` of tile_lanes/token_candidate4). Weight 0 is the distribution drawn from; chain
// residual sources add weight 1 = p itself, for the fallback draw when the residual has no mass.

/// p (NaN where p is invalid): detail::RowWeight of chain.hpp.
template <class T>
struct RowSource {
  static constexpr int kOut = 1;
  static constexpr int kVec = kVecOf<T>;
  const T* p;
  SPECDEC_HD void load_vec(std::int64_t x0, float (&w)[1][kVec]) const {
    float a[kVec];
    detail::load_vec<T>(p + x0, a);
SPECDEC_UNROLL
    for (int c = 0; c < kVec; ++c) w[0][c] = valid_probability(a[c]) ? a[c] : nan_value();
  }
  SPECDEC_HD void load_one(std::int64_t x, float (&w)[1]) const {
    const float a = to_float(p[x]);
    w[0] = valid_probability(a) ? a : nan_value();
  }
};

/// max(p - q, 0) (NaN where p or q is invalid), and p: detail::ResidualWeight and RowWeight of chain.hpp.
template <class T>
struct ResidualSource {
  static constexpr int kOut = 2;
  static constexpr int kVec = kVecOf<T>;
  const T* p;
  const T* q;
  SPECDEC_HD static void weights(float a, float b, float& w0, float& w1) {
    const float d = a - b;
    const float w = d > 0.0f ? d : 0.0f;
    w0 = valid_probability(a) && valid_probability(b) ? w : nan_value();
    w1 = valid_probability(a) ? a : nan_value();
  }
  SPECDEC_HD void load_vec(std::int64_t x0, float (&w)[2][kVec]) const {
    float a[kVec], b[kVec];
    detail::load_vec<T>(p + x0, a);
    detail::load_vec<T>(q + x0, b);
SPECDEC_UNROLL
    for (int c = 0; c < kVec; ++c) weights(a[c], b[c], w[0][c], w[1][c]);
  }
  SPECDEC_HD void load_one(std::int64_t x, float (&w)[2]) const { weights(to_float(p[x]), to_float(q[x]), w[0], w[1]); }
};

/// p with token `removed` set to 0 (NaN where p is invalid), and p: detail::RemovedWeight and RowWeight.
template <class T>
struct RemovedSource {
  static constexpr int kOut = 2;
  static constexpr int kVec = kVecOf<T>;
  const T* p;
  std::int64_t removed;
  SPECDEC_HD static void weights(float a, bool is_removed, float& w0, float& w1) {
    const float w = is_removed ? 0.0f : a;
    w0 = valid_probability(a) ? w : nan_value();
    w1 = valid_probability(a) ? a : nan_value();
  }
  SPECDEC_HD void load_vec(std::int64_t x0, float (&w)[2][kVec]) const {
    float a[kVec];
    detail::load_vec<T>(p + x0, a);
SPECDEC_UNROLL
    for (int c = 0; c < kVec; ++c) weights(a[c], x0 + c == removed, w[0][c], w[1][c]);
  }
  SPECDEC_HD void load_one(std::int64_t x, float (&w)[2]) const { weights(to_float(p[x]), x == removed, w[0], w[1]); }
};

/// Selects weight `O` of another source as weight 0 (the token race of a fallback draw).
template <class Src, int O>
struct PickSource {
  static constexpr int kOut = 1;
  const Src& src;
  SPECDEC_HD void load_one(std::int64_t x, float (&w)[1]) const {
    float all[Src::kOut];
    src.load_one(x, all);
    w[0] = all[O];
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Request checks shared by the chain and tree kernels.

/// Request b's range and scalar arguments (what check_batch of sampling/chain.hpp checks, per request): cu[0] == 0,
/// 0 <= cu[b] <= cu[b + 1] <= N, cu[B] == N for the last request, positions[b] >= 0, output_stride >= K_b + 1.
template <class IdT>
SPECDEC_HD Status check_request_range(const IdT* cu, std::int64_t b, std::int64_t batch_size,
                                      std::int64_t num_draft_tokens, std::int64_t output_stride,
                                      const std::int64_t* positions, std::int64_t& start, std::int64_t& num_drafts) {
  start = static_cast<std::int64_t>(cu[b]);
  const auto end = static_cast<std::int64_t>(cu[b + 1]);
  num_drafts = -1;
  if (start < 0 || end < start || end > num_draft_tokens || (b == 0 && start != 0) ||
      (b == batch_size - 1 && end != num_draft_tokens))
    return Status::kInvalidArgument;
  num_drafts = end - start;
  if (positions[b] < 0 || output_stride < num_drafts + 1) return Status::kInvalidArgument;
  return Status::kSuccess;
}

/// The checks above without the cu[B] == N check of the last request (kept for callers that do not pass B).
template <class IdT>
SPECDEC_HD Status check_request_range(const IdT* cu, std::int64_t b, std::int64_t num_draft_tokens,
                                      std::int64_t output_stride, const std::int64_t* positions, std::int64_t& start,
                                      std::int64_t& num_drafts) {
  return check_request_range(cu, b, std::int64_t{-1}, num_draft_tokens, output_stride, positions, start, num_drafts);
}

/// Request b's draft kind against the pointers: flagged as having draft probabilities (has_draft_probs[b] != 0)
/// with drafts to test while draft_probs is null is kInvalidArgument (check_batch of sampling/chain.hpp).
template <class ProbT>
SPECDEC_HD Status check_request_draft_kind(const ProbT* draft_probs, const std::uint8_t* has_draft_probs,
                                           std::int64_t b, std::int64_t num_drafts) {
  if (num_drafts > 0 && has_draft_probs != nullptr && has_draft_probs[b] != 0 && draft_probs == nullptr)
    return Status::kInvalidArgument;
  return Status::kSuccess;
}

template <class IdT>
SPECDEC_HD bool id_in_range(IdT id, std::int64_t vocab_size) {
  const auto x = static_cast<std::int64_t>(id);
  return x >= 0 && x < vocab_size;
}

#if defined(__CUDACC__)
// ---------------------------------------------------------------------------------------------------------------
// CTA-level passes shared by the chain and tree kernels.

/// One CTA's share of the tile masses of `src` (tiles [t_lo, t_hi)); every thread of the CTA calls it.
template <int kThreads, class Src>
__device__ inline void tile_masses_pass(Src& src, std::int64_t t_lo, std::int64_t t_hi, std::int64_t vocab_size,
                                        bool vec_ok, float* mass0, float* mass1) {
  constexpr int kVec = Src::kVec, kOut = Src::kOut, kTpt = kTileLanes / kVec, kSlots = kThreads / kTpt;
  const int slot = threadIdx.x / kTpt, t = threadIdx.x % kTpt;
  for (std::int64_t base = t_lo; base < t_hi; base += kSlots) {
    const std::int64_t tile = base + slot;
    const bool active = tile < t_hi;
    float acc[kOut][kVec];
    if (active) {
      tile_lanes<kVec, kOut>(src, tile, vocab_size, t, vec_ok, acc);
    } else {
SPECDEC_UNROLL
      for (int o = 0; o < kOut; ++o)
SPECDEC_UNROLL
        for (int c = 0; c < kVec; ++c) acc[o][c] = 0.0f;
    }
    reduce_slot<kVec, kOut>(acc);
    if (active && t == 0) {
      mass0[tile] = acc[0][0];
      if constexpr (kOut > 1) mass1[tile] = acc[1][0];
    }
  }
}

/// (max, lowest index) of row[lo, hi) over the CTA, with the validity of every value read; all threads call it.
template <int kThreads, class ProbT>
__device__ inline Candidate row_argmax(const ProbT* row, std::int64_t lo, std::int64_t hi, bool vec_ok, bool& ok,
                                       Candidate* scratch) {
  constexpr int kVec = kVecOf<ProbT>;
  Candidate best = no_candidate();
  bool valid = true;
  std::int64_t scalar_from = lo;
  if (vec_ok) {
    const std::int64_t n_vec = (hi - lo) / kVec;
    for (std::int64_t v = threadIdx.x; v < n_vec; v += kThreads) {
      float w[kVec];
      load_vec<ProbT>(row + lo + v * kVec, w);
SPECDEC_UNROLL
      for (int c = 0; c < kVec; ++c) argmax_step(best, valid, w[c], lo + v * kVec + c);
    }
    scalar_from = lo + n_vec * kVec;
  }
  for (std::int64_t x = scalar_from + threadIdx.x; x < hi; x += kThreads) argmax_step(best, valid, to_float(row[x]), x);
  ok = __syncthreads_and(valid) != 0;
  return block_best<kThreads>(best, scratch);
}

/// Tile race over masses[0, T) (every thread calls it): the winner, or index -1; `ok` is false when a mass is invalid.
template <int kThreads>
__device__ inline Candidate block_race_tiles(const float* masses, std::int64_t tiles, std::uint64_t seed,
                                             std::int64_t position, Purpose purpose, bool& ok, Candidate* scratch) {
  Candidate best = no_candidate();
  bool valid = true;
  for (std::int64_t t = threadIdx.x; t < tiles; t += kThreads) {
    const float m = masses[t];
    valid = valid && valid_probability(m);
    best = better(best, tile_candidate(m, t, seed, position, purpose));
  }
  ok = __syncthreads_and(valid) != 0;
  return block_best<kThreads>(best, scratch);
}

/// Token race inside `tile` under weight 0 of `src` (every thread calls it).
template <int kThreads, class Src>
__device__ inline Candidate block_race_tokens(Src& src, std::int64_t tile, std::int64_t vocab_size,
                                              std::uint64_t seed, std::int64_t position, Purpose purpose,
                                              Candidate* scratch) {
  const std::int64_t begin = tile * kTileSize;
  const std::int64_t end = begin + kTileSize < vocab_size ? begin + kTileSize : vocab_size;
  Candidate best = no_candidate();
  for (std::int64_t x0 = begin + 4 * static_cast<std::int64_t>(threadIdx.x); x0 < end; x0 += 4 * kThreads)
    best = better(best, token_candidate4(src, x0, end, seed, position, purpose));
  return block_best<kThreads>(best, scratch);
}

#endif  // __CUDACC__

// ---------------------------------------------------------------------------------------------------------------
// Host-side argument checks of the launchers (no device memory is read): each failure names the argument.

/// Sizes known on the host: batch_size in [0, max_batch], vocab_size in (0, 2^31), num_draft_tokens >= 0,
/// output_stride >= 1, and the optional element counts of the caller's buffers against N, B and V.
inline VerifyResult check_shape(std::int64_t batch_size, std::int64_t max_batch, std::int64_t vocab_size,
                                std::int64_t num_draft_tokens, std::int64_t output_stride, bool has_draft_probs,
                                const specdec::detail::BatchSizes& sizes) {
  using specdec::detail::bad_argument;
  auto num = [](std::int64_t v) { return std::optional<double>(static_cast<double>(v)); };
  const Status bad = Status::kInvalidArgument;
  if (batch_size < 0) return bad_argument(bad, "batch_size", ">= 0", std::nullopt, num(batch_size));
  if (batch_size > max_batch)
    return bad_argument(bad, "batch_size", "<= the CUDA grid limit", num(max_batch), num(batch_size));
  if (vocab_size <= 0 || vocab_size > 0x7fffffffLL)
    return bad_argument(bad, "vocab_size", "a value in [1, 2^31)", std::nullopt, num(vocab_size));
  if (num_draft_tokens < 0 || num_draft_tokens > 0x7fffffffLL)
    return bad_argument(bad, "num_draft_tokens", "a value in [0, 2^31)", std::nullopt, num(num_draft_tokens));
  if (output_stride < 1) return bad_argument(bad, "output_stride", ">= 1", std::nullopt, num(output_stride));
  const std::int64_t n = num_draft_tokens, b = batch_size, v = vocab_size;  // n, b < 2^31, v < 2^31: no overflow
  if (sizes.draft_token_ids >= 0 && sizes.draft_token_ids != n)
    return bad_argument(bad, "draft_token_ids_size", "num_draft_tokens", num(n), num(sizes.draft_token_ids));
  if (sizes.parents >= 0 && sizes.parents != n)
    return bad_argument(bad, "parents_size", "num_draft_tokens", num(n), num(sizes.parents));
  if (has_draft_probs && sizes.draft_probs >= 0 && sizes.draft_probs != n * v)
    return bad_argument(bad, "draft_probs_size", "num_draft_tokens * vocab_size", num(n * v), num(sizes.draft_probs));
  if (sizes.target_probs >= 0 && sizes.target_probs != (n + b) * v)
    return bad_argument(bad, "target_probs_size", "(num_draft_tokens + batch_size) * vocab_size", num((n + b) * v),
                        num(sizes.target_probs));
  return {};
}

/// The pointers every verifier needs once the batch is not empty (the draft ids when there are drafts), in the order
/// they are reported: the first null one is named.
template <class Params>
VerifyResult check_required_pointers(const Params& a) {
  using specdec::detail::null_argument;
  if (!a.cu_num_draft_tokens) return null_argument("cu_num_draft_tokens");
  if (!a.target_probs) return null_argument("target_probs");
  if (!a.seeds) return null_argument("seeds");
  if (!a.positions) return null_argument("positions");
  if (!a.output_token_ids) return null_argument("output_token_ids");
  if (!a.num_accepted) return null_argument("num_accepted");
  if (!a.status) return null_argument("status");
  if (a.num_draft_tokens > 0 && !a.draft_token_ids) return null_argument("draft_token_ids");
  return {};
}

/// Whether the probability rows allow 16-byte loads (row length a multiple of 16 bytes, both bases aligned).
template <class ProbT>
bool vector_loads_ok(std::int64_t vocab_size, const ProbT* target_probs, const ProbT* draft_probs) {
  return (vocab_size * static_cast<std::int64_t>(sizeof(ProbT))) % 16 == 0 && aligned16(target_probs) &&
         (!draft_probs || aligned16(draft_probs));
}

// ---------------------------------------------------------------------------------------------------------------
// Workspace carving.

SPECDEC_INLINE std::size_t align_up(std::size_t n) {
  return (n + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

/// Hands out aligned regions of a workspace in order; `size()` after the last take is the bytes needed.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <class U>
  U* take(std::size_t count) {
    U* r = base_ ? reinterpret_cast<U*>(base_ + offset_) : nullptr;
    offset_ += align_up(count * sizeof(U));
    return r;
  }
  std::size_t size() const { return offset_; }

 private:
  char* base_;
  std::size_t offset_ = 0;
};

/// cudaError_t -> Status.
inline Status from_cuda(cudaError_t e) { return e == cudaSuccess ? Status::kSuccess : Status::kCudaError; }

#if defined(__CUDACC__)
/// Multiprocessors of the current device (0 and kCudaError when the runtime cannot say).
inline Status current_device_sms(int* sms) {
  int device = 0;
  *sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return Status::kCudaError;
  return Status::kSuccess;
}

/// The CUTLASS-style operator of a verifier (can_implement / get_workspace_size / initialize / run), over its
/// Traits: Params, check (the host argument checks), workspace_size(B, N, V) and launch(params, ws, bytes, stream).
template <class Traits>
class VerifyOperator {
 public:
  using Params = typename Traits::Params;
  static Status can_implement(const Params& a) { return Traits::check(a).status; }
  static std::size_t get_workspace_size(const Params& a) {
    return Traits::workspace_size(a.batch_size, a.num_draft_tokens, a.vocab_size);
  }
  /// Binds arguments and workspace (nothing is launched or allocated).
  Status initialize(const Params& a, void* workspace, std::size_t workspace_bytes, cudaStream_t = nullptr) {
    if (Status s = can_implement(a); s != Status::kSuccess) return s;
    if (!workspace && get_workspace_size(a) > 0) return Status::kWorkspaceTooSmall;
    if (workspace_bytes < get_workspace_size(a)) return Status::kWorkspaceTooSmall;
    params_ = a;
    workspace_ = workspace;
    workspace_bytes_ = workspace_bytes;
    return Status::kSuccess;
  }
  Status run(cudaStream_t stream) const { return Traits::launch(params_, workspace_, workspace_bytes_, stream); }
  Status operator()(cudaStream_t stream) const { return run(stream); }

 private:
  Params params_{};
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
};
#endif  // __CUDACC__

}  // namespace detail
}  // namespace specdec::cuda
