// specdec — CUDA entry points of the tensor front, called by rejection_sample / tree_rejection_sample when the
// tensors are on a CUDA device. Declared only when the libtorch found has CUDA (SPECDEC_TORCH_HAS_CUDA, set on
// specdec_torch by src/torch/cuda/CMakeLists.txt). Same tensor signatures as the CPU front; the caller validates
// dtypes and shapes first (these functions re-check what they rely on). Each call runs on the current CUDA stream,
// allocates its outputs and workspace with the caching allocator, and synchronises once to read the per-request
// statuses and raise c10::Error naming the first failed request; verify_logits_cuda never synchronises.
#pragma once

#if defined(SPECDEC_TORCH_HAS_CUDA)

#include <optional>

#include "specdec/torch/rejection_sample.hpp"
#include "specdec/torch/verify_logits_detail.hpp"

namespace specdec::torch {

RejectionSampleResult rejection_sample_cuda(const at::Tensor& draft_token_ids, const at::Tensor& cu_num_draft_tokens,
                                            const std::optional<at::Tensor>& draft_probs,
                                            const at::Tensor& target_probs, const at::Tensor& seeds,
                                            const at::Tensor& positions, const std::optional<at::Tensor>& greedy,
                                            const RejectionSampleOptions& options,
                                            const std::optional<at::Tensor>& has_draft_probs);

TreeRejectionSampleResult tree_rejection_sample_cuda(const at::Tensor& draft_token_ids, const at::Tensor& parents,
                                                     const at::Tensor& cu_num_draft_tokens,
                                                     const std::optional<at::Tensor>& draft_probs,
                                                     const at::Tensor& target_probs, const at::Tensor& seeds,
                                                     const at::Tensor& positions,
                                                     const std::optional<at::Tensor>& greedy,
                                                     const RejectionSampleOptions& options,
                                                     const std::optional<at::Tensor>& has_draft_probs);

/// verify_logits on CUDA tensors (shapes already checked): no host synchronisation, statuses left on the device.
VerifyLogitsResult verify_logits_cuda(const VerifyLogitsArgs& args, const detail::Shapes& shapes);
std::int64_t verify_logits_workspace_bytes_cuda(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                                std::int64_t vocab_size, bool tree, bool draft_rows);

}  // namespace specdec::torch

#endif  // SPECDEC_TORCH_HAS_CUDA
