// specdec — tensor front of the verifiers: every check in one place, then the CPU core (parallel over requests)
// or the CUDA kernels.
// The deprecated probabilities-in entries, tested (or defined) here.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "specdec/torch/rejection_sample.hpp"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/tree.hpp"
#if defined(SPECDEC_TORCH_HAS_CUDA)
#include "specdec/torch/cuda_dispatch.hpp"
#endif

namespace specdec::torch {
namespace {

std::string shape_of(const at::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

std::string dtype_of(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

void check_dtype(const at::Tensor& t, const char* name, std::initializer_list<at::ScalarType> allowed,
                 const char* expected) {
  bool ok = false;
  for (auto s : allowed) ok |= t.scalar_type() == s;
  TORCH_CHECK(ok, name, ": expected ", expected, ", got ", dtype_of(t));
}

void check_layout(const at::Tensor& t, const char* name, const at::Tensor& ref, std::int64_t dims,
                  const std::string& expected_shape) {
  TORCH_CHECK(t.defined(), name, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK(t.dim() == dims, name, ": expected a ", dims, "-D tensor ", expected_shape, ", got shape ",
              shape_of(t));
  TORCH_CHECK(t.device() == ref.device(), name, ": expected a tensor on ", ref.device().str(),
              " (the device of target_probs), got ", t.device().str());
  TORCH_CHECK(t.is_contiguous(), name, ": expected a contiguous tensor, got strides [",
              fmt::format("{}", fmt::join(t.strides(), ", ")), "]");
}

std::int64_t as_i64(const at::Tensor& t, std::int64_t i) {
  return t.scalar_type() == at::kInt ? t.data_ptr<std::int32_t>()[i] : t.data_ptr<std::int64_t>()[i];
}

/// Shapes and host-checked facts of a ragged batch.
struct Batch {
  std::int64_t B = 0, N = 0, V = 0, max_k = 0;
};

Batch check_batch(const at::Tensor& ids, const at::Tensor* parents, const at::Tensor& cu,
                  const std::optional<at::Tensor>& draft_probs, const at::Tensor& target, const at::Tensor& seeds,
                  const at::Tensor& positions, const std::optional<at::Tensor>& greedy,
                  const RejectionSampleOptions& options, const std::optional<at::Tensor>& has_draft_probs) {
  TORCH_CHECK(target.defined(), "target_probs: expected a tensor, got an undefined tensor");
  TORCH_CHECK(target.dim() == 2, "target_probs: expected a 2-D tensor [N + B, V], got shape ", shape_of(target));
  Batch b;
  b.V = target.size(1);
  TORCH_CHECK(b.V > 0, "target_probs: expected V > 0 columns, got shape ", shape_of(target));
  TORCH_CHECK(b.V <= std::numeric_limits<std::int32_t>::max(), "target_probs: expected V < 2^31, got ", b.V);
  const bool cuda = target.is_cuda();
  TORCH_CHECK(target.is_cpu() || cuda, "target_probs: expected a CPU or CUDA tensor, got ", target.device().str());
  if (cuda)
    check_dtype(target, "target_probs", {at::kFloat, at::kHalf, at::kBFloat16}, "float32, float16 or bfloat16");
  else
    check_dtype(target, "target_probs", {at::kFloat}, "float32 (on CPU)");
  TORCH_CHECK(target.is_contiguous(), "target_probs: expected a contiguous tensor, got strides [",
              fmt::format("{}", fmt::join(target.strides(), ", ")), "]");

  check_layout(ids, "draft_token_ids", target, 1, "[N]");
  check_dtype(ids, "draft_token_ids", {at::kInt, at::kLong}, "int32 or int64");
  check_layout(cu, "cu_num_draft_tokens", target, 1, "[B + 1]");
  check_dtype(cu, "cu_num_draft_tokens", {at::kInt, at::kLong}, "int32 or int64");
  TORCH_CHECK(cu.numel() >= 1, "cu_num_draft_tokens: expected B + 1 >= 1 entries, got 0");
  b.B = cu.numel() - 1;
  b.N = ids.numel();
  TORCH_CHECK(target.size(0) == b.N + b.B, "target_probs: expected N + B = ", b.N, " + ", b.B, " = ", b.N + b.B,
              " rows (K_b + 1 per request), got ", target.size(0));
  if (parents) {
    check_layout(*parents, "parents", target, 1, "[N]");
    TORCH_CHECK(parents->scalar_type() == ids.scalar_type(), "parents: expected ", dtype_of(ids),
                " (the dtype of draft_token_ids), got ", dtype_of(*parents));
    TORCH_CHECK(parents->numel() == b.N, "parents: expected ", b.N, " entries (one per draft token), got ",
                parents->numel());
  }
  if (draft_probs) {
    check_layout(*draft_probs, "draft_probs", target, 2, "[N, V]");
    TORCH_CHECK(draft_probs->scalar_type() == target.scalar_type(), "draft_probs: expected ", dtype_of(target),
                " (the dtype of target_probs), got ", dtype_of(*draft_probs));
    TORCH_CHECK(draft_probs->size(0) == b.N && draft_probs->size(1) == b.V, "draft_probs: expected shape [", b.N,
                ", ", b.V, "] (N drafts, the V of target_probs), got ", shape_of(*draft_probs));
  }
  check_layout(seeds, "seeds", target, 1, "[B]");
  check_dtype(seeds, "seeds", {at::kLong}, "int64");
  TORCH_CHECK(seeds.numel() == b.B, "seeds: expected ", b.B, " entries (one per request), got ", seeds.numel());
  check_layout(positions, "positions", target, 1, "[B]");
  check_dtype(positions, "positions", {at::kLong}, "int64");
  TORCH_CHECK(positions.numel() == b.B, "positions: expected ", b.B, " entries (one per request), got ",
              positions.numel());
  if (greedy) {
    check_layout(*greedy, "greedy", target, 1, "[B]");
    check_dtype(*greedy, "greedy", {at::kBool, at::kByte}, "bool or uint8");
    TORCH_CHECK(greedy->numel() == b.B, "greedy: expected ", b.B, " entries (one per request), got ",
                greedy->numel());
  }
  if (has_draft_probs) {
    check_layout(*has_draft_probs, "has_draft_probs", target, 1, "[B]");
    check_dtype(*has_draft_probs, "has_draft_probs", {at::kBool, at::kByte}, "bool or uint8");
    TORCH_CHECK(has_draft_probs->numel() == b.B, "has_draft_probs: expected ", b.B,
                " entries (one per request), got ", has_draft_probs->numel());
  }
  TORCH_CHECK(options.lenience > 0.0 && options.lenience <= 1.0, "lenience: expected a value in (0, 1], got ",
              options.lenience);
  TORCH_CHECK(options.method == VerifyMethod::kToken || options.method == VerifyMethod::kBlock,
              "method: expected token or block, got ", static_cast<int>(options.method));
  TORCH_CHECK(options.method != VerifyMethod::kBlock || options.lenience == 1.0,
              "lenience: expected 1 with block verification (it is lossless only), got ", options.lenience);
  TORCH_CHECK(options.method != VerifyMethod::kBlock || parents == nullptr,
              "method: expected token for tree verification (block verification applies to chains), got block");
  // On CUDA the values (cu monotone with cu[B] == N, ids, positions, parents, draft kinds, probabilities) are
  // checked on the device, per request, and reported after the launch.
  if (cuda) return b;

  TORCH_CHECK(as_i64(cu, 0) == 0, "cu_num_draft_tokens: expected cu[0] == 0, got ", as_i64(cu, 0));
  for (std::int64_t r = 0; r < b.B; ++r) {
    const std::int64_t k = as_i64(cu, r + 1) - as_i64(cu, r);
    TORCH_CHECK(k >= 0, "cu_num_draft_tokens: expected non-decreasing offsets, got cu[", r + 1, "] = ",
                as_i64(cu, r + 1), " < cu[", r, "] = ", as_i64(cu, r));
    b.max_k = std::max(b.max_k, k);
  }
  TORCH_CHECK(as_i64(cu, b.B) == b.N, "cu_num_draft_tokens: expected cu[B] == N = ", b.N,
              " (the length of draft_token_ids), got ", as_i64(cu, b.B));
  // Rows of draft_probs the verifier reads: every row, or those of the requests flagged in has_draft_probs.
  std::vector<std::uint8_t> q_rows_read;
  if (has_draft_probs) {
    const auto* flags = static_cast<const std::uint8_t*>(has_draft_probs->data_ptr());
    q_rows_read.assign(static_cast<std::size_t>(b.N), 0);
    for (std::int64_t r = 0; r < b.B; ++r) {
      const std::int64_t k = as_i64(cu, r + 1) - as_i64(cu, r);
      TORCH_CHECK(!(flags[r] && k > 0 && !draft_probs), "has_draft_probs: expected 0 for a request with drafts when "
                  "draft_probs is absent, got ", static_cast<int>(flags[r]), " for request ", r);
      if (flags[r])
        for (std::int64_t j = as_i64(cu, r); j < as_i64(cu, r + 1); ++j) q_rows_read[j] = 1;
    }
  }
  for (std::int64_t j = 0; j < b.N; ++j) {
    const std::int64_t x = as_i64(ids, j);
    TORCH_CHECK(x >= 0 && x < b.V, "draft_token_ids: expected ids in [0, ", b.V, ") (V of target_probs), got ", x,
                " at index ", j);
  }
  const std::int64_t* pos = positions.data_ptr<std::int64_t>();
  for (std::int64_t r = 0; r < b.B; ++r)
    TORCH_CHECK(pos[r] >= 0, "positions: expected values >= 0, got ", pos[r], " for request ", r);
  if (parents) {
    for (std::int64_t r = 0; r < b.B; ++r)
      for (std::int64_t j = as_i64(cu, r); j < as_i64(cu, r + 1); ++j) {
        const std::int64_t local = j - as_i64(cu, r), par = as_i64(*parents, j);
        TORCH_CHECK(par >= 0 && par <= local, "parents: expected parents[", j, "] (draft ", local, " of request ", r,
                    ") in [0, ", local, "] (an earlier node; 0 is the root), got ", par);
      }
  }
  if (options.validate_probs) {
    auto scan = [&](const at::Tensor& t, const char* name, const std::vector<std::uint8_t>& only_rows) {
      const float* data = t.data_ptr<float>();
      const std::int64_t rows = t.size(0), V = b.V;
      std::atomic<std::int64_t> bad_row{rows};
      at::parallel_for(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
          if (!only_rows.empty() && !only_rows[r]) continue;  // a row of a request without draft probs: never read
          const float* row = data + r * V;
          bool ok = true;
          float mass = 0.0f;
          for (std::int64_t x = 0; x < V; ++x) {
            ok &= valid_probability(row[x]);
            mass += row[x] > 0.0f ? 1.0f : 0.0f;
          }
          if (!ok || mass == 0.0f) {
            std::int64_t cur = bad_row.load();
            while (r < cur && !bad_row.compare_exchange_weak(cur, r)) {
            }
          }
        }
      });
      const std::int64_t r = bad_row.load();
      if (r == rows) return;
      const float* row = data + r * V;
      for (std::int64_t x = 0; x < V; ++x)
        TORCH_CHECK(valid_probability(row[x]), name, ": expected finite, non-negative probabilities, got ", row[x],
                    " at [", r, ", ", x, "]");
      TORCH_CHECK(false, name, ": expected every row to have positive mass, row ", r, " is all zeros");
    };
    scan(target, "target_probs", {});
    if (draft_probs) scan(*draft_probs, "draft_probs", q_rows_read);
  }
  return b;
}

[[noreturn]] void raise(const VerifyResult& r, const char* op) {
  const std::string where = r.position >= 0 ? fmt::format(" at draft position {}", r.position) : std::string();
  switch (r.status) {
    case Status::kInvalidProbability:
      TORCH_CHECK(false, op, ": target_probs/draft_probs: expected finite, non-negative probabilities in the rows of "
                  "request ", r.request, where, ", got a NaN, infinite or negative value (", to_string(r), ")");
    case Status::kZeroMass:
      TORCH_CHECK(false, op, ": target_probs: expected positive mass in the rows of request ", r.request, where,
                  ", got a row that is all zeros");
    default:
      TORCH_CHECK(false, op, ": ", to_string(r));
  }
}

/// Runs `one(b, scratch)` for every request in parallel; returns the lowest failing request's result.
template <class One>
VerifyResult for_each_request(std::int64_t B, std::int64_t V, const One& one) {
  std::vector<VerifyResult> failures(static_cast<std::size_t>(B));
  at::parallel_for(0, B, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(num_tiles(V)));
    for (std::int64_t b = begin; b < end; ++b) failures[b] = one(b, scratch.data());
  });
  for (const auto& f : failures)
    if (!f.ok()) return f;
  return {};
}

const std::uint8_t* flags_of(const std::optional<at::Tensor>& t) {
  return t ? static_cast<const std::uint8_t*>(t->data_ptr()) : nullptr;
}

template <class IdT, class OffT>
RejectionSampleResult chain_cpu(const Batch& b, const at::Tensor& ids, const at::Tensor& cu,
                                const std::optional<at::Tensor>& draft_probs, const at::Tensor& target,
                                const at::Tensor& seeds, const at::Tensor& positions,
                                const std::optional<at::Tensor>& greedy, double lenience, VerifyMethod method,
                                const std::optional<at::Tensor>& has_draft_probs) {
  const std::int64_t stride = b.max_k + 1;
  RejectionSampleResult out{at::full({b.B, stride}, -1, ids.options()),
                            at::empty({b.B}, ids.options().dtype(at::kInt)),
                            at::empty({b.N}, ids.options().dtype(at::kBool))};
  ChainVerifyArgs<IdT, OffT> a;
  a.batch_size = b.B;
  a.vocab_size = b.V;
  a.cu_num_draft_tokens = cu.data_ptr<OffT>();
  a.draft_token_ids = ids.data_ptr<IdT>();
  a.draft_probs = draft_probs ? draft_probs->data_ptr<float>() : nullptr;
  a.target_probs = target.data_ptr<float>();
  a.seeds = reinterpret_cast<const std::uint64_t*>(seeds.data_ptr<std::int64_t>());
  a.positions = positions.data_ptr<std::int64_t>();
  a.greedy = flags_of(greedy);
  a.lenience = static_cast<float>(lenience);
  a.has_draft_probs = flags_of(has_draft_probs);
  a.draft_token_ids_size = ids.numel();
  a.draft_probs_size = draft_probs ? draft_probs->numel() : -1;
  a.target_probs_size = target.numel();
  IdT* tokens = out.output_token_ids.data_ptr<IdT>();
  std::int32_t* counts = out.num_accepted.data_ptr<std::int32_t>();
  auto* flags = static_cast<std::uint8_t*>(out.accepted.data_ptr());
  std::int64_t max_k = 0;  // the core's own checks, once (the tensor checks above already passed them)
  if (const VerifyResult c = specdec::detail::check_chain(a, ChainVerifyOutputs<IdT>{tokens, stride, counts, flags}, max_k);
      !c.ok())
    raise(c, "rejection_sample");
  const bool block = method == VerifyMethod::kBlock;
  const VerifyResult r = for_each_request(b.B, b.V, [&](std::int64_t i, float* scratch) {
    return block ? verify_block_one(a, i, tokens + i * stride, counts + i, flags, scratch)
                 : verify_chain_one(a, i, tokens + i * stride, counts + i, flags, scratch);
  });
  if (!r.ok()) raise(r, "rejection_sample");
  return out;
}

template <class IdT, class OffT>
TreeRejectionSampleResult tree_cpu(const Batch& b, const at::Tensor& ids, const at::Tensor& parents,
                                   const at::Tensor& cu, const std::optional<at::Tensor>& draft_probs,
                                   const at::Tensor& target, const at::Tensor& seeds, const at::Tensor& positions,
                                   const std::optional<at::Tensor>& greedy,
                                   const std::optional<at::Tensor>& has_draft_probs) {
  const std::int64_t stride = b.max_k + 1, V = b.V;
  TreeRejectionSampleResult out{at::full({b.B, stride}, -1, ids.options()),
                                at::empty({b.B}, ids.options().dtype(at::kInt)),
                                at::full({b.B, stride}, -1, ids.options())};
  TreeVerifyArgs<IdT, OffT> a;
  a.batch_size = b.B;
  a.vocab_size = V;
  a.cu_num_draft_tokens = cu.data_ptr<OffT>();
  a.draft_token_ids = ids.data_ptr<IdT>();
  a.parents = parents.data_ptr<IdT>();
  a.draft_probs = draft_probs ? draft_probs->data_ptr<float>() : nullptr;
  a.target_probs = target.data_ptr<float>();
  a.seeds = reinterpret_cast<const std::uint64_t*>(seeds.data_ptr<std::int64_t>());
  a.positions = positions.data_ptr<std::int64_t>();
  a.greedy = flags_of(greedy);
  a.has_draft_probs = flags_of(has_draft_probs);
  a.draft_token_ids_size = ids.numel();
  a.parents_size = parents.numel();
  a.draft_probs_size = draft_probs ? draft_probs->numel() : -1;
  a.target_probs_size = target.numel();
  IdT* tokens = out.output_token_ids.data_ptr<IdT>();
  IdT* nodes = out.accepted_nodes.data_ptr<IdT>();
  std::int32_t* counts = out.num_accepted.data_ptr<std::int32_t>();
  std::int64_t max_k = 0;  // the core's own checks, once (the tensor checks above already passed them)
  if (const VerifyResult c = specdec::detail::check_batch<IdT, OffT>(
          b.B, V, a.cu_num_draft_tokens, a.draft_token_ids, a.parents, true, a.draft_probs, a.has_draft_probs,
          a.target_probs, a.seeds, a.positions, stride,
          specdec::detail::BatchSizes{a.draft_token_ids_size, a.parents_size, a.draft_probs_size, a.target_probs_size}, max_k);
      !c.ok())
    raise(c, "tree_rejection_sample");
  const VerifyResult r = for_each_request(b.B, V, [&](std::int64_t i, float* scratch) {
    return verify_tree_one(a, i, tokens + i * stride, nodes + i * stride, counts + i, scratch);
  });
  if (!r.ok()) raise(r, "tree_rejection_sample");
  return out;
}

template <class F>
auto dispatch_ids(const at::Tensor& ids, const at::Tensor& cu, const F& f) {
  if (ids.scalar_type() == at::kInt)
    return cu.scalar_type() == at::kInt ? f(std::int32_t{}, std::int32_t{}) : f(std::int32_t{}, std::int64_t{});
  return cu.scalar_type() == at::kInt ? f(std::int64_t{}, std::int32_t{}) : f(std::int64_t{}, std::int64_t{});
}

#if !defined(SPECDEC_TORCH_HAS_CUDA)
[[noreturn]] void no_cuda(const at::Tensor& t) {
  TORCH_CHECK(false, "target_probs: expected a CPU tensor (this build of specdec has no CUDA support), got ",
              t.device().str());
}
#endif

}  // namespace

RejectionSampleResult rejection_sample(const at::Tensor& draft_token_ids, const at::Tensor& cu_num_draft_tokens,
                                       const std::optional<at::Tensor>& draft_probs, const at::Tensor& target_probs,
                                       const at::Tensor& seeds, const at::Tensor& positions,
                                       const std::optional<at::Tensor>& greedy,
                                       const RejectionSampleOptions& options,
                                       const std::optional<at::Tensor>& has_draft_probs) {
  const Batch b = check_batch(draft_token_ids, nullptr, cu_num_draft_tokens, draft_probs, target_probs, seeds,
                              positions, greedy, options, has_draft_probs);
  if (target_probs.is_cuda()) {
#if defined(SPECDEC_TORCH_HAS_CUDA)
    return rejection_sample_cuda(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, seeds, positions,
                                 greedy, options, has_draft_probs);
#else
    no_cuda(target_probs);
#endif
  }
  return dispatch_ids(draft_token_ids, cu_num_draft_tokens, [&](auto id, auto off) {
    return chain_cpu<decltype(id), decltype(off)>(b, draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs,
                                                  seeds, positions, greedy, options.lenience, options.method,
                                                  has_draft_probs);
  });
}

TreeRejectionSampleResult tree_rejection_sample(const at::Tensor& draft_token_ids, const at::Tensor& parents,
                                                const at::Tensor& cu_num_draft_tokens,
                                                const std::optional<at::Tensor>& draft_probs,
                                                const at::Tensor& target_probs, const at::Tensor& seeds,
                                                const at::Tensor& positions, const std::optional<at::Tensor>& greedy,
                                                const RejectionSampleOptions& options,
                                                const std::optional<at::Tensor>& has_draft_probs) {
  TORCH_CHECK(options.lenience == 1.0, "lenience: expected 1 for tree verification (lenience applies to chains), got ",
              options.lenience);
  const Batch b = check_batch(draft_token_ids, &parents, cu_num_draft_tokens, draft_probs, target_probs, seeds,
                              positions, greedy, options, has_draft_probs);
  if (target_probs.is_cuda()) {
#if defined(SPECDEC_TORCH_HAS_CUDA)
    return tree_rejection_sample_cuda(draft_token_ids, parents, cu_num_draft_tokens, draft_probs, target_probs, seeds,
                                      positions, greedy, options, has_draft_probs);
#else
    no_cuda(target_probs);
#endif
  }
  return dispatch_ids(draft_token_ids, cu_num_draft_tokens, [&](auto id, auto off) {
    return tree_cpu<decltype(id), decltype(off)>(b, draft_token_ids, parents, cu_num_draft_tokens, draft_probs,
                                                 target_probs, seeds, positions, greedy, has_draft_probs);
  });
}

}  // namespace specdec::torch
