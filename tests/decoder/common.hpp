// Shared helpers of the decoder and proposer tests: tiny random Llama models and reference decoding.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/proposers/proposer_chain.hpp"
#include "specdec/torch/rows.hpp"

namespace specdec::test {

namespace sm = specdec::models;
namespace sp = specdec::proposers;
namespace sd = specdec::decoder;

inline sm::LlamaConfig tiny_config(std::int64_t vocab = 64, std::int64_t layers = 2) {
  sm::LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = layers;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.max_position_embeddings = 1024;
  return c;
}

inline sm::LlamaModel tiny_model(std::uint64_t seed, std::int64_t vocab = 64, std::int64_t layers = 2) {
  sm::LlamaOptions o;
  o.initial_cache_capacity = 64;
  o.initial_cache_slots = 4;
  return sm::LlamaModel::random(tiny_config(vocab, layers), seed, o);
}

/// Deterministic prompt of `length` tokens with some repetition (so n-gram lookup finds matches).
inline std::vector<std::int64_t> make_prompt(std::int64_t length, std::int64_t vocab, std::uint64_t salt) {
  std::vector<std::int64_t> p;
  std::uint64_t s = 0x1234567ull + salt * 7919;
  for (std::int64_t i = 0; i < length; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    if (i >= 6 && (s >> 60) < 6) {
      p.push_back(p[static_cast<std::size_t>(i - 5)]);  // repeat an earlier token
    } else {
      p.push_back(static_cast<std::int64_t>((s >> 33) % static_cast<std::uint64_t>(vocab)));
    }
  }
  return p;
}

inline sd::GenerationRequest make_request(std::vector<std::int64_t> prompt, std::int64_t max_new, float temperature = 0.0f,
                                          std::uint64_t seed = 0) {
  sd::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new;
  r.params.temperature = temperature;
  r.params.seed = seed;
  return r;
}

/// Logits of the next token after `tokens` from a fresh slot (full prefill).
inline at::Tensor fresh_next_logits(sm::LlamaModel& m, const std::vector<std::int64_t>& tokens) {
  const auto slot = m.allocate_sequence();
  sm::ForwardBatch fb = sm::make_chain_batch(slot, tokens);
  fb.last_logits_only = true;
  at::Tensor l = specdec::torch::tensor_of(m.forward(fb).logits)[0].clone();
  m.free_sequence(slot);
  return l;
}

/// Logits of the next token after `tokens` through `slot`, whose cache holds a prefix of `tokens`; rolled back afterwards.
inline at::Tensor cached_next_logits(sm::LlamaModel& m, std::int64_t slot, const std::vector<std::int64_t>& tokens) {
  const auto cached = m.sequence_length(slot);
  EXPECT_LT(cached, static_cast<std::int64_t>(tokens.size()));
  sm::ForwardBatch fb = sm::make_chain_batch(slot, std::vector<std::int64_t>(tokens.begin() + cached, tokens.end()));
  fb.last_logits_only = true;
  at::Tensor l = specdec::torch::tensor_of(m.forward(fb).logits)[0].clone();
  m.truncate(slot, cached);
  return l;
}

/// Greedy continuation of `prompt` computed token by token from fresh prefills (the reference of the reference).
inline std::vector<std::int64_t> reference_greedy(sm::LlamaModel& m, std::vector<std::int64_t> ctx, std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; ++i) {
    const at::Tensor l = fresh_next_logits(m, ctx);
    const auto t = l.argmax().item<std::int64_t>();
    out.push_back(t);
    ctx.push_back(t);
  }
  return out;
}

/// An n-gram proposer, then a tiny draft model (tiny_model(seed, vocab)), as a chain of members named "ngram" and "draft".
struct NgramThenDraft {
  explicit NgramThenDraft(std::uint64_t seed, std::int64_t vocab = 64, sp::ChainOptions options = {})
      : draft_model(tiny_model(seed, vocab)), draft(draft_model), chain(options) {
    chain.add(ngram, "ngram").add(draft, "draft");
  }
  sm::LlamaModel draft_model;
  sp::NgramProposer ngram;
  sp::DraftModelProposer<sm::LlamaModel> draft;
  sp::ProposerChain chain;
};

}  // namespace specdec::test
