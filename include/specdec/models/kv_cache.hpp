// KvCache: per-layer key/value storage for several sequences ("slots") of a decoder-only transformer, with O(1) rollback.
//
// Layout: one array `storage` (float32, or float16 with KvCacheShape::half) of shape
// [num_layers, 2, num_slots, num_kv_heads, capacity, head_dim]
// (index 0 of dim 1 holds keys, 1 holds values); key_data(l) / value_data(l) point at a layer's [num_slots, num_kv_heads,
// capacity, head_dim]; the first length(slot) positions of a slot are valid. Keys are stored after the rotary embedding
// was applied. Standard library only.
//
// Growth: when a sequence needs more positions than `capacity`, capacity doubles (at least) and the storage is reallocated
// once; likewise the number of slots doubles when every slot is taken. So n single-token steps cost O(log n) reallocations.
// Truncation (rollback after rejected drafts) only sets the length: O(1), no data moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace specdec::models {

struct KvCacheShape {
  std::int64_t num_layers = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t initial_capacity = 64;  ///< positions per slot before the first growth (>= 1)
  std::int64_t initial_slots = 1;      ///< slots before the first growth (>= 1)
  bool half = false;                   ///< store IEEE float16 (half the bytes a forward reads) instead of float32
  /// Also keep every key transposed in blocks of 16 positions ([blocks, head_dim, 16] per slot and kv head, the layout a
  /// vector attention kernel scores 16 keys from), written by whoever writes a key (write_key_block) and kept in step by
  /// keep_path and growth: a decode then reads its keys without transposing them again (half as many bytes again as
  /// the keys).
  bool key_blocks = false;
};

class KvCache {
 public:
  KvCache() = default;
  /// Throws specdec::error when a dimension is < 1.
  explicit KvCache(const KvCacheShape& shape);

  /// Takes a free slot (growing the slot count by doubling when none is free) and returns its index; its length is 0.
  std::int64_t allocate();
  /// Returns the slot to the free list. Throws specdec::error for an index that is not allocated.
  void free(std::int64_t slot);
  bool is_allocated(std::int64_t slot) const noexcept;

  /// Number of valid positions of `slot`.
  std::int64_t length(std::int64_t slot) const;
  /// Rolls `slot` back to `new_length` positions (0 <= new_length <= length(slot)). O(1): no data moves.
  void truncate(std::int64_t slot, std::int64_t new_length);
  /// Makes room for positions [0, required) of any slot: grows capacity by doubling when required > capacity().
  /// Existing data is preserved. Does not change any length.
  void reserve(std::int64_t required);
  /// Declares positions [0, new_length) of `slot` valid after a writer filled them (new_length <= capacity()).
  void set_length(std::int64_t slot, std::int64_t new_length);

  /// After a tree forward wrote its n nodes at positions [prefix_length, prefix_length + n): keeps only the nodes
  /// `path` (node indices, strictly increasing, each < length(slot) - prefix_length), moving node path[i] to position
  /// prefix_length + i in every layer, and sets length(slot) = prefix_length + path.size(). Costs O(layers * path.size()).
  /// A root-to-leaf path of a tree laid out with parents before children satisfies the ordering; since node path[i] sits at
  /// depth i, its rotary position (prefix_length + depth) already matches its new position.
  void keep_path(std::int64_t slot, std::int64_t prefix_length, std::span<const std::int64_t> path);

  /// Layer `layer`'s keys / values, [num_slots, num_kv_heads, capacity, head_dim] contiguous: what a CPU forward reads
  /// and writes on every layer (invalidated by growth). Float32 storage only (nullptr for a half cache).
  float* key_data(std::int64_t layer) const noexcept { return half() ? nullptr : static_cast<float*>(data_of(layer, 0)); }
  float* value_data(std::int64_t layer) const noexcept { return half() ? nullptr : static_cast<float*>(data_of(layer, 1)); }
  /// The same as IEEE float16 bit patterns. Half storage only (nullptr for a float32 cache).
  std::uint16_t* key_data_half(std::int64_t layer) const noexcept {
    return half() ? static_cast<std::uint16_t*>(data_of(layer, 0)) : nullptr;
  }
  std::uint16_t* value_data_half(std::int64_t layer) const noexcept {
    return half() ? static_cast<std::uint16_t*>(data_of(layer, 1)) : nullptr;
  }
  /// Whether the storage is float16 (KvCacheShape::half).
  bool half() const noexcept { return shape_.half; }
  /// Whether keys are also kept in transposed blocks (KvCacheShape::key_blocks).
  bool has_key_blocks() const noexcept { return key_blocks_ != nullptr; }
  /// Layer `layer`'s key blocks, [num_slots, num_kv_heads, key_block_count(), head_dim, 16], float32 or float16 as the
  /// storage (nullptr for the other type or without key blocks; invalidated by growth): key p of a slot and kv head is at
  /// [p / 16][d][p % 16].
  float* key_block_data(std::int64_t layer) const noexcept {
    return has_key_blocks() && !half() ? static_cast<float*>(block_data_of(layer)) : nullptr;
  }
  std::uint16_t* key_block_data_half(std::int64_t layer) const noexcept {
    return has_key_blocks() && half() ? static_cast<std::uint16_t*>(block_data_of(layer)) : nullptr;
  }
  std::int64_t key_block_count() const noexcept { return (capacity_ + 15) / 16; }
  /// Copies key `position` of (layer, slot, kv head) from the keys into its block (after a writer stored it there).
  void write_key_block(std::int64_t layer, std::int64_t slot, std::int64_t kv_head, std::int64_t position) noexcept;
  /// The whole storage [num_layers, 2, num_slots, num_kv_heads, capacity, head_dim], float32 or float16 (invalidated by
  /// growth).
  const void* storage_data() const noexcept { return storage_.get(); }

  std::int64_t capacity() const noexcept { return capacity_; }
  std::int64_t num_slots() const noexcept { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t num_layers() const noexcept { return shape_.num_layers; }
  std::int64_t num_kv_heads() const noexcept { return shape_.num_kv_heads; }
  std::int64_t head_dim() const noexcept { return shape_.head_dim; }
  /// How many times the storage was reallocated (capacity or slot growth) since construction.
  std::int64_t num_reallocations() const noexcept { return reallocations_; }
  /// Bytes held by the storage (and the key blocks).
  std::int64_t bytes() const noexcept;

 private:
  void check_slot(std::int64_t slot, const char* what) const;
  std::int64_t element_bytes() const noexcept { return half() ? 2 : 4; }
  void* data_of(std::int64_t layer, std::int64_t which) const noexcept {
    return storage_.get() +
           (layer * 2 + which) * num_slots() * shape_.num_kv_heads * capacity_ * shape_.head_dim * element_bytes();
  }
  void* block_data_of(std::int64_t layer) const noexcept {
    return key_blocks_.get() +
           layer * num_slots() * shape_.num_kv_heads * key_block_count() * 16 * shape_.head_dim * element_bytes();
  }
  void resize(std::int64_t slots, std::int64_t capacity);
  std::int64_t storage_elements() const noexcept {
    return shape_.num_layers * 2 * num_slots() * shape_.num_kv_heads * capacity_ * shape_.head_dim;
  }
  std::int64_t key_block_elements() const noexcept {
    return shape_.num_layers * num_slots() * shape_.num_kv_heads * key_block_count() * shape_.head_dim * 16;
  }

  KvCacheShape shape_{};
  std::shared_ptr<std::byte> storage_;     // huge pages (detail::allocate_huge_pages)
  std::shared_ptr<std::byte> key_blocks_;  // [num_layers, num_slots, num_kv_heads, blocks, head_dim, 16] with KvCacheShape::key_blocks
  std::int64_t capacity_ = 0;
  std::vector<std::int64_t> lengths_;   // per slot
  std::vector<bool> allocated_;         // per slot
  std::int64_t reallocations_ = 0;
};

}  // namespace specdec::models
