// specdec — chain, tree and block verification on the GPU, host-only declarations: a C++ compiler calls the kernels
// without nvcc. The kernels are compiled once into specdec::cuda (kernels/verify_*.cu and kernels/block_verify.cu
// from include/specdec/cuda/{chain,tree,block}_verify.cuh), with the flags they need kept private there.
//
// Usage (no hidden allocation, no host synchronisation, capturable in a CUDA graph):
//   specdec::cuda::ChainVerifyParams<float, std::int32_t> a{...};       // device pointers, host sizes
//   if (auto r = chain_verify_check_arguments(a); !r.ok()) ...         // names the argument (specdec::to_string)
//   std::size_t bytes = chain_verify_workspace_size(a.batch_size, a.num_draft_tokens, a.vocab_size);
//   ... allocate once (16-byte aligned, e.g. cudaMallocAsync), reuse for every step of at most that size ...
//   Status s = chain_verify(a, workspace, bytes, stream);              // kSuccess once launched
//   ... a.status[b] (device) holds each request's Status once the stream reaches it ...
// tree_verify and block_verify take the same steps with TreeVerifyParams / BlockVerifyParams.
//
// Checked on the host before any launch (the *_check_arguments functions, which read no device memory): batch_size
// in [0, 65535] (chain, block; tree: [0, 2^31)), vocab_size in [1, 2^31), num_draft_tokens in [0, 2^31),
// output_stride >= 1, the optional element counts (*_size, -1 = not given) against N, B and V, lenience in (0, 1]
// (chain), and the required pointers once the batch is not empty (the draft ids and, for trees, the parents once
// there are drafts). The launchers return kInvalidArgument for these, kWorkspaceTooSmall for a null, short or
// misaligned workspace, kCudaError when the runtime cannot name the device's multiprocessors (chain, block) or a launch
// fails. Everything that needs device memory (cu, ids, parents, probabilities, positions, the per-request draft kinds)
// is checked per request on the device and reported in status[b]; the kernels follow sampling/chain.hpp,
// sampling/tree.hpp and sampling/block.hpp bit for bit.
//
// Instantiated in specdec::cuda for ProbT in {float, __half, __nv_bfloat16} and IdT in {std::int32_t, std::int64_t};
// other types do not link. Code compiled by nvcc may include the .cuh headers instead (specdec::cuda_headers); the
// declarations below are theirs, and the instantiations above are still taken from specdec::cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::cuda {

// ---------------------------------------------------------------------------------------------------------------
// Parameters. Pointers are device pointers; sizes are host values. ProbT is float, __half or __nv_bfloat16; IdT is
// std::int32_t or std::int64_t. The shapes are those of sampling/chain.hpp (N drafts in all, B requests, V tokens).

/// Inputs and outputs of a batched chain verification (sampling/chain.hpp).
template <class ProbT, class IdT>
struct ChainVerifyParams {
  std::int64_t batch_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t num_draft_tokens = 0;          ///< N, the rows of draft_probs; the kernels check cu against it
                                              ///< (every cu[b + 1] <= N, and cu[B] == N)
  const IdT* cu_num_draft_tokens = nullptr;   ///< [B + 1]
  const IdT* draft_token_ids = nullptr;       ///< [N]
  const ProbT* draft_probs = nullptr;         ///< [N, V], or nullptr for deterministic drafts
  const ProbT* target_probs = nullptr;        ///< [N + B, V]
  const std::uint64_t* seeds = nullptr;       ///< [B]
  const std::int64_t* positions = nullptr;    ///< [B]
  const std::uint8_t* greedy = nullptr;       ///< [B] 1 = temperature 0, or nullptr (every row sampled)
  float lenience = 1.0f;                      ///< in (0, 1]
  IdT* output_token_ids = nullptr;            ///< [B, output_stride]
  std::int64_t output_stride = 0;             ///< >= max_b K_b + 1 (checked per request on the device)
  std::int32_t* num_accepted = nullptr;       ///< [B]
  std::uint8_t* accepted = nullptr;           ///< [N], or nullptr
  Status* status = nullptr;                   ///< [B] each request's status
  const std::uint8_t* has_draft_probs = nullptr;  ///< [B] per-request draft kind (sampling/chain.hpp), or nullptr
  // Element counts of the caller's buffers, checked on the host when given (-1 = not given).
  std::int64_t draft_token_ids_size = -1;     ///< N
  std::int64_t draft_probs_size = -1;         ///< N * V (ignored when draft_probs is null)
  std::int64_t target_probs_size = -1;        ///< (N + B) * V
};

/// Inputs and outputs of a batched tree verification (sampling/tree.hpp).
template <class ProbT, class IdT>
struct TreeVerifyParams {
  std::int64_t batch_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t num_draft_tokens = 0;          ///< N
  const IdT* cu_num_draft_tokens = nullptr;   ///< [B + 1]
  const IdT* draft_token_ids = nullptr;       ///< [N]
  const IdT* parents = nullptr;               ///< [N] parent node of draft j (node j + 1), in [0, j]
  const ProbT* draft_probs = nullptr;         ///< [N, V], or nullptr
  const ProbT* target_probs = nullptr;        ///< [N + B, V]
  const std::uint64_t* seeds = nullptr;       ///< [B]
  const std::int64_t* positions = nullptr;    ///< [B]
  const std::uint8_t* greedy = nullptr;       ///< [B], or nullptr
  IdT* output_token_ids = nullptr;            ///< [B, output_stride]
  std::int64_t output_stride = 0;             ///< >= max_b K_b + 1
  std::int32_t* num_accepted = nullptr;       ///< [B]
  IdT* accepted_nodes = nullptr;              ///< [B, output_stride], or nullptr
  Status* status = nullptr;                   ///< [B]
  const std::uint8_t* has_draft_probs = nullptr;  ///< [B] per-request draft kind (sampling/chain.hpp), or nullptr
  // Element counts of the caller's buffers, checked on the host when given (-1 = not given).
  std::int64_t draft_token_ids_size = -1;     ///< N
  std::int64_t parents_size = -1;             ///< N
  std::int64_t draft_probs_size = -1;         ///< N * V (ignored when draft_probs is null)
  std::int64_t target_probs_size = -1;        ///< (N + B) * V
};

/// Inputs and outputs of a batched block verification (sampling/block.hpp; no lenience: block verification is
/// lossless only).
template <class ProbT, class IdT>
struct BlockVerifyParams {
  std::int64_t batch_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t num_draft_tokens = 0;          ///< N, the rows of draft_probs; the kernels check cu against it
  const IdT* cu_num_draft_tokens = nullptr;   ///< [B + 1]
  const IdT* draft_token_ids = nullptr;       ///< [N]
  const ProbT* draft_probs = nullptr;         ///< [N, V], or nullptr for deterministic drafts
  const ProbT* target_probs = nullptr;        ///< [N + B, V]
  const std::uint8_t* has_draft_probs = nullptr;  ///< [B] per-request draft kind (sampling/chain.hpp), or nullptr
  const std::uint64_t* seeds = nullptr;       ///< [B]
  const std::int64_t* positions = nullptr;    ///< [B]
  const std::uint8_t* greedy = nullptr;       ///< [B] 1 = temperature 0, or nullptr (every row sampled)
  IdT* output_token_ids = nullptr;            ///< [B, output_stride]
  std::int64_t output_stride = 0;             ///< >= max_b K_b + 1 (checked per request on the device)
  std::int32_t* num_accepted = nullptr;       ///< [B]
  std::uint8_t* accepted = nullptr;           ///< [N], or nullptr
  Status* status = nullptr;                   ///< [B] each request's status
  // Element counts of the caller's buffers, checked on the host when given (-1 = not given).
  std::int64_t draft_token_ids_size = -1;     ///< N
  std::int64_t draft_probs_size = -1;         ///< N * V (ignored when draft_probs is null)
  std::int64_t target_probs_size = -1;        ///< (N + B) * V
};

// ---------------------------------------------------------------------------------------------------------------
// Workspace sizes: bytes for `batch_size` requests, `num_draft_tokens` drafts in all and vocabulary `vocab_size`
// (arguments that pass the checks below): a multiple of 256, non-decreasing in each argument, so a workspace of that
// size serves every smaller step (it must be 16-byte aligned). Pure arithmetic, no device access.

std::size_t chain_verify_workspace_size(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                        std::int64_t vocab_size);
std::size_t tree_verify_workspace_size(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                       std::int64_t vocab_size);
std::size_t block_verify_workspace_size(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                        std::int64_t vocab_size);

// ---------------------------------------------------------------------------------------------------------------
// Host-side argument checks (no device access). The result names the argument, what was expected and what was
// received (specdec::to_string); the *_can_implement forms return its status alone.

template <class ProbT, class IdT>
VerifyResult chain_verify_check_arguments(const ChainVerifyParams<ProbT, IdT>& a);
template <class ProbT, class IdT>
VerifyResult tree_verify_check_arguments(const TreeVerifyParams<ProbT, IdT>& a);
template <class ProbT, class IdT>
VerifyResult block_verify_check_arguments(const BlockVerifyParams<ProbT, IdT>& a);

template <class ProbT, class IdT>
Status chain_verify_can_implement(const ChainVerifyParams<ProbT, IdT>& a) {
  return chain_verify_check_arguments(a).status;
}
template <class ProbT, class IdT>
Status tree_verify_can_implement(const TreeVerifyParams<ProbT, IdT>& a) {
  return tree_verify_check_arguments(a).status;
}
template <class ProbT, class IdT>
Status block_verify_can_implement(const BlockVerifyParams<ProbT, IdT>& a) {
  return block_verify_check_arguments(a).status;
}

// ---------------------------------------------------------------------------------------------------------------
// Launchers: check the arguments, then launch on `stream` (chain, block: two kernels; tree: one). kSuccess once
// launched (per-request results land in a.status); an empty batch launches nothing. Nothing is allocated, nothing
// synchronises with the host.

template <class ProbT, class IdT>
Status chain_verify(const ChainVerifyParams<ProbT, IdT>& a, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream);
template <class ProbT, class IdT>
Status tree_verify(const TreeVerifyParams<ProbT, IdT>& a, void* workspace, std::size_t workspace_bytes,
                   cudaStream_t stream);
template <class ProbT, class IdT>
Status block_verify(const BlockVerifyParams<ProbT, IdT>& a, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream);

// The instantiations compiled into specdec::cuda (kernels/verify_{f32,f16,bf16}.cu, kernels/block_verify.cu, which
// define SPECDEC_CUDA_INSTANTIATING): nvcc callers that see the definitions in the .cuh headers take them from the
// library too instead of compiling the kernels again.
#if !defined(SPECDEC_CUDA_INSTANTIATING)
#define SPECDEC_CUDA_VERIFY_EXTERN(ProbT, IdT)                                                                        \
  extern template VerifyResult chain_verify_check_arguments<ProbT, IdT>(const ChainVerifyParams<ProbT, IdT>&);        \
  extern template VerifyResult tree_verify_check_arguments<ProbT, IdT>(const TreeVerifyParams<ProbT, IdT>&);          \
  extern template VerifyResult block_verify_check_arguments<ProbT, IdT>(const BlockVerifyParams<ProbT, IdT>&);        \
  extern template Status chain_verify<ProbT, IdT>(const ChainVerifyParams<ProbT, IdT>&, void*, std::size_t,           \
                                                  cudaStream_t);                                                      \
  extern template Status tree_verify<ProbT, IdT>(const TreeVerifyParams<ProbT, IdT>&, void*, std::size_t,             \
                                                 cudaStream_t);                                                       \
  extern template Status block_verify<ProbT, IdT>(const BlockVerifyParams<ProbT, IdT>&, void*, std::size_t,           \
                                                  cudaStream_t);
SPECDEC_CUDA_VERIFY_EXTERN(float, std::int32_t)
SPECDEC_CUDA_VERIFY_EXTERN(float, std::int64_t)
SPECDEC_CUDA_VERIFY_EXTERN(__half, std::int32_t)
SPECDEC_CUDA_VERIFY_EXTERN(__half, std::int64_t)
SPECDEC_CUDA_VERIFY_EXTERN(__nv_bfloat16, std::int32_t)
SPECDEC_CUDA_VERIFY_EXTERN(__nv_bfloat16, std::int64_t)
#undef SPECDEC_CUDA_VERIFY_EXTERN
#endif

}  // namespace specdec::cuda
