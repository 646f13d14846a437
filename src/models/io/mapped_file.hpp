// Internal to src/models/io: the bytes a file reader parses, either a read-only private mapping of a file or a copy held
// in memory (the readers' from_bytes), with page release for a mapped file. Shared by GgufFile and SafetensorsFile.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace specdec::models::detail {

struct MappedFile {
  const std::byte* data = nullptr;
  std::uint64_t size = 0;
  void* mmap_base = nullptr;     // non-null when mapped
  std::vector<std::byte> owned;  // the bytes held by hold()

  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  /// Maps the regular file at `path` (an empty file maps nothing). Throws specdec::error "<reader>: cannot open '<path>':
  /// ...", "... is not a regular file" or "... cannot map ..." naming the file and the system's reason.
  void map(const std::filesystem::path& path, std::string_view reader);
  /// Holds a copy of `bytes`.
  void hold(std::span<const std::byte> bytes);
  /// Returns the whole pages inside [begin, end) of a mapped file to the system (their next read faults the file back
  /// in); nothing for held bytes or a range outside the file.
  void release(std::uint64_t begin, std::uint64_t end) const noexcept;
};

}  // namespace specdec::models::detail
