// specdec — chain verification (Leviathan et al. 2023; Chen et al. 2023), the CPU reference.
//
// Shapes (DESIGN.md): a ragged batch of B requests, request b with K_b = cu[b+1] - cu[b] drafts.
//   draft_token_ids [N]           N = cu[B]
//   draft_probs     [N, V]        or absent (a deterministic draft: n-gram, argmax heads)
//   target_probs    [N + B, V]    request b's K_b + 1 rows start at row cu[b] + b; row i is the target's
//                                 distribution for draft position i, row K_b the bonus distribution
//   output          [B, stride]   accepted drafts then one recovered/bonus token, padded with -1 (stride >= K_b + 1)
//   num_accepted    [B], accepted flags [N] (1 = accepted, 0 = rejected or not reached)
//
// The rule for request b (seed s, position P = index of its first draft token in the sequence):
//  - greedy rows: accept draft i while it equals argmax p_i (lowest id on ties); emit argmax p_i at the first
//    mismatch, or argmax p_K when all are accepted;
//  - draft probs present: with u_i = uniform(s, P + i, kAccept, 0), accept x_i iff u_i * q_i(x_i) * l < p_i(x_i)
//    (l = lenience, 1 by default). As u_i lies in (0, 1), p >= q always accepts, p = 0 never does, and the
//    strict < makes the acceptance probability exactly min(1, p / (l q)) up to the uniform's 2^-23 grid.
//    At the first rejection emit from max(p_i - q_i, 0);
//  - draft probs absent: accept x_i iff u_i < p_i(x_i); at the first rejection emit from p_i with x_i removed;
//  - all accepted: emit the bonus token from p_K.
//  Emission uses the race of residual.hpp at position P + i with purposes kResidualTile/kResidual (or
//  kBonusTile/kBonus). If a residual has no mass (possible only through rounding when p ~= q) the token is drawn
//  from p_i itself. With l = 1 the output is distributed exactly as sampling from the target; l < 1 is lossy
//  (it accepts with probability min(1, p / (l q)), so the acceptance rate sum_x min(q, p / l) rises, and the
//  output is no longer the target's distribution). Off by default.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specdec/sampling/residual.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec {

/// Inputs of a batched chain verification. Pointers are host pointers; nothing is owned.
template <class IdT, class OffT = IdT>
struct ChainVerifyArgs {
  std::int64_t batch_size = 0;
  std::int64_t vocab_size = 0;
  const OffT* cu_num_draft_tokens = nullptr;  ///< [B + 1], cu[0] == 0, non-decreasing
  const IdT* draft_token_ids = nullptr;       ///< [N]
  const float* draft_probs = nullptr;         ///< [N, V], or nullptr for deterministic drafts
  const float* target_probs = nullptr;        ///< [N + B, V]
  const std::uint64_t* seeds = nullptr;       ///< [B]
  const std::int64_t* positions = nullptr;    ///< [B] sequence index of each request's first draft token
  const std::uint8_t* greedy = nullptr;       ///< [B] 1 = temperature 0; nullptr = every row sampled
  float lenience = 1.0f;                      ///< in (0, 1]; < 1 is lossy (see above)
};

/// Outputs of a batched chain verification. Written only when the call succeeds.
template <class IdT>
struct ChainVerifyOutputs {
  IdT* output_token_ids = nullptr;    ///< [B, output_stride], padded with -1
  std::int64_t output_stride = 0;     ///< >= max_b K_b + 1
  std::int32_t* num_accepted = nullptr;  ///< [B]
  std::uint8_t* accepted = nullptr;   ///< [N] or nullptr
};

/// Where a verification failed: the status, the request and the draft position (or -1).
struct VerifyResult {
  Status status = Status::kSuccess;
  std::int64_t request = -1;
  std::int64_t position = -1;
  bool ok() const { return status == Status::kSuccess; }
};

namespace detail {

/// Argmax of a probability row (lowest id on ties); kInvalidProbability if a value is NaN/inf/negative.
inline Status argmax_row(const float* p, std::int64_t vocab_size, std::int64_t& token) {
  float best = p[0];
  std::int64_t arg = 0;
  bool ok = true;
  for (std::int64_t x = 0; x < vocab_size; ++x) {
    const float v = p[x];
    ok &= valid_probability(v);
    if (v > best) {
      best = v;
      arg = x;
    }
  }
  if (!ok) return Status::kInvalidProbability;
  token = arg;
  return Status::kSuccess;
}

/// Draws from the weights `weight` (see residual.hpp). A weight returns NaN for an invalid input value, which
/// poisons its tile's mass and is reported as kInvalidProbability. `tile_masses` holds num_tiles(V) floats.
template <class Weight>
inline Status draw(const Weight& weight, std::int64_t vocab_size, std::uint64_t seed, std::int64_t position,
                   RacePurposes purposes, float* tile_masses, std::int64_t& token) {
  const std::int64_t tiles = num_tiles(vocab_size);
  for (std::int64_t t = 0; t < tiles; ++t) {
    const float m = tile_mass(weight, t, vocab_size);
    if (!valid_probability(m)) return Status::kInvalidProbability;
    tile_masses[t] = m;
  }
  const std::int64_t tile = race_tiles(tile_masses, tiles, seed, position, purposes.tile);
  if (tile < 0) return Status::kZeroMass;
  token = race_in_tile(weight, tile, vocab_size, seed, position, purposes.token);
  return Status::kSuccess;
}

/// The residual max(p - q, 0) (NaN where p or q is not a valid probability).
struct ResidualWeight {
  const float* p;
  const float* q;
  float operator()(std::int64_t x) const {
    const float a = p[x], b = q[x];
    const float d = a - b;
    const float w = d > 0.0f ? d : 0.0f;
    return valid_probability(a) && valid_probability(b) ? w : __builtin_nanf("");
  }
};

/// p with one token removed (NaN where p is not a valid probability).
struct RemovedWeight {
  const float* p;
  std::int64_t removed;
  float operator()(std::int64_t x) const {
    const float a = p[x];
    const float w = x == removed ? 0.0f : a;
    return valid_probability(a) ? w : __builtin_nanf("");
  }
};

/// p itself (NaN where p is not a valid probability).
struct RowWeight {
  const float* p;
  float operator()(std::int64_t x) const {
    const float a = p[x];
    return valid_probability(a) ? a : __builtin_nanf("");
  }
};

/// Emission from a residual with the fallback to p when the residual has no mass.
template <class Weight>
inline Status draw_residual(const Weight& weight, const float* p, std::int64_t vocab_size, std::uint64_t seed,
                            std::int64_t position, float* tile_masses, std::int64_t& token) {
  Status s = draw(weight, vocab_size, seed, position, kResidualRace, tile_masses, token);
  if (s == Status::kZeroMass) s = draw(RowWeight{p}, vocab_size, seed, position, kResidualRace, tile_masses, token);
  return s;
}

}  // namespace detail

/// Verifies one request's chain. `draft_probs` is [K, V] or nullptr, `target_probs` is [K + 1, V].
/// Writes K_accepted + 1 tokens to `out_tokens` (capacity K + 1), the count to `num_accepted` and, if given, K
/// flags to `accepted`. `tile_masses` is scratch of num_tiles(V) floats. Token ids must already be in range.
/// On failure `error_position` gets the draft position whose row was bad.
template <class IdT>
inline Status verify_chain_request(std::int64_t vocab_size, std::int64_t num_drafts, const IdT* draft_token_ids,
                                   const float* draft_probs, const float* target_probs, std::uint64_t seed,
                                   std::int64_t position, bool greedy, float lenience, IdT* out_tokens,
                                   std::int32_t* num_accepted, std::uint8_t* accepted, float* tile_masses,
                                   std::int64_t* error_position = nullptr) {
  const std::int64_t V = vocab_size;
  std::int64_t i = 0;
  std::int64_t token = -1;
  Status s = Status::kSuccess;
  auto fail = [&](Status st) {
    if (error_position) *error_position = i;
    return st;
  };
  for (; i < num_drafts; ++i) {
    const float* p = target_probs + i * V;
    const std::int64_t x = static_cast<std::int64_t>(draft_token_ids[i]);
    if (greedy) {
      if ((s = detail::argmax_row(p, V, token)) != Status::kSuccess) return fail(s);
      if (token != x) break;
    } else {
      const float px = p[x];
      const float u = uniform(seed, position + i, Purpose::kAccept, 0);
      bool accept;
      if (draft_probs) {
        const float qx = draft_probs[i * V + x];
        if (!valid_probability(px) || !valid_probability(qx)) return fail(Status::kInvalidProbability);
        accept = u * qx * lenience < px;
      } else {
        if (!valid_probability(px)) return fail(Status::kInvalidProbability);
        accept = u < px;
      }
      if (!accept) {
        if (draft_probs)
          s = detail::draw_residual(detail::ResidualWeight{p, draft_probs + i * V}, p, V, seed, position + i,
                                    tile_masses, token);
        else
          s = detail::draw_residual(detail::RemovedWeight{p, x}, p, V, seed, position + i, tile_masses, token);
        if (s != Status::kSuccess) return fail(s);
        break;
      }
    }
    out_tokens[i] = draft_token_ids[i];
    if (accepted) accepted[i] = 1;
  }
  const std::int64_t n_acc = i;
  if (n_acc == num_drafts) {  // every draft accepted: the bonus token from p_K
    const float* p = target_probs + num_drafts * V;
    if (greedy)
      s = detail::argmax_row(p, V, token);
    else
      s = detail::draw(detail::RowWeight{p}, V, seed, position + num_drafts, kBonusRace, tile_masses, token);
    if (s != Status::kSuccess) return fail(s);
  }
  out_tokens[n_acc] = static_cast<IdT>(token);
  if (accepted)
    for (std::int64_t j = n_acc; j < num_drafts; ++j) accepted[j] = 0;
  *num_accepted = static_cast<std::int32_t>(n_acc);
  return Status::kSuccess;
}

namespace detail {

/// Checks the batch-level arguments and every draft id; returns the largest K through `max_drafts`.
template <class IdT, class OffT>
inline VerifyResult check_ragged(std::int64_t batch_size, std::int64_t vocab_size, const OffT* cu, const IdT* ids,
                                 const void* target_probs, const std::uint64_t* seeds, const std::int64_t* positions,
                                 std::int64_t output_stride, std::int64_t& max_drafts) {
  if (batch_size < 0 || vocab_size <= 0 || !cu || !target_probs || !seeds || !positions)
    return {Status::kInvalidArgument, -1, -1};
  if (cu[0] != 0) return {Status::kInvalidArgument, 0, -1};
  max_drafts = 0;
  for (std::int64_t b = 0; b < batch_size; ++b) {
    const std::int64_t k = static_cast<std::int64_t>(cu[b + 1]) - static_cast<std::int64_t>(cu[b]);
    if (k < 0) return {Status::kInvalidArgument, b, -1};
    max_drafts = std::max(max_drafts, k);
    if (positions[b] < 0) return {Status::kInvalidArgument, b, -1};
  }
  if (output_stride < max_drafts + 1) return {Status::kInvalidArgument, -1, -1};
  if (cu[batch_size] > 0 && !ids) return {Status::kInvalidArgument, -1, -1};
  for (std::int64_t b = 0; b < batch_size; ++b)
    for (std::int64_t j = static_cast<std::int64_t>(cu[b]); j < static_cast<std::int64_t>(cu[b + 1]); ++j) {
      const auto x = static_cast<std::int64_t>(ids[j]);
      if (x < 0 || x >= vocab_size) return {Status::kInvalidTokenId, b, j - static_cast<std::int64_t>(cu[b])};
    }
  return {};
}

}  // namespace detail

/// Verifies request `b` of a batch into its own output row (used by the batch loop and parallel front ends).
template <class IdT, class OffT>
inline VerifyResult verify_chain_one(const ChainVerifyArgs<IdT, OffT>& a, std::int64_t b, IdT* out_row,
                                     std::int32_t* num_accepted, std::uint8_t* accepted, float* tile_masses) {
  const std::int64_t V = a.vocab_size;
  const auto start = static_cast<std::int64_t>(a.cu_num_draft_tokens[b]);
  const auto k = static_cast<std::int64_t>(a.cu_num_draft_tokens[b + 1]) - start;
  std::int64_t pos = -1;
  const Status s = verify_chain_request<IdT>(
      V, k, a.draft_token_ids + start, a.draft_probs ? a.draft_probs + start * V : nullptr,
      a.target_probs + (start + b) * V, a.seeds[b], a.positions[b], a.greedy && a.greedy[b], a.lenience, out_row,
      num_accepted, accepted ? accepted + start : nullptr, tile_masses, &pos);
  if (s != Status::kSuccess) return {s, b, pos};
  return {};
}

/// Batched chain verification on the CPU (one thread). Validates everything first; on any failure returns the
/// status with the request and position, and leaves every output untouched.
template <class IdT, class OffT>
inline VerifyResult verify_chain(const ChainVerifyArgs<IdT, OffT>& a, const ChainVerifyOutputs<IdT>& out) {
  std::int64_t max_k = 0;
  VerifyResult r = detail::check_ragged(a.batch_size, a.vocab_size, a.cu_num_draft_tokens, a.draft_token_ids,
                                        a.target_probs, a.seeds, a.positions, out.output_stride, max_k);
  if (!r.ok()) return r;
  if (!(a.lenience > 0.0f && a.lenience <= 1.0f) || !out.output_token_ids || !out.num_accepted)
    return {Status::kInvalidArgument, -1, -1};
  const std::int64_t B = a.batch_size, stride = out.output_stride;
  const std::int64_t N = static_cast<std::int64_t>(a.cu_num_draft_tokens[B]);
  std::vector<IdT> tokens(static_cast<std::size_t>(B * stride), static_cast<IdT>(-1));
  std::vector<std::int32_t> counts(static_cast<std::size_t>(B));
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(N));
  std::vector<float> tile_masses(static_cast<std::size_t>(num_tiles(a.vocab_size)));
  for (std::int64_t b = 0; b < B; ++b) {
    r = verify_chain_one(a, b, tokens.data() + b * stride, &counts[b], flags.data(), tile_masses.data());
    if (!r.ok()) return r;
  }
  std::copy(tokens.begin(), tokens.end(), out.output_token_ids);
  std::copy(counts.begin(), counts.end(), out.num_accepted);
  if (out.accepted) std::copy(flags.begin(), flags.end(), out.accepted);
  return {};
}

}  // namespace specdec
