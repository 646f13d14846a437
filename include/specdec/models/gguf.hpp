// GGUF reader: memory-mapped, read-only, torch-free.
//
// Format (ggml docs/gguf.md, versions 2 and 3, little-endian): magic "GGUF", uint32 version, uint64 tensor count, uint64 metadata
// count, the metadata key/value pairs, the tensor infos, padding to `general.alignment` (default 32), then the tensor data.
// Every count, length, dimension and offset is validated against the file size before it is used, so a truncated or corrupt file
// gives a specdec::error naming what was expected and what was found, never a crash or a huge allocation.
//
// Shapes: GGUF stores dimensions innermost-first (ne[0] is the contiguous one). TensorInfo::shape is exposed the way torch and
// numpy write it: row-major, OUTERMOST FIRST, i.e. shape = {ne[n-1], ..., ne[1], ne[0]}. A GGUF matrix with ne = {576, 49152}
// (token_embd.weight) therefore has shape {49152, 576}: 49152 rows of 576 contiguous values, exactly what dequantize() writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

/// Metadata value types (gguf_metadata_value_type).
enum class GgufType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* to_string(GgufType type) noexcept;

/// Tensor element types (ggml_type). Every type ggml defines can be parsed (its block size is known); dequantize() supports
/// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS.
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};
const char* to_string(GgmlType type) noexcept;

/// Layout of a ggml type: `block_elements` values are stored in `block_bytes` bytes. nullopt for an unknown type id.
struct GgmlTypeTraits {
  std::uint32_t block_elements;
  std::uint32_t block_bytes;
};
std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t type_id) noexcept;
/// True for the types dequantize() converts.
bool can_dequantize(GgmlType type) noexcept;
/// The types dequantize() converts, as a comma-separated list (for error messages).
const char* dequantizable_type_names() noexcept;

struct GgufValue;
/// A metadata array: its element type and the elements (each a GgufValue of that type; nested arrays are allowed).
struct GgufArray {
  GgufType element_type = GgufType::kUint8;
  std::vector<GgufValue> elements;
};

/// One metadata value. `data` holds the C++ type matching `type` (kBool -> bool, kString -> std::string, kArray -> GgufArray).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t, std::uint32_t, std::int32_t, float, bool, std::string,
               GgufArray, std::uint64_t, std::int64_t, double>
      data;

  /// Any integer type (or bool) as int64; throws if it does not fit (a uint64 above INT64_MAX) or the value is not an integer.
  std::int64_t as_integer(std::string_view what) const;
  /// float32 or float64 (integers are accepted too) as double.
  double as_double(std::string_view what) const;
};

/// One tensor of the file.
struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<std::int64_t> shape;  ///< row-major, outermost first (the reverse of GGUF's ne[]); see the file comment
  std::uint64_t offset = 0;         ///< byte offset of the data from the start of the data section
  std::uint64_t size_bytes = 0;     ///< bytes of data
  std::int64_t num_elements = 0;    ///< product of shape (1 for a 0-d tensor)
  /// GGUF's own order, innermost first (ne[0], ne[1], ...).
  std::vector<std::int64_t> ne() const { return {shape.rbegin(), shape.rend()}; }
};

/// Converts `in` (raw data of `num_elements` values of `type`, `num_elements` a multiple of the block size) into floats.
/// Throws specdec::error if the type is not supported or the sizes disagree.
void dequantize(GgmlType type, std::span<const std::byte> in, std::span<float> out);

class GgufFile {
 public:
  /// Maps `path` read-only and parses it. Throws specdec::error (with the path in the message) on any problem.
  explicit GgufFile(const std::filesystem::path& path);
  /// Parses a copy of an in-memory image (used by tests and the fuzzer).
  static GgufFile from_bytes(std::span<const std::byte> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  std::uint32_t version() const noexcept { return version_; }
  std::uint64_t alignment() const noexcept { return alignment_; }
  std::uint64_t data_offset() const noexcept { return data_offset_; }  ///< absolute offset of the data section
  std::uint64_t file_size() const noexcept;

  // --- metadata -----------------------------------------------------------------------------------------------------------
  const std::map<std::string, GgufValue, std::less<>>& metadata() const noexcept { return metadata_; }
  /// Keys in file order.
  const std::vector<std::string>& metadata_keys() const noexcept { return keys_; }
  bool contains(std::string_view key) const { return metadata_.find(key) != metadata_.end(); }
  const GgufValue* find(std::string_view key) const;
  /// The value of `key`; throws "gguf: metadata key 'x' is missing".
  const GgufValue& value(std::string_view key) const;

  /// Exact-type accessor: T is one of uint8_t..double, bool, std::string; throws on a missing key or a different stored type
  /// ("gguf: metadata key 'llama.block_count' has type string, expected uint32").
  template <class T>
  const T& get(std::string_view key) const;
  template <class T>
  std::optional<T> get_optional(std::string_view key) const {
    if (!contains(key)) return std::nullopt;
    return get<T>(key);
  }
  /// Any integer type, converted with a range check.
  std::int64_t get_integer(std::string_view key) const;
  std::optional<std::int64_t> get_integer_optional(std::string_view key) const;
  /// float32/float64 (or an integer), as double.
  double get_double(std::string_view key) const;
  std::optional<double> get_double_optional(std::string_view key) const;
  const std::string& get_string(std::string_view key) const { return get<std::string>(key); }
  const GgufArray& get_array(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<std::int64_t> get_integer_array(std::string_view key) const;
  std::vector<double> get_double_array(std::string_view key) const;

  // --- tensors ------------------------------------------------------------------------------------------------------------
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  /// Throws "gguf: tensor 'x' is missing".
  const TensorInfo& tensor(std::string_view name) const;
  /// The raw bytes of a tensor (a view into the mapping, valid while this object lives).
  std::span<const std::byte> tensor_data(const TensorInfo& info) const;
  /// Hints that a tensor's data will not be read again soon: the mapping's whole pages inside it are dropped from memory
  /// (read back from the file if touched again). For loaders that copy tensors into their own layout.
  void release(const TensorInfo& info) const noexcept;
  /// Dequantises into `out` (exactly info.num_elements floats, row-major as info.shape).
  void dequantize(const TensorInfo& info, std::span<float> out) const;
  std::vector<float> dequantize(const TensorInfo& info) const;

 private:
  struct Mapping;
  GgufFile() = default;
  void parse(const std::string& source_name);

  std::unique_ptr<Mapping> mapping_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<std::string> keys_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

extern template const std::uint8_t& GgufFile::get<std::uint8_t>(std::string_view) const;
extern template const std::int8_t& GgufFile::get<std::int8_t>(std::string_view) const;
extern template const std::uint16_t& GgufFile::get<std::uint16_t>(std::string_view) const;
extern template const std::int16_t& GgufFile::get<std::int16_t>(std::string_view) const;
extern template const std::uint32_t& GgufFile::get<std::uint32_t>(std::string_view) const;
extern template const std::int32_t& GgufFile::get<std::int32_t>(std::string_view) const;
extern template const std::uint64_t& GgufFile::get<std::uint64_t>(std::string_view) const;
extern template const std::int64_t& GgufFile::get<std::int64_t>(std::string_view) const;
extern template const float& GgufFile::get<float>(std::string_view) const;
extern template const double& GgufFile::get<double>(std::string_view) const;
extern template const bool& GgufFile::get<bool>(std::string_view) const;
extern template const std::string& GgufFile::get<std::string>(std::string_view) const;
extern template const GgufArray& GgufFile::get<GgufArray>(std::string_view) const;

}  // namespace specdec::models
