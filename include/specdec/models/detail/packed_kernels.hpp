// Internal: the packed products of PackedMatrix::linear, one per instruction set (src/models/packed_linear*.cpp). Each
// computes exactly the arithmetic of packed_matrix.hpp's file comment. Arguments are checked by PackedMatrix::linear.
#pragma once

#include <cstdint>

#include "specdec/models/detail/packed_matrix.hpp"

namespace specdec::models::detail {

struct PackedArgs {
  const PackedMatrix* w;
  const QuantizedRows* x;
  std::int64_t tile_begin, tile_end;
  float* y;
  std::int64_t ldy;
  bool accumulate;
};

void packed_linear_portable(const PackedArgs& a);
void packed_linear_avx2(const PackedArgs& a);        // only where cpu_supports(CpuIsa::kAvx2)
void packed_linear_avx512vnni(const PackedArgs& a);  // only where cpu_supports(CpuIsa::kAvx512Vnni)

}  // namespace specdec::models::detail
