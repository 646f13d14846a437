// specdec — the CPU verification path on plain arrays (include/specdec/verify/detail/cpu_rows.hpp): logits processing
// of the target (and draft) rows with the shared logits core, then the single-request chain, block and tree verifiers,
// requests spread over the caller's threads.
#include "specdec/verify/detail/cpu_rows.hpp"

#include <algorithm>
#include <exception>
#include <mutex>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/tree.hpp"
#include "specdec/verify/status_rule.hpp"

namespace specdec::detail {

void run_ranges(const RangeFor& range_for, std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  if (range_for) range_for(n, body);
  else body(0, n);
}

RangeFor ranges_of(const ParallelFor& parallel_for) {
  if (!parallel_for) return {};
  return [parallel_for](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
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
  };
}

std::vector<LogitsParams> request_params(std::int64_t B, const float* temperature, const std::int32_t* top_k,
                                         const float* top_p, const float* min_p) {
  std::vector<LogitsParams> params(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b)
    params[static_cast<std::size_t>(b)] = specdec::detail::request_logits_params(temperature, top_k, top_p, min_p, b);
  return params;
}
template <class IdT>
void process_rows(const RangeFor& range_for, const IdT* cu, std::int64_t B, std::int64_t V,
                  const std::vector<LogitsParams>& params, const float* src, std::int64_t rows, std::int64_t src_stride,
                  std::int32_t extra, float* dst, Status* st) {
  run_ranges(range_for, rows, [&](std::int64_t lo, std::int64_t hi) {
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
void verify_rows_cpu(const CpuRows<IdT>& c, const RangeFor& range_for) {
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
  const bool lazy = !c.all_target_probs && !tree && c.method == VerifyMethod::kToken && !c.block && !c.draft_rows;
  const float* lg = c.logits;
  const std::int64_t lg_stride = c.logits_stride;
  float* const p = c.probs;  // written here too when rows are processed lazily
  if (N + B > 0 && !lazy) process_rows(range_for, c.cu, B, V, params, lg, N + B, lg_stride, 1, p, target_rows.data());
  // Request b's draft rows (from its first draft), or none: deterministic drafts, or a request without draft probs.
  auto draft_rows_of = [&](std::int64_t b, std::int64_t start) -> const float* {
    return c.q && (!c.has_q || c.has_q[b]) ? c.q + start * V : nullptr;
  };
  run_ranges(range_for, B, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<float> tiles(static_cast<std::size_t>(num_tiles(V)));
    specdec::detail::LogitsScratch scratch;
    for (std::int64_t b = lo; b < hi; ++b) {
      const RequestRange range = request_range(c.cu, b, B, N, stride, c.positions);
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
      if (st == Status::kSuccess) st = first_failed_row(target_rows.data(), c.draft_rows, range, b);
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
                  : (c.block ? c.block[b] != 0 : c.method == VerifyMethod::kBlock)
                      ? verify_block_request<IdT>(V, k, c.ids + start, qb, pb, seed, c.positions[b], greedy,
                                                  c.out + b * stride, c.nacc + b, c.flags + start, tiles.data())
                      : verify_chain_request<IdT>(V, k, c.ids + start, qb, pb, seed, c.positions[b], greedy, 1.0f,
                                                  c.out + b * stride, c.nacc + b, c.flags + start, tiles.data());
      }
      c.status[b] = static_cast<std::int32_t>(st);
    }
  });
}

template void process_rows<std::int32_t>(const RangeFor&, const std::int32_t*, std::int64_t, std::int64_t,
                                         const std::vector<LogitsParams>&, const float*, std::int64_t, std::int64_t,
                                         std::int32_t, float*, Status*);
template void process_rows<std::int64_t>(const RangeFor&, const std::int64_t*, std::int64_t, std::int64_t,
                                         const std::vector<LogitsParams>&, const float*, std::int64_t, std::int64_t,
                                         std::int32_t, float*, Status*);
template void verify_rows_cpu<std::int32_t>(const CpuRows<std::int32_t>&, const RangeFor&);
template void verify_rows_cpu<std::int64_t>(const CpuRows<std::int64_t>&, const RangeFor&);

}  // namespace specdec::detail
