// specdec::proposers — the processed distributions of a batch of logit rows, for proposers that sample their drafts.
// Header-only, standard library and the sampling core.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "specdec/rows.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

/// Runs fn(i) for every i in [0, n) on the caller's threads (a model's pool: models::HasParallelFor) and returns when
/// all are done; empty: in order on the calling thread.
using ParallelFor = std::function<void(std::int64_t n, const std::function<void(std::int64_t)>& fn)>;

/// Row i of `logits` (float32 rows in host memory, [R, V]) goes through specdec::logits_to_probs with *row_params[i]
/// (temperature 0 gives the one-hot argmax row). Returns [R, V] float32 host rows, contiguous. Proposers that sample use
/// it for their draft rows so that draft and target rows are processed identically. Sampled rows (an exp per entry) go
/// over `parallel` when there are several. Throws specdec::error for rows elsewhere, a count of params other than R, or,
/// naming the row, NaN/+inf logits or a row whose logits are all -inf.
inline Rows process_logits(const Rows& logits, std::span<const SamplingParams* const> row_params,
                           const ParallelFor& parallel = {}) {
  const float* lp = logits.host_float32_data("process_logits: logits");
  const std::int64_t R = logits.rows(), V = logits.cols(), ld = logits.row_stride();
  if (static_cast<std::int64_t>(row_params.size()) != R)
    throw error(Status::kInvalidArgument, "process_logits: expected " + std::to_string(R) + " row params, got " +
                                              std::to_string(row_params.size()));
  Rows probs = Rows::host_float32_for_overwrite(R, V);
  float* pp = probs.mutable_host_float32_data();
  std::vector<Status> status(static_cast<std::size_t>(R), Status::kSuccess);
  const std::function<void(std::int64_t)> row = [&](std::int64_t r) {
    status[static_cast<std::size_t>(r)] =
        logits_to_probs(std::span<const float>(lp + r * ld, static_cast<std::size_t>(V)),
                        *row_params[static_cast<std::size_t>(r)], std::span<float>(pp + r * V, static_cast<std::size_t>(V)));
  };
  std::int64_t sampled = 0;
  for (std::int64_t r = 0; r < R; ++r) sampled += row_params[static_cast<std::size_t>(r)]->greedy() ? 0 : 1;
  if (sampled > 1 && parallel)
    parallel(R, row);
  else
    for (std::int64_t r = 0; r < R; ++r) row(r);
  for (std::int64_t r = 0; r < R; ++r)
    if (status[static_cast<std::size_t>(r)] != Status::kSuccess)
      throw error(status[static_cast<std::size_t>(r)], "process_logits: logits row " + std::to_string(r) + ": " +
                                                           to_string(status[static_cast<std::size_t>(r)]));
  return probs;
}

}  // namespace specdec::proposers
