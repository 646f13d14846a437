// specdec — a float32 array in host memory with a shape: how weights reach the CPU models (WeightGetter, StoredWeight)
// without a tensor library. Copies share the values (as tensors do); a default-constructed one is undefined (an absent
// weight). The torch layer converts to and from at::Tensor (specdec/torch/float_tensor.hpp). Standard library only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

class FloatTensor {
 public:
  FloatTensor() = default;
  /// Zeros of `shape` (every size >= 0; throws specdec::error otherwise).
  explicit FloatTensor(std::vector<std::int64_t> shape) : shape_(std::move(shape)) {
    values_ = std::make_shared<std::vector<float>>(static_cast<std::size_t>(count(shape_)), 0.0f);
  }
  /// `values` (row-major, outermost first) as `shape`; throws specdec::error when their count is not the shape's.
  FloatTensor(std::vector<std::int64_t> shape, std::vector<float> values) : shape_(std::move(shape)) {
    if (static_cast<std::int64_t>(values.size()) != count(shape_))
      throw error(Status::kInvalidArgument, "FloatTensor: expected " + std::to_string(count(shape_)) +
                                                " values for the shape, got " + std::to_string(values.size()));
    values_ = std::make_shared<std::vector<float>>(std::move(values));
  }

  bool defined() const noexcept { return values_ != nullptr; }
  const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  std::int64_t dim() const noexcept { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t i) const { return shape_.at(static_cast<std::size_t>(i)); }
  std::int64_t numel() const noexcept { return values_ ? static_cast<std::int64_t>(values_->size()) : 0; }
  const float* data() const noexcept { return values_ ? values_->data() : nullptr; }
  /// Writable values (seen by every copy): for the code that made the tensor.
  float* mutable_data() const noexcept { return values_ ? values_->data() : nullptr; }
  std::span<const float> values() const noexcept { return {data(), static_cast<std::size_t>(numel())}; }
  /// The same values under another shape of as many elements (sharing them); throws specdec::error otherwise.
  FloatTensor reshaped(std::vector<std::int64_t> shape) const {
    if (count(shape) != numel())
      throw error(Status::kInvalidArgument, "FloatTensor::reshaped: expected " + std::to_string(numel()) +
                                                " elements, got a shape of " + std::to_string(count(shape)));
    FloatTensor t = *this;
    t.shape_ = std::move(shape);
    return t;
  }

 private:
  static std::int64_t count(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (const auto s : shape) {
      if (s < 0) throw error(Status::kInvalidArgument, "FloatTensor: expected sizes >= 0, got " + std::to_string(s));
      n *= s;
    }
    return n;
  }
  std::vector<std::int64_t> shape_;
  std::shared_ptr<std::vector<float>> values_;
};

}  // namespace specdec::models
