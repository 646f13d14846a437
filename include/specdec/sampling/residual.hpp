// specdec — sampling a token from an unnormalised distribution with a result that does not depend on how
// the work is split: the two-level exponential race shared by the CPU core and the CUDA kernels.
//
// Given weights r(x) >= 0 over a vocabulary of V tokens (a residual max(p - q, 0), p with a token removed, or p):
//  1. Split the vocabulary into tiles of kTileSize = 1024 tokens (the last one partial). A tile's mass R_t is
//     the float sum of its weights in this fixed order: lane l (0..31) adds tokens t*1024 + 32 j + l for
//     j = 0..31 in increasing j, starting from 0; then lanes combine by halving (l += l + 16, l += l + 8, ...,
//     l += l + 1), exactly a warp's shuffle-down reduction. Tokens past V contribute nothing.
//  2. Tile race: t* = argmax over tiles with R_t > 0 of R_t / E_t, E_t = exponential(seed, pos, tile purpose, t).
//  3. Token race inside t*: x* = argmax over tokens with r(x) > 0 of r(x) / E_x, E_x = exponential(seed, pos,
//     token purpose, x).
//  Ties go to the lower index. Step 2 picks tile t with probability R_t / sum R; step 3 picks x with probability
//  r(x) / R_t (an exponential race, i.e. Gumbel-max); so x* ~ r / sum r. Every operation is a single IEEE float
//  operation in a fixed order (or an explicit fmaf in log_positive), so the host and the device agree bit for bit.
// A distribution's total mass, when needed (tree verification renormalises), is the float sum of the tile
// masses in increasing tile order.
#pragma once

#include <cfloat>
#include <cstdint>

#include "specdec/sampling/philox.hpp"

namespace specdec {

inline constexpr std::int32_t kTileSize = 1024;
inline constexpr std::int32_t kTileLanes = 32;

SPECDEC_INLINE std::int64_t num_tiles(std::int64_t vocab_size) { return (vocab_size + kTileSize - 1) / kTileSize; }

/// True for a value a probability may take: finite and >= 0 (false for NaN).
SPECDEC_INLINE bool valid_probability(float v) { return v >= 0.0f && v <= FLT_MAX; }

namespace detail {

/// The lane reduction of step 1 over 32 partial sums (in place; the result ends in acc[0]).
SPECDEC_INLINE float reduce_lanes(float* acc) {
  for (int off = kTileLanes / 2; off > 0; off /= 2)
    for (int l = 0; l < off; ++l) acc[l] += acc[l + off];
  return acc[0];
}

}  // namespace detail

/// Mass of tile `tile` of the weights `weight(x)`, in the order of step 1. `weight` must return a float >= 0.
template <class Weight>
inline float tile_mass(const Weight& weight, std::int64_t tile, std::int64_t vocab_size) {
  float acc[kTileLanes] = {};
  const std::int64_t begin = tile * kTileSize;
  if (begin + kTileSize <= vocab_size) {
    for (std::int32_t j = 0; j < kTileSize / kTileLanes; ++j)
      for (std::int32_t l = 0; l < kTileLanes; ++l) acc[l] += weight(begin + j * kTileLanes + l);
  } else {
    for (std::int32_t j = 0; j < kTileSize / kTileLanes; ++j)
      for (std::int32_t l = 0; l < kTileLanes; ++l) {
        const std::int64_t x = begin + j * kTileLanes + l;
        if (x < vocab_size) acc[l] += weight(x);
      }
  }
  return detail::reduce_lanes(acc);
}

/// Step 2 over precomputed tile masses: the winning tile, or -1 when every mass is 0.
inline std::int64_t race_tiles(const float* tile_masses, std::int64_t tiles, std::uint64_t seed, std::int64_t position,
                               Purpose purpose) {
  std::int64_t best = -1;
  float best_key = 0.0f;
  for (std::int64_t t = 0; t < tiles; ++t) {
    const float m = tile_masses[t];
    if (!(m > 0.0f)) continue;
    const float key = m / exponential(seed, position, purpose, static_cast<std::uint32_t>(t));
    if (best < 0 || key > best_key) {
      best = t;
      best_key = key;
    }
  }
  return best;
}

/// Step 3: the winning token inside `tile` (-1 if the tile has no positive weight). Skips the logarithm for a
/// token whose key provably loses: -log(u) >= 1 - u, so r / E <= r / (1 - u); the 1% margin absorbs rounding, so
/// the skip never changes the winner.
template <class Weight>
inline std::int64_t race_in_tile(const Weight& weight, std::int64_t tile, std::int64_t vocab_size, std::uint64_t seed,
                                 std::int64_t position, Purpose purpose) {
  const std::int64_t begin = tile * kTileSize;
  const std::int64_t end = begin + kTileSize < vocab_size ? begin + kTileSize : vocab_size;
  std::int64_t best = -1;
  float best_key = 0.0f;
  Philox4x32 block{};
  for (std::int64_t x = begin; x < end; ++x) {
    const auto index = static_cast<std::uint32_t>(x);
    if (x == begin || (index & 3u) == 0) block = random_block(seed, position, purpose, index >> 2);
    const float w = weight(x);
    if (!(w > 0.0f)) continue;
    const float u = bits_to_uniform(block.v[index & 3u]);
    if (best >= 0 && w < best_key * (1.0f - u) * 0.99f) continue;
    const float key = w / -log_positive(u);
    if (best < 0 || key > best_key) {
      best = x;
      best_key = key;
    }
  }
  return best;
}

/// Purposes used for one draw: the residual after a rejection, or the bonus token.
struct RacePurposes {
  Purpose tile;
  Purpose token;
};
inline constexpr RacePurposes kResidualRace{Purpose::kResidualTile, Purpose::kResidual};
inline constexpr RacePurposes kBonusRace{Purpose::kBonusTile, Purpose::kBonus};

}  // namespace specdec
