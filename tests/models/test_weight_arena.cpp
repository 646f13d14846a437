// Huge-page slabs for packed weights: pieces are 64-byte aligned, disjoint, carved in order from 2 MiB-aligned slabs, and
// outlive the arena that made them (the sanitizer build runs these too).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "specdec/models/detail/weight_arena.hpp"

namespace specdec::models::detail {
namespace {

std::uintptr_t address(const std::shared_ptr<std::byte>& p) { return reinterpret_cast<std::uintptr_t>(p.get()); }

TEST(WeightArena, PiecesAreAlignedDisjointAndInOrder) {
  std::vector<std::shared_ptr<std::byte>> pieces;
  std::vector<std::size_t> sizes = {1, 63, 64, 65, 1000, 300000, 5, 1 << 20};
  {
    WeightArena arena(std::size_t{4} << 20);
    for (const auto n : sizes) pieces.push_back(arena.allocate(n));
  }  // the arena goes; the pieces keep their slabs
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    ASSERT_NE(pieces[i], nullptr);
    EXPECT_EQ(address(pieces[i]) % 64, 0u) << "piece " << i;
    std::memset(pieces[i].get(), static_cast<int>(i + 1), sizes[i]);
  }
  for (std::size_t i = 0; i + 1 < pieces.size(); ++i)  // one slab here: each piece follows the last, rounded to 64 bytes
    EXPECT_EQ(address(pieces[i + 1]) - address(pieces[i]), (sizes[i] + 63) / 64 * 64) << "piece " << i;
  for (std::size_t i = 0; i < pieces.size(); ++i)
    for (std::size_t j = 0; j < sizes[i]; j += 997)
      ASSERT_EQ(std::to_integer<int>(pieces[i].get()[j]), static_cast<int>(i + 1)) << "piece " << i << " byte " << j;
  EXPECT_EQ(address(pieces[0]) % kHugePageBytes, 0u);
}

TEST(WeightArena, APieceThatDoesNotFitStartsASlabOfItsOwnSize) {
  WeightArena arena(kHugePageBytes);
  const auto a = arena.allocate(kHugePageBytes / 2);
  const auto b = arena.allocate(kHugePageBytes);  // does not fit in the rest of the first slab
  const auto c = arena.allocate(3 * kHugePageBytes + 1);
  EXPECT_EQ(address(a) % kHugePageBytes, 0u);
  EXPECT_EQ(address(b) % kHugePageBytes, 0u);
  EXPECT_EQ(address(c) % kHugePageBytes, 0u);
  std::memset(c.get(), 7, 3 * kHugePageBytes + 1);
  EXPECT_EQ(std::to_integer<int>(c.get()[3 * kHugePageBytes]), 7);
}

TEST(WeightArena, HugePageAllocationsAreAlignedAndWritable) {
  const auto p = allocate_huge_pages(100);
  EXPECT_EQ(address(p) % kHugePageBytes, 0u);
  std::memset(p.get(), 1, kHugePageBytes);  // rounded up to a whole huge page
}

}  // namespace
}  // namespace specdec::models::detail
