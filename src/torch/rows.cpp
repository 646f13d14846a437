// specdec torch front — tensors as specdec::Rows and back (include/specdec/torch/rows.hpp).
#include "specdec/torch/rows.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <memory>
#include <string>

namespace specdec::torch {
namespace {

DType dtype_of(at::ScalarType t, const char* who) {
  switch (t) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default:
      throw error(Status::kInvalidArgument,
                  std::string(who) + ": expected float32, float16 or bfloat16 rows, got " + c10::toString(t));
  }
}

at::ScalarType scalar_type_of(DType t) {
  return t == DType::kFloat32 ? at::kFloat : t == DType::kFloat16 ? at::kHalf : at::kBFloat16;
}

}  // namespace

Rows rows_of(const at::Tensor& t, const char* who) {
  if (!t.defined()) return {};
  if (t.dim() != 2 || (t.size(1) > 1 && t.stride(1) != 1))
    throw error(Status::kInvalidArgument, std::string(who) + ": expected a 2-D tensor with a contiguous last dimension, "
                                                             "got " + std::to_string(t.dim()) + " dimensions");
  RowsView v;
  v.dtype = dtype_of(t.scalar_type(), who);
  v.rows = t.size(0);
  v.cols = t.size(1);
  v.row_stride = t.size(0) <= 1 ? t.size(1) : t.stride(0);
  v.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  if (t.is_cuda()) v.device = Device{DeviceType::kCuda, static_cast<std::int32_t>(t.device().index())};
  else if (!t.is_cpu())
    throw error(Status::kInvalidArgument, std::string(who) + ": expected a CPU or CUDA tensor, got " + t.device().str());
  return Rows(v, std::make_shared<const at::Tensor>(t));
}

at::Device device_of(const Rows& r) {
  const Device d = r.device();
  return d.is_cpu() ? at::Device(at::kCPU) : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index));
}

at::Tensor tensor_of(const Rows& r) {
  if (!r.defined()) return {};
  const RowsView& v = r.view();
  const at::Device device = device_of(r);
  const auto options = at::TensorOptions().dtype(scalar_type_of(v.dtype)).device(device);
  if (v.rows == 0 || v.cols == 0) return at::empty({v.rows, v.cols}, options);
  std::shared_ptr<const void> owner = r.owner();
  return at::from_blob(const_cast<void*>(v.data), {v.rows, v.cols}, {v.row_stride, 1},
                       [owner](void*) mutable { owner.reset(); }, options);
}

Rows rows_to_host_float32(const Rows& r) {
  if (r.is_host_float32()) return r;
  c10::InferenceMode inference;
  return rows_of(tensor_of(r).to(at::kFloat).cpu().contiguous(), "rows_to_host_float32");
}

}  // namespace specdec::torch
