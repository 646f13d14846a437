// specdec — reference transform from logits to the distribution a request samples from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "specdec/sampling/logits_core.hpp"
#include "specdec/sampling/logits_simd.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/sampling/row_scan.hpp"

namespace specdec {

namespace detail {

/// Scratch of the CPU reference (reused across rows of a batch).
struct LogitsScratch {
  std::vector<std::int32_t> candidates;
  std::vector<float> lanes;   ///< [tiles][32][16] lane sums of a digit pass
  std::vector<float> masses;  ///< [16][tiles] tile masses
};

inline LogitsParams logits_params(const SamplingParams& p) {
  return LogitsParams{p.temperature, p.top_k, p.top_p, p.min_p};
}

/// The masked masses M(max(floor, base | c << shift)) for c = 0..15 over the candidates (ascending ids; every token
/// with weight > 0 and key >= max(floor, base) is among them): the fixed order of logits_core.hpp, skipping the rest.
/// A tile without candidates has mass +0 (its lanes are all +0), so only the tiles holding candidates are summed.
inline void candidate_masses(const float* w, std::int64_t vocab_size, const std::vector<std::int32_t>& cand,
                             std::uint64_t floor, std::uint64_t base, int shift, LogitsScratch& s,
                             float (&out)[kCutDigitValues]) {
  const std::int64_t tiles = num_tiles(vocab_size);
  s.masses.assign(static_cast<std::size_t>(tiles * kCutDigitValues), 0.0f);
  s.lanes.resize(static_cast<std::size_t>(kTileLanes * kCutDigitValues));
  std::size_t i = 0;
  while (i < cand.size()) {
    const std::int64_t tile = cand[i] / kTileSize;
    std::fill(s.lanes.begin(), s.lanes.end(), 0.0f);
    for (; i < cand.size() && cand[i] / kTileSize == tile; ++i) {
      const std::int32_t x = cand[i];
      const float v = w[x];
      const std::uint64_t key = cut_key(v, x, vocab_size);
      if (key < floor) continue;
      const int d = cut_digit(key, base, shift);
      float* lane = s.lanes.data() + (x % kTileLanes) * kCutDigitValues;
      for (int c = 0; c <= d; ++c) lane[c] += v;
    }
    for (int c = 0; c < kCutDigitValues; ++c) {
      float acc[kTileLanes];
      for (int l = 0; l < kTileLanes; ++l) acc[l] = s.lanes[static_cast<std::size_t>(l * kCutDigitValues + c)];
      s.masses[static_cast<std::size_t>(c * tiles + tile)] = reduce_lanes(acc);
    }
  }
  for (int c = 0; c < kCutDigitValues; ++c) out[c] = combine_tiles(s.masses.data() + c * tiles, tiles, 1);
}

/// M(floor) over the whole row: lane l of a tile adds its tokens in increasing j (masked_lane_sum's order), here with
/// j outer and the 32 lanes inner (contiguous loads); adding +0 for a masked token is exact.
/// With floor 0 (every weight kept) the tiles go through tile_masses, on the CPU's widest path.
inline float row_mass(const float* w, std::int64_t vocab_size, std::uint64_t floor, LogitsScratch& s) {
  const std::int64_t tiles = num_tiles(vocab_size);
  s.masses.resize(static_cast<std::size_t>(tiles));
  if (floor == 0) {
    tile_masses(best_logits_path(), w, vocab_size, s.masses.data());
    return combine_tiles(s.masses.data(), tiles, 1);
  }
  for (std::int64_t t = 0; t < tiles; ++t) {
    float acc[kTileLanes] = {};
    const std::int64_t begin = t * kTileSize;
    for (std::int32_t j = 0; j < kTileSize / kTileLanes; ++j)
      for (std::int32_t l = 0; l < kTileLanes; ++l) {
        const std::int64_t x = begin + j * kTileLanes + l;
        if (x >= vocab_size) break;
        const float v = w[x];
        acc[l] += v > 0.0f && cut_key(v, x, vocab_size) >= floor ? v : 0.0f;  // adding +0 is exact
      }
    s.masses[static_cast<std::size_t>(t)] = reduce_lanes(acc);
  }
  return combine_tiles(s.masses.data(), tiles, 1);
}

inline void keep_above(const float* w, std::int64_t vocab_size, std::uint64_t floor, std::vector<std::int32_t>& cand) {
  std::erase_if(cand, [&](std::int32_t x) { return cut_key(w[x], x, vocab_size) < floor; });
}

/// Step 1's checks of one row and its scan (the largest logit, lowest id on ties): the Status logits_row returns,
/// without writing anything.
inline Status logits_row_check(const float* logits, std::int64_t vocab_size, const LogitsParams& p, RowArgmax& scan) {
  if (!logits_params_ok(p) || vocab_size <= 0 || vocab_size > 0x7fffffffLL) return Status::kInvalidArgument;
  scan = row_argmax<RowValues::kLogits>(logits, vocab_size);
  if (!scan.all_valid) return Status::kInvalidProbability;
  if (scan.max == -std::numeric_limits<float>::infinity()) return Status::kZeroMass;
  return Status::kSuccess;
}

/// One row (logits_core.hpp steps 1-4). On success `probs` holds the distribution; on failure it is untouched
/// unless `zero_on_error`.
inline Status logits_row(const float* logits, std::int64_t vocab_size, const LogitsParams& p, float* probs,
                         LogitsScratch& s, bool zero_on_error) {
  RowArgmax scan;
  if (const Status st = logits_row_check(logits, vocab_size, p, scan); st != Status::kSuccess) {
    if (zero_on_error) std::fill(probs, probs + vocab_size, 0.0f);
    return st;
  }
  const std::int64_t n = vocab_size;
  const std::int64_t argmax = scan.index;
  const float max_logit = scan.max;
  if (p.temperature == 0.0f) {
    std::fill(probs, probs + n, 0.0f);
    probs[argmax] = 1.0f;
    return Status::kSuccess;
  }
  const LogitsPath path = best_logits_path();
  logit_weights(path, logits, n, max_logit, p.temperature, probs);
  const CutSteps steps = cut_steps(p, n);
  std::uint64_t floor = 0;
  if (steps.top_k || steps.top_p) {
    int shifts[kMaxCutDigits];
    const int digits = cut_digit_shifts(n, shifts);
    auto& cand = s.candidates;
    cand.clear();
    for (std::int64_t x = 0; x < n; ++x)
      if (probs[x] > 0.0f) cand.push_back(static_cast<std::int32_t>(x));
    if (steps.top_k && static_cast<std::int64_t>(p.top_k) < static_cast<std::int64_t>(cand.size())) {
      std::uint64_t base = 0;
      for (int i = 0; i < digits; ++i) {
        std::int64_t hist[kCutDigitValues] = {};
        for (const std::int32_t x : cand) {
          const int d = cut_digit(cut_key(probs[x], x, n), base, shifts[i]);
          if (d >= 0) ++hist[d];
        }
        base |= static_cast<std::uint64_t>(pick_count_digit(hist, p.top_k)) << shifts[i];
        keep_above(probs, n, base, cand);
      }
      floor = base;
    }
    if (steps.top_p) {
      float m[kCutDigitValues];
      candidate_masses(probs, n, cand, floor, 0, 0, s, m);  // m[0] = M(floor), the top-k set's mass
      const float target = p.top_p * m[0];
      std::uint64_t base = 0;
      for (int i = 0; i < digits; ++i) {
        candidate_masses(probs, n, cand, floor, base, shifts[i], s, m);
        base |= static_cast<std::uint64_t>(pick_mass_digit(m, target)) << shifts[i];
        keep_above(probs, n, std::max(base, floor), cand);
      }
      floor = std::max(floor, std::min(base, cut_key(probs[argmax], argmax, n)));
    }
  }
  floor = std::max(floor, min_p_floor(p.min_p, probs[argmax]));
  const float inverse = inverse_mass(row_mass(probs, n, floor, s));
  if (floor == 0) {
    normalise_row(path, probs, n, inverse);  // +0 * inverse = +0
  } else {
    for (std::int64_t x = 0; x < n; ++x) {
      const float v = probs[x];
      probs[x] = v > 0.0f && cut_key(v, x, n) >= floor ? normalised_weight(v, inverse) : 0.0f;
    }
  }
  return Status::kSuccess;
}

}  // namespace detail

/// Writes the processed distribution for `logits` into `probs` (same length V).
///  - temperature 0: one-hot on the argmax (lowest id on ties);
///  - otherwise: softmax(logits / temperature) (max-subtracted, with the deterministic exp of logits_core.hpp), then
///    top-k (the k largest; ties broken by lower id), top-p (the smallest prefix of the descending order whose mass
///    reaches top_p times the top-k set's mass, the crossing token included), min-p (drop p < min_p * p_max), and
///    renormalisation. Every sum is a float sum in the fixed order of logits_core.hpp, so the CUDA kernel
///    (cuda/logits.cuh) writes the same bits. Within 2e-6 relative of an fp64 computation of the same rule
///    (tests/core/test_logits.cpp).
/// Masked tokens get exactly 0. Logits may contain -inf (a banned token); NaN or +inf is an error.
/// Returns kInvalidArgument for bad params or mismatched sizes, kInvalidProbability for NaN/+inf logits,
/// kZeroMass when every logit is -inf. On failure `probs` is left untouched.
inline Status logits_to_probs(std::span<const float> logits, const SamplingParams& params, std::span<float> probs) {
  if (validate(params) != Status::kSuccess || logits.size() != probs.size() || logits.empty())
    return Status::kInvalidArgument;
  detail::LogitsScratch scratch;
  return detail::logits_row(logits.data(), static_cast<std::int64_t>(logits.size()), detail::logits_params(params),
                            probs.data(), scratch, false);
}

/// Convenience form returning a vector; throws specdec::error on bad input.
inline std::vector<float> logits_to_probs(std::span<const float> logits, const SamplingParams& params) {
  check(params);
  std::vector<float> probs(logits.size());
  const Status s = logits_to_probs(logits, params, std::span<float>(probs));
  if (s != Status::kSuccess) throw error(s, std::string("logits_to_probs: ") + to_string(s));
  return probs;
}

/// A batch of rows [num_rows, V] (logits rows `logits_stride` apart, probs contiguous), each with the parameters of
/// its request (the CPU twin of cuda::logits_to_probs, same layout and bits):
///  - cu == nullptr: row r uses params[r] (num_requests == num_rows);
///  - otherwise request b owns rows [cu[b] + extra * b, cu[b + 1] + extra * (b + 1)) with extra = rows_extra: 0 for
///    draft rows (cu = cu_num_draft_tokens), 1 for target rows (K_b + 1 rows each).
/// status[r] gets each row's Status; a failed row's probs are all 0; a row no request owns is kInvalidArgument.
/// Returns kInvalidArgument (nothing written) when a pointer or size is bad, else kSuccess.
template <class IdT = std::int64_t>
inline Status logits_to_probs_batch(const float* logits, std::int64_t num_rows, std::int64_t vocab_size,
                                    std::int64_t logits_stride, const LogitsParams* params, std::int64_t num_requests,
                                    const IdT* cu, std::int32_t rows_extra, float* probs, Status* status) {
  if (num_rows < 0 || vocab_size <= 0 || vocab_size > 0x7fffffffLL || logits_stride < vocab_size ||
      num_requests < 0 || (rows_extra != 0 && rows_extra != 1) || (cu == nullptr && num_requests != num_rows))
    return Status::kInvalidArgument;
  if (num_rows == 0) return Status::kSuccess;
  if (!logits || !params || !probs || !status) return Status::kInvalidArgument;
  detail::LogitsScratch scratch;
  for (std::int64_t r = 0; r < num_rows; ++r) {
    float* out = probs + r * vocab_size;
    const std::int64_t b = detail::logits_row_request(cu, num_requests, rows_extra, r);
    if (b < 0) {
      std::fill(out, out + vocab_size, 0.0f);
      status[r] = Status::kInvalidArgument;
      continue;
    }
    status[r] = detail::logits_row(logits + r * logits_stride, vocab_size, params[b], out, scratch, true);
  }
  return Status::kSuccess;
}

}  // namespace specdec
