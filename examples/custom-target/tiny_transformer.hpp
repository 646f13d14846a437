// A user's own target model, written against specdec::models::CausalLM with plain ATen ops: one attention layer and an
// MLP with seeded random weights, on any at::Device (CPU, CUDA). Its KV cache is a [capacity, dim] key and value tensor
// per slot; a forward appends the new tokens (a chain, or a tree given as parent indices) and attends each one to the cached
// prefix and to its own ancestors. Nothing here is specific to specdec beyond the members the concept asks for.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/models/causal_lm.hpp"
#include "specdec/torch/rows.hpp"

namespace custom {

class TinyTransformer {
 public:
  TinyTransformer(std::int64_t vocab, std::int64_t dim, std::uint64_t seed, at::Device device = at::kCPU)
      : V_(vocab), D_(dim), device_(device) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    auto w = [&](std::int64_t r, std::int64_t c, double scale) {
      return (at::randn({r, c}, gen, at::TensorOptions(at::kFloat)) * scale).to(device_);
    };
    embed_ = w(V_, D_, 1.0);
    wq_ = w(D_, D_, 2.0 / std::sqrt(D_));
    wk_ = w(D_, D_, 2.0 / std::sqrt(D_));
    wv_ = w(D_, D_, 1.0 / std::sqrt(D_));
    wo_ = w(D_, D_, 1.0 / std::sqrt(D_));
    w1_ = w(D_, 4 * D_, 1.0 / std::sqrt(D_));
    w2_ = w(4 * D_, D_, 0.5 / std::sqrt(D_));
  }

  std::int64_t vocab_size() const { return V_; }
  std::int64_t hidden_size() const { return D_; }

  std::int64_t allocate_sequence() {
    for (std::size_t s = 0; s < used_.size(); ++s)
      if (!used_[s]) return open(static_cast<std::int64_t>(s));
    used_.push_back(false), len_.push_back(0), k_.emplace_back(), v_.emplace_back();
    return open(static_cast<std::int64_t>(used_.size()) - 1);
  }
  void free_sequence(std::int64_t slot) { used_.at(check(slot)) = false; }
  std::int64_t sequence_length(std::int64_t slot) const { return len_.at(check(slot)); }
  void truncate(std::int64_t slot, std::int64_t length) {
    if (length < 0 || length > len_.at(check(slot))) throw std::invalid_argument("truncate: length out of range");
    len_[static_cast<std::size_t>(slot)] = length;  // O(1): later rows are simply overwritten
  }
  // After a tree forward at prefix `length`: rows length + path[i] move to length + i.
  void keep_path(std::int64_t slot, std::int64_t length, std::span<const std::int64_t> path) {
    const auto s = static_cast<std::size_t>(check(slot));
    const auto idx = at::tensor(std::vector<std::int64_t>(path.begin(), path.end())).add_(length).to(device_);
    for (auto* cache : {&k_[s], &v_[s]})
      cache->narrow(0, length, idx.size(0)).copy_(cache->index_select(0, idx));
    len_[s] = length + static_cast<std::int64_t>(path.size());
  }

  specdec::models::ForwardOutput forward(const specdec::models::ForwardBatch& b) {
    const auto B = static_cast<std::int64_t>(b.slots.size());
    specdec::models::detail::check_ragged_tokens("TinyTransformer::forward", "token", B, b.cu_num_tokens, b.token_ids, V_);
    for (auto slot : b.slots) check(slot);
    std::vector<at::Tensor> logits;
    for (std::int64_t i = 0; i < B; ++i) {
      const auto s = static_cast<std::size_t>(b.slots[static_cast<std::size_t>(i)]);
      const std::int64_t start = b.cu_num_tokens[static_cast<std::size_t>(i)];
      const std::int64_t n = b.cu_num_tokens[static_cast<std::size_t>(i) + 1] - start, L = len_[s];
      const std::int32_t* parents = b.parents.empty() || b.parents[static_cast<std::size_t>(i)].empty()
                                        ? nullptr : b.parents[static_cast<std::size_t>(i)].data();
      // Positions L + depth, and the mask: the cached prefix plus each node's ancestors and itself.
      std::vector<std::int64_t> depth(static_cast<std::size_t>(n), 0);
      at::Tensor mask = at::full({n, L + n}, -INFINITY, at::kFloat);
      mask.narrow(1, 0, L).zero_();
      auto m = mask.accessor<float, 2>();
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t parent = j == 0 ? -1 : parents ? parents[j] : j - 1;
        if (j > 0) depth[static_cast<std::size_t>(j)] = depth[static_cast<std::size_t>(parent)] + 1;
        for (std::int64_t a = j; a >= 0; a = a == 0 ? -1 : parents ? parents[a] : a - 1) m[j][L + a] = 0.f;
      }
      const auto ids = at::tensor(std::vector<std::int64_t>(b.token_ids.begin() + start, b.token_ids.begin() + start + n));
      at::Tensor x = embed_.index_select(0, ids.to(device_)) + positions(at::tensor(depth).add_(L)).to(device_);
      reserve(s, L + n);
      k_[s].narrow(0, L, n).copy_(at::matmul(x, wk_));
      v_[s].narrow(0, L, n).copy_(at::matmul(x, wv_));
      len_[s] = L + n;
      const at::Tensor scores = at::matmul(at::matmul(x, wq_), k_[s].narrow(0, 0, L + n).t()) / std::sqrt(D_);
      const at::Tensor att = at::softmax(scores + mask.to(device_), -1).matmul(v_[s].narrow(0, 0, L + n));
      const at::Tensor h = x + at::matmul(att, wo_);
      const at::Tensor y = h + at::matmul(at::relu(at::matmul(h, w1_)), w2_);
      logits.push_back(b.last_logits_only ? y.narrow(0, n - 1, 1) : y);
    }
    specdec::models::ForwardOutput out;
    // [N, V] (or [B, V]) float32 on the device, handed over as Rows that keep the tensor alive
    out.logits = specdec::torch::rows_of(at::matmul(at::cat(logits), embed_.t()).contiguous());
    return out;
  }

 private:
  std::int64_t V_, D_;
  at::Device device_;
  at::Tensor embed_, wq_, wk_, wv_, wo_, w1_, w2_;
  std::vector<bool> used_;
  std::vector<std::int64_t> len_;
  std::vector<at::Tensor> k_, v_;  // per slot [capacity, D]

  std::int64_t open(std::int64_t slot) {
    used_[static_cast<std::size_t>(slot)] = true;
    len_[static_cast<std::size_t>(slot)] = 0;
    return slot;
  }
  std::int64_t check(std::int64_t slot) const {
    if (slot < 0 || slot >= static_cast<std::int64_t>(used_.size()) || !used_[static_cast<std::size_t>(slot)])
      throw std::invalid_argument("TinyTransformer: slot " + std::to_string(slot) + " is not allocated");
    return slot;
  }
  void reserve(std::size_t s, std::int64_t rows) {  // grows a slot's cache by doubling, keeping its rows
    const std::int64_t cap = k_[s].defined() ? k_[s].size(0) : 0;
    if (rows <= cap) return;
    const std::int64_t grown = std::max<std::int64_t>(rows, 2 * cap);
    for (auto* cache : {&k_[s], &v_[s]}) {
      at::Tensor t = at::zeros({grown, D_}, embed_.options());
      if (cap) t.narrow(0, 0, cap).copy_(*cache);
      *cache = t;
    }
  }
  at::Tensor positions(const at::Tensor& pos) const {  // sinusoidal position embeddings [n, D] (CPU)
    const at::Tensor freq = at::exp(at::arange(0, D_ / 2, at::kFloat) * (-std::log(10000.0) / (D_ / 2)));
    const at::Tensor angle = pos.to(at::kFloat).unsqueeze(1) * freq.unsqueeze(0);
    return at::cat({at::sin(angle), at::cos(angle)}, 1);
  }
};

static_assert(specdec::models::CausalLM<TinyTransformer>);

}  // namespace custom
