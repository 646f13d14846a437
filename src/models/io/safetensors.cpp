// safetensors reader and writer: see include/specdec/models/safetensors.hpp.
#include "specdec/models/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "specdec/models/float16.hpp"
#include "json_excerpt.hpp"
#include "mapped_file.hpp"

namespace specdec::models {

namespace {
[[noreturn]] void fail(const std::string& msg) { throw specdec::error(msg); }
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the limit the reference implementation uses

}  // namespace

const char* to_string(SafetensorsDtype dtype) noexcept {
  switch (dtype) {
    case SafetensorsDtype::kF64: return "F64";
    case SafetensorsDtype::kF32: return "F32";
    case SafetensorsDtype::kF16: return "F16";
    case SafetensorsDtype::kBF16: return "BF16";
    case SafetensorsDtype::kI64: return "I64";
    case SafetensorsDtype::kI32: return "I32";
    case SafetensorsDtype::kI16: return "I16";
    case SafetensorsDtype::kI8: return "I8";
    case SafetensorsDtype::kU8: return "U8";
    case SafetensorsDtype::kBool: return "BOOL";
  }
  return "unknown";
}

std::size_t element_size(SafetensorsDtype dtype) noexcept {
  switch (dtype) {
    case SafetensorsDtype::kF64:
    case SafetensorsDtype::kI64: return 8;
    case SafetensorsDtype::kF32:
    case SafetensorsDtype::kI32: return 4;
    case SafetensorsDtype::kF16:
    case SafetensorsDtype::kBF16:
    case SafetensorsDtype::kI16: return 2;
    case SafetensorsDtype::kI8:
    case SafetensorsDtype::kU8:
    case SafetensorsDtype::kBool: return 1;
  }
  return 0;
}

struct SafetensorsFile::Mapping : detail::MappedFile {};

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) {
  mapping_ = std::make_unique<Mapping>();
  const std::string name = path.string();
  mapping_->map(path, "safetensors");
  try {
    parse();
  } catch (const specdec::error& e) {
    throw specdec::error(fmt::format("{} (file '{}')", e.what(), name));
  }
}

SafetensorsFile SafetensorsFile::from_bytes(std::span<const std::byte> bytes) {
  SafetensorsFile f;
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->hold(bytes);
  f.parse();
  return f;
}

void SafetensorsFile::parse() {
  const std::uint64_t size = mapping_->size;
  if (size < 8) fail(fmt::format("safetensors: file truncated: expected an 8-byte header length, the file has {} bytes", size));
  std::uint64_t n = 0;
  std::memcpy(&n, mapping_->data, 8);
  if (n > kMaxHeaderBytes) fail(fmt::format("safetensors: header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes));
  if (n > size - 8)
    fail(fmt::format("safetensors: file truncated: header length {} but only {} bytes follow the length field", n, size - 8));
  data_offset_ = 8 + n;
  const std::uint64_t data_size = size - data_offset_;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(mapping_->data + 8),
                                   reinterpret_cast<const char*>(mapping_->data + 8 + n));
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("safetensors: header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) fail(fmt::format("safetensors: header must be a JSON object, got {}", header.type_name()));
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) fail(fmt::format("safetensors: __metadata__ must be an object, got {}", v.type_name()));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(fmt::format("safetensors: __metadata__ value '{}' must be a string, got {}", m.key(), m.value().type_name()));
        metadata_.emplace(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    if (!v.is_object()) fail(fmt::format("safetensors: entry '{}' must be an object, got {}", key, v.type_name()));
    SafetensorsTensor t;
    t.name = key;
    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) fail(fmt::format("safetensors: tensor '{}' has no string 'dtype'", key));
    const auto& ds = dt->get_ref<const std::string&>();
    static constexpr SafetensorsDtype kAll[] = {SafetensorsDtype::kF64, SafetensorsDtype::kF32, SafetensorsDtype::kF16,
                                                SafetensorsDtype::kBF16, SafetensorsDtype::kI64, SafetensorsDtype::kI32,
                                                SafetensorsDtype::kI16, SafetensorsDtype::kI8, SafetensorsDtype::kU8,
                                                SafetensorsDtype::kBool};
    bool found = false;
    for (auto d : kAll)
      if (ds == to_string(d)) {
        t.dtype = d;
        found = true;
      }
    if (!found)
      fail(fmt::format("safetensors: tensor '{}' has unsupported dtype '{}' (expected one of F64, F32, F16, BF16, I64, I32, I16, "
                       "I8, U8, BOOL)",
                       key, ds));
    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) fail(fmt::format("safetensors: tensor '{}' has no array 'shape'", key));
    std::uint64_t count = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        fail(fmt::format("safetensors: tensor '{}' shape entries must be non-negative integers, got {}", key,
                         detail::json_excerpt(d)));
      const auto dim = d.get<std::uint64_t>();
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) || __builtin_mul_overflow(count, dim, &count))
        fail(fmt::format("safetensors: tensor '{}' shape entry {} ({}) overflows the element count", key, t.shape.size(), dim));
      t.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail(fmt::format("safetensors: tensor '{}' needs 'data_offsets' [begin, end] of non-negative integers", key));
    t.begin = (*off)[0].get<std::uint64_t>();
    t.end = (*off)[1].get<std::uint64_t>();
    if (t.end < t.begin) fail(fmt::format("safetensors: tensor '{}' data_offsets [{}, {}] end before begin", key, t.begin, t.end));
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(element_size(t.dtype)), &bytes) || bytes != t.end - t.begin)
      fail(fmt::format("safetensors: tensor '{}' of dtype {} and shape {} needs {} bytes, but data_offsets [{}, {}] span {}", key,
                       ds, fmt::format("[{}]", fmt::join(t.shape, ",")), count * element_size(t.dtype), t.begin, t.end,
                       t.end - t.begin));
    if (t.end > data_size)
      fail(fmt::format("safetensors: tensor '{}' data [{}, {}] lies past the end of the data section ({} bytes)", key, t.begin,
                       t.end, data_size));
    t.num_elements = static_cast<std::int64_t>(count);
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < tensors_.size(); ++i)
    if (tensors_[i].begin < tensors_[i - 1].end)
      fail(fmt::format("safetensors: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", tensors_[i - 1].name, tensors_[i - 1].begin,
                       tensors_[i - 1].end, tensors_[i].name, tensors_[i].begin, tensors_[i].end));
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const SafetensorsTensor* SafetensorsFile::find_tensor(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  const auto* t = find_tensor(name);
  if (t == nullptr) fail(fmt::format("safetensors: tensor '{}' is missing", name));
  return *t;
}

std::span<const std::byte> SafetensorsFile::tensor_data(const SafetensorsTensor& t) const {
  const std::uint64_t avail = mapping_->size - data_offset_;
  if (t.end < t.begin || t.end > avail)
    fail(fmt::format("safetensors: tensor '{}' data [{}, {}] lies past the end of the data section ({} bytes)", t.name, t.begin,
                     t.end, avail));
  return {mapping_->data + data_offset_ + t.begin, static_cast<std::size_t>(t.end - t.begin)};
}

void SafetensorsFile::to_float(const SafetensorsTensor& t, std::span<float> out) const {
  if (out.size() != static_cast<std::uint64_t>(t.num_elements))
    fail(fmt::format("safetensors: to_float '{}': output has {} floats, expected {}", t.name, out.size(), t.num_elements));
  const auto data = tensor_data(t);
  if (data.size() != out.size() * element_size(t.dtype))
    fail(fmt::format("safetensors: tensor '{}' has {} bytes, expected {}", t.name, data.size(),
                     out.size() * element_size(t.dtype)));
  if (t.dtype != SafetensorsDtype::kF32 && t.dtype != SafetensorsDtype::kF16 && t.dtype != SafetensorsDtype::kBF16)
    fail(fmt::format("safetensors: tensor '{}' has dtype {}, expected F32, F16 or BF16 for conversion to float", t.name,
                     to_string(t.dtype)));
  if (out.empty()) return;  // a zero-sized tensor
  switch (t.dtype) {
    case SafetensorsDtype::kF32: std::memcpy(out.data(), data.data(), data.size()); break;
    case SafetensorsDtype::kF16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, data.data() + 2 * i, 2);
        out[i] = half_to_float(h);
      }
      break;
    case SafetensorsDtype::kBF16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, data.data() + 2 * i, 2);
        out[i] = bf16_to_float(h);
      }
      break;
    default:
      fail(fmt::format("safetensors: tensor '{}' has dtype {}, expected F32, F16 or BF16 for conversion to float", t.name,
                       to_string(t.dtype)));
  }
}

std::vector<float> SafetensorsFile::to_float(const SafetensorsTensor& t) const {
  std::vector<float> out(static_cast<std::size_t>(t.num_elements));
  to_float(t, out);
  return out;
}

void write_safetensors(const std::filesystem::path& path, std::span<const SafetensorsWriteTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::uint64_t count = 1;
    for (auto d : t.shape) {
      if (d < 0) fail(fmt::format("write_safetensors: tensor '{}': negative dimension {}", t.name, d));
      count *= static_cast<std::uint64_t>(d);
    }
    const std::uint64_t bytes = count * element_size(t.dtype);
    if (bytes != t.data.size())
      fail(fmt::format("write_safetensors: tensor '{}': expected {} bytes for its shape, got {}", t.name, bytes, t.data.size()));
    header[t.name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(fmt::format("write_safetensors: cannot open '{}' for writing", path.string()));
  const std::uint64_t n = h.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  if (!out) fail(fmt::format("write_safetensors: writing '{}' failed", path.string()));
}

}  // namespace specdec::models
