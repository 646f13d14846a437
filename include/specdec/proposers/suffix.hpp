// SuffixProposer: suffix decoding (Oliaro et al., "SuffixDecoding: Extreme Speculative Decoding for Emerging AI
// Applications"; as in Arctic Inference). Two frequency-counted suffix tries of bounded depth: one over each live request's
// own context (prompt + generated tokens), one over the outputs of requests that finished (a bounded global cache shared
// by every request, so a repeated task drafts from earlier answers). Each step matches the longest suffix of the context
// in a trie and grows a draft tree below the match best-first by the empirical probability of each path (the product of
// child count / parent's children count), with a node budget that grows with the match length (longer matches are more
// reliable); the better tree of the two tries (larger expected accepted length, the sum of its path probabilities) is
// proposed. Deterministic drafts (no probs), verified losslessly by the tree verifier (siblings: sampling without
// replacement from the target).
//
// SuffixTrie: node i holds a token, a count (how many indexed positions continue through it) and its children. Appending
// token t to an indexed sequence walks the at most `depth` open suffixes ending at the previous token one step down to t
// (creating nodes) and opens a new one at the root: O(depth) per token. Removing a sequence walks the same paths with
// -1 counts (zero-count nodes are skipped when drafting and reused when the same suffix is indexed again). The global
// trie's outputs come and go, so once most of its nodes are at zero count it is rebuilt from the outputs it holds:
// its size stays within a small multiple of theirs however many requests pass through.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <queue>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

struct SuffixOptions {
  std::int32_t max_depth = 24;          ///< longest suffix indexed and matched (trie depth)
  std::int32_t min_match = 1;           ///< shortest suffix match worth drafting from
  double tokens_per_match_token = 1.0;  ///< draft budget: this many nodes per matched token (the paper's alpha)
  std::int32_t max_tree_nodes = 24;     ///< cap on drafts per step (tree nodes); the decoder's g caps the depth
  std::int32_t max_width = 4;           ///< children kept per node (1: a chain, for targets without trees)
  double min_path_probability = 0.1;    ///< a node is drafted only if its path's empirical probability is at least this
  std::int32_t global_outputs = 256;    ///< finished outputs kept in the global trie (0: no global cache)
};

class SuffixTrie {
 public:
  explicit SuffixTrie(std::int32_t depth = 24) : depth_(depth) { nodes_.push_back({}); }

  std::int32_t depth() const { return depth_; }
  std::int64_t num_nodes() const { return static_cast<std::int64_t>(nodes_.size()); }
  /// Nodes (the root aside) whose count is 0: what removed sequences left behind.
  std::int64_t zero_nodes() const { return zero_nodes_; }

  /// Indexes `tokens` as one sequence (count +1, or -1 with `sign` = -1 to remove a sequence indexed before).
  void add_sequence(std::span<const std::int64_t> tokens, int sign = 1) {
    std::vector<std::int32_t> open;
    for (const auto t : tokens) step(open, t, sign);
  }

  /// An incrementally indexed sequence (a live request's context): call push for each new token.
  struct Cursor {
    std::vector<std::int32_t> open;  // nodes of the open suffixes ending at the last pushed token
  };
  void push(Cursor& c, std::int64_t token) { step(c.open, token, 1); }

  /// The node reached by the longest suffix of `context` (length <= min(max_len, depth - 1), >= min_len) that has
  /// continuations; its length in `matched` (0 and -1 when none). The trie holds depth_ tokens per suffix, so a match of
  /// length m has at most depth_ - m continuation tokens below it: a caller that wants g of them passes
  /// max_len = depth_ - g.
  std::int32_t match(std::span<const std::int64_t> context, std::int32_t min_len, std::int32_t& matched,
                     std::int32_t max_len = std::numeric_limits<std::int32_t>::max()) const {
    const auto L = static_cast<std::int64_t>(context.size());
    for (std::int64_t m = std::min<std::int64_t>({depth_ - 1, L, max_len}); m >= std::max(min_len, 1); --m) {
      std::int32_t node = 0;
      for (std::int64_t i = L - m; i < L && node >= 0; ++i) node = child(node, context[static_cast<std::size_t>(i)]);
      if (node >= 0 && nodes_[static_cast<std::size_t>(node)].count > 0 && children_total(node) > 0) {
        matched = static_cast<std::int32_t>(m);
        return node;
      }
    }
    matched = 0;
    return -1;
  }

  /// match() for the sequence this trie indexed through `c` (a live request's context, pushed token by token): the
  /// cursor holds the node of each suffix (open[m - 1]: length m), so the same node and length come in O(depth) lookups
  /// instead of a walk from the root per candidate length (O(depth^2)).
  std::int32_t match_open(const Cursor& c, std::int32_t min_len, std::int32_t& matched,
                          std::int32_t max_len = std::numeric_limits<std::int32_t>::max()) const {
    const auto L = static_cast<std::int64_t>(c.open.size());
    for (std::int64_t m = std::min<std::int64_t>({depth_ - 1, L, max_len}); m >= std::max(min_len, 1); --m) {
      const std::int32_t node = c.open[static_cast<std::size_t>(m - 1)];
      if (node >= 0 && nodes_[static_cast<std::size_t>(node)].count > 0 && children_total(node) > 0) {
        matched = static_cast<std::int32_t>(m);
        return node;
      }
    }
    matched = 0;
    return -1;
  }

  /// A draft tree below `from`: best-first by path probability, at most `budget` nodes, depth <= max_depth, <= width
  /// children per node, each with path probability >= min_prob. Appends tokens / parents (node indices local to the tree,
  /// 0 = the root) and returns the sum of the drafted paths' probabilities (the expected number of accepted drafts when
  /// the empirical probabilities are the target's).
  double grow(std::int32_t from, std::int32_t budget, std::int32_t max_depth, std::int32_t width, double min_prob,
              std::vector<std::int64_t>& tokens, std::vector<std::int64_t>& parents) const {
    struct Item {
      double prob;
      std::int32_t node, parent_local, depth;
      bool operator<(const Item& o) const { return prob < o.prob || (prob == o.prob && node > o.node); }
    };
    std::priority_queue<Item> heap;
    auto push_children = [&](std::int32_t node, std::int32_t local, std::int32_t depth, double prob) {
      if (depth >= max_depth) return;
      const double total = static_cast<double>(children_total(node));
      if (total <= 0) return;
      std::vector<std::pair<std::int64_t, std::int32_t>> kids;  // (count, child)
      for (const auto& [tok, c] : nodes_[static_cast<std::size_t>(node)].children)
        if (nodes_[static_cast<std::size_t>(c)].count > 0) kids.push_back({nodes_[static_cast<std::size_t>(c)].count, c});
      std::sort(kids.begin(), kids.end(), [&](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && token_of(a.second) < token_of(b.second));
      });
      if (static_cast<std::int32_t>(kids.size()) > width) kids.resize(static_cast<std::size_t>(width));
      for (const auto& [count, c] : kids) heap.push({prob * static_cast<double>(count) / total, c, local, depth + 1});
    };
    push_children(from, 0, 0, 1.0);
    double expected = 0;
    while (!heap.empty() && static_cast<std::int32_t>(tokens.size()) < budget) {
      const Item it = heap.top();
      heap.pop();
      if (it.prob < min_prob) break;
      tokens.push_back(token_of(it.node));
      parents.push_back(it.parent_local);
      expected += it.prob;
      push_children(it.node, static_cast<std::int32_t>(tokens.size()), it.depth, it.prob);
    }
    return expected;
  }

 private:
  struct Node {
    std::int64_t token = -1;
    std::int64_t count = 0;
    std::unordered_map<std::int64_t, std::int32_t> children;
  };

  std::int32_t child(std::int32_t node, std::int64_t token) const {
    const auto& ch = nodes_[static_cast<std::size_t>(node)].children;
    auto it = ch.find(token);
    return it == ch.end() ? -1 : it->second;
  }
  std::int64_t token_of(std::int32_t node) const { return nodes_[static_cast<std::size_t>(node)].token; }
  std::int64_t children_total(std::int32_t node) const {
    std::int64_t s = 0;
    for (const auto& [tok, c] : nodes_[static_cast<std::size_t>(node)].children) s += nodes_[static_cast<std::size_t>(c)].count;
    return s;
  }
  std::int32_t child_or_new(std::int32_t node, std::int64_t token) {
    const std::int32_t c = child(node, token);
    if (c >= 0) return c;
    const auto id = static_cast<std::int32_t>(nodes_.size());
    nodes_.push_back({token, 0, {}});
    ++zero_nodes_;  // until step() counts it
    nodes_[static_cast<std::size_t>(node)].children.emplace(token, id);
    return id;
  }
  // Moves every open suffix one token down (opening a new one at the root); suffixes reaching the depth close.
  void step(std::vector<std::int32_t>& open, std::int64_t token, int sign) {
    open.insert(open.begin(), 0);
    if (static_cast<std::int32_t>(open.size()) > depth_) open.pop_back();
    for (auto& node : open) {
      node = sign > 0 ? child_or_new(node, token) : child(node, token);
      if (node >= 0) {
        std::int64_t& count = nodes_[static_cast<std::size_t>(node)].count;
        zero_nodes_ += (count == 0 ? -1 : 0) + (count + sign == 0 ? 1 : 0);
        count += sign;
      }
    }
    std::erase(open, -1);
  }

  std::int32_t depth_;
  std::vector<Node> nodes_;
  std::int64_t zero_nodes_ = 0;
};

class SuffixProposer {
 public:
  static constexpr bool supports_trees = true;
  /// Lookups in the tries (has_lookup_drafts).
  bool drafts_are_lookups() const { return true; }

  explicit SuffixProposer(SuffixOptions options = {}) : options_(options), global_(options.max_depth) {
    auto bad = [](const std::string& what) { throw error(Status::kInvalidArgument, "SuffixOptions." + what); };
    if (options.max_depth < 2) bad("max_depth: expected >= 2, got " + std::to_string(options.max_depth));
    if (options.min_match < 1 || options.min_match >= options.max_depth)
      bad("min_match: expected in [1, max_depth), got " + std::to_string(options.min_match));
    if (!(options.tokens_per_match_token > 0)) bad("tokens_per_match_token: expected > 0");
    if (options.max_tree_nodes < 0) bad("max_tree_nodes: expected >= 0, got " + std::to_string(options.max_tree_nodes));
    if (options.max_width < 1) bad("max_width: expected >= 1, got " + std::to_string(options.max_width));
    if (!(options.min_path_probability >= 0 && options.min_path_probability <= 1))
      bad("min_path_probability: expected in [0, 1]");
    if (options.global_outputs < 0) bad("global_outputs: expected >= 0, got " + std::to_string(options.global_outputs));
  }

  void begin_request(const RequestContext& ctx) {
    auto [it, inserted] = live_.try_emplace(ctx.id, Live{SuffixTrie(options_.max_depth), {}, {}, 0, 0});
    if (!inserted)
      throw error(Status::kInvalidArgument, "SuffixProposer::begin_request: request " + std::to_string(ctx.id) + " is already live");
    it->second.prompt_length = static_cast<std::int64_t>(ctx.context.size());
    extend(it->second, ctx.context);
  }

  /// Ends a request; its generated tokens join the global trie (the oldest output leaves when the cache is full).
  void end_request(RequestId id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    Live& r = it->second;
    if (options_.global_outputs > 0 && static_cast<std::int64_t>(r.tokens.size()) > r.prompt_length) {
      outputs_.emplace_back(r.tokens.begin() + r.prompt_length, r.tokens.end());
      global_.add_sequence(outputs_.back());
      while (static_cast<std::int32_t>(outputs_.size()) > options_.global_outputs) {
        global_.add_sequence(outputs_.front(), -1);
        outputs_.pop_front();
      }
      // Mostly nodes of outputs that left: rebuilt from those it holds (the cost of the nodes removed since the last
      // rebuild, so amortised O(depth) a token).
      if (global_.num_nodes() > kMinRebuildNodes && 2 * global_.zero_nodes() > global_.num_nodes()) {
        global_ = SuffixTrie(options_.max_depth);
        for (const auto& o : outputs_) global_.add_sequence(o);
      }
    }
    live_.erase(it);
  }

  DraftBatch propose(std::span<const ProposeRequest> requests) {
    DraftBatch batch;
    batch.cu_num_drafts.push_back(0);
    std::vector<std::int64_t> tokens, parents, best_tokens, best_parents;
    for (const auto& r : requests) {
      auto it = live_.find(r.id);
      if (it == live_.end())
        throw error(Status::kInvalidArgument, "SuffixProposer: request " + std::to_string(r.id) + " is not live (begin_request?)");
      Live& live = it->second;
      if (r.context.size() < live.tokens.size())
        throw error(Status::kInvalidArgument, "SuffixProposer: request " + std::to_string(r.id) + ": the context shrank");
      extend(live, r.context);
      double best = 0;
      live.last_match = 0;
      best_tokens.clear();
      best_parents.clear();
      for (const SuffixTrie* trie : {&live.trie, &global_}) {
        std::int32_t matched = 0;
        // Leave room for r.max_drafts continuation levels below the match (a longer match in a depth-bounded trie
        // could draft only depth - m tokens). The live trie indexed this very context through the request's cursor.
        const std::int32_t max_len = std::max(options_.min_match, options_.max_depth - r.max_drafts);
        const std::int32_t node = trie == &live.trie ? trie->match_open(live.cursor, options_.min_match, matched, max_len)
                                                     : trie->match(r.context, options_.min_match, matched, max_len);
        if (node < 0 || r.max_drafts <= 0) continue;
        const auto budget = static_cast<std::int32_t>(std::min<double>(
            options_.max_tree_nodes, std::ceil(options_.tokens_per_match_token * static_cast<double>(matched))));
        tokens.clear();
        parents.clear();
        const double expected = trie->grow(node, budget, r.max_drafts, options_.max_width, options_.min_path_probability,
                                           tokens, parents);
        if (expected > best) {
          best = expected;
          live.last_match = matched;
          best_tokens.swap(tokens);
          best_parents.swap(parents);
        }
      }
      const bool chain = std::all_of(best_parents.begin(), best_parents.end(),
                                     [i = std::int64_t{0}](std::int64_t p) mutable { return p == i++; });
      if (chain) best_parents.clear();  // a chain: no parent array (targets without trees take it too)
      batch.append(best_tokens, best_parents);
    }
    return batch;
  }
  void observe(std::span<const StepFeedback>) {}

  /// The length of the suffix match behind request `id`'s last proposal (the trie whose tree was proposed; 0: it drafted
  /// nothing). What the node budget grows with; bench_replay --trace tabulates acceptance by it.
  std::int32_t last_match_length(RequestId id) const {
    auto it = live_.find(id);
    if (it == live_.end())
      throw error(Status::kInvalidArgument, "SuffixProposer::last_match_length: request " + std::to_string(id) + " is not live");
    return it->second.last_match;
  }

  /// Finished outputs in the global trie.
  std::int64_t cached_outputs() const { return static_cast<std::int64_t>(outputs_.size()); }
  /// Nodes of the global trie (those of outputs that left included, until a rebuild).
  std::int64_t global_nodes() const { return global_.num_nodes(); }
  /// The global trie is rebuilt only past this many nodes.
  static constexpr std::int64_t kMinRebuildNodes = 4096;

 private:
  struct Live {
    SuffixTrie trie;
    SuffixTrie::Cursor cursor;
    std::vector<std::int64_t> tokens;
    std::int64_t prompt_length = 0;
    std::int32_t last_match = 0;  // see last_match_length
  };
  static void extend(Live& r, std::span<const std::int64_t> context) {
    for (std::size_t i = r.tokens.size(); i < context.size(); ++i) {
      r.tokens.push_back(context[i]);
      r.trie.push(r.cursor, context[i]);
    }
  }

  SuffixOptions options_;
  SuffixTrie global_;
  std::deque<std::vector<std::int64_t>> outputs_;
  std::unordered_map<RequestId, Live> live_;
};

}  // namespace specdec::proposers
