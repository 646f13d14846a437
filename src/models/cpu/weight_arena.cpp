// Huge-page slabs for packed weights. See include/specdec/models/detail/weight_arena.hpp.
#include "specdec/models/detail/weight_arena.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "specdec/models/detail/errors.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace specdec::models::detail {

std::shared_ptr<std::byte> allocate_huge_pages(std::size_t bytes) {
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, size);
  if (p == nullptr) fail(fmt::format("weights: cannot allocate {} bytes", size));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only: without transparent huge pages the memory stays in small pages
#endif
  return {static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); }};
}

std::shared_ptr<std::byte> WeightArena::allocate(std::size_t bytes) {
  const std::size_t need = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!slab_ || size_ - used_ < need) {
    // A new slab: the rest of the old one stays unused (its untouched huge pages are never faulted in).
    size_ = std::max(slab_bytes_, need);
    size_ = (size_ + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    slab_ = allocate_huge_pages(size_);
    used_ = 0;
  }
  std::shared_ptr<std::byte> piece(slab_, slab_.get() + used_);
  used_ += need;
  return piece;
}

}  // namespace specdec::models::detail
