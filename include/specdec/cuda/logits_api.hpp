// specdec — logits processing on the GPU (temperature, top-k, top-p, min-p -> probabilities), host-only declarations:
// a C++ compiler calls it without nvcc; the kernels are compiled once into specdec::cuda (kernels/logits.cu from
// include/specdec/cuda/logits.cuh) with the flags they need kept private there.
//
// Usage (no hidden allocation, no host synchronisation, capturable in a CUDA graph):
//   specdec::cuda::LogitsToProbsArgs a{...};                       // device pointers, host sizes
//   if (auto r = logits_to_probs_check_arguments(a); !r.ok()) ... // names the argument
//   std::size_t bytes = logits_to_probs_workspace_size(a.num_rows, a.vocab_size);
//   ... allocate once, reuse for every step of at most that size ...
//   Status s = logits_to_probs(a, workspace, bytes, stream);      // kSuccess once launched
//   ... a.status[r] (device) holds each row's Status once the stream reaches it ...
//
// The result equals the CPU reference (specdec::logits_to_probs_batch, sampling/logits.hpp) bit for bit: both run the
// arithmetic of sampling/logits_core.hpp. Per row: kInvalidArgument (bad parameters, or no request owns the row),
// kInvalidProbability (NaN or +inf logit), kZeroMass (every logit -inf); a failed row's probs are all 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/logits_core.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::cuda {

/// Element type of the logits.
enum class LogitsType : std::int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
/// Element type of the cu offsets.
enum class OffsetType : std::int32_t { kInt32 = 0, kInt64 = 1 };

/// Threads of one CTA of the logits kernel (one CTA per row).
inline constexpr int kLogitsThreads = 512;

/// Inputs and outputs of a batched logits processing. Pointers are device pointers; sizes are host values.
struct LogitsToProbsArgs {
  std::int64_t num_rows = 0;                  ///< R
  std::int64_t vocab_size = 0;                ///< V, in [1, 2^31)
  const void* logits = nullptr;               ///< [R, logits_stride] of logits_type
  LogitsType logits_type = LogitsType::kFloat32;
  std::int64_t logits_stride = 0;             ///< elements between rows, >= V (0 = V)
  float* probs = nullptr;                     ///< [R, V] float32, contiguous
  std::int64_t num_requests = 0;              ///< B: the length of the parameter arrays
  const float* temperature = nullptr;         ///< [B], or nullptr (1)
  const std::int32_t* top_k = nullptr;        ///< [B], or nullptr (off)
  const float* top_p = nullptr;               ///< [B], or nullptr (off)
  const float* min_p = nullptr;               ///< [B], or nullptr (off)
  /// [B + 1] row offsets of logits_row_request (sampling/logits_core.hpp), or nullptr: row r is request r (B == R).
  const void* cu = nullptr;
  OffsetType cu_type = OffsetType::kInt64;
  std::int32_t rows_extra = 0;                ///< 0: draft rows (cu = cu_num_draft_tokens); 1: target rows
  Status* status = nullptr;                   ///< [R] each row's Status
  std::uint8_t* greedy = nullptr;             ///< [B] optional output: 1 where temperature == 0 (the verifiers' flag)
};

/// Bytes of workspace for `num_rows` rows of `vocab_size` tokens (a multiple of 256; the workspace must be 16-byte
/// aligned).
std::size_t logits_to_probs_workspace_size(std::int64_t num_rows, std::int64_t vocab_size);

/// Host-side argument checks (no device access): sizes, required pointers, the types. The result names the argument,
/// what was expected and what was received (specdec::to_string).
VerifyResult logits_to_probs_check_arguments(const LogitsToProbsArgs& a);

/// Launches the processing on `stream` (one kernel, grid max(R, B) CTAs). Returns kSuccess once launched (per-row
/// results land in a.status), kInvalidArgument / kWorkspaceTooSmall for host-checkable problems, kCudaError if the
/// launch failed. Nothing is allocated, nothing synchronises with the host.
Status logits_to_probs(const LogitsToProbsArgs& a, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace specdec::cuda
