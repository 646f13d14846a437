// specdec — chain verification (Leviathan et al. 2023; Chen et al. 2023), the CPU reference.
//
// Shapes (docs/design.md, "Shapes"): a ragged batch of B requests, request b with K_b = cu[b+1] - cu[b] drafts.
//   draft_token_ids [N]           N = cu[B]
//   draft_probs     [N, V]        or absent (a deterministic draft: n-gram, argmax heads)
//   target_probs    [N + B, V]    request b's K_b + 1 rows start at row cu[b] + b; row i is the target's
//                                 distribution for draft position i, row K_b the bonus distribution
//   output          [B, stride]   accepted drafts then one recovered/bonus token, padded with -1 (stride >= K_b + 1)
//   num_accepted    [B], accepted flags [N] (1 = accepted, 0 = rejected or not reached)
//   has_draft_probs [B]           optional per-request draft kind: 1 = request b's drafts come with probabilities
//                                 (its K_b rows of draft_probs are read), 0 = deterministic drafts (n-gram, argmax
//                                 heads; its rows of draft_probs are never read and may hold anything). Absent
//                                 (nullptr): every request is as `draft_probs != nullptr` says. draft_probs keeps the
//                                 full [N, V] layout either way (row j belongs to draft j), so a batch can mix an
//                                 n-gram request with a draft-model request without repacking; a request with
//                                 drafts flagged 1 while draft_probs is nullptr is an error.
//
// Validation (the promises of docs/design.md: never UB, never abort): verify_chain and the checked single-request
// entry verify_chain_request check every size, pointer and id they read before reading any probability, and
// report failures as a VerifyResult naming the argument, what was expected and what was received (to_string()
// formats it). The optional *_size fields of ChainVerifyArgs (element counts of the caller's buffers) let the
// batch entry prove that cu, K and the probability buffers agree; without them that is the caller's contract.
// Outputs are written only when the call succeeds. A row that must be sampled or argmaxed and sums to zero gives
// kZeroMass, greedy or not.
//
// The rule for request b (seed s, position P = index of its first draft token in the sequence):
//  - greedy rows: accept draft i while it equals argmax p_i (lowest id on ties); emit argmax p_i at the first
//    mismatch, or argmax p_K when all are accepted (a row read this way with no positive value: kZeroMass);
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
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "specdec/sampling/race_weights.hpp"
#include "specdec/sampling/residual.hpp"
#include "specdec/sampling/row_scan.hpp"
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
  const std::uint8_t* has_draft_probs = nullptr;  ///< [B] per-request draft kind (see above), or nullptr
  // Element counts of the caller's buffers, checked when given (-1 = not given): a K that disagrees with the
  // probability buffers is then an error instead of an out-of-bounds read.
  std::int64_t draft_token_ids_size = -1;     ///< elements of draft_token_ids: N = cu[B]
  std::int64_t draft_probs_size = -1;         ///< elements of draft_probs: N * V (ignored when draft_probs is null)
  std::int64_t target_probs_size = -1;        ///< elements of target_probs: (N + B) * V
};

/// Outputs of a batched chain verification. Written only when the call succeeds.
template <class IdT>
struct ChainVerifyOutputs {
  IdT* output_token_ids = nullptr;    ///< [B, output_stride], padded with -1
  std::int64_t output_stride = 0;     ///< >= max_b K_b + 1
  std::int32_t* num_accepted = nullptr;  ///< [B]
  std::uint8_t* accepted = nullptr;   ///< [N] or nullptr
};

/// Where and why a verification failed: the status, the request and the draft position (or -1), and for most
/// failures the argument at fault, what was expected and what was received. `to_string` formats it as
/// "invalid argument: draft_token_ids: expected an id in [0, vocab_size) with vocab_size = 4, got 7 (request 1,
/// draft position 0)". The strings have static storage; the struct is trivially cheap to copy.
struct VerifyResult {
  Status status = Status::kSuccess;
  std::int64_t request = -1;
  std::int64_t position = -1;
  const char* argument = nullptr;              ///< the argument at fault ("draft_token_ids", ...), or nullptr
  const char* expected = nullptr;              ///< what was expected, in words
  std::optional<double> expected_value{};      ///< the number `expected` ends with ("... = value"), if any
  std::optional<double> received{};            ///< the value received, if it is a number
  const char* received_text = nullptr;         ///< the value received when it is not a number ("null", ...)
  bool ok() const { return status == Status::kSuccess; }
};

namespace detail {

inline constexpr const char* kNonNull = "a non-null pointer";
inline constexpr const char* kValidProbabilities = "finite, non-negative probabilities";

/// A number as it reads best: integers exactly (up to 2^53), others with 9 significant digits.
inline std::string format_number(double v) {
  char buf[40];
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (v == v && v >= -kExact && v <= kExact && v == static_cast<double>(static_cast<long long>(v)))
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else
    std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

/// A failure of `argument`: expected `expected` (= expected_value), got `received`.
inline VerifyResult bad_argument(Status status, const char* argument, const char* expected,
                                 std::optional<double> expected_value, std::optional<double> received,
                                 std::int64_t request = -1, std::int64_t position = -1) {
  VerifyResult r;
  r.status = status;
  r.request = request;
  r.position = position;
  r.argument = argument;
  r.expected = expected;
  r.expected_value = expected_value;
  r.received = received;
  return r;
}

/// A required pointer that is null.
inline VerifyResult null_argument(const char* argument) {
  VerifyResult r = bad_argument(Status::kInvalidArgument, argument, kNonNull, std::nullopt, std::nullopt);
  r.received_text = "null";
  return r;
}

}  // namespace detail

/// The failure in words (see VerifyResult); "success" for a successful result.
inline std::string to_string(const VerifyResult& r) {
  if (r.ok()) return "success";
  std::string s = to_string(r.status);
  if (r.argument) {
    s += ": ";
    s += r.argument;
    s += ": expected ";
    s += r.expected ? r.expected : "a valid value";
    if (r.expected_value) s += " = " + detail::format_number(*r.expected_value);
    s += ", got ";
    if (r.received)
      s += detail::format_number(*r.received);
    else
      s += r.received_text ? r.received_text : "an invalid value";
  }
  if (r.request >= 0 || r.position >= 0) {
    s += " (";
    if (r.request >= 0) s += "request " + std::to_string(r.request);
    if (r.request >= 0 && r.position >= 0) s += ", ";
    if (r.position >= 0) s += "draft position " + std::to_string(r.position);
    s += ")";
  }
  return s;
}

namespace detail {

/// Argmax of a probability row (lowest id on ties); kInvalidProbability if a value is NaN/inf/negative, kZeroMass
/// if no value is positive (an all-zero row has no argmax to emit, greedy or not).
inline Status argmax_row(const float* p, std::int64_t vocab_size, std::int64_t& token) {
  const RowArgmax scan = row_argmax<RowValues::kProbabilities>(p, vocab_size);
  if (!scan.all_valid) return Status::kInvalidProbability;
  if (!(scan.max > 0.0f)) return Status::kZeroMass;
  token = scan.index;
  return Status::kSuccess;
}

/// Draws from the weights `weight` (see residual.hpp). A weight returns NaN for an invalid input value, which
/// poisons its tile's mass and is reported as kInvalidProbability. `tile_masses` holds num_tiles(V) floats.
template <class Weight>
inline Status draw(const Weight& weight, std::int64_t vocab_size, std::uint64_t seed, std::int64_t position,
                   RacePurposes purposes, float* tile_masses, std::int64_t& token) {
  const std::int64_t tiles = num_tiles(vocab_size);
  race_tile_masses(weight, vocab_size, tile_masses);
  for (std::int64_t t = 0; t < tiles; ++t)
    if (!valid_probability(tile_masses[t])) return Status::kInvalidProbability;
  const std::int64_t tile = race_tiles(tile_masses, tiles, seed, position, purposes.tile);
  if (tile < 0) return Status::kZeroMass;
  token = race_in_tile(weight, tile, vocab_size, seed, position, purposes.token);
  return Status::kSuccess;
}

/// Emission from a residual with the fallback to p when the residual has no mass.
template <class Weight>
inline Status draw_residual(const Weight& weight, const float* p, std::int64_t vocab_size, std::uint64_t seed,
                            std::int64_t position, float* tile_masses, std::int64_t& token) {
  Status s = draw(weight, vocab_size, seed, position, kResidualRace, tile_masses, token);
  if (s == Status::kZeroMass) s = draw(RowWeight{p}, vocab_size, seed, position, kResidualRace, tile_masses, token);
  return s;
}

}  // namespace detail

namespace detail {

/// A failure while reading the probability rows of draft position `position` (status from argmax_row/draw).
inline VerifyResult row_failure(Status s, std::int64_t position, bool has_draft_probs) {
  VerifyResult r;
  r.status = s;
  r.position = position;
  if (s == Status::kZeroMass) {
    r.argument = "target_probs";
    r.expected = "a row with positive mass";
    r.received = 0.0;
  } else {
    r.argument = has_draft_probs ? "target_probs or draft_probs" : "target_probs";
    r.expected = kValidProbabilities;
    r.received_text = "a NaN, infinite or negative value";
  }
  return r;
}

/// A probability value read by an accept test that is not a probability.
inline VerifyResult value_failure(const char* argument, float value, std::int64_t position) {
  return bad_argument(Status::kInvalidProbability, argument, kValidProbabilities, std::nullopt,
                      static_cast<double>(value), -1, position);
}

/// The sampled test of one draft: accepted when u * q(x) * lenience < p(x), or u < p(x) for a deterministic draft.
inline bool accepts_draft(float u, float px, bool has_q, float qx, float lenience) {
  return has_q ? u * qx * lenience < px : u < px;
}

/// Whether sampled chain verification reads the target row after draft i of a request (draft_token_ids[i] = x in
/// [0, V), p = its row, q = its draft row or nullptr): the draft is accepted by the rule below; false when it is not,
/// or when a value fails a check (then nothing after it is read either). Lets a caller process the rows one at a time.
/// Sampled rows only: in a greedy chain a draft goes on when it is its row's argmax.
inline bool chain_continues(const float* p, std::int64_t x, const float* q, std::uint64_t seed, std::int64_t position_i,
                            float lenience) {
  const float px = p[x];
  const float qx = q ? q[x] : 1.0f;
  if (!valid_probability(px) || !valid_probability(qx)) return false;
  return accepts_draft(uniform(seed, position_i, Purpose::kAccept, 0), px, q != nullptr, qx, lenience);
}

/// The chain rule for one request whose arguments are known to be valid (sizes, pointers, every id in range):
/// the batch entries call it after checking the whole batch. Outputs are written only on success.
/// A verified chain's outputs: the first n_acc drafts then `token`, the count, and (if given) the K per-draft flags.
template <class IdT>
inline void write_chain_outcome(std::int64_t num_drafts, const IdT* draft_token_ids, std::int64_t n_acc, std::int64_t token,
                                IdT* out_tokens, std::int32_t* num_accepted, std::uint8_t* accepted) {
  for (std::int64_t j = 0; j < n_acc; ++j) out_tokens[j] = draft_token_ids[j];
  out_tokens[n_acc] = static_cast<IdT>(token);
  if (accepted)
    for (std::int64_t j = 0; j < num_drafts; ++j) accepted[j] = j < n_acc ? 1 : 0;
  *num_accepted = static_cast<std::int32_t>(n_acc);
}

template <class IdT>
inline VerifyResult verify_chain_request_unchecked(std::int64_t vocab_size, std::int64_t num_drafts,
                                                   const IdT* draft_token_ids, const float* draft_probs,
                                                   const float* target_probs, std::uint64_t seed,
                                                   std::int64_t position, bool greedy, float lenience,
                                                   IdT* out_tokens, std::int32_t* num_accepted,
                                                   std::uint8_t* accepted, float* tile_masses) {
  const std::int64_t V = vocab_size;
  const bool has_q = draft_probs != nullptr;
  std::int64_t i = 0;
  std::int64_t token = -1;
  Status s = Status::kSuccess;
  for (; i < num_drafts; ++i) {
    const float* p = target_probs + i * V;
    const std::int64_t x = static_cast<std::int64_t>(draft_token_ids[i]);
    if (greedy) {
      if ((s = argmax_row(p, V, token)) != Status::kSuccess) return row_failure(s, i, false);
      if (token != x) break;
      continue;
    }
    const float px = p[x];
    const float u = uniform(seed, position + i, Purpose::kAccept, 0);
    if (!valid_probability(px)) return value_failure("target_probs", px, i);
    const float qx = has_q ? draft_probs[i * V + x] : 1.0f;
    if (has_q && !valid_probability(qx)) return value_failure("draft_probs", qx, i);
    if (!accepts_draft(u, px, has_q, qx, lenience)) {
      if (has_q)
        s = draw_residual(ResidualWeight{p, draft_probs + i * V}, p, V, seed, position + i, tile_masses, token);
      else
        s = draw_residual(RemovedWeight{p, x}, p, V, seed, position + i, tile_masses, token);
      if (s != Status::kSuccess) return row_failure(s, i, has_q);
      break;
    }
  }
  const std::int64_t n_acc = i;
  if (n_acc == num_drafts) {  // every draft accepted: the bonus token from p_K
    const float* p = target_probs + num_drafts * V;
    if (greedy)
      s = argmax_row(p, V, token);
    else
      s = draw(RowWeight{p}, V, seed, position + num_drafts, kBonusRace, tile_masses, token);
    if (s != Status::kSuccess) return row_failure(s, num_drafts, false);
  }
  write_chain_outcome(num_drafts, draft_token_ids, n_acc, token, out_tokens, num_accepted, accepted);
  return {};
}

/// The checks of the checked single-request entry: sizes, pointers, lenience, position and every draft id.
template <class IdT>
inline VerifyResult check_chain_request(std::int64_t vocab_size, std::int64_t num_drafts, const IdT* draft_token_ids,
                                        const float* target_probs, std::int64_t position, float lenience,
                                        void* out_tokens, void* num_accepted, void* tile_masses) {
  if (vocab_size <= 0)
    return bad_argument(Status::kInvalidArgument, "vocab_size", "> 0", std::nullopt, static_cast<double>(vocab_size));
  if (num_drafts < 0)
    return bad_argument(Status::kInvalidArgument, "num_drafts", ">= 0", std::nullopt, static_cast<double>(num_drafts));
  if (num_drafts > 0 && !draft_token_ids) return null_argument("draft_token_ids");
  if (!target_probs) return null_argument("target_probs");
  if (!out_tokens) return null_argument("out_tokens");
  if (!num_accepted) return null_argument("num_accepted");
  if (!tile_masses) return null_argument("tile_masses");
  if (position < 0)
    return bad_argument(Status::kInvalidArgument, "position", ">= 0", std::nullopt, static_cast<double>(position));
  if (!(lenience > 0.0f && lenience <= 1.0f))
    return bad_argument(Status::kInvalidArgument, "lenience", "a value in (0, 1]", std::nullopt,
                        static_cast<double>(lenience));
  for (std::int64_t i = 0; i < num_drafts; ++i) {
    const auto x = static_cast<std::int64_t>(draft_token_ids[i]);
    if (x < 0 || x >= vocab_size)
      return bad_argument(Status::kInvalidTokenId, "draft_token_ids", "an id in [0, vocab_size) with vocab_size",
                          static_cast<double>(vocab_size), static_cast<double>(x), -1, i);
  }
  return {};
}

}  // namespace detail

/// Verifies one request's chain: the checked single-request entry. `draft_probs` is [K, V] or nullptr (deterministic
/// drafts), `target_probs` is [K + 1, V]. Writes K_accepted + 1 tokens to `out_tokens` (capacity K + 1), the count to
/// `num_accepted` and, if given, K flags to `accepted`. `tile_masses` is scratch of num_tiles(V) floats.
/// Checks vocab_size > 0, num_drafts >= 0, the required pointers, position >= 0, lenience in (0, 1] and every draft
/// id before reading a probability; a NaN/inf/negative value read gives kInvalidProbability, a row with no mass to
/// draw or argmax from kZeroMass. On failure nothing is written except the error reports: `error_position` gets the
/// draft position whose row or id was bad (-1 if none), `error` the full VerifyResult (argument, expected, got).
template <class IdT>
inline Status verify_chain_request(std::int64_t vocab_size, std::int64_t num_drafts, const IdT* draft_token_ids,
                                   const float* draft_probs, const float* target_probs, std::uint64_t seed,
                                   std::int64_t position, bool greedy, float lenience, IdT* out_tokens,
                                   std::int32_t* num_accepted, std::uint8_t* accepted, float* tile_masses,
                                   std::int64_t* error_position = nullptr, VerifyResult* error = nullptr) {
  VerifyResult r = detail::check_chain_request(vocab_size, num_drafts, draft_token_ids, target_probs, position,
                                               lenience, out_tokens, num_accepted, tile_masses);
  if (r.ok())
    r = detail::verify_chain_request_unchecked<IdT>(vocab_size, num_drafts, draft_token_ids, draft_probs,
                                                    target_probs, seed, position, greedy, lenience, out_tokens,
                                                    num_accepted, accepted, tile_masses);
  if (!r.ok()) {
    if (error_position) *error_position = r.position;
    if (error) *error = r;
  }
  return r.status;
}

namespace detail {

/// Element counts of a batch's buffers (-1 = not given), checked by check_batch when given.
struct BatchSizes {
  std::int64_t draft_token_ids = -1;
  std::int64_t parents = -1;
  std::int64_t draft_probs = -1;
  std::int64_t target_probs = -1;
};

/// Checks a ragged batch before anything is verified, in this order: batch_size, vocab_size, the required pointers,
/// cu[0] == 0, per request K_b >= 0, positions >= 0 and has_draft_probs consistent with draft_probs, the output
/// stride, the buffer sizes given, every draft id, and (trees, `parents` given) every parent. Reads only what the
/// checks before it proved in bounds. Returns the largest K through `max_drafts`.
template <class IdT, class OffT>
inline VerifyResult check_batch(std::int64_t batch_size, std::int64_t vocab_size, const OffT* cu, const IdT* ids,
                                const IdT* parents, bool tree, const void* draft_probs,
                                const std::uint8_t* has_draft_probs, const void* target_probs,
                                const std::uint64_t* seeds, const std::int64_t* positions,
                                std::int64_t output_stride, const BatchSizes& sizes, std::int64_t& max_drafts) {
  auto count = [](std::int64_t v) { return std::optional<double>(static_cast<double>(v)); };
  if (batch_size < 0)
    return bad_argument(Status::kInvalidArgument, "batch_size", ">= 0", std::nullopt, count(batch_size));
  if (vocab_size <= 0)
    return bad_argument(Status::kInvalidArgument, "vocab_size", "> 0", std::nullopt, count(vocab_size));
  if (!cu) return null_argument("cu_num_draft_tokens");
  if (!target_probs) return null_argument("target_probs");
  if (!seeds) return null_argument("seeds");
  if (!positions) return null_argument("positions");
  if (cu[0] != 0)
    return bad_argument(Status::kInvalidArgument, "cu_num_draft_tokens", "cu[0] == 0", std::nullopt,
                        count(static_cast<std::int64_t>(cu[0])));
  max_drafts = 0;
  for (std::int64_t b = 0; b < batch_size; ++b) {
    // cu[0] == 0 and every earlier K_b >= 0, so cu[b] >= 0 and the difference cannot overflow once it is >= 0.
    const auto lo = static_cast<std::int64_t>(cu[b]), hi = static_cast<std::int64_t>(cu[b + 1]);
    if (hi < lo)
      return bad_argument(Status::kInvalidArgument, "cu_num_draft_tokens", "K_b = cu[b + 1] - cu[b] >= 0", std::nullopt,
                          static_cast<double>(hi) - static_cast<double>(lo), b);
    const std::int64_t k = hi - lo;
    max_drafts = std::max(max_drafts, k);
    if (positions[b] < 0)
      return bad_argument(Status::kInvalidArgument, "positions", ">= 0", std::nullopt, count(positions[b]), b);
    if (k > 0 && has_draft_probs && has_draft_probs[b] && !draft_probs)
      return bad_argument(Status::kInvalidArgument, "has_draft_probs", "0 when draft_probs is null", std::nullopt,
                          count(has_draft_probs[b]), b);
  }
  if (output_stride <= max_drafts)
    return bad_argument(Status::kInvalidArgument, "output_stride", ">= max_b K_b + 1",
                        static_cast<double>(max_drafts) + 1.0, count(output_stride));
  const auto n = static_cast<std::int64_t>(cu[batch_size]);
  if (sizes.draft_token_ids >= 0 && sizes.draft_token_ids != n)
    return bad_argument(Status::kInvalidArgument, "cu_num_draft_tokens", "cu[B] == draft_token_ids_size",
                        count(sizes.draft_token_ids), count(n));
  if (n > 0 && !ids) return null_argument("draft_token_ids");
  if (tree && n > 0 && !parents) return null_argument("parents");
  if (tree && sizes.parents >= 0 && sizes.parents != n)
    return bad_argument(Status::kInvalidArgument, "parents_size", "N = cu[B]", count(n), count(sizes.parents));
  // N * V and (N + B) * V, or -1 when they overflow (no buffer has that many elements).
  const std::int64_t max_rows = std::numeric_limits<std::int64_t>::max() / vocab_size;
  const std::int64_t q_elems = n <= max_rows ? n * vocab_size : -1;
  const std::int64_t p_elems = n <= max_rows - batch_size ? (n + batch_size) * vocab_size : -1;
  if (draft_probs && sizes.draft_probs >= 0 && sizes.draft_probs != q_elems)
    return bad_argument(Status::kInvalidArgument, "draft_probs_size", "N * vocab_size", count(q_elems),
                        count(sizes.draft_probs));
  if (sizes.target_probs >= 0 && sizes.target_probs != p_elems)
    return bad_argument(Status::kInvalidArgument, "target_probs_size", "(N + B) * vocab_size", count(p_elems),
                        count(sizes.target_probs));
  for (std::int64_t b = 0; b < batch_size; ++b)
    for (std::int64_t j = static_cast<std::int64_t>(cu[b]); j < static_cast<std::int64_t>(cu[b + 1]); ++j) {
      const auto x = static_cast<std::int64_t>(ids[j]);
      if (x < 0 || x >= vocab_size)
        return bad_argument(Status::kInvalidTokenId, "draft_token_ids", "an id in [0, vocab_size) with vocab_size",
                            count(vocab_size), count(x), b, j - static_cast<std::int64_t>(cu[b]));
    }
  if (tree)
    for (std::int64_t b = 0; b < batch_size; ++b)
      for (std::int64_t j = static_cast<std::int64_t>(cu[b]); j < static_cast<std::int64_t>(cu[b + 1]); ++j) {
        const std::int64_t local = j - static_cast<std::int64_t>(cu[b]);
        const auto par = static_cast<std::int64_t>(parents[j]);
        if (par < 0 || par > local)
          return bad_argument(Status::kInvalidTree, "parents", "an earlier node in [0, j] (0 is the root) with j",
                              count(local), count(par), b, local);
      }
  return {};
}

/// Checks the batch-level arguments and every draft id; returns the largest K through `max_drafts`. (The checks of
/// check_batch without buffer sizes, per-request draft kinds or parents.)
template <class IdT, class OffT>
inline VerifyResult check_ragged(std::int64_t batch_size, std::int64_t vocab_size, const OffT* cu, const IdT* ids,
                                 const void* target_probs, const std::uint64_t* seeds, const std::int64_t* positions,
                                 std::int64_t output_stride, std::int64_t& max_drafts) {
  return check_batch<IdT, OffT>(batch_size, vocab_size, cu, ids, nullptr, false, nullptr, nullptr, target_probs, seeds,
                                positions, output_stride, BatchSizes{}, max_drafts);
}

/// Request b's draft probability rows under the per-request draft kind, or nullptr (deterministic drafts).
template <class OffT>
inline const float* request_draft_probs(const float* draft_probs, const std::uint8_t* has_draft_probs,
                                        const OffT* cu, std::int64_t b, std::int64_t vocab_size) {
  if (!draft_probs || (has_draft_probs && !has_draft_probs[b])) return nullptr;
  return draft_probs + static_cast<std::int64_t>(cu[b]) * vocab_size;
}

/// Every check of a batched chain verification (check_batch, then lenience and the output pointers).
template <class IdT, class OffT>
inline VerifyResult check_chain(const ChainVerifyArgs<IdT, OffT>& a, const ChainVerifyOutputs<IdT>& out,
                                std::int64_t& max_drafts) {
  const BatchSizes sizes{a.draft_token_ids_size, -1, a.draft_probs_size, a.target_probs_size};
  VerifyResult r = check_batch<IdT, OffT>(a.batch_size, a.vocab_size, a.cu_num_draft_tokens, a.draft_token_ids,
                                          nullptr, false, a.draft_probs, a.has_draft_probs, a.target_probs, a.seeds,
                                          a.positions, out.output_stride, sizes, max_drafts);
  if (!r.ok()) return r;
  if (!(a.lenience > 0.0f && a.lenience <= 1.0f))
    return bad_argument(Status::kInvalidArgument, "lenience", "a value in (0, 1]", std::nullopt,
                        static_cast<double>(a.lenience));
  if (!out.output_token_ids) return null_argument("output_token_ids");
  if (!out.num_accepted) return null_argument("num_accepted");
  return {};
}

}  // namespace detail

/// Verifies request `b` of a batch into its own output row (used by the batch loop and parallel front ends). The
/// batch must have passed detail::check_chain (nothing is checked here).
template <class IdT, class OffT>
inline VerifyResult verify_chain_one(const ChainVerifyArgs<IdT, OffT>& a, std::int64_t b, IdT* out_row,
                                     std::int32_t* num_accepted, std::uint8_t* accepted, float* tile_masses) {
  const std::int64_t V = a.vocab_size;
  const auto start = static_cast<std::int64_t>(a.cu_num_draft_tokens[b]);
  const auto k = static_cast<std::int64_t>(a.cu_num_draft_tokens[b + 1]) - start;
  VerifyResult r = detail::verify_chain_request_unchecked<IdT>(
      V, k, a.draft_token_ids + start,
      detail::request_draft_probs(a.draft_probs, a.has_draft_probs, a.cu_num_draft_tokens, b, V),
      a.target_probs + (start + b) * V, a.seeds[b], a.positions[b], a.greedy && a.greedy[b], a.lenience, out_row,
      num_accepted, accepted ? accepted + start : nullptr, tile_masses);
  r.request = r.ok() ? -1 : b;
  return r;
}

/// Batched chain verification on the CPU (one thread). Validates everything first; on any failure returns the
/// status with the request, position and argument, and leaves every output untouched.
template <class IdT, class OffT>
inline VerifyResult verify_chain(const ChainVerifyArgs<IdT, OffT>& a, const ChainVerifyOutputs<IdT>& out) {
  std::int64_t max_k = 0;
  VerifyResult r = detail::check_chain(a, out, max_k);
  if (!r.ok()) return r;
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
