// specdec — the engine-facing stateless verification entry (include/specdec/torch/verify_logits.hpp): host checks of
// shapes, dtypes and devices, then the CPU path (the shared logits core and the single-request verifiers) or the CUDA
// path (src/torch/cuda/verify_logits_cuda.cu).
#include "specdec/torch/verify_logits.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <exception>
#include <mutex>
#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/tree.hpp"
#include "specdec/torch/verify_logits_detail.hpp"
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

using ParallelFor = std::function<void(std::int64_t n, const std::function<void(std::int64_t)>& fn)>;

/// body(lo, hi) over [0, n): one index a call on the caller's threads (parallel_for), else ATen's.
void for_range(const ParallelFor& parallel_for, std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  if (parallel_for) {  // an exception in a chunk comes back to the caller (the first one), as at::parallel_for does
    std::mutex mutex;
    std::exception_ptr first;
    parallel_for(n, [&](std::int64_t i) {
      try {
        body(i, i + 1);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
    if (first) std::rethrow_exception(first);
    return;
  }
  at::parallel_for(0, n, 1, body);
}

/// The CPU path on plain arrays (no tensor is made or read): what verify_logits and verify_logits_host share.
template <class IdT>
struct CpuRows {
  std::int64_t B = 0, N = 0, V = 0, stride = 0;  // stride: the output width (max K + 1)
  const float* logits = nullptr;                 // [N + B, V] float32, rows logits_stride apart
  std::int64_t logits_stride = 0;
  const IdT* cu = nullptr;
  const IdT* ids = nullptr;
  const IdT* parents = nullptr;  // trees
  const float* q = nullptr;      // processed draft rows [N, V], or none
  const Status* draft_rows = nullptr;  // their statuses when processed here, else none
  const std::uint8_t* has_q = nullptr;
  const float *temperature = nullptr, *top_p = nullptr, *min_p = nullptr;
  const std::int32_t* top_k = nullptr;
  const std::int64_t *seeds = nullptr, *positions = nullptr;
  VerifyMethod method = VerifyMethod::kToken;
  bool all_target_probs = true;
  // Greedy requests verified lazily take each row's argmax from its logits scan and write no probability row (their
  // rows of `probs` are then unspecified): the same tokens and statuses, since a greedy row's processed distribution
  // is one-hot on that argmax. Only for callers that do not read `probs` (verify_logits_host).
  bool greedy_by_scan = false;
  float* probs = nullptr;  // [N + B, V]: the processed target rows
  // Outputs, every element written: tokens [B, stride] (-1 padded), counts [B], chains: flags [N]; trees: nodes
  // [B, stride] (-1 padded); statuses [B].
  IdT* out = nullptr;
  std::int32_t* nacc = nullptr;
  std::uint8_t* flags = nullptr;
  IdT* nodes = nullptr;
  std::int32_t* status = nullptr;
};

std::vector<LogitsParams> request_params(std::int64_t B, const float* temperature, const std::int32_t* top_k,
                                         const float* top_p, const float* min_p) {
  std::vector<LogitsParams> params(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b)
    params[static_cast<std::size_t>(b)] = specdec::detail::request_logits_params(temperature, top_k, top_p, min_p, b);
  return params;
}

// Logits processing, rows spread over threads (each row is independent, so the bits do not depend on the split):
// logits_to_probs_batch row by row.
template <class IdT>
void process_rows(const ParallelFor& parallel_for, const IdT* cu, std::int64_t B, std::int64_t V,
                  const std::vector<LogitsParams>& params, const float* src, std::int64_t rows, std::int64_t src_stride,
                  std::int32_t extra, float* dst, Status* st) {
  for_range(parallel_for, rows, [&](std::int64_t lo, std::int64_t hi) {
    specdec::detail::LogitsScratch scratch;
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t b = specdec::detail::logits_row_request(cu, B, extra, r);
      float* out_row = dst + r * V;
      if (b < 0) {
        std::fill(out_row, out_row + V, 0.0f);
        st[r] = Status::kInvalidArgument;
        continue;
      }
      st[r] = specdec::detail::logits_row(src + r * src_stride, V, params[static_cast<std::size_t>(b)], out_row, scratch,
                                          true);
    }
  });
}

template <class IdT>
void verify_rows_cpu(const CpuRows<IdT>& c, const ParallelFor& parallel_for) {
  const std::int64_t B = c.B, N = c.N, V = c.V, stride = c.stride;
  std::fill(c.out, c.out + B * stride, IdT{-1});
  std::fill(c.nacc, c.nacc + B, 0);
  if (c.parents) std::fill(c.nodes, c.nodes + B * stride, IdT{-1});
  else std::fill(c.flags, c.flags + N, std::uint8_t{0});
  std::fill(c.status, c.status + B, 0);
  const std::vector<LogitsParams> params = request_params(B, c.temperature, c.top_k, c.top_p, c.min_p);
  const bool tree = c.parents != nullptr;
  std::vector<Status> target_rows(static_cast<std::size_t>(N + B), Status::kSuccess);
  // Lazy rows: each request's rows are processed in the verification loop as the chain rule reaches them.
  const bool lazy = !c.all_target_probs && !tree && c.method == VerifyMethod::kToken && !c.draft_rows;
  const float* lg = c.logits;
  const std::int64_t lg_stride = c.logits_stride;
  float* const p = c.probs;  // written here too when rows are processed lazily
  if (N + B > 0 && !lazy) process_rows(parallel_for, c.cu, B, V, params, lg, N + B, lg_stride, 1, p, target_rows.data());
  // Request b's draft rows (from its first draft), or none: deterministic drafts, or a request without draft probs.
  auto draft_rows_of = [&](std::int64_t b, std::int64_t start) -> const float* {
    return c.q && (!c.has_q || c.has_q[b]) ? c.q + start * V : nullptr;
  };
  for_range(parallel_for, B, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<float> tiles(static_cast<std::size_t>(num_tiles(V)));
    specdec::detail::LogitsScratch scratch;
    for (std::int64_t b = lo; b < hi; ++b) {
      const detail::RequestRange range = detail::request_range(c.cu, b, B, N, stride, c.positions);
      Status st = range.status;
      if (st == Status::kSuccess && range.num_drafts > 0 && c.has_q && c.has_q[b] && !c.q) st = Status::kInvalidArgument;
      std::int64_t scan_stop = -1, scan_token = -1;  // greedy_by_scan: the first row not accepted, its argmax
      if (st == Status::kSuccess && lazy) {
        // Row i is processed, and row i + 1 only while the chain rule goes on past draft i; the rows after the stop
        // get logits_row's checks alone, so every row's status is what processing it would give. A greedy request under
        // greedy_by_scan gets only the checks' scan of every row: its argmax decides.
        const LogitsParams& lp = params[static_cast<std::size_t>(b)];
        const bool by_scan = c.greedy_by_scan && lp.temperature == 0.0f;
        const std::int64_t row0 = range.start + b, k = range.num_drafts;
        const float* qb = draft_rows_of(b, range.start);
        std::int64_t i = 0;
        for (; i <= k; ++i) {
          const std::int64_t row = row0 + i;
          if (by_scan) {
            specdec::detail::RowArgmax scan;
            target_rows[row] = specdec::detail::logits_row_check(lg + row * lg_stride, V, lp, scan);
            scan_token = scan.index;
          } else {
            target_rows[row] = specdec::detail::logits_row(lg + row * lg_stride, V, lp, p + row * V, scratch, true);
          }
          if (i == k || target_rows[row] != Status::kSuccess) break;
          const auto x = static_cast<std::int64_t>(c.ids[range.start + i]);  // out of range: the verifier reports it
          if (x < 0 || x >= V) break;
          // greedy: the processed row is one-hot on its argmax
          const bool goes_on = by_scan                 ? x == scan_token
                               : lp.temperature == 0.0f ? p[row * V + x] == 1.0f
                                                        : specdec::detail::chain_continues(
                                                              p + row * V, x, qb ? qb + i * V : nullptr,
                                                              static_cast<std::uint64_t>(c.seeds[b]), c.positions[b] + i, 1.0f);
          if (!goes_on) break;
        }
        if (by_scan) scan_stop = i;
        for (std::int64_t j = i + 1; j <= k; ++j) {
          specdec::detail::RowArgmax scan;
          target_rows[row0 + j] = specdec::detail::logits_row_check(lg + (row0 + j) * lg_stride, V, lp, scan);
        }
      }
      if (st == Status::kSuccess) st = detail::first_failed_row(target_rows.data(), c.draft_rows, range, b);
      if (st == Status::kSuccess) {
        const std::int64_t start = range.start, k = range.num_drafts;
        const float* qb = draft_rows_of(b, start);
        const float* pb = p + (start + b) * V;
        const bool greedy = params[b].temperature == 0.0f;
        const auto seed = static_cast<std::uint64_t>(c.seeds[b]);
        if (scan_stop >= 0) {  // verify_chain_request's checks, then its greedy rule on the scanned argmaxes
          st = specdec::detail::check_chain_request(V, k, c.ids + start, pb, c.positions[b], 1.0f, c.out + b * stride,
                                                    c.nacc + b, tiles.data())
                   .status;
          if (st == Status::kSuccess)
            specdec::detail::write_chain_outcome(k, c.ids + start, scan_stop, scan_token, c.out + b * stride, c.nacc + b,
                                                 c.flags + start);
          c.status[b] = static_cast<std::int32_t>(st);
          continue;
        }
        st = tree ? verify_tree_request<IdT>(V, k, c.ids + start, c.parents + start, qb, pb, seed, c.positions[b], greedy,
                                             c.out + b * stride, c.nodes + b * stride, c.nacc + b, tiles.data())
                  : c.method == VerifyMethod::kBlock
                      ? verify_block_request<IdT>(V, k, c.ids + start, qb, pb, seed, c.positions[b], greedy,
                                                  c.out + b * stride, c.nacc + b, c.flags + start, tiles.data())
                      : verify_chain_request<IdT>(V, k, c.ids + start, qb, pb, seed, c.positions[b], greedy, 1.0f,
                                                  c.out + b * stride, c.nacc + b, c.flags + start, tiles.data());
      }
      c.status[b] = static_cast<std::int32_t>(st);
    }
  });
}

template <class T>
const T* data_of(const std::optional<at::Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

template <class IdT>
VerifyLogitsResult verify_logits_cpu(const VerifyLogitsArgs& a, const detail::Shapes& s) {
  const std::int64_t B = s.B, N = s.N, V = s.V;
  CpuRows<IdT> c;
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
      process_rows(a.parallel_for, c.cu, B, V, request_params(B, c.temperature, c.top_k, c.top_p, c.min_p),
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
  verify_rows_cpu(c, a.parallel_for);
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

HostVerifyResult verify_logits_host(const HostVerifyArgs& a) {
  TORCH_CHECK(a.vocab_size >= 1 && a.vocab_size < (std::int64_t{1} << 31), "vocab_size: expected V in [1, 2^31), got ",
              a.vocab_size);
  TORCH_CHECK(!a.cu_num_draft_tokens.empty(), "cu_num_draft_tokens: expected [B + 1] offsets, got none");
  const auto B = static_cast<std::int64_t>(a.cu_num_draft_tokens.size()) - 1;
  const auto N = static_cast<std::int64_t>(a.draft_token_ids.size());
  const std::int64_t V = a.vocab_size;
  auto check_b = [B](std::size_t n, const char* name, bool optional) {
    TORCH_CHECK((optional && n == 0) || static_cast<std::int64_t>(n) == B, name, ": expected ", B,
                optional ? " values (one per request) or none, got " : " values (one per request), got ", n);
  };
  check_b(a.has_draft_probs.size(), "has_draft_probs", true);
  check_b(a.temperature.size(), "temperature", true);
  check_b(a.top_k.size(), "top_k", true);
  check_b(a.top_p.size(), "top_p", true);
  check_b(a.min_p.size(), "min_p", true);
  check_b(a.seeds.size(), "seeds", false);
  check_b(a.positions.size(), "positions", false);
  const bool tree = !a.parents.empty();
  TORCH_CHECK(!tree || static_cast<std::int64_t>(a.parents.size()) == N, "parents: expected ", N,
              " values (one per draft) or none, got ", a.parents.size());
  TORCH_CHECK(a.target_logits != nullptr || N + B == 0, "target_logits: expected [N + B, V] = [", N + B, ", ", V,
              "] floats, got none");
  TORCH_CHECK(N + B <= 1 || a.target_logits_stride >= V, "target_logits_stride: expected rows at least V = ", V,
              " floats apart, got ", a.target_logits_stride);
  TORCH_CHECK(a.workspace != nullptr || N + B == 0, "workspace: expected [N + B, V] = [", N + B, ", ", V,
              "] floats, got none");
  TORCH_CHECK(a.max_num_draft_tokens >= -1, "max_num_draft_tokens: expected >= 0 (or -1), got ", a.max_num_draft_tokens);
  TORCH_CHECK(a.method == VerifyMethod::kToken || a.method == VerifyMethod::kBlock, "method: expected token or block, got ",
              static_cast<int>(a.method));
  TORCH_CHECK(a.method != VerifyMethod::kBlock || !tree,
              "method: expected token for tree verification (block verification applies to chains), got block");
  std::int64_t width = a.max_num_draft_tokens;
  if (width < 0) {
    width = 0;
    for (std::int64_t b = 0; b < B; ++b) width = std::max(width, a.cu_num_draft_tokens[b + 1] - a.cu_num_draft_tokens[b]);
  }
  HostVerifyResult r;
  r.stride = width + 1;
  r.output_token_ids.resize(static_cast<std::size_t>(B * r.stride));
  r.num_accepted.resize(static_cast<std::size_t>(B));
  if (tree) r.accepted_nodes.resize(static_cast<std::size_t>(B * r.stride));
  else r.accepted.resize(static_cast<std::size_t>(N));
  r.status.resize(static_cast<std::size_t>(B));
  auto opt = [](auto span) { return span.empty() ? nullptr : span.data(); };
  CpuRows<std::int64_t> c;
  c.B = B;
  c.N = N;
  c.V = V;
  c.stride = r.stride;
  c.logits = a.target_logits;
  c.logits_stride = a.target_logits_stride;
  c.cu = a.cu_num_draft_tokens.data();
  c.ids = a.draft_token_ids.data();
  c.parents = tree ? a.parents.data() : nullptr;
  c.q = a.draft_probs;
  c.has_q = opt(a.has_draft_probs);
  c.temperature = opt(a.temperature);
  c.top_k = opt(a.top_k);
  c.top_p = opt(a.top_p);
  c.min_p = opt(a.min_p);
  c.seeds = a.seeds.data();
  c.positions = a.positions.data();
  c.method = a.method;
  c.all_target_probs = a.all_target_probs;
  c.greedy_by_scan = true;  // no target_probs come back from this entry
  c.probs = a.workspace;
  c.out = r.output_token_ids.data();
  c.nacc = r.num_accepted.data();
  c.flags = tree ? nullptr : r.accepted.data();
  c.nodes = tree ? r.accepted_nodes.data() : nullptr;
  c.status = r.status.data();
  verify_rows_cpu(c, a.parallel_for);
  return r;
}

void check_verify_status(const VerifyLogitsResult& result, const char* op) {
  const at::Tensor host = result.status.to(at::kCPU, at::kInt).contiguous();
  const auto* st = host.data_ptr<std::int32_t>();
  for (std::int64_t b = 0; b < host.numel(); ++b)
    TORCH_CHECK(st[b] == 0, op, ": request ", b, " failed: ", to_string(static_cast<Status>(st[b])), ": ",
                detail::blame(static_cast<Status>(st[b])));
}

}  // namespace specdec::torch
