// The portable packed product: plain scalar C++, exactly the arithmetic of packed_matrix.hpp's file comment. It is the
// reference the vector paths are tested against bit for bit, and the path of CPUs without AVX2. One or two activation planes.
#include <cmath>
#include <cstring>

#include "specdec/models/detail/packed_kernels.hpp"

namespace specdec::models::detail {

void packed_linear_portable(const PackedArgs& a) {
  const PackedMatrix& w = *a.w;
  const PackedMatrix::Layout& L = w.layout();
  const QuantizedRows& x = *a.x;
  const std::int64_t blocks = w.cols() / w.block();
  for (std::int64_t t = a.tile_begin; t < a.tile_end; ++t) {
    const std::byte* tile = w.tile(t);
    for (std::int64_t lane = 0; lane < kTileRows && t * kTileRows + lane < w.rows(); ++lane) {
      const std::int64_t o = t * kTileRows + lane;
      for (std::int64_t i = 0; i < x.n; ++i) {
        float acc = 0.f;
        for (std::int64_t b = 0; b < blocks; ++b) {
          const std::byte* vb = L.values(tile, b);
          const std::byte* xb = x.block_ptr(i, b);
          const auto* q = reinterpret_cast<const std::int8_t*>(xb);
          const std::int64_t head = x.planes * L.block;
          float dx;
          std::int32_t sum_q;
          std::memcpy(&dx, xb + head, 4);
          std::memcpy(&sum_q, xb + head + 4, 4);
          std::int32_t s = 0, s2 = 0;
          for (std::int64_t e = 0; e < L.block; ++e) {
            const int u = L.value(vb, lane, e);
            s += u * q[e];
            if (x.planes == 2) s2 += u * q[L.block + e];
          }
          if (x.planes == 2) s = 256 * s + s2;
          const float f = static_cast<float>(s - L.zero * sum_q);
          float d, m;
          L.scale_min(tile, b, lane, d, m);
          const float e = L.has_min ? std::fma(d, f, m * static_cast<float>(sum_q)) : d * f;
          acc = std::fma(e, dx, acc);
        }
        float& dst = a.y[i * a.ldy + o];
        dst = a.accumulate ? dst + acc : acc;
      }
    }
  }
}

}  // namespace specdec::models::detail
