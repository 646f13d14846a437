// specdec — internals of the CPU verification path on plain arrays, shared by the host entry (specdec::verify,
// src/verify/) and the torch entry on CPU tensors (src/torch/verify_logits.cpp): the rows and outputs of one call, the
// logits processing of its rows and the per-request verification. Compiled once into specdec::verify (int32 and int64
// ids).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/logits_core.hpp"
#include "specdec/sampling/status.hpp"
#include "specdec/verify/host.hpp"

namespace specdec::detail {

/// Runs body(lo, hi) over disjoint ranges covering [0, n) and returns when all are done.
using RangeFor = std::function<void(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body)>;

/// body over [0, n): through range_for, or as body(0, n) on the calling thread when range_for is empty.
void run_ranges(const RangeFor& range_for, std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body);

/// A RangeFor on a caller's per-index ParallelFor: one index a call, the first exception rethrown once all are done.
/// Empty when parallel_for is.
RangeFor ranges_of(const ParallelFor& parallel_for);

/// One call's rows and outputs on plain arrays (no tensor is made or read).
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
  const std::uint8_t* block = nullptr;  // chains: [B] per-request methods (1 = block) overriding `method`, or none
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

/// Each request's processing parameters (sampling/logits_core.hpp) from the optional [B] arrays.
std::vector<LogitsParams> request_params(std::int64_t B, const float* temperature, const std::int32_t* top_k,
                                         const float* top_p, const float* min_p);

/// Logits processing of `rows` rows (row r belongs to request logits_row_request(cu, B, extra, r)), spread over
/// threads; each row is independent, so the bits do not depend on the split.
template <class IdT>
void process_rows(const RangeFor& range_for, const IdT* cu, std::int64_t B, std::int64_t V,
                  const std::vector<LogitsParams>& params, const float* src, std::int64_t rows, std::int64_t src_stride,
                  std::int32_t extra, float* dst, Status* st);

/// Processing and verification of every request of `c`; every output element is written.
template <class IdT>
void verify_rows_cpu(const CpuRows<IdT>& c, const RangeFor& range_for);

extern template void process_rows<std::int32_t>(const RangeFor&, const std::int32_t*, std::int64_t, std::int64_t,
                                                const std::vector<LogitsParams>&, const float*, std::int64_t,
                                                std::int64_t, std::int32_t, float*, Status*);
extern template void process_rows<std::int64_t>(const RangeFor&, const std::int64_t*, std::int64_t, std::int64_t,
                                                const std::vector<LogitsParams>&, const float*, std::int64_t,
                                                std::int64_t, std::int32_t, float*, Status*);
extern template void verify_rows_cpu<std::int32_t>(const CpuRows<std::int32_t>&, const RangeFor&);
extern template void verify_rows_cpu<std::int64_t>(const CpuRows<std::int64_t>&, const RangeFor&);

}  // namespace specdec::detail
