// y[t, o] (+)= sum_i x[t, i] * w[o, i] for a few rows t (decode and speculative verify: 1-16 new tokens) and a block of
// output rows o — the product that dominates a decode forward. BLAS gemm packs the weight for every call, which triples the
// cost of a 2-16 row product on this workload; this kernel streams each weight row once from memory (a tile of rows stays in
// L1 while every pair of token rows passes over it), so a 6-token product costs well under 6x a 1-token product.
//
// Plain C++ with GCC/Clang vector extensions; an AVX2+FMA build of the same code is chosen at first
// use when the CPU has both. No torch in this file.
#include <algorithm>
#include <cstdint>
#include <cstring>

// Vector-extension types wider than the baseline ISA are only used inside always-inlined helpers.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace specdec::models::detail {

namespace {

using v8 = float __attribute__((vector_size(32)));

[[gnu::always_inline]] inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline float hsum(v8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// Tile: 6 weight rows x 2 token rows = 12 vector accumulators (of 16 AVX registers). Measured on this project's 2-core AMD EPYC
// build machine against 4x3, 3x4, 2x6 and 8x1 tiles over SmolLM2-135M's matrices: the fastest for 1, 2 and 6 token rows.
constexpr int kRows = 6;    // weight rows per tile
constexpr int kTokens = 2;  // token rows per tile (a weight tile is re-read from L1 for each further pair of token rows)

// R output rows x NB token rows, all in registers.
template <int R, int NB>
[[gnu::always_inline]] inline void tile(const float* x, std::int64_t in, const float* w, float* y, std::int64_t ldy, bool accumulate) {
  v8 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NB; ++t) acc[r][t] = v8{};
  std::int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    v8 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load8(w + r * in + i);
    for (int t = 0; t < NB; ++t) {
      const v8 xv = load8(x + t * in + i);
      for (int r = 0; r < R; ++r) acc[r][t] += wv[r] * xv;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NB; ++t) {
      float s = hsum(acc[r][t]);
      for (std::int64_t j = i; j < in; ++j) s += w[r * in + j] * x[t * in + j];
      float& dst = y[t * ldy + r];
      dst = accumulate ? dst + s : s;
    }
}

static_assert(kTokens == 2, "tile_rows dispatches token-row counts 1 and 2");
template <int R>
[[gnu::always_inline]] inline void tile_rows(const float* x, std::int64_t nb, std::int64_t in, const float* w, float* y,
                                             std::int64_t ldy, bool accumulate) {
  if (nb == 2)
    tile<R, 2>(x, in, w, y, ldy, accumulate);
  else
    tile<R, 1>(x, in, w, y, ldy, accumulate);
}

[[gnu::always_inline]] inline void linear_rows_impl(const float* x, std::int64_t n, std::int64_t in, const float* w,
                                                    std::int64_t o_begin, std::int64_t o_end, float* y, std::int64_t ldy,
                                                    bool accumulate) {
  std::int64_t o = o_begin;
  for (; o + kRows <= o_end; o += kRows) {
    for (std::int64_t t = 0; t < n; t += kTokens)
      tile_rows<kRows>(x + t * in, std::min<std::int64_t>(kTokens, n - t), in, w + o * in, y + t * ldy + o, ldy, accumulate);
  }
  for (; o < o_end; ++o)
    for (std::int64_t t = 0; t < n; t += kTokens)
      tile_rows<1>(x + t * in, std::min<std::int64_t>(kTokens, n - t), in, w + o * in, y + t * ldy + o, ldy, accumulate);
}

// out[d] = sum_j p[j] * v[j * ldv + d] for d < dim (dim a multiple of 8 takes the vector path).
[[gnu::always_inline]] inline void weighted_sum_impl(const float* p, std::int64_t count, const float* v, std::int64_t ldv,
                                                     std::int64_t dim, float* out) {
  if (dim % 8 == 0 && dim <= 128) {
    v8 acc[16];
    const std::int64_t nv = dim / 8;
    for (std::int64_t k = 0; k < nv; ++k) acc[k] = v8{};
    for (std::int64_t j = 0; j < count; ++j) {
      const float pj = p[j];
      const float* vj = v + j * ldv;
      for (std::int64_t k = 0; k < nv; ++k) acc[k] += pj * load8(vj + 8 * k);
    }
    for (std::int64_t k = 0; k < nv; ++k) std::memcpy(out + 8 * k, &acc[k], sizeof(v8));
    return;
  }
  for (std::int64_t d = 0; d < dim; ++d) out[d] = 0.f;
  for (std::int64_t j = 0; j < count; ++j)
    for (std::int64_t d = 0; d < dim; ++d) out[d] += p[j] * v[j * ldv + d];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPECDEC_LINEAR_X86_DISPATCH 1
__attribute__((target("avx2,fma"))) void linear_rows_avx2(const float* x, std::int64_t n, std::int64_t in, const float* w,
                                                          std::int64_t o_begin, std::int64_t o_end, float* y,
                                                          std::int64_t ldy, bool accumulate) {
  linear_rows_impl(x, n, in, w, o_begin, o_end, y, ldy, accumulate);
}
__attribute__((target("avx2,fma"))) void weighted_sum_avx2(const float* p, std::int64_t count, const float* v,
                                                           std::int64_t ldv, std::int64_t dim, float* out) {
  weighted_sum_impl(p, count, v, ldv, dim, out);
}
#endif

void weighted_sum_baseline(const float* p, std::int64_t count, const float* v, std::int64_t ldv, std::int64_t dim, float* out) {
  weighted_sum_impl(p, count, v, ldv, dim, out);
}

bool has_avx2_fma() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

void linear_rows_baseline(const float* x, std::int64_t n, std::int64_t in, const float* w, std::int64_t o_begin,
                          std::int64_t o_end, float* y, std::int64_t ldy, bool accumulate) {
  linear_rows_impl(x, n, in, w, o_begin, o_end, y, ldy, accumulate);
}

using LinearRowsFn = void (*)(const float*, std::int64_t, std::int64_t, const float*, std::int64_t, std::int64_t, float*,
                              std::int64_t, bool);

using WeightedSumFn = void (*)(const float*, std::int64_t, const float*, std::int64_t, std::int64_t, float*);

LinearRowsFn select_linear_rows() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  if (has_avx2_fma()) return &linear_rows_avx2;
#endif
  return &linear_rows_baseline;
}
WeightedSumFn select_weighted_sum() {
#ifdef SPECDEC_LINEAR_X86_DISPATCH
  if (has_avx2_fma()) return &weighted_sum_avx2;
#endif
  return &weighted_sum_baseline;
}

}  // namespace

/// x [n, in] (row stride in), w [*, in] (row stride in), y [n, ldy]: computes columns [o_begin, o_end) of y = x w^T, adding to y
/// when `accumulate`. Each weight row is read from memory once; token rows are processed in pairs against it.
void linear_rows(const float* x, std::int64_t n, std::int64_t in, const float* w, std::int64_t o_begin, std::int64_t o_end,
                 float* y, std::int64_t ldy, bool accumulate) {
  static const LinearRowsFn fn = select_linear_rows();
  fn(x, n, in, w, o_begin, o_end, y, ldy, accumulate);
}

/// out[d] = sum_{j < count} p[j] * v[j * ldv + d] for d < dim: one attention output row from its probabilities and the values.
void weighted_sum(const float* p, std::int64_t count, const float* v, std::int64_t ldv, std::int64_t dim, float* out) {
  static const WeightedSumFn fn = select_weighted_sum();
  fn(p, count, v, ldv, dim, out);
}

}  // namespace specdec::models::detail
