#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "specdec/models/detail/errors.hpp"

namespace specdec::models::detail {

MappedFile::~MappedFile() {
  if (mmap_base != nullptr) ::munmap(mmap_base, size);
}

void MappedFile::map(const std::filesystem::path& path, std::string_view reader) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(fmt::format("{}: cannot open '{}': {}", reader, name, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(fmt::format("{}: cannot stat '{}': {}", reader, name, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(fmt::format("{}: '{}' is not a regular file", reader, name));
  }
  size = static_cast<std::uint64_t>(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      size = 0;
      fail(fmt::format("{}: cannot map '{}' ({} bytes): {}", reader, name, st.st_size, std::strerror(e)));
    }
    mmap_base = p;
    data = static_cast<const std::byte*>(p);
  }
  ::close(fd);
}

void MappedFile::hold(std::span<const std::byte> bytes) {
  owned.assign(bytes.begin(), bytes.end());
  data = owned.data();
  size = owned.size();
}

void MappedFile::release(std::uint64_t begin, std::uint64_t end) const noexcept {
  if (mmap_base == nullptr || end > size || begin >= end) return;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  // Only whole pages inside the range (its neighbours may still be read).
  const std::uint64_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last > first) ::madvise(static_cast<std::byte*>(mmap_base) + first, last - first, MADV_DONTNEED);
}

}  // namespace specdec::models::detail
