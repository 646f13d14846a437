// specdec::proposers — the processed distributions of a batch of logit rows, for proposers that sample their drafts.
#pragma once

#include <ATen/core/Tensor.h>

#include <span>

#include "specdec/sampling/params.hpp"

namespace specdec::proposers {

/// Row i of `logits` ([R, V] float32) goes through specdec::logits_to_probs with *row_params[i] (temperature 0 gives the
/// one-hot argmax row). Returns [R, V] float32 on the CPU. Proposers that sample use it for their draft rows so that
/// draft and target rows are processed identically. Throws specdec::error naming the row for NaN/+inf logits or a row
/// whose logits are all -inf. Defined in specdec::proposers.
at::Tensor process_logits(const at::Tensor& logits, std::span<const SamplingParams* const> row_params);

}  // namespace specdec::proposers
