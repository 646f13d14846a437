// A minimal GGUF writer for tests (little-endian host assumed, as everywhere this project runs): metadata of every value
// type, tensors with their data, the alignment padding. Shared by the GGUF reader's tests and the loaders' tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "specdec/models/gguf.hpp"

namespace specdec_test {

using specdec::models::GgmlType;
using specdec::models::GgufType;

struct Bytes {
  std::vector<std::byte> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<std::uint64_t>(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    b.insert(b.end(), p, p + s.size());
  }
  void raw(const std::vector<std::byte>& v) { b.insert(b.end(), v.begin(), v.end()); }
};

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> ne;
  std::uint32_t type;
  std::vector<std::byte> data;
};

struct Writer {
  std::uint32_t version = 3;
  std::uint64_t alignment = 32;
  std::vector<std::pair<std::string, Bytes>> kvs;  // key -> (type + value) bytes
  std::vector<Tensor> tensors;

  template <class T>
  void scalar(const std::string& key, GgufType t, T v) {
    Bytes x;
    x.put<std::uint32_t>(static_cast<std::uint32_t>(t));
    x.put<T>(v);
    kvs.emplace_back(key, std::move(x));
  }
  void string(const std::string& key, const std::string& v) {
    Bytes x;
    x.put<std::uint32_t>(static_cast<std::uint32_t>(GgufType::kString));
    x.str(v);
    kvs.emplace_back(key, std::move(x));
  }
  void string_array(const std::string& key, const std::vector<std::string>& v) {
    Bytes x;
    x.put<std::uint32_t>(static_cast<std::uint32_t>(GgufType::kArray));
    x.put<std::uint32_t>(static_cast<std::uint32_t>(GgufType::kString));
    x.put<std::uint64_t>(v.size());
    for (const auto& s : v) x.str(s);
    kvs.emplace_back(key, std::move(x));
  }
  template <class T>
  void array(const std::string& key, GgufType et, const std::vector<T>& v) {
    Bytes x;
    x.put<std::uint32_t>(static_cast<std::uint32_t>(GgufType::kArray));
    x.put<std::uint32_t>(static_cast<std::uint32_t>(et));
    x.put<std::uint64_t>(v.size());
    for (const auto& e : v) x.put<T>(e);
    kvs.emplace_back(key, std::move(x));
  }
  void raw_kv(const std::string& key, Bytes value) { kvs.emplace_back(key, std::move(value)); }
  void tensor(const std::string& name, std::vector<std::uint64_t> ne, GgmlType type, std::vector<std::byte> data) {
    tensors.push_back({name, std::move(ne), static_cast<std::uint32_t>(type), std::move(data)});
  }

  std::vector<std::byte> build() const {
    Bytes out;
    out.put<std::uint32_t>(0x46554747u);
    out.put<std::uint32_t>(version);
    out.put<std::uint64_t>(tensors.size());
    out.put<std::uint64_t>(kvs.size());
    for (const auto& [k, v] : kvs) {
      out.str(k);
      out.raw(v.b);
    }
    std::uint64_t off = 0;
    for (const auto& t : tensors) {
      out.str(t.name);
      out.put<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()));
      for (auto d : t.ne) out.put<std::uint64_t>(d);
      out.put<std::uint32_t>(t.type);
      out.put<std::uint64_t>(off);
      off += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    while (out.b.size() % alignment != 0) out.b.push_back(std::byte{0});
    for (const auto& t : tensors) {
      out.raw(t.data);
      while (out.b.size() % alignment != 0) out.b.push_back(std::byte{0});
    }
    return out.b;
  }
};

/// Writes `bytes` to `path` (for loaders that take a file name).
inline void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace specdec_test
