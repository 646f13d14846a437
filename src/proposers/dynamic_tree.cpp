// The EAGLE-2 dynamic draft tree: expansion by cumulative log-probability and the final top-n selection (see eagle.hpp).
#include "eagle_internal.hpp"

namespace specdec::proposers {

using namespace eagle_internal;

namespace {

// Indices of the k best of `scores[i]` for i in [0, n) (score descending, ties to the lower index), skipping -inf/NaN.
std::vector<std::int64_t> top_k_indices(std::int64_t n, std::int64_t k, const std::function<float(std::int64_t)>& score) {
  std::vector<std::int64_t> idx;
  idx.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const float s = score(i);
    if (s > -std::numeric_limits<float>::infinity()) idx.push_back(i);  // NaN fails the test too
  }
  auto better = [&](std::int64_t a, std::int64_t b) {
    const float sa = score(a), sb = score(b);
    return sa > sb || (sa == sb && a < b);
  };
  const auto keep = static_cast<std::size_t>(std::min<std::int64_t>(k, static_cast<std::int64_t>(idx.size())));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(), better);
  idx.resize(keep);
  return idx;
}

// The k best tokens of one row of log-probabilities (value descending, ties to the lower id), skipping -inf/NaN: one
// pass over the row keeping a short sorted list (the same order top_k_indices gives, without sorting the row).
std::vector<std::int64_t> top_k_tokens(std::span<const float> row, std::int64_t k) {
  std::vector<std::pair<float, std::int64_t>> best;
  best.reserve(static_cast<std::size_t>(k) + 1);
  const auto n = static_cast<std::int64_t>(row.size());
  for (std::int64_t t = 0; t < n; ++t) {
    const float v = row[static_cast<std::size_t>(t)];
    if (!(v > -std::numeric_limits<float>::infinity())) continue;  // NaN fails the test too
    if (static_cast<std::int64_t>(best.size()) == k && !(v > best.back().first)) continue;  // an equal value keeps the lower id
    auto at = best.end();
    while (at != best.begin() && (at - 1)->first < v) --at;  // after every value >= v: ties stay in id order
    best.insert(at, {v, t});
    if (static_cast<std::int64_t>(best.size()) > k) best.pop_back();
  }
  std::vector<std::int64_t> out;
  out.reserve(best.size());
  for (const auto& b : best) out.push_back(b.second);
  return out;
}

}  // namespace

DynamicTreeBuilder::DynamicTreeBuilder(const DynamicTreeParams& params, std::int32_t max_depth,
                                       std::span<const float> root_logprobs)
    : params_(params), max_depth_(max_depth), vocab_(static_cast<std::int64_t>(root_logprobs.size())) {
  if (params.top_k < 1) fail(fmt::format("DynamicTreeBuilder: params.top_k: expected >= 1, got {}", params.top_k));
  if (params.num_nodes < 1) fail(fmt::format("DynamicTreeBuilder: params.num_nodes: expected >= 1, got {}", params.num_nodes));
  if (params.depth < 0) fail(fmt::format("DynamicTreeBuilder: params.depth: expected >= 0, got {}", params.depth));
  if (max_depth < 1) fail(fmt::format("DynamicTreeBuilder: max_depth: expected >= 1, got {}", max_depth));
  if (vocab_ < 1) fail("DynamicTreeBuilder: root_logprobs: expected a non-empty row");
  if (!(params.min_path_prob >= 0.0 && params.min_path_prob <= 1.0))
    fail(fmt::format("DynamicTreeBuilder: params.min_path_prob: expected in [0, 1], got {}", params.min_path_prob));
  params_.top_k = static_cast<std::int32_t>(std::min<std::int64_t>(params.top_k, vocab_));
  if (params.min_path_prob > 0.0) min_score_ = static_cast<float>(std::log(params.min_path_prob));
  add_children(-1, root_logprobs, 0.f, 1);
  level_begin_ = 0;
  if (max_depth_ > 1) {
    const float bound = kept_bound();
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(candidates_.size()); ++i)
      if (!(candidates_[static_cast<std::size_t>(i)].score < bound)) frontier_.push_back(i);
  }
}

void DynamicTreeBuilder::add_children(std::int64_t parent, std::span<const float> logprobs, float base, std::int32_t depth) {
  for (const auto t : top_k_tokens(logprobs, params_.top_k)) {
    const float score = base + logprobs[static_cast<std::size_t>(t)];
    if (score >= min_score_) candidates_.push_back({t, parent, score, depth});
  }
}

float DynamicTreeBuilder::kept_bound() const {
  const auto n = static_cast<std::int64_t>(params_.num_nodes);
  if (static_cast<std::int64_t>(candidates_.size()) < n) return -std::numeric_limits<float>::infinity();
  std::vector<float> scores;
  scores.reserve(candidates_.size());
  for (const auto& c : candidates_) scores.push_back(c.score);
  std::nth_element(scores.begin(), scores.begin() + (n - 1), scores.end(), std::greater<float>());
  return scores[static_cast<std::size_t>(n - 1)];
}

void DynamicTreeBuilder::expand(std::span<const float> logprobs) {
  const auto rows = static_cast<std::int64_t>(frontier_.size());
  if (rows == 0) fail("DynamicTreeBuilder::expand: the frontier is empty (the tree is complete)");
  if (static_cast<std::int64_t>(logprobs.size()) != rows * vocab_)
    fail(fmt::format("DynamicTreeBuilder::expand: logprobs: expected {} values ({} frontier rows x {}), got {}", rows * vocab_,
                     rows, vocab_, logprobs.size()));
  const auto begin = static_cast<std::int64_t>(candidates_.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const Candidate& parent = candidates_[static_cast<std::size_t>(frontier_[static_cast<std::size_t>(r)])];
    const float base = parent.score;
    const std::int32_t depth = parent.depth + 1;
    add_children(frontier_[static_cast<std::size_t>(r)], logprobs.subspan(static_cast<std::size_t>(r * vocab_), static_cast<std::size_t>(vocab_)),
                 base, depth);
  }
  level_begin_ = begin;
  frontier_.clear();
  const std::int32_t level_depth = begin < static_cast<std::int64_t>(candidates_.size()) ? candidates_[static_cast<std::size_t>(begin)].depth : max_depth_;
  if (level_depth < max_depth_) {
    const std::int64_t n = static_cast<std::int64_t>(candidates_.size()) - begin;
    // A candidate scoring below the num_nodes-th best cannot be kept, nor can any descendant (a child scores at most its
    // parent): not expanding it leaves the kept set as it would be (the bound only rises as the tree grows).
    const float bound = kept_bound();
    for (const auto i : top_k_indices(n, params_.top_k, [&](std::int64_t i) { return candidates_[static_cast<std::size_t>(begin + i)].score; }))
      if (!(candidates_[static_cast<std::size_t>(begin + i)].score < bound)) frontier_.push_back(begin + i);
    std::sort(frontier_.begin(), frontier_.end());
  }
}

std::vector<std::int64_t> DynamicTreeBuilder::select() const {
  const auto n = static_cast<std::int64_t>(candidates_.size());
  std::vector<std::int64_t> order = top_k_indices(n, n, [&](std::int64_t i) { return candidates_[static_cast<std::size_t>(i)].score; });
  std::vector<bool> kept(static_cast<std::size_t>(n), false);
  std::vector<std::int64_t> out;
  for (const auto i : order) {
    if (static_cast<std::int64_t>(out.size()) >= params_.num_nodes) break;
    const std::int64_t p = candidates_[static_cast<std::size_t>(i)].parent;
    if (p >= 0 && !kept[static_cast<std::size_t>(p)]) continue;  // keep the tree closed under ancestors
    kept[static_cast<std::size_t>(i)] = true;
    out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::int64_t> DynamicTreeBuilder::tree_parents(std::span<const std::int64_t> selected) const {
  std::unordered_map<std::int64_t, std::int64_t> node_of;  // candidate -> node index
  std::vector<std::int64_t> parents(selected.size());
  for (std::size_t j = 0; j < selected.size(); ++j) {
    const std::int64_t p = candidates_.at(static_cast<std::size_t>(selected[j])).parent;
    if (p < 0) {
      parents[j] = 0;
    } else {
      auto it = node_of.find(p);
      if (it == node_of.end())
        fail(fmt::format("DynamicTreeBuilder::tree_parents: candidate {} is selected without its parent {}", selected[j], p));
      parents[j] = it->second;
    }
    node_of[selected[j]] = static_cast<std::int64_t>(j) + 1;
  }
  return parents;
}

}  // namespace specdec::proposers
