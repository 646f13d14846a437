#include "specdec/models/detail/errors.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/detail/weight_arena.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

namespace {
using detail::fail;

// A zeroed cache in huge pages (detail::allocate_huge_pages): a decode at a long context streams the whole cache once per
// forward, like the weights.
at::Tensor zeros_in_huge_pages(at::IntArrayRef sizes, bool half) {
  std::int64_t numel = 1;
  for (const auto s : sizes) numel *= s;
  const auto bytes = static_cast<std::size_t>(numel) * (half ? 2u : 4u);
  std::shared_ptr<std::byte> memory = detail::allocate_huge_pages(bytes);
  std::memset(memory.get(), 0, bytes);
  void* data = memory.get();
  return at::from_blob(data, sizes, [memory](void*) mutable { memory.reset(); },
                       at::TensorOptions().dtype(half ? at::kHalf : at::kFloat));
}
}  // namespace

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  if (shape.num_layers < 1) fail(fmt::format("KvCache: num_layers: expected >= 1, got {}", shape.num_layers));
  if (shape.num_kv_heads < 1) fail(fmt::format("KvCache: num_kv_heads: expected >= 1, got {}", shape.num_kv_heads));
  if (shape.head_dim < 1) fail(fmt::format("KvCache: head_dim: expected >= 1, got {}", shape.head_dim));
  if (shape.initial_capacity < 1)
    fail(fmt::format("KvCache: initial_capacity: expected >= 1, got {}", shape.initial_capacity));
  if (shape.initial_slots < 1) fail(fmt::format("KvCache: initial_slots: expected >= 1, got {}", shape.initial_slots));
  c10::NoGradGuard guard;
  capacity_ = shape.initial_capacity;
  storage_ = zeros_in_huge_pages({shape.num_layers, 2, shape.initial_slots, shape.num_kv_heads, capacity_, shape.head_dim},
                                 shape.half);
  if (shape.key_blocks)
    key_blocks_ = zeros_in_huge_pages(
        {shape.num_layers, shape.initial_slots, shape.num_kv_heads, key_block_count(), shape.head_dim, 16}, shape.half);
  lengths_.assign(static_cast<std::size_t>(shape.initial_slots), 0);
  allocated_.assign(static_cast<std::size_t>(shape.initial_slots), false);
}

void KvCache::resize(std::int64_t slots, std::int64_t capacity) {
  c10::NoGradGuard guard;
  at::Tensor grown = zeros_in_huge_pages({shape_.num_layers, 2, slots, shape_.num_kv_heads, capacity, shape_.head_dim}, shape_.half);
  if (storage_.defined()) {
    const std::int64_t old_slots = storage_.size(2);
    grown.narrow(2, 0, old_slots).narrow(4, 0, capacity_).copy_(storage_);
  }
  storage_ = std::move(grown);
  if (key_blocks_.defined()) {  // blocks hold whole runs of 16 positions, so the old ones are a prefix of the new
    at::Tensor blocks = zeros_in_huge_pages(
        {shape_.num_layers, slots, shape_.num_kv_heads, (capacity + 15) / 16, shape_.head_dim, 16}, shape_.half);
    blocks.narrow(1, 0, key_blocks_.size(1)).narrow(3, 0, key_blocks_.size(3)).copy_(key_blocks_);
    key_blocks_ = std::move(blocks);
  }
  capacity_ = capacity;
  lengths_.resize(static_cast<std::size_t>(slots), 0);
  allocated_.resize(static_cast<std::size_t>(slots), false);
  ++reallocations_;
}

std::int64_t KvCache::allocate() {
  if (!storage_.defined()) fail("KvCache::allocate: the cache was default-constructed (no shape)");
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
    c10::NoGradGuard guard;
    const auto moved = static_cast<std::int64_t>(path.size() - first_moved);
    std::vector<std::int64_t> src(path.begin() + static_cast<std::ptrdiff_t>(first_moved), path.end());
    for (auto& s : src) s += prefix_length;
    at::Tensor index = at::tensor(src, at::TensorOptions().dtype(at::kLong));
    at::Tensor seq = storage_.select(2, slot);  // [layers, 2, kv_heads, capacity, head_dim]
    // Each destination position precedes its source (path[i] >= i) and sources are read before any write, so gather first.
    at::Tensor gathered = seq.index_select(3, index);
    seq.narrow(3, prefix_length + static_cast<std::int64_t>(first_moved), moved).copy_(gathered);
    if (key_blocks_.defined())
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

at::Tensor KvCache::keys(std::int64_t layer) const { return storage_.select(0, layer).select(0, 0); }
at::Tensor KvCache::values(std::int64_t layer) const { return storage_.select(0, layer).select(0, 1); }

std::int64_t KvCache::bytes() const noexcept {
  const std::int64_t elements = (storage_.defined() ? storage_.numel() : 0) + (key_blocks_.defined() ? key_blocks_.numel() : 0);
  return elements * element_bytes();
}

}  // namespace specdec::models
