// specdec — the CUDA path of verify_logits (include/specdec/torch/verify_logits.hpp): the logits kernel on the target
// rows (and on draft logits), the chain or tree verification kernels on the float32 probabilities, and a fold kernel
// applying the per-request status rule of verify_logits_detail.hpp. Everything is enqueued on the current stream:
// no host synchronisation, no tensor of data-dependent size, intermediates in one workspace (the caller's, or one
// buffer from the caching allocator).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>

#include "specdec/cuda/block_verify.cuh"
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/logits_api.hpp"
#include "specdec/cuda/tree_verify.cuh"
#include "specdec/torch/cuda_dispatch.hpp"
#include "specdec/torch/verify_logits_detail.hpp"

namespace specdec::torch {
namespace {

/// Byte offsets of the workspace regions.
struct Layout {
  std::size_t target_probs, draft_probs, target_status, draft_status, greedy, logits_ws, logits_ws_bytes, verify_ws,
      verify_ws_bytes, total;
};

Layout layout(std::int64_t B, std::int64_t N, std::int64_t V, bool tree, bool draft_rows) {
  cuda::detail::WorkspaceCarver c(nullptr);
  Layout l{};
  auto take = [&](std::size_t bytes) {
    const std::size_t at = c.size();
    c.take<char>(bytes);
    return at;
  };
  const auto rows = static_cast<std::size_t>(N + B), n = static_cast<std::size_t>(N), v = static_cast<std::size_t>(V);
  l.target_probs = take(rows * v * sizeof(float));
  l.draft_probs = take(draft_rows ? n * v * sizeof(float) : 0);
  l.target_status = take(rows * sizeof(std::int32_t));
  l.draft_status = take(n * sizeof(std::int32_t));
  l.greedy = take(static_cast<std::size_t>(B));
  l.logits_ws_bytes = cuda::logits_to_probs_workspace_size(N + B, V);
  l.logits_ws = take(l.logits_ws_bytes);
  l.verify_ws_bytes = tree ? cuda::tree_verify_workspace_size(B, N, V)
                           : std::max(cuda::chain_verify_workspace_size(B, N, V), cuda::block_verify_workspace_size(B, N, V));
  l.verify_ws = take(l.verify_ws_bytes);
  l.total = c.size();
  return l;
}

cuda::LogitsType logits_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kHalf: return cuda::LogitsType::kFloat16;
    case at::kBFloat16: return cuda::LogitsType::kBFloat16;
    default: return cuda::LogitsType::kFloat32;
  }
}

template <class T>
const T* opt_ptr(const std::optional<at::Tensor>& t) {
  return t ? reinterpret_cast<const T*>(t->data_ptr()) : nullptr;
}

/// The status rule's steps 1-3 over the verifier's results (one thread per request).
template <class IdT>
__global__ void fold_statuses_kernel(std::int64_t B, std::int64_t N, std::int64_t stride, const IdT* cu,
                                     const std::int64_t* positions, const std::uint8_t* has_q, bool have_q,
                                     const std::int32_t* target_rows, const std::int32_t* draft_rows, IdT* tokens,
                                     std::int32_t* num_accepted, std::uint8_t* flags, IdT* nodes,
                                     std::int32_t* status) {
  const std::int64_t b = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (b >= B) return;
  const detail::RequestRange range = detail::request_range(cu, b, B, N, stride, positions);
  Status s = range.status;
  if (s == Status::kSuccess && range.num_drafts > 0 && has_q && has_q[b] && !have_q) s = Status::kInvalidArgument;
  if (s == Status::kSuccess) s = detail::first_failed_row(target_rows, draft_rows, range, b);
  if (s == Status::kSuccess) return;  // the verifier's status stands
  status[b] = static_cast<std::int32_t>(s);
  num_accepted[b] = 0;
  for (std::int64_t i = 0; i < stride; ++i) {
    tokens[b * stride + i] = IdT(-1);
    if (nodes) nodes[b * stride + i] = IdT(-1);
  }
  if (flags && range.num_drafts > 0)
    for (std::int64_t i = 0; i < range.num_drafts; ++i) flags[range.start + i] = 0;
}

template <class IdT>
VerifyLogitsResult run(const VerifyLogitsArgs& a, const detail::Shapes& s) {
  const std::int64_t B = s.B, N = s.N, V = s.V;
  const at::Device dev = a.target_logits.device();
  const std::int64_t stride = a.max_num_draft_tokens + 1;
  const auto ids_opts = a.draft_token_ids.options();
  VerifyLogitsResult r;
  r.output_token_ids = at::full({B, stride}, -1, ids_opts);
  r.num_accepted = at::zeros({B}, at::TensorOptions().device(dev).dtype(at::kInt));
  r.accepted = s.tree ? at::full({B, stride}, -1, ids_opts) : at::zeros({N}, at::TensorOptions().device(dev).dtype(at::kBool));
  r.status = at::zeros({B}, at::TensorOptions().device(dev).dtype(at::kInt));
  const Layout l = layout(B, N, V, s.tree, s.draft_rows);
  at::Tensor ws = a.workspace ? *a.workspace
                              : at::empty({static_cast<std::int64_t>(l.total)}, at::TensorOptions().device(dev).dtype(at::kByte));
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(ws.data_ptr()) % cuda::kWorkspaceAlignment == 0,
              "workspace: expected a ", cuda::kWorkspaceAlignment, "-byte aligned data pointer, got offset ",
              reinterpret_cast<std::uintptr_t>(ws.data_ptr()) % cuda::kWorkspaceAlignment);
  auto region = [&](std::size_t offset) { return static_cast<char*>(ws.data_ptr()) + offset; };
  r.target_probs = ws.narrow(0, static_cast<std::int64_t>(l.target_probs), (N + B) * V * 4).view(at::kFloat).view({N + B, V});
  if (B == 0) return r;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  auto* target_status = reinterpret_cast<std::int32_t*>(region(l.target_status));
  auto* draft_status = reinterpret_cast<std::int32_t*>(region(l.draft_status));
  auto* greedy = reinterpret_cast<std::uint8_t*>(region(l.greedy));
  // 1. Logits processing of the target rows (and the draft logits).
  cuda::LogitsToProbsArgs la;
  la.vocab_size = V;
  la.num_requests = B;
  la.temperature = opt_ptr<float>(a.temperature);
  la.top_k = opt_ptr<std::int32_t>(a.top_k);
  la.top_p = opt_ptr<float>(a.top_p);
  la.min_p = opt_ptr<float>(a.min_p);
  la.cu = a.cu_num_draft_tokens.data_ptr();
  la.cu_type = sizeof(IdT) == 4 ? cuda::OffsetType::kInt32 : cuda::OffsetType::kInt64;
  auto process = [&](const at::Tensor& logits, std::int64_t rows, std::int32_t extra, float* probs,
                     std::int32_t* row_status, std::uint8_t* greedy_out, const char* name) {
    la.num_rows = rows;
    la.logits = logits.data_ptr();
    la.logits_type = logits_type(logits);
    la.logits_stride = rows > 1 ? logits.stride(0) : V;
    la.probs = probs;
    la.rows_extra = extra;
    la.status = reinterpret_cast<Status*>(row_status);
    la.greedy = greedy_out;
    const VerifyResult check = cuda::logits_to_probs_check_arguments(la);
    TORCH_CHECK(check.ok(), "verify_logits (CUDA, ", name, "): ", to_string(check));
    const Status st = cuda::logits_to_probs(la, region(l.logits_ws), l.logits_ws_bytes, stream);
    TORCH_CHECK(st == Status::kSuccess, "verify_logits (CUDA, ", name, "): ", to_string(st));
  };
  auto* target_probs = reinterpret_cast<float*>(region(l.target_probs));
  process(a.target_logits, N + B, 1, target_probs, target_status, greedy, "target_logits");
  const float* draft_probs = nullptr;
  bool draft_rows_processed = false;
  if (a.draft_logits && N > 0) {
    process(*a.draft_logits, N, 0, reinterpret_cast<float*>(region(l.draft_probs)), draft_status, nullptr,
            "draft_logits");
    draft_probs = reinterpret_cast<const float*>(region(l.draft_probs));
    draft_rows_processed = true;
  } else if (a.draft_probs && N > 0) {
    if (a.draft_probs->scalar_type() == at::kFloat) {
      draft_probs = a.draft_probs->data_ptr<float>();
    } else {
      at::Tensor view = ws.narrow(0, static_cast<std::int64_t>(l.draft_probs), N * V * 4).view(at::kFloat).view({N, V});
      view.copy_(*a.draft_probs);  // a conversion kernel on the stream, no allocation
      draft_probs = view.data_ptr<float>();
    }
  }
  const bool have_q = a.draft_probs.has_value() || a.draft_logits.has_value();
  // 2. Verification on float32 probabilities.
  const auto* has_q = opt_ptr<std::uint8_t>(a.has_draft_probs);
  const auto* cu = a.cu_num_draft_tokens.data_ptr<IdT>();
  const auto* ids = a.draft_token_ids.data_ptr<IdT>();
  auto* status = reinterpret_cast<Status*>(r.status.data_ptr<std::int32_t>());
  if (s.tree) {
    cuda::TreeVerifyParams<float, IdT> t;
    t.batch_size = B;
    t.vocab_size = V;
    t.num_draft_tokens = N;
    t.cu_num_draft_tokens = cu;
    t.draft_token_ids = ids;
    t.parents = a.parents->data_ptr<IdT>();
    t.draft_probs = draft_probs;
    t.target_probs = target_probs;
    t.seeds = reinterpret_cast<const std::uint64_t*>(a.seeds.data_ptr<std::int64_t>());
    t.positions = a.positions.data_ptr<std::int64_t>();
    t.greedy = greedy;
    t.has_draft_probs = has_q;
    t.output_token_ids = r.output_token_ids.data_ptr<IdT>();
    t.output_stride = stride;
    t.num_accepted = r.num_accepted.data_ptr<std::int32_t>();
    t.accepted_nodes = r.accepted.data_ptr<IdT>();
    t.status = status;
    const VerifyResult check = cuda::tree_verify_check_arguments(t);
    TORCH_CHECK(check.ok(), "verify_logits (CUDA, tree): ", to_string(check));
    const Status st = cuda::tree_verify(t, region(l.verify_ws), l.verify_ws_bytes, stream);
    TORCH_CHECK(st == Status::kSuccess, "verify_logits (CUDA, tree): ", to_string(st));
  } else if (a.method == VerifyMethod::kBlock) {
    cuda::BlockVerifyParams<float, IdT> c;
    c.batch_size = B;
    c.vocab_size = V;
    c.num_draft_tokens = N;
    c.cu_num_draft_tokens = cu;
    c.draft_token_ids = ids;
    c.draft_probs = draft_probs;
    c.target_probs = target_probs;
    c.seeds = reinterpret_cast<const std::uint64_t*>(a.seeds.data_ptr<std::int64_t>());
    c.positions = a.positions.data_ptr<std::int64_t>();
    c.greedy = greedy;
    c.has_draft_probs = has_q;
    c.output_token_ids = r.output_token_ids.data_ptr<IdT>();
    c.output_stride = stride;
    c.num_accepted = r.num_accepted.data_ptr<std::int32_t>();
    c.accepted = reinterpret_cast<std::uint8_t*>(r.accepted.data_ptr<bool>());
    c.status = status;
    const VerifyResult check = cuda::block_verify_check_arguments(c);
    TORCH_CHECK(check.ok(), "verify_logits (CUDA, block): ", to_string(check));
    const Status st = cuda::block_verify(c, region(l.verify_ws), l.verify_ws_bytes, stream);
    TORCH_CHECK(st == Status::kSuccess, "verify_logits (CUDA, block): ", to_string(st));
  } else {
    cuda::ChainVerifyParams<float, IdT> c;
    c.batch_size = B;
    c.vocab_size = V;
    c.num_draft_tokens = N;
    c.cu_num_draft_tokens = cu;
    c.draft_token_ids = ids;
    c.draft_probs = draft_probs;
    c.target_probs = target_probs;
    c.seeds = reinterpret_cast<const std::uint64_t*>(a.seeds.data_ptr<std::int64_t>());
    c.positions = a.positions.data_ptr<std::int64_t>();
    c.greedy = greedy;
    c.has_draft_probs = has_q;
    c.output_token_ids = r.output_token_ids.data_ptr<IdT>();
    c.output_stride = stride;
    c.num_accepted = r.num_accepted.data_ptr<std::int32_t>();
    c.accepted = reinterpret_cast<std::uint8_t*>(r.accepted.data_ptr<bool>());
    c.status = status;
    const VerifyResult check = cuda::chain_verify_check_arguments(c);
    TORCH_CHECK(check.ok(), "verify_logits (CUDA, chain): ", to_string(check));
    const Status st = cuda::chain_verify(c, region(l.verify_ws), l.verify_ws_bytes, stream);
    TORCH_CHECK(st == Status::kSuccess, "verify_logits (CUDA, chain): ", to_string(st));
  }
  // 3. The per-request status rule.
  constexpr int kThreads = 128;
  fold_statuses_kernel<IdT><<<static_cast<unsigned>((B + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      B, N, stride, cu, a.positions.data_ptr<std::int64_t>(), has_q, have_q, target_status,
      draft_rows_processed ? draft_status : nullptr, r.output_token_ids.data_ptr<IdT>(),
      r.num_accepted.data_ptr<std::int32_t>(), s.tree ? nullptr : reinterpret_cast<std::uint8_t*>(r.accepted.data_ptr<bool>()),
      s.tree ? r.accepted.data_ptr<IdT>() : nullptr, r.status.data_ptr<std::int32_t>());
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "verify_logits (CUDA): the status fold kernel failed to launch");
  return r;
}

}  // namespace

std::int64_t verify_logits_workspace_bytes_cuda(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                                std::int64_t vocab_size, bool tree, bool draft_rows) {
  return static_cast<std::int64_t>(layout(batch_size, num_draft_tokens, vocab_size, tree, draft_rows).total);
}

VerifyLogitsResult verify_logits_cuda(const VerifyLogitsArgs& args, const detail::Shapes& shapes) {
  const c10::cuda::CUDAGuard guard(args.target_logits.device());
  if (args.draft_token_ids.scalar_type() == at::kInt) return run<std::int32_t>(args, shapes);
  return run<std::int64_t>(args, shapes);
}

}  // namespace specdec::torch
