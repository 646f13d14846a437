// specdec — rows of numbers passed across the library's seams without tensors: logits and probabilities (target and
// draft), hidden states. A RowsView says where the rows are (pointer, element type, rows, columns, row stride, device,
// stream); Rows adds shared ownership, so a proposer or a model can hand its rows to the decoder, and the decoder keep
// them as long as it needs them, whatever made them: a host buffer (Rows::host_float32), an engine's own memory with
// its own release, or a tensor held by the torch layer (specdec/torch/rows.hpp). Copies of a Rows share the memory.
// Standard library only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec {

/// Element type of a row.
enum class DType : std::uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline constexpr std::size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }
inline constexpr const char* to_string(DType t) {
  return t == DType::kFloat32 ? "float32" : t == DType::kFloat16 ? "float16" : "bfloat16";
}

/// Where rows live.
enum class DeviceType : std::uint8_t { kCpu = 0, kCuda = 1 };
struct Device {
  DeviceType type = DeviceType::kCpu;
  std::int32_t index = 0;  ///< the GPU's ordinal (0 on the CPU)
  bool is_cpu() const { return type == DeviceType::kCpu; }
  friend bool operator==(const Device&, const Device&) = default;
};

/// A non-owning view of a 2-D array: `rows` rows of `cols` elements, row i at element i * row_stride, the elements of a
/// row contiguous.
struct RowsView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;  ///< elements between the starts of consecutive rows (>= cols)
  Device device{};
  void* stream = nullptr;  ///< on CUDA: the stream (cudaStream_t) the rows are ordered on; nullptr = the default stream
};

/// Rows with shared ownership (see the file comment). A default-constructed Rows is undefined (no rows at all, as an
/// absent tensor); a defined one may have 0 rows.
class Rows {
 public:
  Rows() = default;
  /// Rows over `view`, kept alive by `owner` (anything; released when the last copy goes). Throws specdec::error for a
  /// view whose sizes do not fit.
  Rows(const RowsView& view, std::shared_ptr<const void> owner) : view_(view), owner_(std::move(owner)), defined_(true) {
    if (view.rows < 0 || view.cols < 0 || (view.rows > 1 && view.row_stride < view.cols) ||
        (view.data == nullptr && view.rows > 0 && view.cols > 0))
      throw error(Status::kInvalidArgument, "Rows: expected rows, cols >= 0, row_stride >= cols and data for a non-empty "
                                            "view, got rows " + std::to_string(view.rows) + ", cols " +
                                                std::to_string(view.cols) + ", row_stride " +
                                                std::to_string(view.row_stride));
  }

  /// `rows` x `cols` float32 zeros in host memory, contiguous, owned.
  static Rows host_float32(std::int64_t rows, std::int64_t cols) {
    check_shape("Rows::host_float32", rows, cols);
    return host_float32_over(std::make_shared<std::vector<float>>(static_cast<std::size_t>(rows * cols), 0.0f), rows, cols);
  }
  /// `values` (at least rows x cols of them, row-major, contiguous) as host float32 rows sharing them.
  static Rows host_float32_over(std::shared_ptr<std::vector<float>> values, std::int64_t rows, std::int64_t cols) {
    check_shape("Rows::host_float32_over", rows, cols);
    if (values == nullptr || static_cast<std::int64_t>(values->size()) < rows * cols)
      throw error(Status::kInvalidArgument, "Rows::host_float32_over: expected " + std::to_string(rows * cols) +
                                                " values, got " + std::to_string(values ? values->size() : 0));
    const float* data = values->data();  // before values is moved into the owner
    return view_of(data, rows, cols, std::move(values));
  }
  /// `rows` x `cols` float32 in host memory, contiguous, owned and not zeroed: for code that writes every value next.
  static Rows host_float32_for_overwrite(std::int64_t rows, std::int64_t cols) {
    check_shape("Rows::host_float32_for_overwrite", rows, cols);
    auto values = std::make_shared_for_overwrite<float[]>(static_cast<std::size_t>(rows * cols > 0 ? rows * cols : 1));
    const float* data = values.get();  // before values is moved into the owner
    return view_of(data, rows, cols, std::move(values));
  }

  bool defined() const { return defined_; }
  const RowsView& view() const { return view_; }
  std::int64_t rows() const { return view_.rows; }
  std::int64_t cols() const { return view_.cols; }
  std::int64_t row_stride() const { return view_.row_stride; }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  bool contiguous() const { return view_.rows <= 1 || view_.row_stride == view_.cols; }
  /// float32 rows in host memory: what the CPU paths read directly.
  bool is_host_float32() const { return defined_ && view_.device.is_cpu() && view_.dtype == DType::kFloat32; }

  /// The first element of host float32 rows; throws specdec::error naming `who` otherwise.
  const float* host_float32_data(const char* who = "Rows") const {
    require_host_float32(who);
    return static_cast<const float*>(view_.data);
  }
  /// Writable access for the code that made the rows (Rows::host_float32): writes are seen by every copy.
  float* mutable_host_float32_data(const char* who = "Rows") const {
    require_host_float32(who);
    return const_cast<float*>(static_cast<const float*>(view_.data));
  }
  /// Row i of host float32 rows.
  const float* host_row(std::int64_t i) const { return host_float32_data() + i * view_.row_stride; }

  /// Rows [first, first + count) sharing this one's memory and owner.
  Rows narrow(std::int64_t first, std::int64_t count) const {
    if (!defined_ || first < 0 || count < 0 || first + count > view_.rows)
      throw error(Status::kInvalidArgument, "Rows::narrow: expected rows [" + std::to_string(first) + ", " +
                                                std::to_string(first + count) + ") within " +
                                                std::to_string(defined_ ? view_.rows : 0) + " rows");
    RowsView v = view_;
    if (view_.data != nullptr)  // rows of 0 columns may have no memory at all
      v.data = static_cast<const char*>(view_.data) +
               static_cast<std::size_t>(first * view_.row_stride) * dtype_size(view_.dtype);
    v.rows = count;
    return Rows(v, owner_);
  }

 private:
  static void check_shape(const char* who, std::int64_t rows, std::int64_t cols) {
    if (rows < 0 || cols < 0)
      throw error(Status::kInvalidArgument, std::string(who) + ": expected rows, cols >= 0, got " + std::to_string(rows) +
                                                " x " + std::to_string(cols));
  }
  static Rows view_of(const float* data, std::int64_t rows, std::int64_t cols, std::shared_ptr<const void> owner) {
    RowsView v;
    v.data = data;
    v.rows = rows;
    v.cols = cols;
    v.row_stride = cols;
    return Rows(v, std::move(owner));
  }
  void require_host_float32(const char* who) const {
    if (!is_host_float32())
      throw error(Status::kInvalidArgument,
                  std::string(who) + ": expected float32 rows in host memory, got " +
                      (defined_ ? std::string(to_string(view_.dtype)) + (view_.device.is_cpu() ? " rows on the CPU"
                                                                                                 : " rows on a GPU")
                                : std::string("no rows")));
  }

  RowsView view_{};
  std::shared_ptr<const void> owner_;
  bool defined_ = false;
};

}  // namespace specdec
