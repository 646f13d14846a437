// specdec::cuda — logits processing (include/specdec/cuda/logits.cuh) for float, half and bfloat16 logits with int32
// and int64 offsets, behind the host-only declarations of include/specdec/cuda/logits_api.hpp.
#include "specdec/cuda/logits.cuh"

namespace specdec::cuda {

std::size_t logits_to_probs_workspace_size(std::int64_t num_rows, std::int64_t vocab_size) {
  if (num_rows <= 0 || vocab_size <= 0) return 0;
  return detail::align_up(static_cast<std::size_t>(num_rows) *
                          static_cast<std::size_t>(detail::logits_workspace_floats(vocab_size)) * sizeof(float));
}

VerifyResult logits_to_probs_check_arguments(const LogitsToProbsArgs& a) {
  using specdec::detail::bad_argument;
  using specdec::detail::null_argument;
  auto num = [](std::int64_t v) { return std::optional<double>(static_cast<double>(v)); };
  const Status bad = Status::kInvalidArgument;
  if (a.num_rows < 0 || a.num_rows > 0x7fffffffLL)
    return bad_argument(bad, "num_rows", "a value in [0, 2^31)", std::nullopt, num(a.num_rows));
  if (a.vocab_size <= 0 || a.vocab_size > 0x7fffffffLL)
    return bad_argument(bad, "vocab_size", "a value in [1, 2^31)", std::nullopt, num(a.vocab_size));
  if (a.logits_stride != 0 && a.logits_stride < a.vocab_size)
    return bad_argument(bad, "logits_stride", ">= vocab_size (or 0)", num(a.vocab_size), num(a.logits_stride));
  if (a.num_requests < 0 || a.num_requests > 0x7fffffffLL)
    return bad_argument(bad, "num_requests", "a value in [0, 2^31)", std::nullopt, num(a.num_requests));
  if (a.cu == nullptr && a.num_requests != a.num_rows)
    return bad_argument(bad, "num_requests", "num_rows when cu is null", num(a.num_rows), num(a.num_requests));
  if (a.rows_extra != 0 && a.rows_extra != 1)
    return bad_argument(bad, "rows_extra", "0 (draft rows) or 1 (target rows)", std::nullopt, num(a.rows_extra));
  if (a.logits_type != LogitsType::kFloat32 && a.logits_type != LogitsType::kFloat16 &&
      a.logits_type != LogitsType::kBFloat16)
    return bad_argument(bad, "logits_type", "float32, float16 or bfloat16", std::nullopt,
                        num(static_cast<std::int64_t>(a.logits_type)));
  if (a.cu != nullptr && a.cu_type != OffsetType::kInt32 && a.cu_type != OffsetType::kInt64)
    return bad_argument(bad, "cu_type", "int32 or int64", std::nullopt, num(static_cast<std::int64_t>(a.cu_type)));
  if (a.num_rows > 0) {
    if (!a.logits) return null_argument("logits");
    if (!a.probs) return null_argument("probs");
    if (!a.status) return null_argument("status");
  }
  return {};
}

namespace {

template <class LogitT>
Status launch_typed(const LogitsToProbsArgs& a, float* ws, cudaStream_t stream) {
  if (a.cu != nullptr && a.cu_type == OffsetType::kInt32)
    return detail::launch_logits_to_probs<LogitT, std::int32_t>(a, ws, stream);
  return detail::launch_logits_to_probs<LogitT, std::int64_t>(a, ws, stream);
}

}  // namespace

Status logits_to_probs(const LogitsToProbsArgs& a, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  if (const VerifyResult r = logits_to_probs_check_arguments(a); !r.ok()) return r.status;
  if (a.num_rows == 0 && (a.greedy == nullptr || a.num_requests == 0)) return Status::kSuccess;
  const std::size_t need = logits_to_probs_workspace_size(a.num_rows, a.vocab_size);
  if (need > 0 && (!workspace || workspace_bytes < need || !detail::aligned16(workspace)))
    return Status::kWorkspaceTooSmall;
  float* ws = static_cast<float*>(workspace);
  switch (a.logits_type) {
    case LogitsType::kFloat32: return launch_typed<float>(a, ws, stream);
    case LogitsType::kFloat16: return launch_typed<__half>(a, ws, stream);
    case LogitsType::kBFloat16: return launch_typed<__nv_bfloat16>(a, ws, stream);
  }
  return Status::kInvalidArgument;
}

}  // namespace specdec::cuda
