// A block-format product over the forward's thread pool. See include/specdec/models/detail/pooled_linear.hpp.
#include "specdec/models/detail/pooled_linear.hpp"

#include <algorithm>

namespace specdec::models::detail {

void pooled_packed_linear(RowPool& pool, const PackedMatrix& m, const float* x, std::int64_t n, std::int64_t planes,
                          QuantizedRows& q, float* y, std::int64_t ldy, bool accumulate, const RowPrep& prep) {
  const std::int64_t cols = m.cols(), tiles = m.tiles();
  prepare_rows(q, n, cols, m.block(), planes);
  if (pool.size() == 1) {
    if (prep) prep(0, n);
    quantize_rows(x, 0, n, cols, q);
    m.linear(q, 0, tiles, y, ldy, accumulate);
    return;
  }
  const std::int64_t per = n >= 32 ? 16 : (n + pool.size() - 1) / pool.size();
  const std::int64_t per_thread = n > 16 ? 32 : 8;
  const std::int64_t target = (tiles + per_thread * pool.size() - 1) / (per_thread * pool.size());
  const std::int64_t step = std::max<std::int64_t>(n > 16 ? 1 : 4, (target + 3) / 4 * 4);
  pool.run_ranges(
      tiles, step, [&](std::int64_t begin, std::int64_t end) { m.linear(q, begin, end, y, ldy, accumulate); },
      (n + per - 1) / per, [&](std::int64_t c) {
        const std::int64_t b = c * per, e = std::min(n, b + per);
        if (prep) prep(b, e);
        quantize_rows(x, b, e, cols, q);
      });
}

}  // namespace specdec::models::detail
