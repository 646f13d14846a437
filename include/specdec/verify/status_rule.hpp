// specdec — the per-request status rule every verification entry applies (the host entry, the torch entry on CPU and
// the CUDA fold kernel run this same code; SPECDEC_HD):
//   1. the request's range and scalars: cu[0] == 0, 0 <= cu[b] <= cu[b + 1] <= N, cu[B] == N, positions[b] >= 0,
//      K_b + 1 <= the output width -> kInvalidArgument (the verifiers' own check);
//   2. flagged in has_draft_probs with drafts while there are no draft probabilities -> kInvalidArgument;
//   3. the first failed row of its logits processing: target rows cu[b] + b .. cu[b + 1] + b, then its draft rows;
//   4. the verifier's status.
// A request that fails at 1-3 gets tokens -1, count 0, flags 0.
#pragma once

#include <cstdint>

#include "specdec/sampling/config.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::detail {

struct RequestRange {
  Status status;
  std::int64_t start;
  std::int64_t num_drafts;
};

/// Step 1 of the rule.
template <class IdT>
SPECDEC_HD RequestRange request_range(const IdT* cu, std::int64_t b, std::int64_t batch_size,
                                      std::int64_t num_draft_tokens, std::int64_t output_stride,
                                      const std::int64_t* positions) {
  const auto start = static_cast<std::int64_t>(cu[b]);
  const auto end = static_cast<std::int64_t>(cu[b + 1]);
  if (start < 0 || end < start || end > num_draft_tokens || (b == 0 && start != 0) ||
      (b == batch_size - 1 && end != num_draft_tokens) || positions[b] < 0 || end - start + 1 > output_stride)
    return RequestRange{Status::kInvalidArgument, start, -1};
  return RequestRange{Status::kSuccess, start, end - start};
}

/// Step 3 of the rule (range already valid): statuses as stored (Status or its int32 value).
template <class S>
SPECDEC_HD Status first_failed_row(const S* target_rows, const S* draft_rows, const RequestRange& r, std::int64_t b) {
  for (std::int64_t i = 0; i <= r.num_drafts; ++i) {
    const auto s = static_cast<Status>(target_rows[r.start + b + i]);
    if (s != Status::kSuccess) return s;
  }
  if (draft_rows)
    for (std::int64_t i = 0; i < r.num_drafts; ++i) {
      const auto s = static_cast<Status>(draft_rows[r.start + i]);
      if (s != Status::kSuccess) return s;
    }
  return Status::kSuccess;
}

/// What a request's status says about the arguments, in words.
inline const char* blame(Status s) {
  switch (s) {
    case Status::kInvalidArgument:
      return "cu_num_draft_tokens/positions/max_num_draft_tokens/sampling parameters/has_draft_probs: expected cu[0] "
             "== 0, 0 <= K_b = cu[b + 1] - cu[b] <= max_num_draft_tokens, cu[B] == N, positions >= 0, temperature >= "
             "0, top_k >= 0, top_p in (0, 1], min_p in [0, 1] and has_draft_probs 0 where there are no draft "
             "probabilities, got a request that breaks one of them";
    case Status::kInvalidTokenId: return "draft_token_ids: expected ids in [0, V), got an id out of range";
    case Status::kInvalidTree: return "parents: expected parents[j] in [0, j] (an earlier node), got one outside";
    case Status::kInvalidProbability:
      return "target_logits/draft_logits/draft_probs: expected finite logits (-inf allowed) and finite non-negative "
             "probabilities, got a NaN or infinite value";
    case Status::kZeroMass:
      return "target_logits/draft_logits/draft_probs: expected a row with positive mass, got one whose logits are all "
             "-inf (or probabilities all zero)";
    default: return to_string(s);
  }
}

}  // namespace specdec::detail
