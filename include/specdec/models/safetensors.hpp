// safetensors reader (memory-mapped, read-only) and writer, torch-free.
//
// Format: uint64 little-endian header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the data; offsets are relative to the first byte after the header. Shapes are
// row-major, outermost first (as torch). Every offset is validated against the file size, and end - begin against the shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

enum class SafetensorsDtype : std::uint8_t { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };
const char* to_string(SafetensorsDtype dtype) noexcept;
std::size_t element_size(SafetensorsDtype dtype) noexcept;

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<std::int64_t> shape;  ///< row-major, outermost first
  std::uint64_t begin = 0;          ///< byte offsets relative to the data section
  std::uint64_t end = 0;
  std::int64_t num_elements = 0;
};

class SafetensorsFile {
 public:
  /// Maps `path` read-only and parses the header. Throws specdec::error on any problem.
  explicit SafetensorsFile(const std::filesystem::path& path);
  /// Parses a copy of an in-memory image.
  static SafetensorsFile from_bytes(std::span<const std::byte> bytes);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  /// Tensors sorted by data offset.
  const std::vector<SafetensorsTensor>& tensors() const noexcept { return tensors_; }
  const SafetensorsTensor* find_tensor(std::string_view name) const;
  /// Throws "safetensors: tensor 'x' is missing".
  const SafetensorsTensor& tensor(std::string_view name) const;
  /// The free-form "__metadata__" map (empty when absent).
  const std::map<std::string, std::string, std::less<>>& metadata() const noexcept { return metadata_; }
  std::uint64_t data_offset() const noexcept { return data_offset_; }

  std::span<const std::byte> tensor_data(const SafetensorsTensor& t) const;
  /// Converts an F32, F16 or BF16 tensor to float (exactly num_elements values); throws for other dtypes.
  void to_float(const SafetensorsTensor& t, std::span<float> out) const;
  std::vector<float> to_float(const SafetensorsTensor& t) const;

 private:
  struct Mapping;
  SafetensorsFile() = default;
  void parse();

  std::unique_ptr<Mapping> mapping_;
  std::uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

/// One tensor for write_safetensors: its bytes (row-major, little-endian, element_size(dtype) x the shape's product).
struct SafetensorsWriteTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

/// Writes `tensors` in the given order as a safetensors file at `path` (the header padded with spaces so the data starts
/// at a multiple of 8 bytes; `metadata` as "__metadata__" when not empty). Throws specdec::error naming the tensor or
/// the file when a tensor's byte count does not match its shape or the file cannot be written.
void write_safetensors(const std::filesystem::path& path, std::span<const SafetensorsWriteTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace specdec::models
