// specdec — internals of verify_logits shared by its CPU path (src/torch/verify_logits.cpp) and its CUDA path
// (src/torch/cuda/verify_logits_cuda.cu): the host checks of the tensors, and the per-request status rule both paths
// apply (specdec/verify/status_rule.hpp, the host entry's too).
#pragma once

#include <cstdint>

#include "specdec/sampling/config.hpp"
#include "specdec/sampling/status.hpp"
#include "specdec/torch/verify_logits.hpp"
#include "specdec/verify/status_rule.hpp"

namespace specdec::torch::detail {

/// Sizes and facts known on the host.
struct Shapes {
  std::int64_t B = 0, N = 0, V = 0;
  bool tree = false;
  bool draft_rows = false;  ///< float32 draft rows are made (draft logits processed, or draft probs converted)
};

/// Checks shapes, dtypes, devices and the workspace (c10::Error naming the argument otherwise).
Shapes check_verify_logits(const VerifyLogitsArgs& a);

// The per-request status rule (specdec/verify/status_rule.hpp), shared with the host entry.
using specdec::detail::blame;
using specdec::detail::first_failed_row;
using specdec::detail::request_range;
using specdec::detail::RequestRange;

}  // namespace specdec::torch::detail
