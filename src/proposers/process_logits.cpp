// proposers::process_logits (proposers/process_logits.hpp): float32 logits rows to the distributions each row's
// request samples from, on the host, through the core's logits_to_probs. The draft-model proposer draws its drafts from
// these rows; the decoder uses it for a step it verifies on the CPU core.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <string>
#include <vector>

#include "specdec/proposers/process_logits.hpp"
#include "specdec/sampling/logits.hpp"

namespace specdec {

namespace proposers {

at::Tensor process_logits(const at::Tensor& logits, std::span<const SamplingParams* const> row_params) {
  if (!logits.defined() || logits.dim() != 2)
    throw error(Status::kInvalidArgument, "process_logits: logits: expected a 2-D tensor [R, V]");
  if (logits.scalar_type() != at::kFloat)
    throw error(Status::kInvalidArgument, "process_logits: logits: expected float32");
  const std::int64_t R = logits.size(0), V = logits.size(1);
  if (static_cast<std::int64_t>(row_params.size()) != R)
    throw error(Status::kInvalidArgument, "process_logits: expected " + std::to_string(R) + " row params, got " +
                                              std::to_string(row_params.size()));
  const at::Tensor l = logits.is_cpu() ? logits.contiguous() : logits.cpu().contiguous();
  at::Tensor probs = at::empty({R, V}, l.options());
  const float* lp = l.data_ptr<float>();
  float* pp = probs.data_ptr<float>();
  std::vector<Status> status(static_cast<std::size_t>(R), Status::kSuccess);
  auto row = [&](std::int64_t r) {
    status[static_cast<std::size_t>(r)] =
        logits_to_probs(std::span<const float>(lp + r * V, static_cast<std::size_t>(V)), *row_params[static_cast<std::size_t>(r)],
                        std::span<float>(pp + r * V, static_cast<std::size_t>(V)));
  };
  // Greedy rows are a single scan; sampled rows cost an exp per entry: spread them over threads when there are several.
  std::int64_t sampled = 0;
  for (std::int64_t r = 0; r < R; ++r) sampled += row_params[static_cast<std::size_t>(r)]->greedy() ? 0 : 1;
  if (sampled > 1)
    at::parallel_for(0, R, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) row(r);
    });
  else
    for (std::int64_t r = 0; r < R; ++r) row(r);
  for (std::int64_t r = 0; r < R; ++r)
    if (status[static_cast<std::size_t>(r)] != Status::kSuccess)
      throw error(status[static_cast<std::size_t>(r)], "process_logits: logits row " + std::to_string(r) + ": " +
                                                           to_string(status[static_cast<std::size_t>(r)]));
  return probs;
}

}  // namespace proposers

}  // namespace specdec
