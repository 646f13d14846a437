// specdec — the engine-facing stateless verification entry (include/specdec/torch/verify_logits.hpp): host checks of
// shapes, dtypes and devices, then the CPU path (the shared logits core and the single-request verifiers) or the CUDA
// path (src/torch/cuda/verify_logits_cuda.cu).
#include "specdec/torch/verify_logits.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/torch/verify_logits_detail.hpp"
#include "specdec/verify/detail/cpu_rows.hpp"
#if defined(SPECDEC_TORCH_HAS_CUDA)
#include "specdec/torch/cuda_dispatch.hpp"
#endif

namespace specdec::torch {
namespace detail {

namespace {

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void check_on(const at::Tensor& t, const char* name, const at::Device& dev) {
  TORCH_CHECK(t.device() == dev, name, ": expected a tensor on ", dev.str(), " (the device of target_logits), got ",
              t.device().str());
}

void check_vector(const at::Tensor& t, const char* name, std::int64_t n, const at::Device& dev,
                  std::initializer_list<at::ScalarType> dtypes, const char* expected_dtype) {
  TORCH_CHECK(t.defined(), name, ": expected a tensor, got an undefined tensor");
  bool ok = false;
  for (auto d : dtypes) ok |= t.scalar_type() == d;
  TORCH_CHECK(ok, name, ": expected ", expected_dtype, ", got ", c10::toString(t.scalar_type()));
  TORCH_CHECK(t.dim() == 1 && t.size(0) == n, name, ": expected a 1-D tensor [", n, "], got shape ", shape_str(t));
  check_on(t, name, dev);
  TORCH_CHECK(t.is_contiguous(), name, ": expected a contiguous tensor");
}

bool is_float_type(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

void check_rows(const at::Tensor& t, const char* name, std::int64_t rows, std::int64_t V, const at::Device& dev) {
  TORCH_CHECK(is_float_type(t.scalar_type()), name, ": expected float32, float16 or bfloat16, got ",
              c10::toString(t.scalar_type()));
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == V, name, ": expected a 2-D tensor [", rows, ", ", V,
              "], got shape ", shape_str(t));
  check_on(t, name, dev);
  TORCH_CHECK(t.size(1) <= 1 || t.stride(1) == 1, name, ": expected a contiguous last dimension, got stride ",
              t.stride(1));
  TORCH_CHECK(t.size(0) <= 1 || t.stride(0) >= V, name, ": expected rows at least V = ", V,
              " elements apart, got stride ", t.stride(0));
}

}  // namespace

Shapes check_verify_logits(const VerifyLogitsArgs& a) {
  const at::Tensor& logits = a.target_logits;
  TORCH_CHECK(logits.defined(), "target_logits: expected a tensor, got an undefined tensor");
  TORCH_CHECK(logits.dim() == 2, "target_logits: expected a 2-D tensor [N + B, V], got shape ", shape_str(logits));
  const at::Device dev = logits.device();
  Shapes s;
  s.V = logits.size(1);
  TORCH_CHECK(s.V >= 1 && s.V < (std::int64_t{1} << 31), "target_logits: expected V in [1, 2^31), got ", s.V);
  const at::Tensor& ids = a.draft_token_ids;
  TORCH_CHECK(ids.defined() && ids.dim() == 1, "draft_token_ids: expected a 1-D tensor [N], got ",
              ids.defined() ? shape_str(ids) : std::string("an undefined tensor"));
  s.N = ids.size(0);
  check_vector(ids, "draft_token_ids", s.N, dev, {at::kInt, at::kLong}, "int32 or int64");
  const at::Tensor& cu = a.cu_num_draft_tokens;
  TORCH_CHECK(cu.defined() && cu.dim() == 1 && cu.size(0) >= 1,
              "cu_num_draft_tokens: expected a 1-D tensor [B + 1], got ",
              cu.defined() ? shape_str(cu) : std::string("an undefined tensor"));
  s.B = cu.size(0) - 1;
  TORCH_CHECK(cu.scalar_type() == ids.scalar_type(), "cu_num_draft_tokens: expected ",
              c10::toString(ids.scalar_type()), " (the dtype of draft_token_ids), got ", c10::toString(cu.scalar_type()));
  check_vector(cu, "cu_num_draft_tokens", s.B + 1, dev, {at::kInt, at::kLong}, "int32 or int64");
  check_rows(logits, "target_logits", s.N + s.B, s.V, dev);
  TORCH_CHECK(!(a.draft_probs && a.draft_logits), "draft_probs/draft_logits: expected at most one of them, got both");
  if (a.draft_probs) {
    check_rows(*a.draft_probs, "draft_probs", s.N, s.V, dev);
    TORCH_CHECK(a.draft_probs->is_contiguous(), "draft_probs: expected a contiguous tensor");
  }
  if (a.draft_logits) check_rows(*a.draft_logits, "draft_logits", s.N, s.V, dev);
  if (a.parents) {
    TORCH_CHECK(a.parents->scalar_type() == ids.scalar_type(), "parents: expected ", c10::toString(ids.scalar_type()),
                " (the dtype of draft_token_ids), got ", c10::toString(a.parents->scalar_type()));
    check_vector(*a.parents, "parents", s.N, dev, {at::kInt, at::kLong}, "int32 or int64");
  }
  if (a.has_draft_probs) check_vector(*a.has_draft_probs, "has_draft_probs", s.B, dev, {at::kBool, at::kByte}, "bool or uint8");
  if (a.temperature) check_vector(*a.temperature, "temperature", s.B, dev, {at::kFloat}, "float32");
  if (a.top_k) check_vector(*a.top_k, "top_k", s.B, dev, {at::kInt}, "int32");
  if (a.top_p) check_vector(*a.top_p, "top_p", s.B, dev, {at::kFloat}, "float32");
  if (a.min_p) check_vector(*a.min_p, "min_p", s.B, dev, {at::kFloat}, "float32");
  check_vector(a.seeds, "seeds", s.B, dev, {at::kLong}, "int64");
  check_vector(a.positions, "positions", s.B, dev, {at::kLong}, "int64");
  TORCH_CHECK(a.max_num_draft_tokens >= -1, "max_num_draft_tokens: expected >= 0 (or -1 on CPU), got ",
              a.max_num_draft_tokens);
  TORCH_CHECK(!logits.is_cuda() || a.max_num_draft_tokens >= 0,
              "max_num_draft_tokens: expected a bound on every K_b on CUDA (reading it from cu_num_draft_tokens would "
              "synchronise with the host), got -1");
  s.tree = a.parents.has_value();
  TORCH_CHECK(a.method == VerifyMethod::kToken || a.method == VerifyMethod::kBlock, "method: expected token or block, got ",
              static_cast<int>(a.method));
  TORCH_CHECK(a.method != VerifyMethod::kBlock || !s.tree,
              "method: expected token for tree verification (block verification applies to chains), got block");
  s.draft_rows = a.draft_logits.has_value() || (a.draft_probs && a.draft_probs->scalar_type() != at::kFloat);
  if (a.workspace) {
    const at::Tensor& w = *a.workspace;
    TORCH_CHECK(w.scalar_type() == at::kByte && w.is_contiguous(), "workspace: expected a contiguous uint8 tensor, got ",
                c10::toString(w.scalar_type()));
    check_on(w, "workspace", dev);
    const std::int64_t need = verify_logits_workspace_bytes(s.B, s.N, s.V, s.tree, s.draft_rows);
    TORCH_CHECK(w.numel() >= need, "workspace: expected at least ", need,
                " bytes (verify_logits_workspace_bytes), got ", w.numel());
  }
  return s;
}

}  // namespace detail

namespace {

/// The CPU path's workspace: the processed target rows [N + B, V] float32, then the processed draft rows [N, V] when
/// draft_rows (the first two regions of the CUDA layout, in the same order).
std::int64_t cpu_workspace_bytes(std::int64_t B, std::int64_t N, std::int64_t V, bool draft_rows) {
  return (N + B + (draft_rows ? N : 0)) * V * static_cast<std::int64_t>(sizeof(float));
}

/// Rows [rows, V] float32 at byte `offset` of the caller's workspace, or a fresh tensor without one.
at::Tensor cpu_rows(const VerifyLogitsArgs& a, std::int64_t offset, std::int64_t rows, std::int64_t V) {
  if (!a.workspace) return at::empty({rows, V}, at::TensorOptions().dtype(at::kFloat));
  const std::int64_t bytes = rows * V * static_cast<std::int64_t>(sizeof(float));
  return a.workspace->slice(0, offset, offset + bytes).view(at::kFloat).view({rows, V});
}

/// The CPU path's threads: the caller's (VerifyLogitsArgs::parallel_for), else ATen's.
specdec::detail::RangeFor cpu_ranges(const VerifyLogitsArgs& a) {
  if (a.parallel_for) return specdec::detail::ranges_of(a.parallel_for);
  return [](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) { at::parallel_for(0, n, 1, body); };
}

template <class T>
const T* data_of(const std::optional<at::Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

template <class IdT>
VerifyLogitsResult verify_logits_cpu(const VerifyLogitsArgs& a, const detail::Shapes& s) {
  const std::int64_t B = s.B, N = s.N, V = s.V;
  specdec::detail::CpuRows<IdT> c;
  const specdec::detail::RangeFor ranges = cpu_ranges(a);
  c.B = B;
  c.N = N;
  c.V = V;
  c.cu = a.cu_num_draft_tokens.data_ptr<IdT>();
  std::int64_t width = a.max_num_draft_tokens;
  if (width < 0) {
    width = 0;
    for (std::int64_t b = 0; b < B; ++b)
      width = std::max<std::int64_t>(width, static_cast<std::int64_t>(c.cu[b + 1]) - static_cast<std::int64_t>(c.cu[b]));
  }
  c.stride = width + 1;
  c.temperature = data_of<float>(a.temperature);
  c.top_k = data_of<std::int32_t>(a.top_k);
  c.top_p = data_of<float>(a.top_p);
  c.min_p = data_of<float>(a.min_p);
  const at::Tensor logits = a.target_logits.scalar_type() == at::kFloat ? a.target_logits : a.target_logits.to(at::kFloat);
  at::Tensor probs = cpu_rows(a, 0, N + B, V);  // the workspace, when the caller keeps one across steps
  c.logits = logits.data_ptr<float>();
  c.logits_stride = logits.stride(0);
  c.probs = probs.data_ptr<float>();
  at::Tensor draft;
  std::vector<Status> draft_rows;
  if (a.draft_logits) {
    const at::Tensor dl = a.draft_logits->scalar_type() == at::kFloat ? *a.draft_logits : a.draft_logits->to(at::kFloat);
    draft = cpu_rows(a, (N + B) * V * static_cast<std::int64_t>(sizeof(float)), N, V);
    draft_rows.assign(static_cast<std::size_t>(N), Status::kSuccess);
    if (N > 0)
      specdec::detail::process_rows(ranges, c.cu, B, V, specdec::detail::request_params(B, c.temperature, c.top_k, c.top_p, c.min_p),
                   dl.data_ptr<float>(), N, dl.stride(0), 0, draft.data_ptr<float>(), draft_rows.data());
    c.draft_rows = draft_rows.data();
  } else if (a.draft_probs) {
    draft = a.draft_probs->to(at::kFloat).contiguous();
  }
  c.q = draft.defined() ? draft.data_ptr<float>() : nullptr;
  const auto ids_opts = a.draft_token_ids.options();
  VerifyLogitsResult r;
  r.output_token_ids = at::empty({B, c.stride}, ids_opts);
  r.num_accepted = at::empty({B}, at::TensorOptions().dtype(at::kInt));
  r.accepted = s.tree ? at::empty({B, c.stride}, ids_opts) : at::empty({N}, at::TensorOptions().dtype(at::kBool));
  r.status = at::empty({B}, at::TensorOptions().dtype(at::kInt));
  r.target_probs = probs;
  c.ids = a.draft_token_ids.data_ptr<IdT>();
  c.parents = s.tree ? a.parents->data_ptr<IdT>() : nullptr;
  const at::Tensor has_q_t = a.has_draft_probs ? a.has_draft_probs->to(at::kByte) : at::Tensor();
  c.has_q = has_q_t.defined() ? has_q_t.data_ptr<std::uint8_t>() : nullptr;
  c.seeds = a.seeds.data_ptr<std::int64_t>();
  c.positions = a.positions.data_ptr<std::int64_t>();
  c.method = a.method;
  c.all_target_probs = a.all_target_probs;
  c.out = r.output_token_ids.data_ptr<IdT>();
  c.nacc = r.num_accepted.data_ptr<std::int32_t>();
  c.flags = s.tree ? nullptr : reinterpret_cast<std::uint8_t*>(r.accepted.data_ptr<bool>());
  c.nodes = s.tree ? r.accepted.data_ptr<IdT>() : nullptr;
  c.status = r.status.data_ptr<std::int32_t>();
  specdec::detail::verify_rows_cpu(c, ranges);
  return r;
}

}  // namespace

std::int64_t verify_logits_workspace_bytes(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                           std::int64_t vocab_size, bool tree, bool draft_rows) {
  const std::int64_t cpu = cpu_workspace_bytes(batch_size, num_draft_tokens, vocab_size, draft_rows);
#if defined(SPECDEC_TORCH_HAS_CUDA)
  return std::max(cpu, verify_logits_workspace_bytes_cuda(batch_size, num_draft_tokens, vocab_size, tree, draft_rows));
#else
  (void)tree;
  return cpu;
#endif
}

VerifyLogitsResult verify_logits(const VerifyLogitsArgs& args) {
  const detail::Shapes s = detail::check_verify_logits(args);
  if (args.target_logits.is_cuda()) {
#if defined(SPECDEC_TORCH_HAS_CUDA)
    return verify_logits_cuda(args, s);
#else
    TORCH_CHECK(false, "target_logits: expected a CPU tensor (this build of specdec has no CUDA glue), got ",
                args.target_logits.device().str());
#endif
  }
  TORCH_CHECK(args.target_logits.is_cpu(), "target_logits: expected a CPU or CUDA tensor, got ",
              args.target_logits.device().str());
  if (args.draft_token_ids.scalar_type() == at::kInt) return verify_logits_cpu<std::int32_t>(args, s);
  return verify_logits_cpu<std::int64_t>(args, s);
}

void check_verify_status(const VerifyLogitsResult& result, const char* op) {
  const at::Tensor host = result.status.to(at::kCPU, at::kInt).contiguous();
  const auto* st = host.data_ptr<std::int32_t>();
  for (std::int64_t b = 0; b < host.numel(); ++b)
    TORCH_CHECK(st[b] == 0, op, ": request ", b, " failed: ", to_string(static_cast<Status>(st[b])), ": ",
                detail::blame(static_cast<Status>(st[b])));
}

}  // namespace specdec::torch
