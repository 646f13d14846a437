// specdec — CUDA entry points of the tensor front, called by rejection_sample / tree_rejection_sample when the
// tensors are on a CUDA device. Declared only when the libtorch found has CUDA (SPECDEC_TORCH_HAS_CUDA, set on
// specdec_torch by src/torch/cuda/CMakeLists.txt). Same tensor signatures as the CPU front; the caller validates
// dtypes and shapes first (these functions re-check what they rely on). Each call runs on the current CUDA stream,
// allocates its outputs and workspace with the caching allocator, and synchronises once to read the per-request
// statuses and raise c10::Error naming the first failed request.
#pragma once

#if defined(SPECDEC_TORCH_HAS_CUDA)

#include <optional>

#include "specdec/torch/rejection_sample.hpp"

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

}  // namespace specdec::torch

#endif  // SPECDEC_TORCH_HAS_CUDA
