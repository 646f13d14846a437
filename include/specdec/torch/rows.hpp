// specdec torch front — tensors as specdec::Rows and back, without copying: the adapter between the library's seams
// (specdec/rows.hpp) and ATen. rows_of keeps the tensor alive in the Rows' owner; tensor_of keeps the Rows' owner alive
// in the tensor's deleter.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "specdec/rows.hpp"

namespace specdec::torch {

/// A 2-D float32/float16/bfloat16 tensor with a contiguous last dimension (on the CPU or a GPU) as Rows sharing its
/// memory; an undefined tensor gives undefined Rows. Throws specdec::error naming `who` for another shape or dtype.
Rows rows_of(const at::Tensor& t, const char* who = "rows_of");

/// Rows as a [rows, cols] tensor over the same memory (strided by row_stride) on their device; undefined Rows give an
/// undefined tensor. The tensor holds the Rows' owner until it is freed.
at::Tensor tensor_of(const Rows& r);

/// The ATen device rows live on.
at::Device device_of(const Rows& r);

/// Rows of any dtype on any device as float32 rows in host memory (a copy; host float32 rows are returned as they are):
/// the rows_to_host hook of proposers that read a device model's logits on the host (DraftModelOptions::rows_to_host).
Rows rows_to_host_float32(const Rows& r);

}  // namespace specdec::torch
