// SyntheticProposer: drafts accepted at a chosen rate, to measure the decoder's speedup against g independently of any
// real proposer (what vLLM's and llama.cpp's benchmarks offer as synthetic acceptance).
//
// It is given each prompt's greedy continuation (the target's own plain greedy output, computed beforehand). Each step it
// draws n ~ Geometric(alpha) (P(n) = alpha^n (1 - alpha): every draft accepted independently with probability alpha, the
// model behind theory::expected_tokens_per_step) and drafts the next min(n, g) reference tokens followed by wrong ones
// (reference + 1 mod V) up to g. At temperature 0 greedy verification keeps exactly the min(n, g) right drafts, so a step
// emits min(n, g) + 1 tokens and costs a real (g + 1)-token verification: the decoder's real step time at a known acceptance.
// Like every proposer it cannot change the output (verification is lossless); only the acceptance depends on the reference
// matching the target's greedy decoding, which the decoder guarantees at temperature 0 (batch-invariant logits). At other
// temperatures the acceptance is not controlled. For benchmarks and tests; header-only, torch-free apart from DraftBatch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

class SyntheticProposer {
 public:
  /// alpha in [0, 1]: the per-draft acceptance; seed keys the draws (a request's draws depend on the seed, its prompt and
  /// its step, not on its batch).
  SyntheticProposer(std::int64_t vocab_size, double alpha, std::uint64_t seed = 0)
      : vocab_size_(vocab_size), alpha_(alpha), seed_(seed) {
    if (vocab_size < 2)
      throw error(Status::kInvalidArgument, "SyntheticProposer: vocab_size: expected >= 2, got " + std::to_string(vocab_size));
    if (!(alpha >= 0.0 && alpha <= 1.0))
      throw error(Status::kInvalidArgument, "SyntheticProposer: alpha: expected a value in [0, 1], got " + std::to_string(alpha));
  }

  /// The reference (the target's greedy continuation) of a prompt; a request whose prompt has none gets wrong drafts only.
  void set_reference(std::vector<std::int64_t> prompt, std::vector<std::int64_t> continuation) {
    std::vector<std::int64_t> full = prompt;
    full.insert(full.end(), continuation.begin(), continuation.end());
    references_[std::move(prompt)] = std::move(full);
  }
  void set_alpha(double alpha) { alpha_ = std::clamp(alpha, 0.0, 1.0); }
  /// Whether the decoder may treat these drafts as lookups (has_lookup_drafts; off by default): on, it stands in for a
  /// lookup proposer whose drafts are right at rate alpha, e.g. to test shadow probes.
  void set_drafts_are_lookups(bool on) { lookups_ = on; }
  bool drafts_are_lookups() const { return lookups_; }
  double alpha() const { return alpha_; }
  std::int64_t vocab_size() const { return vocab_size_; }

  void begin_request(const RequestContext& ctx) {
    State s;
    auto it = references_.find(std::vector<std::int64_t>(ctx.context.begin(), ctx.context.end()));
    if (it != references_.end()) s.reference = &it->second;
    s.key = seed_;
    for (auto t : ctx.context) s.key = mix(s.key ^ static_cast<std::uint64_t>(t));
    states_[ctx.id] = s;
  }
  void end_request(RequestId id) { states_.erase(id); }

  DraftBatch propose(std::span<const ProposeRequest> requests) {
    DraftBatch d;
    d.cu_num_drafts.push_back(0);
    std::vector<std::int64_t> drafts;
    for (const auto& r : requests) {
      drafts.clear();
      State& s = states_.at(r.id);
      const auto p = static_cast<std::size_t>(r.position);
      const std::vector<std::int64_t>* ref = s.reference;
      const bool on_track = ref && ref->size() >= p && std::equal(r.context.begin(), r.context.end(), ref->begin());
      std::int32_t right = 0;  // n ~ Geometric(alpha), cut at g
      while (right < r.max_drafts && uniform(s) < alpha_) ++right;
      for (std::int32_t i = 0; i < r.max_drafts; ++i) {
        const std::size_t at = p + static_cast<std::size_t>(i);
        const std::int64_t truth = on_track && at < ref->size() ? (*ref)[at] : 0;
        drafts.push_back(i < right && on_track && at < ref->size() ? truth : (truth + 1) % vocab_size_);
      }
      d.append(drafts);
    }
    return d;
  }
  void observe(std::span<const StepFeedback>) {}

 private:
  struct State {
    const std::vector<std::int64_t>* reference = nullptr;
    std::uint64_t key = 0, draws = 0;
  };
  static std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  static double uniform(State& s) {  // in [0, 1)
    return static_cast<double>(mix(s.key + ++s.draws) >> 11) * 0x1.0p-53;
  }

  std::int64_t vocab_size_;
  double alpha_;
  bool lookups_ = false;
  std::uint64_t seed_;
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> references_;  // prompt -> prompt + continuation
  std::map<RequestId, State> states_;
};

static_assert(Proposer<SyntheticProposer>);

}  // namespace specdec::proposers
