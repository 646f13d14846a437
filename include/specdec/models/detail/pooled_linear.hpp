// Internal: one block-format product spread over the forward's thread pool (src/models/cpu/pooled_linear.cpp), the call
// every packed matrix of the Llama forward goes through and the benchmarks time. Not a stable API.
#pragma once

#include <cstdint>
#include <functional>

#include "specdec/models/detail/packed_matrix.hpp"
#include "specdec/models/detail/row_pool.hpp"

namespace specdec::models::detail {

/// Fills rows [begin, end) of a product's input before they are quantised (an RMSNorm or SiLU step), on the thread that
/// quantises them.
using RowPrep = std::function<void(std::int64_t begin, std::int64_t end)>;

/// y[t, 0 .. m.rows()) (+)= m x[t] for the n rows of x (m.cols() floats each, contiguous): the rows are quantised into q
/// in `planes` planes, after `prep` (when given) fills them, in the pool call's prologue, in chunks of ceil(n / threads)
/// rows (16 for a prompt); each thread then streams its own contiguous share of the tiles (the hardware prefetcher follows
/// one run instead of restarting at every chunk: the 1-token forward measured 12-25% faster than with chunks from a
/// shared counter), in pieces of about an eighth of a share (a 32nd for long prompts), whole runs of 4 tiles (the
/// kernel's widest step), so a thread that finishes early takes at most a piece from the back of another's share. Every
/// output is computed alone, so the split changes no bit.
void pooled_packed_linear(RowPool& pool, const PackedMatrix& m, const float* x, std::int64_t n, std::int64_t planes,
                          QuantizedRows& q, float* y, std::int64_t ldy, bool accumulate, const RowPrep& prep = {});

}  // namespace specdec::models::detail
