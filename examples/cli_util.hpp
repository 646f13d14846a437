// Helpers of the command-line programs (specdec-generate, specdec-train) that check what a user typed before any model
// loads, and describe a run: a seed parsed without wrapping, the first invalid UTF-8 byte of a text, whether a JSON
// output path can be written, the SHA-256 of a model file, and the CPU a run measured on. Header-only, std only, so
// tests/cli checks them directly.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specdec::cli {

/// A decimal integer in [0, 2^64): digits only (no sign, no spaces, no hex), at least one. Returns nothing for anything
/// else, including values that do not fit (so "-1" is refused rather than wrapped to 2^64 - 1).
inline std::optional<std::uint64_t> parse_u64(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

/// The byte offset where the first ill-formed UTF-8 sequence starts (a stray continuation byte, a lead byte without its
/// continuation bytes, an overlong form, a surrogate or a code point above U+10FFFF, as Unicode's table 3-7 says), or
/// nothing when the whole text is well-formed.
inline std::optional<std::size_t> first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return i;
    if (i + 1 >= n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if (i + k >= n || p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::nullopt;
}

/// Why an output file cannot be written at `path` (empty when it can): a directory at the path, a missing or unwritable
/// directory, or an existing file that cannot be replaced. Checked before a run, so a long run never ends unable to save.
inline std::string output_file_problem(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return "expected a file path, got an empty string";
  if (fs::is_directory(path, ec)) return "'" + path.string() + "' is a directory (expected a file path)";
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) return "the directory '" + dir.string() + "' does not exist";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "the directory '" + dir.string() + "' is not writable";
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    return "'" + path.string() + "' exists and is not writable";
  return {};
}

/// SHA-256 (FIPS 180-4) of a byte stream, fed in pieces.
class Sha256 {
 public:
  void update(const unsigned char* data, std::size_t n) {
    total_ += n;
    while (n > 0) {
      const std::size_t take = std::min<std::size_t>(64 - used_, n);
      for (std::size_t i = 0; i < take; ++i) block_[used_ + i] = data[i];
      used_ += take;
      data += take;
      n -= take;
      if (used_ == 64) {
        compress(block_.data());
        used_ = 0;
      }
    }
  }
  /// The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex() {
    const std::uint64_t bits = total_ * 8;
    const unsigned char pad = 0x80;
    update(&pad, 1);
    const unsigned char zero = 0;
    while (used_ != 56) update(&zero, 1);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(len, 8);
    std::string out;
    static const char* digits = "0123456789abcdef";
    for (const std::uint32_t w : h_)
      for (int s = 28; s >= 0; s -= 4) out += digits[(w >> s) & 0xF];
    return out;
  }

 private:
  static std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void compress(const unsigned char* b) {
    static constexpr std::uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (std::uint32_t{b[4 * i]} << 24) | (std::uint32_t{b[4 * i + 1]} << 16) | (std::uint32_t{b[4 * i + 2]} << 8) |
             std::uint32_t{b[4 * i + 3]};
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h_[0], bb = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = bb, bb = a, a = t1 + t2;
    }
    h_[0] += a, h_[1] += bb, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
  }
  std::array<std::uint32_t, 8> h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

/// SHA-256 of a file's bytes as hex; empty when it cannot be read.
inline std::string sha256_file(const std::filesystem::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  Sha256 h;
  std::vector<unsigned char> buf(1 << 20);
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  const bool ok = std::ferror(f) == 0;
  std::fclose(f);
  return ok ? h.hex() : std::string();
}

/// The CPU a run was measured on, as /proc/cpuinfo names it: results from different hosts (a Zen 4 and a Zen 5 EPYC
/// both call themselves "AMD EPYC" under a hypervisor) are told apart by family and model.
struct CpuDescription {
  std::string vendor;      ///< vendor_id, e.g. "AuthenticAMD"; empty when not listed
  std::string model_name;  ///< "model name"
  int family = -1;         ///< "cpu family" (-1 when not listed)
  int model = -1;          ///< "model"
  int logical_cpus = 0;    ///< "processor" entries
};

/// Parses the text of /proc/cpuinfo: the first processor's vendor, name, family and model, and how many processors
/// are listed. Lines it does not know are skipped; a field missing or not a number stays at its default.
inline CpuDescription parse_cpuinfo(std::string_view text) {
  CpuDescription d;
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
    return v;
  };
  auto number = [](std::string_view v) -> int {
    const auto n = parse_u64(v);
    return n && *n <= 1000000 ? static_cast<int>(*n) : -1;
  };
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "processor") {
      ++d.logical_cpus;
    } else if (d.logical_cpus <= 1) {  // the first processor's fields
      if (key == "vendor_id" && d.vendor.empty()) d.vendor = value;
      else if (key == "model name" && d.model_name.empty()) d.model_name = value;
      else if (key == "cpu family" && d.family < 0) d.family = number(value);
      else if (key == "model" && d.model < 0) d.model = number(value);
    }
  }
  return d;
}

/// parse_cpuinfo of this machine's /proc/cpuinfo; all defaults where it cannot be read (not Linux).
inline CpuDescription read_cpu_description() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "rb");
  if (!f) return {};
  std::string text;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) text.append(buf.data(), n);
  std::fclose(f);
  return parse_cpuinfo(text);
}

}  // namespace specdec::cli
