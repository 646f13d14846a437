// specdec-demo — speculative sampling on a small built-in example, explained in words and numbers.
//
// A target model and a cheaper draft model are stood in for by fixed next-token distributions over a toy
// vocabulary. The draft proposes K tokens, the verifier accepts or rejects them against the target, and we check
// that what comes out is distributed exactly as the target, while the acceptance rate matches the theory.
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <vector>

#include "specdec/core.hpp"

int main() {
  using namespace specdec;
  const std::vector<std::string> words = {"the", "a", "cat", "dog", "sat", "ran", "on", "mat"};
  const std::int64_t V = static_cast<std::int64_t>(words.size());
  const std::vector<float> target_logits = {2.0f, 1.2f, 1.5f, 0.8f, 0.3f, -0.5f, 0.1f, -1.0f};
  const std::vector<float> draft_logits = {1.6f, 1.5f, 1.0f, 1.1f, 0.0f, 0.2f, 0.4f, -0.8f};
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 6;
  const auto p = logits_to_probs(target_logits, params);
  const auto q = logits_to_probs(draft_logits, params);
  const int K = 4, steps = 50000;
  const double a = theory::acceptance_rate(p, q);

  fmt::print("specdec demo: speculative sampling on an {}-word vocabulary, temperature {}, top-k {}\n", V,
             params.temperature, params.top_k);
  fmt::print("  draft proposes K = {} tokens per step; target verifies all of them at once\n", K);
  fmt::print("  acceptance rate a = sum_x min(p, q) = {:.4f}\n\n", a);

  std::vector<float> p_rows, q_rows;
  for (int i = 0; i <= K; ++i) p_rows.insert(p_rows.end(), p.begin(), p.end());
  for (int i = 0; i < K; ++i) q_rows.insert(q_rows.end(), q.begin(), q.end());
  std::mt19937_64 rng(2024);
  std::discrete_distribution<std::int32_t> draft(q.begin(), q.end());
  std::vector<std::int32_t> drafts(K), out(K + 1);
  std::vector<float> scratch(static_cast<std::size_t>(num_tiles(V)));
  std::vector<std::int64_t> first_token(V);
  std::int64_t emitted = 0, accepted_total = 0, tests = 0;
  for (int s = 0; s < steps; ++s) {
    for (auto& d : drafts) d = draft(rng);
    std::int32_t n = 0;
    const Status st = verify_chain_request<std::int32_t>(V, K, drafts.data(), q_rows.data(), p_rows.data(),
                                                         /*seed=*/s, /*position=*/0, /*greedy=*/false, 1.0f,
                                                         out.data(), &n, nullptr, scratch.data());
    if (st != Status::kSuccess) {
      fmt::print(stderr, "verification failed: {}\n", to_string(st));
      return 1;
    }
    ++first_token[out[0]];
    emitted += n + 1;
    accepted_total += n;
    tests += n + (n < K ? 1 : 0);  // every accept test up to and including the first rejection
    if (s == 0) {
      fmt::print("  first step: draft proposed [");
      for (int i = 0; i < K; ++i) fmt::print("{}{}", i ? " " : "", words[drafts[i]]);
      fmt::print("], target kept {} of them and emitted [", n);
      for (int i = 0; i <= n; ++i) fmt::print("{}{}", i ? " " : "", words[out[i]]);
      fmt::print("]\n\n");
    }
  }
  const double tokens_per_step = static_cast<double>(emitted) / steps;
  fmt::print("  {} steps: {:.3f} tokens per target forward (theory (1 - a^(K+1)) / (1 - a) = {:.3f})\n", steps,
             tokens_per_step, theory::expected_tokens_per_step(a, K));
  fmt::print("  measured acceptance {:.4f} over {} accept tests (theory {:.4f})\n\n",
             static_cast<double>(accepted_total) / static_cast<double>(tests), tests, a);
  fmt::print("  first emitted token vs the target distribution (lossless => they agree):\n");
  fmt::print("    {:>5}  {:>8}  {:>8}  {:>7}\n", "word", "target", "emitted", "sigmas");
  double worst = 0;
  for (std::int64_t x = 0; x < V; ++x) {
    const double pi = p[x], freq = static_cast<double>(first_token[x]) / steps;
    const double sd = std::sqrt(pi * (1 - pi) / steps);
    const double z = sd > 0 ? (freq - pi) / sd : (freq == 0 ? 0 : INFINITY);
    worst = std::max(worst, std::abs(z));
    fmt::print("    {:>5}  {:>8.4f}  {:>8.4f}  {:>+7.2f}\n", words[x], pi, freq, z);
  }
  fmt::print("\n  largest deviation {:.2f} standard deviations: {}\n", worst,
             worst < 6 ? "output matches the target distribution" : "MISMATCH");
  fmt::print("  expected walltime speedup if the draft costs c = 0.05 of the target: {:.2f}x\n",
             theory::walltime_improvement(a, K, 0.05));
  return worst < 6 ? 0 : 1;
}
