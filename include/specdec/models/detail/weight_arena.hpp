// Internal: memory for packed weights in 2 MiB-aligned slabs that the kernel is asked to back with transparent huge pages
// (src/models/cpu/weight_arena.cpp). Not a stable API.
//
// A forward streams every weight once (about 97 MB for SmolLM2-135M in Q4_1). In 4 KiB pages that is ~24k pages, eight
// times what the data TLB covers, so each page costs a table walk on the weights' critical path; in 2 MiB pages it is ~50.
// On Linux with transparent huge pages in "madvise" mode (Debian's default) only memory marked with
// madvise(MADV_HUGEPAGE) gets them, and a small matrix never fills a huge page of its own, so a model's matrices are
// carved one after another from shared slabs. Where huge pages are unavailable, the memory is ordinary.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

namespace specdec::models::detail {

/// Bytes of one huge page: the slabs' alignment and the granularity of their size.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// `bytes` of memory (not zeroed) aligned to kHugePageBytes and marked for huge pages, rounded up to whole huge pages;
/// kept alive by the returned pointer (and any pointer sharing it). Pages are faulted in as they are first written, so
/// a part never written takes no memory. Throws specdec::error when the allocation fails.
std::shared_ptr<std::byte> allocate_huge_pages(std::size_t bytes);

/// Carves 64-byte-aligned pieces out of huge-page slabs of at least `slab_bytes`, in the order asked for. Each piece keeps
/// its slab alive (an aliasing std::shared_ptr), so the arena itself may go once the pieces are made: a model keeps an
/// arena only while it loads. Thread-safe.
class WeightArena {
 public:
  explicit WeightArena(std::size_t slab_bytes = std::size_t{64} << 20) : slab_bytes_(slab_bytes) {}
  /// `bytes` of memory (not zeroed), 64-byte aligned.
  std::shared_ptr<std::byte> allocate(std::size_t bytes);

 private:
  std::mutex mutex_;
  std::size_t slab_bytes_;
  std::shared_ptr<std::byte> slab_;
  std::size_t size_ = 0, used_ = 0;
};

}  // namespace specdec::models::detail
