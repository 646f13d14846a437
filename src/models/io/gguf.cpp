// GGUF parser: see include/specdec/models/gguf.hpp.
#include "specdec/models/gguf.hpp"

#include "mapped_file.hpp"


#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace specdec::models {

namespace {

constexpr std::uint64_t kMaxDims = 4;  // GGML_MAX_DIMS

[[noreturn]] void fail(const std::string& msg) { throw specdec::error(msg); }

}  // namespace

// ------------------------------------------------------------------------------------------------------------------------------
// names and traits

const char* to_string(GgufType type) noexcept {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

const char* to_string(GgmlType type) noexcept {
  switch (type) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ8_1: return "Q8_1";
    case GgmlType::kQ2_K: return "Q2_K";
    case GgmlType::kQ3_K: return "Q3_K";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kQ8_K: return "Q8_K";
    case GgmlType::kIQ2_XXS: return "IQ2_XXS";
    case GgmlType::kIQ2_XS: return "IQ2_XS";
    case GgmlType::kIQ3_XXS: return "IQ3_XXS";
    case GgmlType::kIQ1_S: return "IQ1_S";
    case GgmlType::kIQ4_NL: return "IQ4_NL";
    case GgmlType::kIQ3_S: return "IQ3_S";
    case GgmlType::kIQ2_S: return "IQ2_S";
    case GgmlType::kIQ4_XS: return "IQ4_XS";
    case GgmlType::kI8: return "I8";
    case GgmlType::kI16: return "I16";
    case GgmlType::kI32: return "I32";
    case GgmlType::kI64: return "I64";
    case GgmlType::kF64: return "F64";
    case GgmlType::kIQ1_M: return "IQ1_M";
    case GgmlType::kBF16: return "BF16";
    case GgmlType::kTQ1_0: return "TQ1_0";
    case GgmlType::kTQ2_0: return "TQ2_0";
    case GgmlType::kMXFP4: return "MXFP4";
  }
  return "unknown";
}

std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t type_id) noexcept {
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32: return GgmlTypeTraits{1, 4};
    case GgmlType::kF16: return GgmlTypeTraits{1, 2};
    case GgmlType::kQ4_0: return GgmlTypeTraits{32, 18};
    case GgmlType::kQ4_1: return GgmlTypeTraits{32, 20};
    case GgmlType::kQ5_0: return GgmlTypeTraits{32, 22};
    case GgmlType::kQ5_1: return GgmlTypeTraits{32, 24};
    case GgmlType::kQ8_0: return GgmlTypeTraits{32, 34};
    case GgmlType::kQ8_1: return GgmlTypeTraits{32, 36};
    case GgmlType::kQ2_K: return GgmlTypeTraits{256, 84};
    case GgmlType::kQ3_K: return GgmlTypeTraits{256, 110};
    case GgmlType::kQ4_K: return GgmlTypeTraits{256, 144};
    case GgmlType::kQ5_K: return GgmlTypeTraits{256, 176};
    case GgmlType::kQ6_K: return GgmlTypeTraits{256, 210};
    case GgmlType::kQ8_K: return GgmlTypeTraits{256, 292};
    case GgmlType::kIQ2_XXS: return GgmlTypeTraits{256, 66};
    case GgmlType::kIQ2_XS: return GgmlTypeTraits{256, 74};
    case GgmlType::kIQ3_XXS: return GgmlTypeTraits{256, 98};
    case GgmlType::kIQ1_S: return GgmlTypeTraits{256, 50};
    case GgmlType::kIQ4_NL: return GgmlTypeTraits{32, 18};
    case GgmlType::kIQ3_S: return GgmlTypeTraits{256, 110};
    case GgmlType::kIQ2_S: return GgmlTypeTraits{256, 82};
    case GgmlType::kIQ4_XS: return GgmlTypeTraits{256, 136};
    case GgmlType::kI8: return GgmlTypeTraits{1, 1};
    case GgmlType::kI16: return GgmlTypeTraits{1, 2};
    case GgmlType::kI32: return GgmlTypeTraits{1, 4};
    case GgmlType::kI64: return GgmlTypeTraits{1, 8};
    case GgmlType::kF64: return GgmlTypeTraits{1, 8};
    case GgmlType::kIQ1_M: return GgmlTypeTraits{256, 56};
    case GgmlType::kBF16: return GgmlTypeTraits{1, 2};
    case GgmlType::kTQ1_0: return GgmlTypeTraits{256, 54};
    case GgmlType::kTQ2_0: return GgmlTypeTraits{256, 66};
    case GgmlType::kMXFP4: return GgmlTypeTraits{32, 17};
  }
  return std::nullopt;
}

// ------------------------------------------------------------------------------------------------------------------------------
// GgufValue

std::int64_t GgufValue::as_integer(std::string_view what) const {
  return std::visit(
      [&](const auto& v) -> std::int64_t {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) {
          return v ? 1 : 0;
        } else if constexpr (std::is_same_v<V, std::uint64_t>) {
          if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            fail(fmt::format("gguf: {} = {} does not fit in int64", what, v));
          return static_cast<std::int64_t>(v);
        } else if constexpr (std::is_integral_v<V>) {
          return static_cast<std::int64_t>(v);
        } else {
          fail(fmt::format("gguf: {} has type {}, expected an integer", what, to_string(type)));
        }
      },
      data);
}

double GgufValue::as_double(std::string_view what) const {
  return std::visit(
      [&](const auto& v) -> double {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>) {
          return static_cast<double>(v);
        } else {
          fail(fmt::format("gguf: {} has type {}, expected a number", what, to_string(type)));
        }
      },
      data);
}

// ------------------------------------------------------------------------------------------------------------------------------
// mapping

struct GgufFile::Mapping : detail::MappedFile {};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

std::uint64_t GgufFile::file_size() const noexcept { return mapping_ ? mapping_->size : 0; }

GgufFile::GgufFile(const std::filesystem::path& path) {
  mapping_ = std::make_unique<Mapping>();
  const std::string name = path.string();
  mapping_->map(path, "gguf");
  try {
    parse(name);
  } catch (const specdec::error& e) {
    // Prefix the path so the user knows which file is broken.
    throw specdec::error(fmt::format("{} (file '{}')", e.what(), name));
  }
}

GgufFile GgufFile::from_bytes(std::span<const std::byte> bytes) {
  GgufFile f;
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->hold(bytes);
  f.parse("<memory>");
  return f;
}

// ------------------------------------------------------------------------------------------------------------------------------
// parsing

namespace {

/// Bounds-checked little-endian reader over the mapping.
class Reader {
 public:
  Reader(const std::byte* data, std::uint64_t size) : data_(data), size_(size) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }

  void need(std::uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail(fmt::format("gguf: file truncated: reading {} needs {} bytes at offset {}, but the file has {} bytes", what, n, pos_,
                       size_));
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) { return read_string_of("", what, ""); }
  /// A string called prefix + name + suffix in messages, built only on failure (a vocabulary is 10^5 strings).
  std::string read_string_of(std::string_view prefix, std::string_view name, std::string_view suffix) {
    if (remaining() < 8) need(8, fmt::format("{}{}{}", prefix, name, suffix));
    const auto n = read<std::uint64_t>(name);
    if (n > remaining())
      fail(fmt::format("gguf: {}{}{} has length {} at offset {}, but only {} bytes remain in the file", prefix, name, suffix, n,
                       pos_ - 8, remaining()));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const std::byte* data_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
};

/// Smallest number of bytes one value of `t` occupies (0 for an unknown type).
std::uint64_t min_value_bytes(std::uint32_t t) {
  switch (static_cast<GgufType>(t)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 0;
}

constexpr int kMaxArrayNesting = 8;

GgufValue read_value(Reader& r, std::uint32_t type, const std::string& key, int depth) {
  GgufValue v;
  if (min_value_bytes(type) == 0)
    fail(fmt::format("gguf: metadata key '{}' has unknown value type {} (expected 0..12)", key, type));
  v.type = static_cast<GgufType>(type);
  switch (v.type) {
    case GgufType::kUint8: v.data = r.read<std::uint8_t>(key); break;
    case GgufType::kInt8: v.data = r.read<std::int8_t>(key); break;
    case GgufType::kUint16: v.data = r.read<std::uint16_t>(key); break;
    case GgufType::kInt16: v.data = r.read<std::int16_t>(key); break;
    case GgufType::kUint32: v.data = r.read<std::uint32_t>(key); break;
    case GgufType::kInt32: v.data = r.read<std::int32_t>(key); break;
    case GgufType::kFloat32: v.data = r.read<float>(key); break;
    case GgufType::kUint64: v.data = r.read<std::uint64_t>(key); break;
    case GgufType::kInt64: v.data = r.read<std::int64_t>(key); break;
    case GgufType::kFloat64: v.data = r.read<double>(key); break;
    case GgufType::kBool: {
      const auto b = r.read<std::uint8_t>(key);
      if (b > 1) fail(fmt::format("gguf: metadata key '{}' is a bool with byte value {}, expected 0 or 1", key, b));
      v.data = b != 0;
      break;
    }
    case GgufType::kString: v.data = r.read_string_of("string value of metadata key '", key, "'"); break;
    case GgufType::kArray: {
      if (depth >= kMaxArrayNesting)
        fail(fmt::format("gguf: metadata key '{}' nests arrays deeper than {} levels", key, kMaxArrayNesting));
      GgufArray a;
      const auto et = r.read<std::uint32_t>(key);
      const std::uint64_t min_bytes = min_value_bytes(et);
      if (min_bytes == 0)
        fail(fmt::format("gguf: metadata key '{}' is an array of unknown element type {} (expected 0..12)", key, et));
      a.element_type = static_cast<GgufType>(et);
      const auto n = r.read<std::uint64_t>(key);
      if (n > r.remaining() / min_bytes)
        fail(fmt::format("gguf: metadata key '{}' is an array of {} {} values, but only {} bytes remain in the file", key, n,
                         to_string(a.element_type), r.remaining()));
      a.elements.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i) a.elements.push_back(read_value(r, et, key, depth + 1));
      v.data = std::move(a);
      break;
    }
  }
  return v;
}

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}

}  // namespace

void GgufFile::parse(const std::string& /*source_name*/) {
  Reader r(mapping_->data, mapping_->size);
  if (mapping_->size < 4)
    fail(fmt::format("gguf: file truncated: expected at least the 4-byte magic 'GGUF', the file has {} bytes", mapping_->size));
  const auto magic = r.read<std::uint32_t>("magic");
  if (magic != 0x46554747u) {  // "GGUF" little-endian
    char got[4];
    std::memcpy(got, &magic, 4);
    std::string shown;
    for (char c : got) shown += (c >= 32 && c < 127) ? std::string(1, c) : fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    fail(fmt::format("gguf: bad magic: expected 'GGUF', got '{}'", shown));
  }
  version_ = r.read<std::uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    if (version_ == 1)
      fail("gguf: unsupported version 1 (expected 2 or 3; version 1 files predate 64-bit counts, convert them with llama.cpp)");
    if ((version_ & 0xFFFFu) == 0 && version_ != 0)
      fail(fmt::format("gguf: unsupported version {} (expected 2 or 3; the file looks big-endian)", version_));
    fail(fmt::format("gguf: unsupported version {} (expected 2 or 3)", version_));
  }
  const auto n_tensors = r.read<std::uint64_t>("tensor count");
  const auto n_kv = r.read<std::uint64_t>("metadata count");
  // Each key/value needs >= 8 (key length) + 4 (type) + 1 bytes; each tensor info >= 8 + 4 + 4 + 8 bytes.
  if (n_kv > r.remaining() / 13)
    fail(fmt::format("gguf: metadata count {} is impossible: only {} bytes remain in the file", n_kv, r.remaining()));
  if (n_tensors > r.remaining() / 24)
    fail(fmt::format("gguf: tensor count {} is impossible: only {} bytes remain in the file", n_tensors, r.remaining()));

  keys_.reserve(static_cast<std::size_t>(n_kv));
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.read_string(fmt::format("key of metadata entry {}", i));
    const auto type = r.read<std::uint32_t>(fmt::format("type of metadata key '{}'", key));
    GgufValue value = read_value(r, type, key, 0);
    if (metadata_.count(key) != 0) fail(fmt::format("gguf: metadata key '{}' appears twice", key));
    keys_.push_back(key);
    metadata_.emplace(std::move(key), std::move(value));
  }

  alignment_ = 32;
  if (const auto* a = find("general.alignment")) {
    if (a->type != GgufType::kUint32)
      fail(fmt::format("gguf: metadata key 'general.alignment' has type {}, expected uint32", to_string(a->type)));
    const auto al = std::get<std::uint32_t>(a->data);
    if (al == 0 || (al & (al - 1)) != 0)
      fail(fmt::format("gguf: general.alignment must be a non-zero power of two, got {}", al));
    alignment_ = al;
  }

  tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = r.read_string(fmt::format("name of tensor {}", i));
    const auto n_dims = r.read<std::uint32_t>(fmt::format("dimension count of tensor '{}'", t.name));
    if (n_dims > kMaxDims)
      fail(fmt::format("gguf: tensor '{}' has {} dimensions, expected at most {}", t.name, n_dims, kMaxDims));
    std::vector<std::uint64_t> ne(n_dims);
    std::uint64_t count = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      ne[d] = r.read<std::uint64_t>(fmt::format("dimension {} of tensor '{}'", d, t.name));
      if (ne[d] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) || mul_overflows(count, ne[d], count) ||
          count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(fmt::format("gguf: tensor '{}' dimensions overflow: element count exceeds 2^63 at dimension {} (size {})", t.name,
                         d, ne[d]));
    }
    const auto type_id = r.read<std::uint32_t>(fmt::format("type of tensor '{}'", t.name));
    const auto traits = ggml_type_traits(type_id);
    if (!traits) fail(fmt::format("gguf: tensor '{}' has unknown ggml type {}", t.name, type_id));
    t.type = static_cast<GgmlType>(type_id);
    t.offset = r.read<std::uint64_t>(fmt::format("data offset of tensor '{}'", t.name));
    const std::uint64_t inner = n_dims > 0 ? ne[0] : 1;
    if (inner % traits->block_elements != 0)
      fail(fmt::format("gguf: tensor '{}' of type {} has innermost dimension {}, expected a multiple of the block size {}",
                       t.name, to_string(t.type), inner, traits->block_elements));
    std::uint64_t bytes = 0;
    if (mul_overflows(count / traits->block_elements, traits->block_bytes, bytes))
      fail(fmt::format("gguf: tensor '{}' data size overflows 64 bits", t.name));
    t.size_bytes = bytes;
    t.num_elements = static_cast<std::int64_t>(count);
    t.shape.assign(ne.rbegin(), ne.rend());
    if (t.offset % alignment_ != 0)
      fail(fmt::format("gguf: tensor '{}' data offset {} is not a multiple of the alignment {}", t.name, t.offset, alignment_));
    if (tensor_index_.count(t.name) != 0) fail(fmt::format("gguf: tensor '{}' appears twice", t.name));
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Data section starts at the next multiple of the alignment.
  const std::uint64_t end_of_infos = r.pos();
  const std::uint64_t pad = (alignment_ - end_of_infos % alignment_) % alignment_;
  data_offset_ = end_of_infos + pad;
  const std::uint64_t file_size = mapping_->size;
  if (!tensors_.empty() && data_offset_ > file_size)
    fail(fmt::format("gguf: data section would start at offset {} but the file has {} bytes", data_offset_, file_size));
  for (const auto& t : tensors_) {
    const std::uint64_t avail = file_size >= data_offset_ ? file_size - data_offset_ : 0;
    if (t.offset > avail || t.size_bytes > avail - t.offset)
      fail(fmt::format("gguf: tensor '{}' data [offset {}, size {}] lies past the end of the file (data section starts at {}, "
                       "file size {})",
                       t.name, data_offset_ + t.offset, t.size_bytes, data_offset_, file_size));
  }
}

// ------------------------------------------------------------------------------------------------------------------------------
// accessors

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::value(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr) fail(fmt::format("gguf: metadata key '{}' is missing", key));
  return *v;
}

namespace {
template <class T>
constexpr GgufType gguf_type_of() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return GgufType::kUint8;
  else if constexpr (std::is_same_v<T, std::int8_t>) return GgufType::kInt8;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return GgufType::kUint16;
  else if constexpr (std::is_same_v<T, std::int16_t>) return GgufType::kInt16;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return GgufType::kUint32;
  else if constexpr (std::is_same_v<T, std::int32_t>) return GgufType::kInt32;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return GgufType::kUint64;
  else if constexpr (std::is_same_v<T, std::int64_t>) return GgufType::kInt64;
  else if constexpr (std::is_same_v<T, float>) return GgufType::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return GgufType::kFloat64;
  else if constexpr (std::is_same_v<T, bool>) return GgufType::kBool;
  else if constexpr (std::is_same_v<T, std::string>) return GgufType::kString;
  else return GgufType::kArray;
}
}  // namespace

template <class T>
const T& GgufFile::get(std::string_view key) const {
  const GgufValue& v = value(key);
  constexpr GgufType want = gguf_type_of<T>();
  if (v.type != want)
    fail(fmt::format("gguf: metadata key '{}' has type {}, expected {}", key, to_string(v.type), to_string(want)));
  return std::get<T>(v.data);
}

template const std::uint8_t& GgufFile::get<std::uint8_t>(std::string_view) const;
template const std::int8_t& GgufFile::get<std::int8_t>(std::string_view) const;
template const std::uint16_t& GgufFile::get<std::uint16_t>(std::string_view) const;
template const std::int16_t& GgufFile::get<std::int16_t>(std::string_view) const;
template const std::uint32_t& GgufFile::get<std::uint32_t>(std::string_view) const;
template const std::int32_t& GgufFile::get<std::int32_t>(std::string_view) const;
template const std::uint64_t& GgufFile::get<std::uint64_t>(std::string_view) const;
template const std::int64_t& GgufFile::get<std::int64_t>(std::string_view) const;
template const float& GgufFile::get<float>(std::string_view) const;
template const double& GgufFile::get<double>(std::string_view) const;
template const bool& GgufFile::get<bool>(std::string_view) const;
template const std::string& GgufFile::get<std::string>(std::string_view) const;
template const GgufArray& GgufFile::get<GgufArray>(std::string_view) const;

std::int64_t GgufFile::get_integer(std::string_view key) const {
  return value(key).as_integer(fmt::format("metadata key '{}'", key));
}
std::optional<std::int64_t> GgufFile::get_integer_optional(std::string_view key) const {
  if (!contains(key)) return std::nullopt;
  return get_integer(key);
}
double GgufFile::get_double(std::string_view key) const { return value(key).as_double(fmt::format("metadata key '{}'", key)); }
std::optional<double> GgufFile::get_double_optional(std::string_view key) const {
  if (!contains(key)) return std::nullopt;
  return get_double(key);
}

const GgufArray& GgufFile::get_array(std::string_view key) const { return get<GgufArray>(key); }

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const auto& a = get_array(key);
  if (a.element_type != GgufType::kString)
    fail(fmt::format("gguf: metadata key '{}' is an array of {}, expected an array of string", key, to_string(a.element_type)));
  std::vector<std::string> out;
  out.reserve(a.elements.size());
  for (const auto& e : a.elements) out.push_back(std::get<std::string>(e.data));
  return out;
}

std::vector<std::int64_t> GgufFile::get_integer_array(std::string_view key) const {
  const auto& a = get_array(key);
  switch (a.element_type) {
    case GgufType::kString:
    case GgufType::kArray:
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      fail(fmt::format("gguf: metadata key '{}' is an array of {}, expected an array of integers", key,
                       to_string(a.element_type)));
    default: break;
  }
  std::vector<std::int64_t> out;
  out.reserve(a.elements.size());
  const std::string what = fmt::format("element of metadata key '{}'", key);
  for (const auto& e : a.elements) out.push_back(e.as_integer(what));
  return out;
}

std::vector<double> GgufFile::get_double_array(std::string_view key) const {
  const auto& a = get_array(key);
  if (a.element_type == GgufType::kString || a.element_type == GgufType::kArray || a.element_type == GgufType::kBool)
    fail(fmt::format("gguf: metadata key '{}' is an array of {}, expected an array of numbers", key, to_string(a.element_type)));
  std::vector<double> out;
  out.reserve(a.elements.size());
  const std::string what = fmt::format("element of metadata key '{}'", key);
  for (const auto& e : a.elements) out.push_back(e.as_double(what));
  return out;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GgufFile::tensor(std::string_view name) const {
  const auto* t = find_tensor(name);
  if (t == nullptr) fail(fmt::format("gguf: tensor '{}' is missing", name));
  return *t;
}

void GgufFile::release(const TensorInfo& info) const noexcept {
  if (mapping_ == nullptr) return;
  const std::uint64_t begin = data_offset_ + info.offset;
  mapping_->release(begin, begin + info.size_bytes);  // whole pages inside the tensor: its neighbours may still be read
}

std::span<const std::byte> GgufFile::tensor_data(const TensorInfo& info) const {
  // Re-validated here because a TensorInfo may come from elsewhere.
  const std::uint64_t size = mapping_ ? mapping_->size : 0;
  const std::uint64_t avail = size >= data_offset_ ? size - data_offset_ : 0;
  if (info.offset > avail || info.size_bytes > avail - info.offset)
    fail(fmt::format("gguf: tensor '{}' data [offset {}, size {}] lies past the end of the file (size {})", info.name,
                     data_offset_ + info.offset, info.size_bytes, size));
  return {mapping_->data + data_offset_ + info.offset, static_cast<std::size_t>(info.size_bytes)};
}

void GgufFile::dequantize(const TensorInfo& info, std::span<float> out) const {
  if (out.size() != static_cast<std::uint64_t>(info.num_elements))
    fail(fmt::format("gguf: dequantize '{}': output has {} floats, expected {}", info.name, out.size(), info.num_elements));
  try {
    models::dequantize(info.type, tensor_data(info), out);
  } catch (const specdec::error& e) {
    throw specdec::error(fmt::format("{} (tensor '{}')", e.what(), info.name));
  }
}

std::vector<float> GgufFile::dequantize(const TensorInfo& info) const {
  std::vector<float> out(static_cast<std::size_t>(info.num_elements));
  dequantize(info, out);
  return out;
}

}  // namespace specdec::models
