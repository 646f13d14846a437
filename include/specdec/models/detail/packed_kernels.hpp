// Internal: the packed products of PackedMatrix::linear, one per instruction set (src/models/cpu/packed_linear*.cpp). Each
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
void packed_linear_avxvnni(const PackedArgs& a);     // only where cpu_supports(CpuIsa::kAvxVnni)
void packed_linear_amx(const PackedArgs& a);         // only where cpu_supports(CpuIsa::kAmx)

/// Whether this CPU has AMX-INT8 (and AVX-512 VNNI) and the OS granted this process the tile state (Linux asks once).
bool amx_supported() noexcept;

/// quantize_rows with AVX2 (blocks a multiple of 8 values; only where cpu_supports(CpuIsa::kAvx2)).
void quantize_rows_avx2(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld, QuantizedRows& out);
/// quantize_rows with AVX-512 (blocks a multiple of 16 values; only where cpu_supports(CpuIsa::kAvx512Vnni)).
void quantize_rows_avx512(const float* x, std::int64_t row_begin, std::int64_t row_end, std::int64_t ld, QuantizedRows& out);

}  // namespace specdec::models::detail
