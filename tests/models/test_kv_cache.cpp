#include <algorithm>
#include <gtest/gtest.h>

#include <vector>

#include "specdec/models/kv_cache.hpp"
#include "specdec/sampling/status.hpp"

namespace sm = specdec::models;

namespace {
sm::KvCache make_cache(std::int64_t capacity = 4, std::int64_t slots = 1) {
  sm::KvCacheShape s;
  s.num_layers = 3;
  s.num_kv_heads = 2;
  s.head_dim = 5;
  s.initial_capacity = capacity;
  s.initial_slots = slots;
  return sm::KvCache(s);
}

// Element 0 of (layer l, keys or values, slot, kv head h, position pos) in the float32 cache's
// [slots, kv heads, capacity, head_dim] layer layout.
float* at_position(const sm::KvCache& c, std::int64_t l, std::int64_t kv, std::int64_t slot, std::int64_t h,
                   std::int64_t pos) {
  float* layer = kv == 0 ? c.key_data(l) : c.value_data(l);
  return layer + ((slot * c.num_kv_heads() + h) * c.capacity() + pos) * c.head_dim();
}

// Writes value (layer*1000 + kv*100 + pos) + 0.5*head into every element of `slot` at `pos`.
void write_position(sm::KvCache& c, std::int64_t slot, std::int64_t pos, float base) {
  for (std::int64_t l = 0; l < c.num_layers(); ++l)
    for (std::int64_t kv = 0; kv < 2; ++kv)
      for (std::int64_t h = 0; h < c.num_kv_heads(); ++h)
        std::fill_n(at_position(c, l, kv, slot, h, pos), c.head_dim(),
                    base + static_cast<float>(l * 1000 + kv * 100) + 0.5f * static_cast<float>(h));
}
float read_position(const sm::KvCache& c, std::int64_t slot, std::int64_t pos, std::int64_t l, std::int64_t kv,
                    std::int64_t h) {
  return *at_position(c, l, kv, slot, h, pos);
}
}  // namespace

TEST(KvCache, CapacityDoublesInsteadOfGrowingEveryStep) {
  sm::KvCache c = make_cache(4);
  const std::int64_t s = c.allocate();
  std::int64_t reallocations_seen = 0;
  for (std::int64_t len = 1; len <= 1000; ++len) {
    const std::int64_t before = c.num_reallocations();
    c.reserve(len);
    write_position(c, s, len - 1, static_cast<float>(len));
    c.set_length(s, len);
    if (c.num_reallocations() != before) {
      ++reallocations_seen;
      EXPECT_EQ(c.capacity() & (c.capacity() - 1), 0) << "capacity stays a power-of-two multiple of 4";
    }
    ASSERT_GE(c.capacity(), len);
  }
  // 4 -> 8 -> ... -> 1024: 8 doublings for 1000 single-position steps.
  EXPECT_EQ(reallocations_seen, 8);
  EXPECT_EQ(c.capacity(), 1024);
  // Growth preserved every earlier position.
  for (std::int64_t pos : {0, 3, 4, 500, 999}) EXPECT_FLOAT_EQ(read_position(c, s, pos, 2, 1, 1), pos + 1 + 2100.5f);
}

TEST(KvCache, TruncateOnlyMovesTheLength) {
  sm::KvCache c = make_cache(8);
  const std::int64_t s = c.allocate();
  for (std::int64_t p = 0; p < 6; ++p) write_position(c, s, p, static_cast<float>(p));
  c.set_length(s, 6);
  const void* data = c.storage_data();
  c.truncate(s, 2);
  EXPECT_EQ(c.length(s), 2);
  EXPECT_EQ(c.storage_data(), data);
  EXPECT_FLOAT_EQ(read_position(c, s, 1, 0, 0, 0), 1.f);
  EXPECT_THROW(c.truncate(s, 3), specdec::error) << "cannot truncate beyond the length";
  EXPECT_THROW(c.truncate(s, -1), specdec::error);
}

TEST(KvCache, SlotsAllocateFreeAndGrow) {
  sm::KvCache c = make_cache(4, 2);
  const std::int64_t a = c.allocate(), b = c.allocate();
  EXPECT_NE(a, b);
  write_position(c, a, 0, 7.f);
  write_position(c, b, 0, 9.f);
  c.set_length(a, 1);
  c.set_length(b, 1);
  const std::int64_t d = c.allocate();  // doubles the slot count, keeping a's and b's data
  EXPECT_EQ(c.num_slots(), 4);
  EXPECT_FLOAT_EQ(read_position(c, a, 0, 1, 0, 0), 1007.f);
  EXPECT_FLOAT_EQ(read_position(c, b, 0, 1, 0, 0), 1009.f);
  EXPECT_EQ(c.length(a), 1);
  EXPECT_EQ(c.length(d), 0);
  c.free(b);
  EXPECT_FALSE(c.is_allocated(b));
  EXPECT_THROW(c.length(b), specdec::error);
  EXPECT_THROW(c.free(b), specdec::error);
  EXPECT_EQ(c.allocate(), b) << "freed slots are reused";
  EXPECT_EQ(c.length(b), 0);
}

TEST(KvCache, KeepPathCompactsAcceptedNodes) {
  sm::KvCache c = make_cache(16);
  const std::int64_t s = c.allocate();
  for (std::int64_t p = 0; p < 10; ++p) write_position(c, s, p, static_cast<float>(p));
  c.set_length(s, 10);
  // prefix 3, tree nodes at 3..9; keep nodes {0, 2, 5} -> positions 3, 4, 5 hold old 3, 5, 8.
  const std::vector<std::int64_t> path = {0, 2, 5};
  c.keep_path(s, 3, path);
  EXPECT_EQ(c.length(s), 6);
  for (std::int64_t l = 0; l < 3; ++l)
    for (std::int64_t kv = 0; kv < 2; ++kv) {
      const float base = static_cast<float>(l * 1000 + kv * 100) + 0.5f;
      EXPECT_FLOAT_EQ(read_position(c, s, 2, l, kv, 1), 2.f + base);
      EXPECT_FLOAT_EQ(read_position(c, s, 3, l, kv, 1), 3.f + base);
      EXPECT_FLOAT_EQ(read_position(c, s, 4, l, kv, 1), 5.f + base);
      EXPECT_FLOAT_EQ(read_position(c, s, 5, l, kv, 1), 8.f + base);
    }
  // Invalid paths leave the cache untouched.
  const std::vector<std::int64_t> unordered = {1, 0};
  EXPECT_THROW(c.keep_path(s, 3, unordered), specdec::error);
  const std::vector<std::int64_t> out_of_range = {0, 3};
  EXPECT_THROW(c.keep_path(s, 3, out_of_range), specdec::error);
  EXPECT_EQ(c.length(s), 6);
}

TEST(KvCache, RejectsBadShapes) {
  sm::KvCacheShape s;
  s.num_layers = 0;
  s.num_kv_heads = 1;
  s.head_dim = 1;
  EXPECT_THROW(sm::KvCache{s}, specdec::error);
}

// KvCacheShape::key_blocks: every key written and copied into its block sits at [p / 16][d][p % 16] of its slot and kv
// head, through slot and capacity growth and keep_path, for both element types.
TEST(KvCache, KeyBlocksMirrorTheKeysThroughGrowthAndKeepPath) {
  for (bool half : {false, true}) {
    sm::KvCacheShape s;
    s.num_layers = 2;
    s.num_kv_heads = 3;
    s.head_dim = 8;
    s.initial_capacity = 20;
    s.half = half;
    s.key_blocks = true;
    sm::KvCache c(s);
    ASSERT_TRUE(c.has_key_blocks());
    const std::int64_t a = c.allocate();
    auto key_at = [&](std::int64_t layer, std::int64_t slot, std::int64_t h, std::int64_t p, std::int64_t d) -> double {
      const std::int64_t i = ((slot * 3 + h) * c.capacity() + p) * 8 + d;
      return half ? static_cast<double>(c.key_data_half(layer)[i]) : static_cast<double>(c.key_data(layer)[i]);
    };
    auto block_at = [&](std::int64_t layer, std::int64_t slot, std::int64_t h, std::int64_t p, std::int64_t d) -> double {
      const std::int64_t i = ((slot * 3 + h) * c.key_block_count() + p / 16) * 8 * 16 + d * 16 + p % 16;
      return half ? static_cast<double>(c.key_block_data_half(layer)[i]) : static_cast<double>(c.key_block_data(layer)[i]);
    };
    auto write = [&](std::int64_t slot, std::int64_t from, std::int64_t to, int salt) {
      c.reserve(to);
      for (std::int64_t l = 0; l < 2; ++l)
        for (std::int64_t h = 0; h < 3; ++h)
          for (std::int64_t p = from; p < to; ++p) {
            for (std::int64_t d = 0; d < 8; ++d) {
              const std::int64_t i = ((slot * 3 + h) * c.capacity() + p) * 8 + d;
              const auto v = static_cast<std::uint16_t>((salt * 7919 + l * 1000 + h * 100 + p * 10 + d) % 30000);
              if (half) c.key_data_half(l)[i] = v;
              else c.key_data(l)[i] = static_cast<float>(v);
            }
            c.write_key_block(l, slot, h, p);
          }
      c.set_length(slot, to);
    };
    auto check = [&](std::int64_t slot, const char* when) {
      for (std::int64_t l = 0; l < 2; ++l)
        for (std::int64_t h = 0; h < 3; ++h)
          for (std::int64_t p = 0; p < c.length(slot); ++p)
            for (std::int64_t d = 0; d < 8; ++d)
              ASSERT_EQ(block_at(l, slot, h, p, d), key_at(l, slot, h, p, d))
                  << when << ": half " << half << " slot " << slot << " layer " << l << " head " << h << " position " << p;
    };
    write(a, 0, 18, 1);
    check(a, "written");
    write(a, 18, 70, 2);  // grows the capacity (20 -> 40 -> 80)
    check(a, "after capacity growth");
    const std::int64_t b = c.allocate();
    const std::int64_t b2 = c.allocate();  // grows the slot count
    write(b2, 0, 33, 3);
    check(a, "after slot growth");
    check(b2, "second slot");
    (void)b;
    const std::vector<std::int64_t> path = {0, 2, 5, 6};  // nodes written at [60, 70)
    c.keep_path(a, 60, path);
    check(a, "after keep_path");
    EXPECT_EQ(c.length(a), 64);
  }
}
