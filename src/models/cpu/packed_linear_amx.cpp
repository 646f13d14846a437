// The AMX packed product (Intel Advanced Matrix Extensions, AMX-INT8; chosen at run time by PackedMatrix::linear for
// calls of at least amx_min_rows() token rows, the AVX-512 VNNI product below that).
//
// A tile block of a format with 8-bit values is already an AMX B operand: rows of 64 bytes holding 4 consecutive values
// of each of the 16 weight rows side by side (K = the block's values, N = 16). A 4-bit block is unpacked once into that
// shape (low nibbles are values 0..15, high nibbles 16..31), then kept in a tile register for every token group. The A
// operand is M <= 16 token rows of the block's int8 activations, read in place from the quantised rows (stride = a row's
// bytes), so one TDPBSUD gives the exact integer sums of M token rows x 16 weight rows at once (a second one the second
// plane's). The sums go through the same AVX-512 float stage as the VNNI path (packed_x86.hpp), block by block in
// ascending order, so every output has the bits of the other paths.
//
// Token rows go in ceil(n / 16) groups of M = ceil(n / groups) rows; the last group starts at n - M, so it may recompute
// rows of the group before it, whose results it does not store again.
#include <algorithm>
#include <vector>

#include "packed_x86.hpp"

#if defined(SPECDEC_PACKED_X86) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define SPECDEC_PACKED_AMX 1
#endif

namespace specdec::models::detail {

#ifdef SPECDEC_PACKED_AMX

bool amx_supported() noexcept {
  static const bool ok = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
    if (!tile || !int8 || !cpu_supports(CpuIsa::kAvx512Vnni)) return false;
    // Linux hands out the tile data state only on request (once per process).
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

namespace {

#define SPECDEC_TARGET_AMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// The LDTILECFG operand (palette 1).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// A 4-bit tile block (blk / 8 chunks of 64 bytes) as a blk / 4-row B operand: low nibbles are the first half of the
// rows, high nibbles the second.
template <class F>
SPECDEC_TARGET_AMX [[gnu::always_inline]] inline void load_weights_u4(const std::byte* tb, std::uint8_t* unpacked) {
  constexpr int kChunks = F::blk / 8;
  #pragma GCC unroll 4
  for (int c = 0; c < kChunks; ++c) {
    __m512i lo, hi;
    avx512_u4_chunk<F>(tb, c, lo, hi);
    _mm512_store_si512(unpacked + 64 * c, lo);
    _mm512_store_si512(unpacked + 64 * (kChunks + c), hi);
  }
}

// A 2-bit tile block (Layout::u2) as a 4-row B operand: row k is crumb k of every byte (values 4k..4k+3).
template <class F>
SPECDEC_TARGET_AMX [[gnu::always_inline]] inline void load_weights_u2(const std::byte* tb, std::uint8_t* unpacked) {
  __m512i op[4];
  avx512_u2_operands<F>(tb, op);
  #pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) _mm512_store_si512(unpacked + 64 * k, op[k]);
}

// Weight tiles [tile, tile + NTILES) (1 or 2), every token row. Tile registers: 0, 1 = A (planes 1 and 2), 2, 3 = B (the
// blocks of two weight tiles), 4, 5 = C of the first weight tile (planes 1 and 2), 6, 7 = C of the second. Two weight
// tiles at a time keep four independent tile products in flight.
template <class F, int P, int NTILES>
SPECDEC_TARGET_AMX void amx_tiles(const PackedArgs& a, std::int64_t tile, std::int64_t groups, std::int64_t M, float* acc) {
  const PackedMatrix& w = *a.w;
  const QuantizedRows& x = *a.x;
  const std::int64_t n = x.n, blocks = w.cols() / F::blk;
  constexpr std::int64_t xbb = P * F::blk + QuantizedRows::header;
  alignas(64) std::uint8_t unpacked[2][8 * 64];
  alignas(64) std::int32_t c[4][16][16];  // [weight tile * 2 + plane][token][lane]
  const std::byte* xd = x.data.data();
  std::fill_n(acc, NTILES * n * 16, 0.f);
  const std::byte* tp0 = w.tile(tile);
  const std::byte* tp1 = NTILES == 2 ? w.tile(tile + 1) : tp0;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::byte* tb0 = values_at<F>(tp0, b);
    const std::byte* tb1 = values_at<F>(tp1, b);
    if constexpr (u2<F>()) {
      load_weights_u2<F>(tb0, unpacked[0]);
      _tile_loadd(2, unpacked[0], 64);
      if constexpr (NTILES == 2) {
        load_weights_u2<F>(tb1, unpacked[1]);
        _tile_loadd(3, unpacked[1], 64);
      }
    } else if constexpr (F::u4) {
      load_weights_u4<F>(tb0, unpacked[0]);
      _tile_loadd(2, unpacked[0], 64);
      if constexpr (NTILES == 2) {
        load_weights_u4<F>(tb1, unpacked[1]);
        _tile_loadd(3, unpacked[1], 64);
      }
    } else {
      _tile_loadd(2, tb0, 64);
      if constexpr (NTILES == 2) _tile_loadd(3, tb1, 64);
    }
    __m512 d[2], m[2];
    avx512_scales<F>(tp0, b, d[0], m[0]);
    if constexpr (NTILES == 2) avx512_scales<F>(tp1, b, d[1], m[1]);
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t t0 = std::min(g * M, n - M), first = g * M - t0;
      const std::byte* xa = xd + t0 * x.stride + b * xbb;
      _tile_loadd(0, xa, x.stride);
      if constexpr (P == 2) _tile_loadd(1, xa + F::blk, x.stride);
      _tile_zero(4);
      _tile_dpbsud(4, 0, 2);
      if constexpr (P == 2) {
        _tile_zero(5);
        _tile_dpbsud(5, 1, 2);
      }
      if constexpr (NTILES == 2) {
        _tile_zero(6);
        _tile_dpbsud(6, 0, 3);
        if constexpr (P == 2) {
          _tile_zero(7);
          _tile_dpbsud(7, 1, 3);
        }
      }
      _tile_stored(4, c[0], 64);
      if constexpr (P == 2) _tile_stored(5, c[1], 64);
      if constexpr (NTILES == 2) {
        _tile_stored(6, c[2], 64);
        if constexpr (P == 2) _tile_stored(7, c[3], 64);
      }
      #pragma GCC unroll 2
      for (int k = 0; k < NTILES; ++k)
        for (std::int64_t i = first; i < M; ++i) {
          __m512i s = _mm512_load_si512(c[2 * k][i]);
          if constexpr (P == 2) s = _mm512_add_epi32(_mm512_slli_epi32(s, 8), _mm512_load_si512(c[2 * k + 1][i]));
          float* at = acc + (k * n + t0 + i) * 16;
          _mm512_storeu_ps(at, avx512_block_step<F>(s, d[k], m[k], xa + i * x.stride + P * F::blk, _mm512_loadu_ps(at)));
        }
    }
  }
  for (int k = 0; k < NTILES; ++k) {
    const std::int64_t o = (tile + k) * kTileRows;
    const std::int64_t valid = std::min<std::int64_t>(kTileRows, w.rows() - o);
    const __mmask16 mask = static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1u);
    for (std::int64_t t = 0; t < n; ++t) {
      float* y = a.y + t * a.ldy + o;
      __m512 v = _mm512_loadu_ps(acc + (k * n + t) * 16);
      if (a.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
      _mm512_mask_storeu_ps(y, mask, v);
    }
  }
}

template <class F, int P>
SPECDEC_TARGET_AMX void amx_run(const PackedArgs& a) {
  const std::int64_t n = a.x->n;
  const std::int64_t groups = (n + 15) / 16, M = (n + groups - 1) / groups;
  TileConfig cfg;
  for (int r : {0, 1}) {
    cfg.rows[r] = static_cast<std::uint8_t>(M);
    cfg.colsb[r] = F::blk;
  }
  for (int r : {2, 3}) {
    cfg.rows[r] = F::blk / 4;
    cfg.colsb[r] = 64;
  }
  for (int r : {4, 5, 6, 7}) {
    cfg.rows[r] = static_cast<std::uint8_t>(M);
    cfg.colsb[r] = 64;
  }
  _tile_loadconfig(&cfg);
  thread_local std::vector<float> acc_store;
  acc_store.resize(static_cast<std::size_t>(2 * n * 16));
  std::int64_t t = a.tile_begin;
  for (; t + 2 <= a.tile_end; t += 2) amx_tiles<F, P, 2>(a, t, groups, M, acc_store.data());
  if (t < a.tile_end) amx_tiles<F, P, 1>(a, t, groups, M, acc_store.data());
  _tile_release();
}

template <class F>
struct AmxRun {
  static void go(const PackedArgs& a) { a.x->planes == 2 ? amx_run<F, 2>(a) : amx_run<F, 1>(a); }
};

}  // namespace

void packed_linear_amx(const PackedArgs& a) { dispatch<AmxRun>(a); }

#else

bool amx_supported() noexcept { return false; }
void packed_linear_amx(const PackedArgs& a) { packed_linear_portable(a); }

#endif

}  // namespace specdec::models::detail
