// specdec — block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification
// Accelerates Speculative Decoding", ICLR 2025, Algorithm 2; vLLM's rejection_sample_method = "block"), the CPU
// reference.
//
// Token-level verification (chain.hpp) accepts draft i with probability min(1, p_i(x_i) / q_i(x_i)) and stops at the
// first rejection. Block verification decides how much of the draft block to keep jointly. It is lossless (the output
// is distributed as sampling from the target) and the paper proves its expected number of accepted drafts optimal
// among lossless verifiers that see the same per-position distributions, so never below token-level's.
//
// Shapes, arguments and outputs are those of verify_chain (ChainVerifyArgs, ChainVerifyOutputs, VerifyResult), checked
// the same way (detail::check_chain, including the per-request has_draft_probs); `lenience` must be 1 (block
// verification is lossless only).
//
// The rule for request b (seed s, position P of its first draft, K drafts x_1..x_K; row i of its target rows is
// P_i = M_b(. | x_1..x_i) for i = 0..K, row i of its draft rows Q_i = M_s(. | x_1..x_i) for i = 0..K-1):
//  - greedy rows, and requests without draft probabilities: exactly verify_chain's rule (greedy: accept while the
//    draft equals the argmax; deterministic drafts: accept x_i with probability P_{i-1}(x_i), then the residual is
//    P_{i-1} without x_i). For a deterministic draft token-level is already optimal: no lossless verifier can emit
//    x_1..x_k with a probability above prod_{j <= k} P_{j-1}(x_j), and that is exactly the probability with which
//    token-level accepts at least k drafts. So block verification keeps token-level there (same bits as verify_chain).
//  - sampled rows with draft probabilities (Algorithm 2):
//      w_0 = 1,   w_i = min(w_{i-1} P_{i-1}(x_i) / Q_{i-1}(x_i), 1)                     i = 1..K
//      r_i(x) = max(w_i P_i(x) - Q_i(x), 0),   S_i = sum_x r_i(x)                         i = 0..K-1
//      h_i = S_i / (S_i + 1 - w_i) for i < K (0 when S_i = 0 and w_i = 1),   h_K = w_K
//      eta_i = uniform(s, P, kBlockAccept, i - 1)                                          i = 1..K
//      tau = the largest i in 1..K with eta_i <= h_i, or 0 when there is none
//    emit x_1..x_tau, then: tau = K: the bonus token from P_K (race at P + K, kBonusTile/kBonus); tau < K: a token
//    from r_tau normalised (race at P + tau, kResidualTile/kResidual). r_0 = max(P_0 - Q_0, 0) is token-level's
//    residual. r_tau always has mass when tau >= 1 (eta_tau <= h_tau needs S_tau > 0); when r_0 has none (only
//    through rounding, P_0 ~= Q_0) the token is drawn from P_0, as in chain.hpp.
//
// Arithmetic, shared with the CUDA kernel (include/specdec/cuda/block_verify.cuh) through the SPECDEC_HD helpers
// below so that both compute the same bits: a = w_{i-1} * P_{i-1}(x_i), then w_i = 1 if a > 0 and a >= Q_{i-1}(x_i),
// else a / Q_{i-1}(x_i) if Q_{i-1}(x_i) > 0, else 0 (a draft Q gave probability 0 and P did not is always accepted,
// as `u * 0 < p` is in chain.hpp); r_i(x) = max(fmaf(w_i, P_i(x), -Q_i(x)), 0), one rounding (so r_0 is chain.hpp's
// p - q bit for bit); S_i is the float sum of r_i's tile masses (residual.hpp's lane order) in increasing tile order;
// h_i = S_i / (S_i + (1 - w_i)); the test is eta_i <= h_i.
//
// Evaluation order, which decides only which rows are read and so which bad values are reported (tau itself is a
// function of the fixed numbers eta_i and h_i): every P_{i-1}(x_i), Q_{i-1}(x_i) for i = 1..K (a NaN, infinite or
// negative value is kInvalidProbability at draft position i - 1); then i = K, K-1, ..., 1 until eta_i <= h_i, where
// h_i for i < K reads rows i of the target and draft rows in full (a bad value, or an infinite S_i, is
// kInvalidProbability at position i); then the draw, which reads row tau (kInvalidProbability, or kZeroMass when
// neither r_0 nor P_0 has mass) or the bonus row K. When eta_K <= w_K no full row but the bonus row is read.
//
// Why eta_i is keyed by the block's first position P (with index i - 1) rather than by P + i - 1: after a step that
// keeps tau drafts the next block starts at P + tau + 1, and this block's eta_j for j > tau are no longer uniform
// given what was emitted (each was above h_j). Keyed by P they are never read again; keyed by position the next step
// would reuse them and lose losslessness.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/config.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/residual.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec {

/// How a request's chain of drafts is verified.
enum class VerifyMethod : std::uint8_t {
  kToken = 0,  ///< token by token (sampling/chain.hpp; Leviathan et al. 2023, Chen et al. 2023)
  kBlock = 1,  ///< the draft block jointly (this file)
};

inline const char* to_string(VerifyMethod m) {
  switch (m) {
    case VerifyMethod::kToken: return "token";
    case VerifyMethod::kBlock: return "block";
  }
  return "unknown";
}

namespace detail {

/// A quiet NaN (the poison of a weight whose input value is not a probability), on host and device.
SPECDEC_INLINE float block_nan() {
#if defined(SPECDEC_ON_DEVICE)
  return __int_as_float(0x7fc00000);
#else
  return __builtin_nanf("");
#endif
}

/// w_i from w_{i-1} and the drafted token's target and draft probabilities (both valid).
SPECDEC_INLINE float block_weight_step(float w, float px, float qx) {
  const float a = w * px;
  if (a > 0.0f && a >= qx) return 1.0f;
  return qx > 0.0f ? a / qx : 0.0f;
}

/// r_i(x) = max(w P(x) - Q(x), 0) with one rounding; NaN where P(x) or Q(x) is not a valid probability.
SPECDEC_INLINE float block_residual(float w, float p, float q) {
  const float d = fma_rn(w, p, -q);
  const float r = d > 0.0f ? d : 0.0f;
  return valid_probability(p) && valid_probability(q) ? r : block_nan();
}

/// h_i (i < K) from S_i and w_i: S / (S + (1 - w)), 0 when the denominator is 0.
SPECDEC_INLINE float block_stop_probability(float mass, float w) {
  const float den = mass + (1.0f - w);
  return den > 0.0f ? mass / den : 0.0f;
}

/// eta_i, i in 1..K, of a block whose first draft is at `position`.
SPECDEC_INLINE float block_eta(std::uint64_t seed, std::int64_t position, std::int64_t i) {
  return uniform(seed, position, Purpose::kBlockAccept, static_cast<std::uint32_t>(i - 1));
}

/// r_i as a weight of residual.hpp (p, q: rows i of the target and draft rows; w: w_i).
struct BlockResidualWeight {
  const float* p;
  const float* q;
  float w;
  float operator()(std::int64_t x) const { return block_residual(w, p[x], q[x]); }
#if defined(SPECDEC_LOGITS_AVX512)
  /// Tokens [x, x + 16) at once (race_weights.hpp): the fused w P - Q rounded once, as fma_rn.
  SPECDEC_RACE_AVX512 __m512 lanes16(std::int64_t x) const {
    const __m512 a = _mm512_loadu_ps(p + x), b = _mm512_loadu_ps(q + x);
    return simd::residual16(_mm512_fmsub_ps(_mm512_set1_ps(w), a, b), a, b);
  }
#endif
};

/// w_i of a request whose drafted tokens' probabilities are known to be valid.
template <class IdT>
inline float block_weight(std::int64_t i, const IdT* draft_token_ids, const float* draft_probs,
                          const float* target_probs, std::int64_t vocab_size) {
  float w = 1.0f;
  for (std::int64_t j = 0; j < i; ++j) {
    const auto x = static_cast<std::int64_t>(draft_token_ids[j]);
    w = block_weight_step(w, target_probs[j * vocab_size + x], draft_probs[j * vocab_size + x]);
  }
  return w;
}

/// The block rule for one request whose arguments are known to be valid (sizes, pointers, every id in range): the
/// batch entries call it after checking the whole batch. Outputs are written only on success.
template <class IdT>
inline VerifyResult verify_block_request_unchecked(std::int64_t vocab_size, std::int64_t num_drafts,
                                                   const IdT* draft_token_ids, const float* draft_probs,
                                                   const float* target_probs, std::uint64_t seed,
                                                   std::int64_t position, bool greedy, IdT* out_tokens,
                                                   std::int32_t* num_accepted, std::uint8_t* accepted,
                                                   float* tile_masses) {
  if (greedy || !draft_probs)
    return verify_chain_request_unchecked<IdT>(vocab_size, num_drafts, draft_token_ids, draft_probs, target_probs,
                                               seed, position, greedy, 1.0f, out_tokens, num_accepted, accepted,
                                               tile_masses);
  const std::int64_t V = vocab_size, K = num_drafts;
  const float* p = target_probs;
  const float* q = draft_probs;
  float w = 1.0f;
  for (std::int64_t j = 0; j < K; ++j) {
    const auto x = static_cast<std::int64_t>(draft_token_ids[j]);
    const float px = p[j * V + x], qx = q[j * V + x];
    if (!valid_probability(px)) return value_failure("target_probs", px, j);
    if (!valid_probability(qx)) return value_failure("draft_probs", qx, j);
    w = block_weight_step(w, px, qx);
  }
  std::int64_t tau = 0;
  if (K > 0 && block_eta(seed, position, K) <= w) {
    tau = K;
  } else {
    const std::int64_t tiles = num_tiles(V);
    for (std::int64_t i = K - 1; i >= 1; --i) {
      const BlockResidualWeight r{p + i * V, q + i * V, block_weight(i, draft_token_ids, q, p, V)};
      float mass = 0.0f;
      race_tile_masses(r, V, tile_masses);
      for (std::int64_t t = 0; t < tiles; ++t) {
        const float m = tile_masses[t];
        if (!valid_probability(m)) return row_failure(Status::kInvalidProbability, i, true);
        mass += m;
      }
      if (!valid_probability(mass)) return row_failure(Status::kInvalidProbability, i, true);
      if (block_eta(seed, position, i) <= block_stop_probability(mass, r.w)) {
        tau = i;
        break;
      }
    }
  }
  std::int64_t token = -1;
  Status s;
  if (tau == K)
    s = draw(RowWeight{p + K * V}, V, seed, position + K, kBonusRace, tile_masses, token);
  else
    s = draw_residual(BlockResidualWeight{p + tau * V, q + tau * V, block_weight(tau, draft_token_ids, q, p, V)},
                      p + tau * V, V, seed, position + tau, tile_masses, token);
  if (s != Status::kSuccess) return row_failure(s, tau, tau < K);
  for (std::int64_t j = 0; j < tau; ++j) out_tokens[j] = draft_token_ids[j];
  out_tokens[tau] = static_cast<IdT>(token);
  if (accepted)
    for (std::int64_t j = 0; j < K; ++j) accepted[j] = j < tau ? 1 : 0;
  *num_accepted = static_cast<std::int32_t>(tau);
  return {};
}

/// Block verification accepts only lenience 1.
inline VerifyResult check_block_lenience(float lenience) {
  if (lenience == 1.0f) return {};
  return bad_argument(Status::kInvalidArgument, "lenience", "1 (block verification is lossless only)", std::nullopt,
                      static_cast<double>(lenience));
}

}  // namespace detail

/// The expected number of accepted drafts given the drafted block, under block verification (this file's rule, from
/// the same float w_i and h_i the verifier computes: P(tau = i) = h_i prod_{j > i} (1 - h_j)) and under token-level
/// verification (chain.hpp, lenience 1: sum_k prod_{j <= k} min(1, P_{j-1}(x_j) / Q_{j-1}(x_j))).
struct ExpectedAccepted {
  double token = 0.0;
  double block = 0.0;
};

/// ExpectedAccepted for one request with draft probabilities (arrays as verify_block_request's). Averaged over steps
/// whose drafts were drawn from Q, each figure estimates its method's mean number of accepted drafts without the noise
/// of the accept draws, and both come from the same drafts: a paired comparison of the two methods on real drafts.
/// Reads every row 0..K-1 in full; kInvalidProbability on a value that is not a probability, kInvalidArgument on a
/// size or pointer out of its domain, kInvalidTokenId on an id out of range.
template <class IdT>
inline Status expected_accepted_drafts(std::int64_t vocab_size, std::int64_t num_drafts, const IdT* draft_token_ids,
                                       const float* draft_probs, const float* target_probs, ExpectedAccepted& out) {
  const std::int64_t V = vocab_size, K = num_drafts;
  if (V <= 0 || K < 0 || (K > 0 && (!draft_token_ids || !draft_probs || !target_probs))) return Status::kInvalidArgument;
  std::vector<float> w(static_cast<std::size_t>(K + 1), 1.0f);
  std::vector<double> h(static_cast<std::size_t>(K + 1), 0.0);
  double token = 0.0, prefix = 1.0;
  for (std::int64_t j = 0; j < K; ++j) {
    const auto x = static_cast<std::int64_t>(draft_token_ids[j]);
    if (x < 0 || x >= V) return Status::kInvalidTokenId;
    const float px = target_probs[j * V + x], qx = draft_probs[j * V + x];
    if (!valid_probability(px) || !valid_probability(qx)) return Status::kInvalidProbability;
    w[static_cast<std::size_t>(j + 1)] = detail::block_weight_step(w[static_cast<std::size_t>(j)], px, qx);
    prefix *= qx > 0.0f ? std::min(1.0, static_cast<double>(px) / qx) : (px > 0.0f ? 1.0 : 0.0);
    token += prefix;
  }
  const std::int64_t tiles = num_tiles(V);
  std::vector<float> masses(static_cast<std::size_t>(tiles));
  for (std::int64_t i = 1; i < K; ++i) {
    const detail::BlockResidualWeight r{target_probs + i * V, draft_probs + i * V, w[static_cast<std::size_t>(i)]};
    float mass = 0.0f;
    detail::race_tile_masses(r, V, masses.data());
    for (std::int64_t t = 0; t < tiles; ++t) mass += masses[static_cast<std::size_t>(t)];
    if (!valid_probability(mass)) return Status::kInvalidProbability;
    h[static_cast<std::size_t>(i)] = detail::block_stop_probability(mass, r.w);
  }
  if (K > 0) h[static_cast<std::size_t>(K)] = w[static_cast<std::size_t>(K)];
  double block = 0.0, above = 1.0;  // above = prod_{j > i} (1 - h_j)
  for (std::int64_t i = K; i >= 1; --i) {
    block += static_cast<double>(i) * h[static_cast<std::size_t>(i)] * above;
    above *= 1.0 - h[static_cast<std::size_t>(i)];
  }
  out.token = token;
  out.block = block;
  return Status::kSuccess;
}

/// Verifies one request's chain of drafts by block verification: the checked single-request entry, with the
/// arguments of verify_chain_request less `lenience`. `draft_probs` is [K, V] or nullptr (deterministic drafts:
/// token-level, see above), `target_probs` is [K + 1, V]. Writes K_accepted + 1 tokens to `out_tokens` (capacity
/// K + 1), the count to `num_accepted` and, if given, K flags to `accepted`; `tile_masses` is scratch of
/// num_tiles(V) floats. Checks what verify_chain_request checks before reading a probability; on failure nothing
/// is written except `error_position` (the draft position whose row or id was bad, or -1) and `error`.
template <class IdT>
inline Status verify_block_request(std::int64_t vocab_size, std::int64_t num_drafts, const IdT* draft_token_ids,
                                   const float* draft_probs, const float* target_probs, std::uint64_t seed,
                                   std::int64_t position, bool greedy, IdT* out_tokens, std::int32_t* num_accepted,
                                   std::uint8_t* accepted, float* tile_masses, std::int64_t* error_position = nullptr,
                                   VerifyResult* error = nullptr) {
  VerifyResult r = detail::check_chain_request(vocab_size, num_drafts, draft_token_ids, target_probs, position, 1.0f,
                                               out_tokens, num_accepted, tile_masses);
  if (r.ok())
    r = detail::verify_block_request_unchecked<IdT>(vocab_size, num_drafts, draft_token_ids, draft_probs,
                                                    target_probs, seed, position, greedy, out_tokens, num_accepted,
                                                    accepted, tile_masses);
  if (!r.ok()) {
    if (error_position) *error_position = r.position;
    if (error) *error = r;
  }
  return r.status;
}

/// Verifies request `b` of a batch by block verification into its own output row. The batch must have passed
/// detail::check_chain and detail::check_block_lenience (nothing is checked here).
template <class IdT, class OffT>
inline VerifyResult verify_block_one(const ChainVerifyArgs<IdT, OffT>& a, std::int64_t b, IdT* out_row,
                                     std::int32_t* num_accepted, std::uint8_t* accepted, float* tile_masses) {
  const std::int64_t V = a.vocab_size;
  const auto start = static_cast<std::int64_t>(a.cu_num_draft_tokens[b]);
  const auto k = static_cast<std::int64_t>(a.cu_num_draft_tokens[b + 1]) - start;
  VerifyResult r = detail::verify_block_request_unchecked<IdT>(
      V, k, a.draft_token_ids + start,
      detail::request_draft_probs(a.draft_probs, a.has_draft_probs, a.cu_num_draft_tokens, b, V),
      a.target_probs + (start + b) * V, a.seeds[b], a.positions[b], a.greedy && a.greedy[b], out_row, num_accepted,
      accepted ? accepted + start : nullptr, tile_masses);
  r.request = r.ok() ? -1 : b;
  return r;
}

/// Batched block verification on the CPU (one thread), on verify_chain's arguments (lenience must be 1). Validates
/// everything first; on any failure returns the status with the request, position and argument, and leaves every
/// output untouched.
template <class IdT, class OffT>
inline VerifyResult verify_block(const ChainVerifyArgs<IdT, OffT>& a, const ChainVerifyOutputs<IdT>& out) {
  std::int64_t max_k = 0;
  VerifyResult r = detail::check_chain(a, out, max_k);
  if (!r.ok()) return r;
  if (r = detail::check_block_lenience(a.lenience); !r.ok()) return r;
  const std::int64_t B = a.batch_size, stride = out.output_stride;
  const std::int64_t N = static_cast<std::int64_t>(a.cu_num_draft_tokens[B]);
  std::vector<IdT> tokens(static_cast<std::size_t>(B * stride), static_cast<IdT>(-1));
  std::vector<std::int32_t> counts(static_cast<std::size_t>(B));
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(N));
  std::vector<float> tile_masses(static_cast<std::size_t>(num_tiles(a.vocab_size)));
  for (std::int64_t b = 0; b < B; ++b) {
    r = verify_block_one(a, b, tokens.data() + b * stride, &counts[b], flags.data(), tile_masses.data());
    if (!r.ok()) return r;
  }
  std::copy(tokens.begin(), tokens.end(), out.output_token_ids);
  std::copy(counts.begin(), counts.end(), out.num_accepted);
  if (out.accepted) std::copy(flags.begin(), flags.end(), out.accepted);
  return {};
}

}  // namespace specdec
