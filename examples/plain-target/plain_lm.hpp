// A target written in plain C++ (no libtorch, no tensors): the smallest CausalLM an engine would write to drive
// SpeculativeDecoder with its own model. Its "forward" is a fixed random bigram-and-trigram table: the logits of the
// token after (a, b) are table1[b] + 0.5 table2[(a, b) hashed], sharp enough that greedy text repeats (so lookup
// proposers find matches). The KV cache is each slot's token history; truncate rolls it back. The logits come back as
// host float32 specdec::Rows that own their buffer.
//
// Used by the torch-free decoder tests (tests/decoder/test_decoder_host.cpp) and the install consumer that links
// specdec::decoder alone (tests/install/decoder_consumer).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "specdec/core.hpp"
#include "specdec/models/causal_lm.hpp"
#include "specdec/rows.hpp"

namespace plain {

class PlainLM {
 public:
  PlainLM(std::int64_t vocab, std::uint64_t seed, float sharpness = 4.0f) : vocab_(vocab) {
    if (vocab < 2) throw specdec::error(specdec::Status::kInvalidArgument, "PlainLM: vocab: expected >= 2, got " + std::to_string(vocab));
    table1_.resize(static_cast<std::size_t>(vocab * vocab));
    table2_.resize(static_cast<std::size_t>(kBuckets * vocab));
    std::uint64_t s = seed;
    for (auto& x : table1_) x = sharpness * normal(s);
    for (auto& x : table2_) x = sharpness * normal(s);
  }

  std::int64_t vocab_size() const { return vocab_; }
  std::int64_t max_sequence_length() const { return 4096; }
  std::int64_t sequence_length(std::int64_t slot) const { return static_cast<std::int64_t>(slot_ref(slot).size()); }

  std::int64_t allocate_sequence() {
    for (std::size_t i = 0; i < live_.size(); ++i)
      if (!live_[i]) {
        live_[i] = true;
        cache_[i].clear();
        return static_cast<std::int64_t>(i);
      }
    live_.push_back(true);
    cache_.emplace_back();
    return static_cast<std::int64_t>(cache_.size() - 1);
  }
  void free_sequence(std::int64_t slot) {
    slot_ref(slot);
    live_[static_cast<std::size_t>(slot)] = false;
  }
  void truncate(std::int64_t slot, std::int64_t length) {
    auto& c = slot_ref(slot);
    if (length < 0 || length > static_cast<std::int64_t>(c.size()))
      throw specdec::error(specdec::Status::kInvalidArgument, "PlainLM::truncate: length " + std::to_string(length) +
                                                                   " outside [0, " + std::to_string(c.size()) + "]");
    c.resize(static_cast<std::size_t>(length));
  }

  specdec::models::ForwardOutput forward(const specdec::models::ForwardBatch& batch) {
    const auto B = static_cast<std::int64_t>(batch.slots.size());
    if (!batch.parents.empty())
      throw specdec::error(specdec::Status::kInvalidArgument, "PlainLM::forward: parents: chains only");
    if (static_cast<std::int64_t>(batch.cu_num_tokens.size()) != B + 1)
      throw specdec::error(specdec::Status::kInvalidArgument, "PlainLM::forward: cu_num_tokens: expected B + 1 offsets");
    for (auto t : batch.token_ids)
      if (t < 0 || t >= vocab_)
        throw specdec::error(specdec::Status::kInvalidArgument, "PlainLM::forward: token id " + std::to_string(t));
    for (auto s : batch.slots) slot_ref(s);
    const std::int64_t rows = batch.last_logits_only ? B : static_cast<std::int64_t>(batch.token_ids.size());
    specdec::Rows logits = specdec::Rows::host_float32(rows, vocab_);
    float* out = logits.mutable_host_float32_data("PlainLM::forward");
    std::int64_t row = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      auto& c = slot_ref(batch.slots[static_cast<std::size_t>(b)]);
      const std::int64_t lo = batch.cu_num_tokens[static_cast<std::size_t>(b)];
      const std::int64_t hi = batch.cu_num_tokens[static_cast<std::size_t>(b + 1)];
      for (std::int64_t i = lo; i < hi; ++i) {
        c.push_back(batch.token_ids[static_cast<std::size_t>(i)]);
        if (batch.last_logits_only && i + 1 < hi) continue;
        write_logits(c, out + row * vocab_);
        ++row;
      }
    }
    specdec::models::ForwardOutput o;
    o.logits = std::move(logits);
    return o;
  }

 private:
  static constexpr std::int64_t kBuckets = 97;

  // Box-Muller on splitmix64: a fixed table for a seed, on every platform.
  static float normal(std::uint64_t& s) {
    auto next = [&s] {
      std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    };
    const double u = next() + 0x1.0p-54, v = next();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
  }

  void write_logits(const std::vector<std::int64_t>& c, float* dst) const {
    const std::int64_t b = c.back(), a = c.size() >= 2 ? c[c.size() - 2] : 0;
    const float* t1 = table1_.data() + b * vocab_;
    const float* t2 = table2_.data() + ((a * 31 + b) % kBuckets) * vocab_;
    for (std::int64_t j = 0; j < vocab_; ++j) dst[j] = t1[j] + 0.5f * t2[j];
  }

  std::vector<std::int64_t>& slot_ref(std::int64_t slot) {
    return const_cast<std::vector<std::int64_t>&>(static_cast<const PlainLM*>(this)->slot_ref(slot));
  }
  const std::vector<std::int64_t>& slot_ref(std::int64_t slot) const {
    if (slot < 0 || slot >= static_cast<std::int64_t>(cache_.size()) || !live_[static_cast<std::size_t>(slot)])
      throw specdec::error(specdec::Status::kInvalidArgument, "PlainLM: slot " + std::to_string(slot) + " is not allocated");
    return cache_[static_cast<std::size_t>(slot)];
  }

  std::int64_t vocab_;
  std::vector<float> table1_, table2_;
  std::vector<std::vector<std::int64_t>> cache_;
  std::vector<bool> live_;
};

static_assert(specdec::models::CausalLM<PlainLM>);

}  // namespace plain
