// Tensors and the CPU models' float weights (include/specdec/torch/float_tensor.hpp), and tensors into safetensors files
// (include/specdec/torch/write_safetensors.hpp).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "specdec/models/detail/errors.hpp"
#include "specdec/models/safetensors.hpp"
#include "specdec/torch/float_tensor.hpp"
#include "specdec/torch/write_safetensors.hpp"

namespace specdec::torch {

models::FloatTensor float_tensor_of(const at::Tensor& t) {
  if (!t.defined()) return {};
  const at::Tensor f = t.detach().to(at::kCPU, at::kFloat).contiguous();
  models::FloatTensor out(f.sizes().vec());
  if (f.numel() > 0) std::memcpy(out.mutable_data(), f.data_ptr<float>(), static_cast<std::size_t>(f.numel()) * 4);
  return out;
}

at::Tensor tensor_of(const models::FloatTensor& t) {
  if (!t.defined()) return {};
  auto keep = std::make_shared<models::FloatTensor>(t);
  return at::from_blob(t.mutable_data(), t.shape(), [keep](void*) mutable { keep.reset(); },
                       at::TensorOptions().dtype(at::kFloat));
}

models::WeightGetter weight_getter(std::function<at::Tensor(const std::string&)> get) {
  return [get = std::move(get)](const std::string& name) { return float_tensor_of(get(name)); };
}

}  // namespace specdec::torch

namespace specdec::models {

void write_tensors_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                               at::ScalarType float_type) {
  SafetensorsDtype float_dtype = SafetensorsDtype::kF32;
  if (float_type == at::kHalf) float_dtype = SafetensorsDtype::kF16;
  else if (float_type == at::kBFloat16) float_dtype = SafetensorsDtype::kBF16;
  else if (float_type != at::kFloat)
    detail::fail(fmt::format("write_tensors_safetensors: float_type: expected Float, Half or BFloat16, got {}",
                             c10::toString(float_type)));
  std::vector<at::Tensor> data;  // keeps the converted tensors alive until written
  std::vector<SafetensorsWriteTensor> out;
  for (const auto& [name, t0] : tensors) {
    at::Tensor t = t0.detach().contiguous();
    SafetensorsDtype dtype = float_dtype;
    if (t.scalar_type() == at::kLong) dtype = SafetensorsDtype::kI64;
    else if (t.scalar_type() == at::kBool) dtype = SafetensorsDtype::kBool;
    else t = t.to(float_type).contiguous();
    data.push_back(t);
    out.push_back({name, dtype, t.sizes().vec(),
                   {static_cast<const std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.numel() * t.element_size())}});
  }
  write_safetensors(path, out, {{"format", "pt"}});
}

}  // namespace specdec::models
