#include "specdec/models/detail/errors.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/detail/weight_arena.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

namespace {
using detail::fail;

// `elements` zeroed elements of `element_bytes` in huge pages (detail::allocate_huge_pages): a decode at a long context
// streams the whole cache once per forward, like the weights.
std::shared_ptr<std::byte> zeros_in_huge_pages(std::int64_t elements, std::int64_t element_bytes) {
  const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(elements * element_bytes, 1));
  std::shared_ptr<std::byte> memory = detail::allocate_huge_pages(bytes);
  std::memset(memory.get(), 0, bytes);
  return memory;
}
}  // namespace

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  if (shape.num_layers < 1) fail(fmt::format("KvCache: num_layers: expected >= 1, got {}", shape.num_layers));
  if (shape.num_kv_heads < 1) fail(fmt::format("KvCache: num_kv_heads: expected >= 1, got {}", shape.num_kv_heads));
  if (shape.head_dim < 1) fail(fmt::format("KvCache: head_dim: expected >= 1, got {}", shape.head_dim));
  if (shape.initial_capacity < 1)
    fail(fmt::format("KvCache: initial_capacity: expected >= 1, got {}", shape.initial_capacity));
  if (shape.initial_slots < 1) fail(fmt::format("KvCache: initial_slots: expected >= 1, got {}", shape.initial_slots));
  capacity_ = shape.initial_capacity;
  lengths_.assign(static_cast<std::size_t>(shape.initial_slots), 0);
  allocated_.assign(static_cast<std::size_t>(shape.initial_slots), false);
  storage_ = zeros_in_huge_pages(storage_elements(), element_bytes());
  if (shape.key_blocks) key_blocks_ = zeros_in_huge_pages(key_block_elements(), element_bytes());
}

void KvCache::resize(std::int64_t slots, std::int64_t capacity) {
  const std::int64_t old_slots = num_slots(), old_capacity = capacity_, old_blocks = key_block_count();
  const std::int64_t hd = shape_.head_dim, nkv = shape_.num_kv_heads, eb = element_bytes();
  const std::shared_ptr<std::byte> old_storage = storage_, old_key_blocks = key_blocks_;
  capacity_ = capacity;
  lengths_.resize(static_cast<std::size_t>(slots), 0);
  allocated_.resize(static_cast<std::size_t>(slots), false);
  storage_ = zeros_in_huge_pages(storage_elements(), eb);
  // [layers, 2, slots, kv heads, capacity, head_dim]: every (layer, k/v, slot, kv head) run of old_capacity positions
  // moves to the start of its longer run.
  const std::int64_t run = old_capacity * hd * eb;
  for (std::int64_t outer = 0; outer < shape_.num_layers * 2; ++outer)
    for (std::int64_t sh = 0; sh < old_slots * nkv; ++sh)
      std::memcpy(storage_.get() + (outer * slots * nkv + sh) * capacity * hd * eb,
                  old_storage.get() + (outer * old_slots * nkv + sh) * run, static_cast<std::size_t>(run));
  if (old_key_blocks) {  // blocks hold whole runs of 16 positions, so the old ones are a prefix of the new
    key_blocks_ = zeros_in_huge_pages(key_block_elements(), eb);
    const std::int64_t block_run = old_blocks * hd * 16 * eb;
    for (std::int64_t l = 0; l < shape_.num_layers; ++l)
      for (std::int64_t sh = 0; sh < old_slots * nkv; ++sh)
        std::memcpy(key_blocks_.get() + (l * slots * nkv + sh) * key_block_count() * hd * 16 * eb,
                    old_key_blocks.get() + (l * old_slots * nkv + sh) * block_run, static_cast<std::size_t>(block_run));
  }
  ++reallocations_;
}

std::int64_t KvCache::allocate() {
  if (!storage_) fail("KvCache::allocate: the cache was default-constructed (no shape)");
  auto it = std::find(allocated_.begin(), allocated_.end(), false);
  std::int64_t slot = it - allocated_.begin();
  if (it == allocated_.end()) resize(num_slots() * 2, capacity_);
  allocated_[static_cast<std::size_t>(slot)] = true;
  lengths_[static_cast<std::size_t>(slot)] = 0;
  return slot;
}

bool KvCache::is_allocated(std::int64_t slot) const noexcept {
  return slot >= 0 && slot < num_slots() && allocated_[static_cast<std::size_t>(slot)];
}

void KvCache::check_slot(std::int64_t slot, const char* what) const {
  if (!is_allocated(slot))
    fail(fmt::format("KvCache::{}: slot: expected an allocated slot in [0, {}), got {}", what, num_slots(), slot));
}

void KvCache::free(std::int64_t slot) {
  check_slot(slot, "free");
  allocated_[static_cast<std::size_t>(slot)] = false;
  lengths_[static_cast<std::size_t>(slot)] = 0;
}

std::int64_t KvCache::length(std::int64_t slot) const {
  check_slot(slot, "length");
  return lengths_[static_cast<std::size_t>(slot)];
}

void KvCache::truncate(std::int64_t slot, std::int64_t new_length) {
  check_slot(slot, "truncate");
  const std::int64_t len = lengths_[static_cast<std::size_t>(slot)];
  if (new_length < 0 || new_length > len)
    fail(fmt::format("KvCache::truncate: new_length: expected in [0, {}], got {}", len, new_length));
  lengths_[static_cast<std::size_t>(slot)] = new_length;
}

void KvCache::reserve(std::int64_t required) {
  if (required <= capacity_) return;
  std::int64_t cap = std::max<std::int64_t>(capacity_, 1);
  while (cap < required) cap *= 2;
  resize(num_slots(), cap);
}

void KvCache::set_length(std::int64_t slot, std::int64_t new_length) {
  check_slot(slot, "set_length");
  if (new_length < 0 || new_length > capacity_)
    fail(fmt::format("KvCache::set_length: new_length: expected in [0, {}], got {}", capacity_, new_length));
  lengths_[static_cast<std::size_t>(slot)] = new_length;
}

void KvCache::keep_path(std::int64_t slot, std::int64_t prefix_length, std::span<const std::int64_t> path) {
  check_slot(slot, "keep_path");
  const std::int64_t len = lengths_[static_cast<std::size_t>(slot)];
  if (prefix_length < 0 || prefix_length > len)
    fail(fmt::format("KvCache::keep_path: prefix_length: expected in [0, {}], got {}", len, prefix_length));
  const std::int64_t n = len - prefix_length;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] < 0 || path[i] >= n)
      fail(fmt::format("KvCache::keep_path: path[{}]: expected a node index in [0, {}), got {}", i, n, path[i]));
    if (i > 0 && path[i] <= path[i - 1])
      fail(fmt::format("KvCache::keep_path: path[{}]: expected > path[{}] = {}, got {}", i, i - 1, path[i - 1], path[i]));
  }
  // Nodes already in place (path[i] == i) form a prefix since the path is strictly increasing; move only the rest.
  std::size_t first_moved = 0;
  while (first_moved < path.size() && path[first_moved] == static_cast<std::int64_t>(first_moved)) ++first_moved;
  if (first_moved < path.size()) {
    // Each destination position precedes its source (path[i] >= i), and the moves go in increasing order, so no source
    // is overwritten before it is read.
    const std::int64_t hd = shape_.head_dim, nkv = shape_.num_kv_heads, eb = element_bytes();
    for (std::int64_t l = 0; l < shape_.num_layers; ++l)
      for (std::int64_t which = 0; which < 2; ++which) {
        std::byte* base = static_cast<std::byte*>(data_of(l, which));
        for (std::int64_t h = 0; h < nkv; ++h) {
          std::byte* seq = base + (slot * nkv + h) * capacity_ * hd * eb;
          for (std::size_t i = first_moved; i < path.size(); ++i) {
            const std::int64_t dst = prefix_length + static_cast<std::int64_t>(i), src = prefix_length + path[i];
            std::memmove(seq + dst * hd * eb, seq + src * hd * eb, static_cast<std::size_t>(hd * eb));
          }
        }
      }
    if (key_blocks_)
      for (std::int64_t l = 0; l < shape_.num_layers; ++l)
        for (std::int64_t h = 0; h < shape_.num_kv_heads; ++h)
          for (std::int64_t p = prefix_length + static_cast<std::int64_t>(first_moved);
               p < prefix_length + static_cast<std::int64_t>(path.size()); ++p)
            write_key_block(l, slot, h, p);
  }
  lengths_[static_cast<std::size_t>(slot)] = prefix_length + static_cast<std::int64_t>(path.size());
}

void KvCache::write_key_block(std::int64_t layer, std::int64_t slot, std::int64_t kv_head, std::int64_t position) noexcept {
  const std::int64_t hd = shape_.head_dim, nkv = shape_.num_kv_heads;
  const std::int64_t row = ((slot * nkv + kv_head) * capacity_ + position) * hd;
  const std::int64_t block = ((slot * nkv + kv_head) * key_block_count() + position / 16) * hd * 16 + position % 16;
  auto copy = [&](const auto* keys, auto* blocks) {
    for (std::int64_t d = 0; d < hd; ++d) blocks[block + d * 16] = keys[row + d];
  };
  if (half())
    copy(static_cast<const std::uint16_t*>(data_of(layer, 0)), static_cast<std::uint16_t*>(block_data_of(layer)));
  else
    copy(static_cast<const float*>(data_of(layer, 0)), static_cast<float*>(block_data_of(layer)));
}

std::int64_t KvCache::bytes() const noexcept {
  return ((storage_ ? storage_elements() : 0) + (key_blocks_ ? key_block_elements() : 0)) * element_bytes();
}

}  // namespace specdec::models
