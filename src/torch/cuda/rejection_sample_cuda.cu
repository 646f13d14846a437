// specdec — torch glue of the CUDA verifiers: tensors -> raw pointers, dtype dispatch (probabilities float32,
// float16, bfloat16; ids int32, int64), outputs and workspace from the caching allocator, the current stream, and
// one synchronisation to turn per-request statuses into a c10::Error.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "specdec/cuda/block_verify.cuh"
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/tree_verify.cuh"
#include "specdec/torch/cuda_dispatch.hpp"

namespace specdec::torch {
namespace {

template <class F>
void dispatch_probs(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat: f(float{}); break;
    case at::kHalf: f(__half{}); break;
    case at::kBFloat16: f(__nv_bfloat16{}); break;
    default: TORCH_CHECK(false, "target_probs: expected float32, float16 or bfloat16, got ", t);
  }
}

template <class F>
void dispatch_ids(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kInt: f(std::int32_t{}); break;
    case at::kLong: f(std::int64_t{}); break;
    default: TORCH_CHECK(false, "draft_token_ids: expected int32 or int64, got ", t);
  }
}

template <class T>
const T* ptr(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<const T*>(t.data_ptr()) : nullptr;
}

/// Largest K_b (one device-to-host copy).
std::int64_t max_drafts(const at::Tensor& cu) {
  const std::int64_t n = cu.numel();
  if (n <= 1) return 0;
  return (cu.narrow(0, 1, n - 1) - cu.narrow(0, 0, n - 1)).max().item<std::int64_t>();
}

/// What a per-request status of the kernels says about the arguments (the kernels report statuses, not names).
const char* blame(Status s) {
  switch (s) {
    case Status::kInvalidArgument:
      return "cu_num_draft_tokens/positions/has_draft_probs: expected cu[0] == 0, K_b = cu[b + 1] - cu[b] >= 0, "
             "cu[B] == N, positions >= 0 and has_draft_probs 0 for requests with drafts when draft_probs is absent, "
             "got a request that breaks one of them";
    case Status::kInvalidTokenId: return "draft_token_ids: expected ids in [0, V), got an id out of range";
    case Status::kInvalidTree: return "parents: expected parents[j] in [0, j] (an earlier node), got one outside";
    case Status::kInvalidProbability:
      return "target_probs/draft_probs: expected finite, non-negative probabilities, got a NaN, infinite or negative "
             "value";
    case Status::kZeroMass: return "target_probs: expected a row with positive mass, got a row that is all zeros";
    default: return to_string(s);
  }
}

void check_statuses(const at::Tensor& status, const char* op) {
  const at::Tensor host = status.cpu();
  const auto* s = host.data_ptr<std::int32_t>();
  for (std::int64_t b = 0; b < host.numel(); ++b)
    TORCH_CHECK(s[b] == 0, op, ": request ", b, " failed: ", to_string(static_cast<Status>(s[b])), ": ",
                blame(static_cast<Status>(s[b])));
}

/// Inputs in the layout the kernels read, on the probabilities' device.
struct Inputs {
  at::Tensor ids, cu, parents, draft, target, seeds, positions, greedy, has_draft_probs;
  std::int64_t B, V, N, stride;
};

Inputs prepare(const at::Tensor& draft_token_ids, const at::Tensor* parents, const at::Tensor& cu_num_draft_tokens,
               const std::optional<at::Tensor>& draft_probs, const at::Tensor& target_probs, const at::Tensor& seeds,
               const at::Tensor& positions, const std::optional<at::Tensor>& greedy,
               const std::optional<at::Tensor>& has_draft_probs) {
  TORCH_CHECK(target_probs.is_cuda() && target_probs.dim() == 2, "target_probs: expected a 2-d CUDA tensor, got ",
              target_probs.sizes(), " on ", target_probs.device());
  const auto dev = target_probs.device();
  Inputs in;
  in.target = target_probs.contiguous();
  in.ids = draft_token_ids.to(dev).contiguous();
  in.cu = cu_num_draft_tokens.to(dev, in.ids.scalar_type()).contiguous();
  if (parents) in.parents = parents->to(dev, in.ids.scalar_type()).contiguous();
  if (draft_probs && draft_probs->defined()) in.draft = draft_probs->to(dev, in.target.scalar_type()).contiguous();
  in.seeds = seeds.to(dev, at::kLong).contiguous();
  in.positions = positions.to(dev, at::kLong).contiguous();
  if (greedy && greedy->defined()) in.greedy = greedy->to(dev, at::kByte).contiguous();
  if (has_draft_probs && has_draft_probs->defined())
    in.has_draft_probs = has_draft_probs->to(dev, at::kByte).contiguous();
  in.B = in.seeds.numel();
  in.V = in.target.size(1);
  in.N = in.ids.numel();
  TORCH_CHECK(in.cu.numel() == in.B + 1, "cu_num_draft_tokens: expected ", in.B + 1, " elements, got ", in.cu.numel());
  TORCH_CHECK(in.target.size(0) == in.N + in.B, "target_probs: expected ", in.N + in.B, " rows, got ",
              in.target.size(0));
  TORCH_CHECK(!in.draft.defined() || (in.draft.dim() == 2 && in.draft.size(0) == in.N && in.draft.size(1) == in.V),
              "draft_probs: expected [", in.N, ", ", in.V, "], got ", in.draft.sizes());
  TORCH_CHECK(in.positions.numel() == in.B && (!in.greedy.defined() || in.greedy.numel() == in.B),
              "positions/greedy: expected ", in.B, " elements");
  TORCH_CHECK(!in.has_draft_probs.defined() || in.has_draft_probs.numel() == in.B, "has_draft_probs: expected ", in.B,
              " elements, got ", in.has_draft_probs.defined() ? in.has_draft_probs.numel() : 0);
  in.stride = max_drafts(in.cu) + 1;
  return in;
}

/// The fields every verifier's params share (chain, block, tree): sizes, inputs, outputs and statuses.
template <class P, class I, class Params>
void bind(Params& a, const Inputs& in, const at::Tensor& out, const at::Tensor& nacc, const at::Tensor& status) {
  a.batch_size = in.B;
  a.vocab_size = in.V;
  a.num_draft_tokens = in.N;
  a.cu_num_draft_tokens = ptr<I>(in.cu);
  a.draft_token_ids = ptr<I>(in.ids);
  a.draft_probs = ptr<P>(in.draft);
  a.target_probs = ptr<P>(in.target);
  a.seeds = ptr<std::uint64_t>(in.seeds);
  a.positions = ptr<std::int64_t>(in.positions);
  a.greedy = ptr<std::uint8_t>(in.greedy);
  a.has_draft_probs = ptr<std::uint8_t>(in.has_draft_probs);
  a.draft_token_ids_size = in.ids.numel();
  a.draft_probs_size = in.draft.defined() ? in.draft.numel() : -1;
  a.target_probs_size = in.target.numel();
  a.output_token_ids = reinterpret_cast<I*>(out.data_ptr());
  a.output_stride = in.stride;
  a.num_accepted = nacc.data_ptr<std::int32_t>();
  a.status = reinterpret_cast<Status*>(status.data_ptr<std::int32_t>());
}

}  // namespace

RejectionSampleResult rejection_sample_cuda(const at::Tensor& draft_token_ids, const at::Tensor& cu_num_draft_tokens,
                                            const std::optional<at::Tensor>& draft_probs,
                                            const at::Tensor& target_probs, const at::Tensor& seeds,
                                            const at::Tensor& positions, const std::optional<at::Tensor>& greedy,
                                            const RejectionSampleOptions& options,
                                            const std::optional<at::Tensor>& has_draft_probs) {
  const c10::cuda::CUDAGuard guard(target_probs.device());
  const Inputs in = prepare(draft_token_ids, nullptr, cu_num_draft_tokens, draft_probs, target_probs, seeds,
                            positions, greedy, has_draft_probs);
  const auto dev = in.target.device();
  at::Tensor out = at::full({in.B, in.stride}, -1, in.ids.options());
  at::Tensor nacc = at::zeros({in.B}, at::TensorOptions().device(dev).dtype(at::kInt));
  at::Tensor accepted = at::zeros({in.N}, at::TensorOptions().device(dev).dtype(at::kByte));
  at::Tensor status = at::zeros({in.B}, at::TensorOptions().device(dev).dtype(at::kInt));
  const bool block = options.method == VerifyMethod::kBlock;
  const auto ws_bytes = block ? cuda::block_verify_workspace_size(in.B, in.N, in.V)
                              : cuda::chain_verify_workspace_size(in.B, in.N, in.V);
  at::Tensor ws = at::empty({static_cast<std::int64_t>(ws_bytes) + 1}, at::TensorOptions().device(dev).dtype(at::kByte));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (block) {
    dispatch_probs(in.target.scalar_type(), [&](auto prob_tag) {
      using P = decltype(prob_tag);
      dispatch_ids(in.ids.scalar_type(), [&](auto id_tag) {
        using I = decltype(id_tag);
        cuda::BlockVerifyParams<P, I> a;
        bind<P, I>(a, in, out, nacc, status);
        a.accepted = accepted.data_ptr<std::uint8_t>();
        const VerifyResult check = cuda::block_verify_check_arguments(a);
        TORCH_CHECK(check.ok(), "rejection_sample (CUDA, block): ", to_string(check));
        const Status s = cuda::block_verify(a, ws.data_ptr(), ws_bytes, stream);
        TORCH_CHECK(s == Status::kSuccess, "rejection_sample (CUDA, block): ", to_string(s));
      });
    });
    check_statuses(status, "rejection_sample (CUDA, block)");
    return {out, nacc, accepted.to(at::kBool)};
  }
  dispatch_probs(in.target.scalar_type(), [&](auto prob_tag) {
    using P = decltype(prob_tag);
    dispatch_ids(in.ids.scalar_type(), [&](auto id_tag) {
      using I = decltype(id_tag);
      cuda::ChainVerifyParams<P, I> a;
      bind<P, I>(a, in, out, nacc, status);
      a.lenience = static_cast<float>(options.lenience);
      a.accepted = accepted.data_ptr<std::uint8_t>();
      const VerifyResult check = cuda::chain_verify_check_arguments(a);
      TORCH_CHECK(check.ok(), "rejection_sample (CUDA): ", to_string(check));
      const Status s = cuda::chain_verify(a, ws.data_ptr(), ws_bytes, stream);
      TORCH_CHECK(s == Status::kSuccess, "rejection_sample (CUDA): ", to_string(s));
    });
  });
  check_statuses(status, "rejection_sample (CUDA)");
  return {out, nacc, accepted.to(at::kBool)};
}

TreeRejectionSampleResult tree_rejection_sample_cuda(const at::Tensor& draft_token_ids, const at::Tensor& parents,
                                                     const at::Tensor& cu_num_draft_tokens,
                                                     const std::optional<at::Tensor>& draft_probs,
                                                     const at::Tensor& target_probs, const at::Tensor& seeds,
                                                     const at::Tensor& positions,
                                                     const std::optional<at::Tensor>& greedy,
                                                     const RejectionSampleOptions& options,
                                                     const std::optional<at::Tensor>& has_draft_probs) {
  const c10::cuda::CUDAGuard guard(target_probs.device());
  const Inputs in = prepare(draft_token_ids, &parents, cu_num_draft_tokens, draft_probs, target_probs, seeds,
                            positions, greedy, has_draft_probs);
  TORCH_CHECK(in.parents.numel() == in.N, "parents: expected ", in.N, " elements, got ", in.parents.numel());
  const auto dev = in.target.device();
  at::Tensor out = at::full({in.B, in.stride}, -1, in.ids.options());
  at::Tensor nodes = at::full({in.B, in.stride}, -1, in.ids.options());
  at::Tensor nacc = at::zeros({in.B}, at::TensorOptions().device(dev).dtype(at::kInt));
  at::Tensor status = at::zeros({in.B}, at::TensorOptions().device(dev).dtype(at::kInt));
  const auto ws_bytes = cuda::tree_verify_workspace_size(in.B, in.N, in.V);
  at::Tensor ws = at::empty({static_cast<std::int64_t>(ws_bytes) + 1}, at::TensorOptions().device(dev).dtype(at::kByte));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_probs(in.target.scalar_type(), [&](auto prob_tag) {
    using P = decltype(prob_tag);
    dispatch_ids(in.ids.scalar_type(), [&](auto id_tag) {
      using I = decltype(id_tag);
      cuda::TreeVerifyParams<P, I> a;
      bind<P, I>(a, in, out, nacc, status);
      a.parents = ptr<I>(in.parents);
      a.parents_size = in.parents.numel();
      a.accepted_nodes = reinterpret_cast<I*>(nodes.data_ptr());
      const VerifyResult check = cuda::tree_verify_check_arguments(a);
      TORCH_CHECK(check.ok(), "tree_rejection_sample (CUDA): ", to_string(check));
      const Status s = cuda::tree_verify(a, ws.data_ptr(), ws_bytes, stream);
      TORCH_CHECK(s == Status::kSuccess, "tree_rejection_sample (CUDA): ", to_string(s));
    });
  });
  (void)options;
  check_statuses(status, "tree_rejection_sample (CUDA)");
  return {out, nacc, nodes};
}

}  // namespace specdec::torch
