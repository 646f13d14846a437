// Reads the little-endian fixture files tests/models/write_dequant_fixture.py writes (tests/models/data): a 4-byte magic,
// then u32 counts and sizes, float32 arrays and raw bytes, read in order. A read past the end yields zeros and leaves
// ok() false, so a test states ok() before trusting what it read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace specdec_test {

class FixtureFile {
 public:
  explicit FixtureFile(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    opened_ = static_cast<bool>(in);
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bool opened() const { return opened_; }
  /// Everything read so far was inside the file.
  bool ok() const { return opened_ && pos_ <= bytes_.size(); }
  bool at_end() const { return pos_ == bytes_.size(); }
  /// The first 4 bytes (and the cursor moves past them).
  std::string magic() {
    const auto b = take(4);
    return b.empty() ? std::string() : std::string(reinterpret_cast<const char*>(b.data()), 4);
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    const auto b = take(4);
    if (!b.empty()) std::memcpy(&v, b.data(), 4);
    return v;
  }
  std::vector<float> floats(std::size_t n) {
    std::vector<float> v(n);
    const auto b = take(4 * n);
    if (!b.empty()) std::memcpy(v.data(), b.data(), 4 * n);
    return v;
  }
  /// The next n bytes (empty, and ok() false, when the file ends first).
  std::vector<std::byte> take(std::size_t n) {
    if (pos_ + n > bytes_.size()) {
      pos_ = bytes_.size() + 1;
      return {};
    }
    std::vector<std::byte> out(n);
    std::memcpy(out.data(), bytes_.data() + pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::vector<char> bytes_;
  std::size_t pos_ = 0;
  bool opened_ = false;
};

}  // namespace specdec_test
