// NgramProposer: prompt lookup decoding. The drafts continue the most recent earlier occurrence of the context's longest
// suffix n-gram (n from max_n down to min_n) within prompt + generated tokens. Deterministic drafts (no probs).
//
// NgramIndex keeps, for every n in [min_n, max_n], a hash table from the n-gram ending at position j to the last such j, and
// a link from j to the previous occurrence of the same n-gram (hash chains, as in LZ77 matchers). Tokens are indexed
// incrementally as the context grows; a lookup hashes the suffix (O(max_n)) and compares the candidate's tokens (O(n)), so
// it costs O(max_n^2) whatever the context length. Only occurrences with at least one following token are indexed, so the
// suffix never matches itself.
//
// With num_candidates > 1 the proposer returns a tree: the continuations of up to num_candidates most recent occurrences
// (of the longest matching n) merged into a trie, most recent first (siblings are deterministic children, verified by
// sampling without replacement from the target's distribution).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

struct NgramOptions {
  std::int32_t min_n = 1;          ///< shortest suffix to match (>= 1)
  std::int32_t max_n = 4;          ///< longest suffix to match (>= min_n, <= 64)
  std::int32_t max_drafts = 8;     ///< cap on drafts per step on top of the decoder's g
  std::int32_t num_candidates = 1; ///< > 1: a tree of the continuations of that many most recent matches
};

/// A match: the n-gram ending at `end` equals the context's last n tokens; the continuation starts at end + 1.
struct NgramMatch {
  std::int64_t end = -1;
  std::int32_t n = 0;
  bool found() const { return end >= 0; }
};

class NgramIndex {
 public:
  explicit NgramIndex(std::int32_t min_n = 1, std::int32_t max_n = 4) : min_n_(min_n), max_n_(max_n) {
    if (min_n < 1 || max_n < min_n || max_n > 64)
      throw error(Status::kInvalidArgument, "NgramIndex: expected 1 <= min_n <= max_n <= 64, got min_n = " +
                                                std::to_string(min_n) + ", max_n = " + std::to_string(max_n));
    tables_.resize(static_cast<std::size_t>(max_n - min_n + 1));
    prev_.resize(tables_.size());
  }

  /// The hash of an n-gram, most recent token first: h_1 = mix(kSeed, t_j), h_n = mix(h_{n-1}, t_{j-n+1}) (also the keys
  /// of CorpusTable, specdec/proposers/corpus.hpp).
  static constexpr std::uint64_t kSeed = 0x9E3779B97F4A7C15ull;
  static std::uint64_t mix(std::uint64_t h, std::int64_t token) {
    std::uint64_t z = h ^ (static_cast<std::uint64_t>(token) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::span<const std::int64_t> tokens() const { return tokens_; }

  /// Appends one token (indexing the n-grams that end just before it).
  void push(std::int64_t token) {
    tokens_.push_back(token);
    const std::int64_t j = size() - 2;  // n-grams ending at j now have a continuation
    for (auto& p : prev_) p.push_back(-1);
    if (j < 0) return;
    std::uint64_t h = kSeed;
    for (std::int32_t n = 1; n <= max_n_ && n <= j + 1; ++n) {
      h = mix(h, tokens_[static_cast<std::size_t>(j - n + 1)]);
      if (n < min_n_) continue;
      const auto t = static_cast<std::size_t>(n - min_n_);
      auto [it, inserted] = tables_[t].try_emplace(h, j);
      if (!inserted) {
        prev_[t][static_cast<std::size_t>(j)] = it->second;
        it->second = j;
      }
    }
  }
  /// Appends tokens[size() ..] of a context that extends the indexed one.
  void extend(std::span<const std::int64_t> context) {
    for (std::size_t i = tokens_.size(); i < context.size(); ++i) push(context[i]);
  }

  /// The longest (then most recent) earlier occurrence of the current suffix.
  NgramMatch find() const {
    const std::int64_t L = size();
    std::uint64_t hashes[64];
    std::uint64_t h = kSeed;
    const std::int32_t top = static_cast<std::int32_t>(std::min<std::int64_t>(max_n_, L - 1));
    for (std::int32_t n = 1; n <= top; ++n) hashes[n - 1] = h = mix(h, tokens_[static_cast<std::size_t>(L - n)]);
    for (std::int32_t n = top; n >= min_n_; --n) {
      const std::int64_t j = lookup(n, hashes[n - 1]);
      if (j >= 0) return {j, n};
    }
    return {};
  }

  /// Up to `count` most recent occurrences of the suffix of length n (the first being `first`).
  std::vector<std::int64_t> occurrences(const NgramMatch& first, std::int32_t count) const {
    std::vector<std::int64_t> out;
    if (!first.found()) return out;
    const auto t = static_cast<std::size_t>(first.n - min_n_);
    for (std::int64_t j = first.end; j >= 0 && static_cast<std::int32_t>(out.size()) < count;
         j = prev_[t][static_cast<std::size_t>(j)])
      if (equal_suffix(j, first.n)) out.push_back(j);
    return out;
  }

 private:
  /// Whether the n tokens ending at j equal the context's last n tokens.
  bool equal_suffix(std::int64_t j, std::int32_t n) const {
    const std::int64_t L = size();
    for (std::int32_t i = 0; i < n; ++i)
      if (tokens_[static_cast<std::size_t>(j - i)] != tokens_[static_cast<std::size_t>(L - 1 - i)]) return false;
    return true;
  }
  std::int64_t lookup(std::int32_t n, std::uint64_t h) const {
    const auto t = static_cast<std::size_t>(n - min_n_);
    auto it = tables_[t].find(h);
    if (it == tables_[t].end()) return -1;
    // A 64-bit hash collision is possible in principle: follow the chain a few links to a true match.
    std::int64_t j = it->second;
    for (int hops = 0; j >= 0 && hops < 4; ++hops, j = prev_[t][static_cast<std::size_t>(j)])
      if (equal_suffix(j, n)) return j;
    return -1;
  }

  std::int32_t min_n_, max_n_;
  std::vector<std::int64_t> tokens_;
  std::vector<std::unordered_map<std::uint64_t, std::int64_t>> tables_;  // per n: hash -> last end position
  std::vector<std::vector<std::int64_t>> prev_;                          // per n: end position -> previous one
};

class NgramProposer {
 public:
  static constexpr bool supports_trees = true;
  /// Lookups in the context (has_lookup_drafts).
  bool drafts_are_lookups() const { return true; }

  explicit NgramProposer(NgramOptions options = {}) : options_(options) {
    (void)NgramIndex(options.min_n, options.max_n);  // validates n
    if (options.max_drafts < 0)
      throw error(Status::kInvalidArgument, "NgramOptions.max_drafts: expected >= 0, got " + std::to_string(options.max_drafts));
    if (options.num_candidates < 1)
      throw error(Status::kInvalidArgument,
                  "NgramOptions.num_candidates: expected >= 1, got " + std::to_string(options.num_candidates));
  }

  void begin_request(const RequestContext& ctx) {
    auto [it, inserted] = indexes_.try_emplace(ctx.id, options_.min_n, options_.max_n);
    if (!inserted)
      throw error(Status::kInvalidArgument, "NgramProposer::begin_request: request " + std::to_string(ctx.id) + " is already live");
    it->second.extend(ctx.context);
  }
  void end_request(RequestId id) { indexes_.erase(id); }

  DraftBatch propose(std::span<const ProposeRequest> requests) {
    DraftBatch batch;
    batch.cu_num_drafts.push_back(0);
    std::vector<std::int64_t> drafts, parents;
    for (const auto& r : requests) {
      auto it = indexes_.find(r.id);
      if (it == indexes_.end())
        throw error(Status::kInvalidArgument, "NgramProposer: request " + std::to_string(r.id) + " is not live (begin_request?)");
      NgramIndex& index = it->second;
      if (static_cast<std::int64_t>(r.context.size()) < index.size())
        throw error(Status::kInvalidArgument, "NgramProposer: request " + std::to_string(r.id) + ": the context shrank");
      index.extend(r.context);
      draft(index, std::min(r.max_drafts, options_.max_drafts), drafts, parents);
      batch.append(drafts, parents);
    }
    return batch;
  }
  void observe(std::span<const StepFeedback>) {}

  /// Drafts for one index (exposed for benchmarks): chain, or trie when num_candidates > 1 (parents then non-empty).
  void draft(const NgramIndex& index, std::int32_t g, std::vector<std::int64_t>& drafts,
             std::vector<std::int64_t>& parents) const {
    drafts.clear();
    parents.clear();
    if (g <= 0) return;
    const NgramMatch m = index.find();
    if (!m.found()) return;
    const auto toks = index.tokens();
    const auto L = static_cast<std::int64_t>(toks.size());
    if (options_.num_candidates == 1) {
      for (std::int64_t i = m.end + 1; i < L && i <= m.end + g; ++i) drafts.push_back(toks[static_cast<std::size_t>(i)]);
      return;
    }
    for (std::int64_t j : index.occurrences(m, options_.num_candidates)) {
      std::int64_t node = 0;
      for (std::int64_t i = j + 1; i < L && i <= j + g; ++i) {
        const std::int64_t x = toks[static_cast<std::size_t>(i)];
        std::int64_t child = -1;
        for (std::size_t c = 0; c < drafts.size(); ++c)
          if (parents[c] == node && drafts[c] == x) {
            child = static_cast<std::int64_t>(c) + 1;
            break;
          }
        if (child < 0) {
          drafts.push_back(x);
          parents.push_back(node);
          child = static_cast<std::int64_t>(drafts.size());
        }
        node = child;
      }
    }
    bool chain = true;  // a single path is sent as a chain
    for (std::size_t c = 0; c < parents.size(); ++c) chain &= parents[c] == static_cast<std::int64_t>(c);
    if (chain) parents.clear();
  }

  const NgramOptions& options() const { return options_; }

 private:
  NgramOptions options_;
  std::unordered_map<RequestId, NgramIndex> indexes_;
};

}  // namespace specdec::proposers
