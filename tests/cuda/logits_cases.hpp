// specdec tests — batches of logits rows for the logits kernel, shared by the host emulation test and the device test:
// random rows of several shapes (vocabularies 1 .. 151,936, partial tiles, ties at the top-k and top-p cuts, -inf
// banned tokens, bf16/f16 rounding that makes ties, temperatures down to denormal, greedy rows, bad rows and bad
// parameters) with per-request parameters, and the CPU reference (specdec::logits_to_probs_batch) run on the logits
// after rounding to the element type under test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cases.hpp"
#include "specdec/sampling/logits.hpp"

namespace specdec::cuda::testing {

/// A batch of rows: logits already rounded to the element type (kept as float), target-row layout (rows_extra = 1)
/// through cu when `use_cu`, else one row per request.
struct LogitsBatch {
  std::int64_t R = 0, V = 0, B = 0, stride = 0;
  std::vector<float> logits;  ///< [R, stride]
  std::vector<float> temperature, top_p, min_p;
  std::vector<std::int32_t> top_k;
  bool use_cu = false;
  std::vector<std::int64_t> cu;  ///< [B + 1] draft counts (rows of request b: K_b + 1)
  std::int32_t rows_extra = 1;
};

/// The CPU reference: probs [R, V] and statuses [R].
inline void reference(const LogitsBatch& c, std::vector<float>& probs, std::vector<Status>& status) {
  std::vector<LogitsParams> params(static_cast<std::size_t>(c.B));
  for (std::int64_t b = 0; b < c.B; ++b)
    params[b] = specdec::detail::request_logits_params(c.temperature.data(), c.top_k.data(), c.top_p.data(), c.min_p.data(), b);
  probs.assign(static_cast<std::size_t>(c.R * c.V), -1.0f);
  status.assign(static_cast<std::size_t>(c.R), Status::kCudaError);
  const Status s = logits_to_probs_batch<std::int64_t>(c.logits.data(), c.R, c.V, c.stride, params.data(), c.B,
                                                       c.use_cu ? c.cu.data() : nullptr, c.rows_extra, probs.data(),
                                                       status.data());
  if (s != Status::kSuccess) status.assign(static_cast<std::size_t>(c.R), s);
}

/// One row's logits of shape `shape` (values rounded to T).
template <class T>
void fill_logits(std::mt19937_64& rng, float* row, std::int64_t V, int shape) {
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> X(0, V - 1);
  const float ninf = -std::numeric_limits<float>::infinity();
  switch (shape) {
    case 0:  // wide normal
      for (std::int64_t x = 0; x < V; ++x) row[x] = 4.0f * N(rng);
      break;
    case 1:  // peaked: a few large logits
      for (std::int64_t x = 0; x < V; ++x) row[x] = N(rng);
      for (int i = 0; i < 5; ++i) row[X(rng)] = 12.0f + N(rng);
      break;
    case 2:  // ties: values from a small set (many equal weights at any cut)
      for (std::int64_t x = 0; x < V; ++x) row[x] = static_cast<float>(static_cast<int>(std::abs(N(rng)) * 3.0f)) * 0.5f;
      break;
    case 3:  // all equal
      for (std::int64_t x = 0; x < V; ++x) row[x] = 0.75f;
      break;
    default:  // normal with banned tokens
      for (std::int64_t x = 0; x < V; ++x) row[x] = 2.0f * N(rng);
      for (std::int64_t x = 0; x < V; x += 3) row[x] = ninf;
      break;
  }
  for (std::int64_t x = 0; x < V; ++x) row[x] = round_to<T>(row[x]);
}

/// Random parameters of one request (the mix covers every cut and their combinations).
inline void random_params(std::mt19937_64& rng, LogitsBatch& c, std::int64_t V) {
  std::uniform_int_distribution<int> pick(0, 11);
  float t = 1.0f, tp = 1.0f, mp = 0.0f;
  std::int32_t k = 0;
  switch (pick(rng)) {
    case 0: t = 0.0f; break;
    case 1: break;
    case 2: t = 0.7f; k = 1 + static_cast<std::int32_t>(rng() % std::min<std::int64_t>(V, 100)); break;
    case 3: t = 1.3f; tp = 0.9f; break;
    case 4: mp = 0.05f; break;
    case 5: t = 0.8f; k = 50; tp = 0.8f; mp = 0.02f; break;
    case 6: t = 1e-6f; break;
    case 7: t = 1e-40f; tp = 0.5f; break;  // denormal temperature: 1 / T overflows
    case 8: k = static_cast<std::int32_t>(std::min<std::int64_t>(V, 2000)); tp = 0.97f; break;
    case 9: tp = 0.5f; break;
    case 10: t = 2.0f; k = 1; break;
    default: t = 0.9f; tp = 0.3f; mp = 0.1f; break;
  }
  c.temperature.push_back(t);
  c.top_k.push_back(k);
  c.top_p.push_back(tp);
  c.min_p.push_back(mp);
}

/// A random batch of `B` requests with K_b in [0, 3] drafts each (target rows), logits rounded to T.
template <class T>
LogitsBatch random_batch(std::mt19937_64& rng, std::int64_t B, std::int64_t V, bool use_cu) {
  LogitsBatch c;
  c.V = V;
  c.B = B;
  c.stride = V + (rng() % 2 ? 0 : 5);
  c.use_cu = use_cu;
  c.cu.push_back(0);
  for (std::int64_t b = 0; b < B; ++b) {
    random_params(rng, c, V);
    c.cu.push_back(c.cu.back() + (use_cu ? static_cast<std::int64_t>(rng() % 4) : 0));
  }
  c.R = use_cu ? c.cu.back() + B : B;
  c.logits.assign(static_cast<std::size_t>(c.R * c.stride), 0.0f);
  std::uniform_int_distribution<int> shape(0, 4);
  for (std::int64_t r = 0; r < c.R; ++r) fill_logits<T>(rng, c.logits.data() + r * c.stride, V, shape(rng));
  return c;
}

/// A batch of hand-made hard rows (one row per request): ties at the top-k and top-p cuts, near-zero temperatures,
/// NaN, +inf, all -inf, bad parameters.
template <class T>
LogitsBatch edge_batch(std::int64_t V) {
  LogitsBatch c;
  c.V = V;
  c.stride = V;
  std::mt19937_64 rng(static_cast<std::uint64_t>(V));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto add = [&](int shape, float t, std::int32_t k, float tp, float mp) {
    const std::size_t at = c.logits.size();
    c.logits.resize(at + static_cast<std::size_t>(V));
    fill_logits<T>(rng, c.logits.data() + at, V, shape);
    c.temperature.push_back(t);
    c.top_k.push_back(k);
    c.top_p.push_back(tp);
    c.min_p.push_back(mp);
    ++c.R;
    ++c.B;
    return c.logits.data() + at;
  };
  const auto half = static_cast<std::int32_t>((V + 1) / 2);
  add(3, 1.0f, half, 1.0f, 0.0f);            // top-k cut inside one tie class: the lower ids
  add(3, 1.0f, 0, 0.5f, 0.0f);               // top-p cut inside one tie class
  add(3, 0.5f, half, 0.3f, 0.0f);            // both
  add(2, 1.0f, 7, 1.0f, 0.0f);               // ties at the k-th value
  add(2, 0.8f, 0, 0.6f, 0.0f);               // ties at the top-p crossing
  add(2, 1.0f, 0, 1.0f, 0.5f);               // min-p on tie classes
  add(0, 1e-6f, 0, 1.0f, 0.0f);              // near-greedy
  add(2, 1e-30f, 0, 0.9f, 0.0f);             // near-greedy with ties at the max
  add(1, 1e-40f, 3, 1.0f, 0.0f);             // denormal temperature
  add(2, 0.0f, 0, 1.0f, 0.0f);               // greedy with ties: lowest id
  add(0, 1.0f, 0, 1.0f, 0.0f)[V - 1] = nan;  // NaN -> kInvalidProbability
  add(0, 1.0f, 0, 1.0f, 0.0f)[V / 2] = inf;  // +inf -> kInvalidProbability
  float* banned = add(0, 1.0f, 0, 1.0f, 0.0f);
  std::fill(banned, banned + V, -inf);       // all -inf -> kZeroMass
  add(0, -1.0f, 0, 1.0f, 0.0f);              // bad temperature
  add(0, 1.0f, -2, 1.0f, 0.0f);              // bad top_k
  add(0, 1.0f, 0, 0.0f, 0.0f);               // bad top_p
  add(0, 1.0f, 0, 1.0f, 2.0f);               // bad min_p
  add(4, 1.0f, 1, 1.0f, 0.0f);               // banned tokens, top-1
  return c;
}

}  // namespace specdec::cuda::testing
