// ReplayTarget (include/specdec/decoder/replay.hpp): recorded greedy outputs answered as one-hot logits, forwards charged
// a modelled cost.
#include "specdec/decoder/replay.hpp"


#include <algorithm>
#include <string>

#include "specdec/sampling/status.hpp"

namespace specdec::decoder {

ReplayTarget::ReplayTarget(std::int64_t vocab, ForwardCostFn cost) : vocab_(vocab), cost_(std::move(cost)) {
  if (vocab_ < 1) throw error(Status::kInvalidArgument, "ReplayTarget: vocab: expected >= 1, got " + std::to_string(vocab_));
  if (!cost_) throw error(Status::kInvalidArgument, "ReplayTarget: cost: expected a function");
}

void ReplayTarget::add_script(std::vector<std::int64_t> sequence) {
  if (sequence.empty()) throw error(Status::kInvalidArgument, "ReplayTarget::add_script: empty sequence");
  for (std::size_t i = 0; i < sequence.size(); ++i)
    if (sequence[i] < 0 || sequence[i] >= vocab_)
      throw error(Status::kInvalidTokenId, "ReplayTarget::add_script: token " + std::to_string(i) + " = " +
                                               std::to_string(sequence[i]) + " outside [0, " + std::to_string(vocab_) + ")");
  scripts_.push_back(std::move(sequence));
}

std::int64_t ReplayTarget::find_script(std::span<const std::int64_t> prefix) const {
  for (std::size_t s = 0; s < scripts_.size(); ++s) {
    const auto& t = scripts_[s];
    if (t.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), t.begin())) return static_cast<std::int64_t>(s);
  }
  return -1;
}

std::span<const std::int64_t> ReplayTarget::continuation(std::span<const std::int64_t> context) const {
  const std::int64_t s = find_script(context);
  if (s < 0) return {};
  const auto& t = scripts_[static_cast<std::size_t>(s)];
  return std::span<const std::int64_t>(t).subspan(context.size());
}

ReplayTarget::Sequence& ReplayTarget::sequence(std::int64_t slot, const char* who) {
  auto it = slots_.find(slot);
  if (it == slots_.end())
    throw error(Status::kInvalidArgument, std::string("ReplayTarget::") + who + ": slot " + std::to_string(slot) + " is not allocated");
  return it->second;
}

std::int64_t ReplayTarget::allocate_sequence() {
  slots_.emplace(next_slot_, Sequence{});
  return next_slot_++;
}

void ReplayTarget::free_sequence(std::int64_t slot) { slots_.erase(slot); }

void ReplayTarget::truncate(std::int64_t slot, std::int64_t length) {
  Sequence& s = sequence(slot, "truncate");
  if (length < 0 || length > static_cast<std::int64_t>(s.tokens.size()))
    throw error(Status::kInvalidArgument, "ReplayTarget::truncate: length " + std::to_string(length) + " outside [0, " +
                                              std::to_string(s.tokens.size()) + "]");
  s.tokens.resize(static_cast<std::size_t>(length));
}

void ReplayTarget::keep_path(std::int64_t slot, std::int64_t length, std::span<const std::int64_t> path) {
  Sequence& s = sequence(slot, "keep_path");
  const auto n = static_cast<std::int64_t>(s.tokens.size());
  if (length < 0 || length > n) throw error(Status::kInvalidArgument, "ReplayTarget::keep_path: bad length");
  std::vector<std::int64_t> kept;
  kept.reserve(path.size());
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] < 0 || length + path[i] >= n || (i > 0 && path[i] <= path[i - 1]))
      throw error(Status::kInvalidArgument, "ReplayTarget::keep_path: path node " + std::to_string(path[i]) + " invalid");
    kept.push_back(s.tokens[static_cast<std::size_t>(length + path[i])]);
  }
  s.tokens.resize(static_cast<std::size_t>(length));
  s.tokens.insert(s.tokens.end(), kept.begin(), kept.end());
}

models::ForwardOutput ReplayTarget::forward(const models::ForwardBatch& batch) {
  const auto B = static_cast<std::int64_t>(batch.slots.size());
  if (static_cast<std::int64_t>(batch.cu_num_tokens.size()) != B + 1 || batch.cu_num_tokens.front() != 0 ||
      batch.cu_num_tokens.back() != static_cast<std::int64_t>(batch.token_ids.size()))
    throw error(Status::kInvalidArgument, "ReplayTarget::forward: cu_num_tokens does not describe token_ids");
  const auto N = static_cast<std::int64_t>(batch.token_ids.size());
  if (batch.return_final_hidden || !batch.hidden_layers.empty())
    throw error(Status::kInvalidArgument, "ReplayTarget::forward: a replay has no hidden states (proposers that read "
                                          "target features cannot be replayed)");
  // Validate everything, the scripts of first forwards included, before changing any sequence.
  std::vector<std::int64_t> script_of(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const Sequence& s = sequence(batch.slots[static_cast<std::size_t>(b)], "forward");
    const auto begin = batch.cu_num_tokens[static_cast<std::size_t>(b)], end = batch.cu_num_tokens[static_cast<std::size_t>(b + 1)];
    if (end <= begin)
      throw error(Status::kInvalidArgument, "ReplayTarget::forward: sequence " + std::to_string(b) + " has no new tokens");
    if (static_cast<std::int64_t>(batch.parents.size()) > b && !batch.parents[static_cast<std::size_t>(b)].empty()) {
      const auto& par = batch.parents[static_cast<std::size_t>(b)];
      bool ok = static_cast<std::int64_t>(par.size()) == end - begin && par[0] == -1;
      for (std::size_t i = 1; ok && i < par.size(); ++i) ok = par[i] >= 0 && static_cast<std::size_t>(par[i]) < i;
      if (!ok) throw error(Status::kInvalidArgument, "ReplayTarget::forward: sequence " + std::to_string(b) + ": bad parents");
    }
    script_of[static_cast<std::size_t>(b)] = s.script;
    if (s.script < 0) {  // the first forward names the script: the prefilled prompt (or a 1-token prompt's root)
      const bool tree = static_cast<std::int64_t>(batch.parents.size()) > b && !batch.parents[static_cast<std::size_t>(b)].empty();
      std::vector<std::int64_t> prefix = s.tokens;
      prefix.insert(prefix.end(), batch.token_ids.begin() + begin, batch.token_ids.begin() + (tree ? begin + 1 : end));
      script_of[static_cast<std::size_t>(b)] = find_script(prefix);
      if (script_of[static_cast<std::size_t>(b)] < 0)
        throw error(Status::kInvalidArgument, "ReplayTarget::forward: slot " + std::to_string(batch.slots[static_cast<std::size_t>(b)]) +
                                                  " starts with tokens no script begins with");
    }
  }
  for (std::int64_t i = 0; i < N; ++i)
    if (batch.token_ids[static_cast<std::size_t>(i)] < 0 || batch.token_ids[static_cast<std::size_t>(i)] >= vocab_)
      throw error(Status::kInvalidTokenId, "ReplayTarget::forward: token " + std::to_string(i) + " outside the vocabulary");

  std::vector<std::int64_t> next;  // per logits row: the token the row's script has next
  next.reserve(static_cast<std::size_t>(N));
  for (std::int64_t b = 0; b < B; ++b) {
    Sequence& s = slots_.at(batch.slots[static_cast<std::size_t>(b)]);
    const auto begin = batch.cu_num_tokens[static_cast<std::size_t>(b)], end = batch.cu_num_tokens[static_cast<std::size_t>(b + 1)];
    const auto L = static_cast<std::int64_t>(s.tokens.size());
    const bool tree = static_cast<std::int64_t>(batch.parents.size()) > b && !batch.parents[static_cast<std::size_t>(b)].empty();
    std::vector<std::int64_t> depth(static_cast<std::size_t>(end - begin), 0);
    for (std::int64_t i = 1; i < end - begin; ++i)
      depth[static_cast<std::size_t>(i)] =
          tree ? depth[static_cast<std::size_t>(batch.parents[static_cast<std::size_t>(b)][static_cast<std::size_t>(i)])] + 1 : i;
    s.tokens.insert(s.tokens.end(), batch.token_ids.begin() + begin, batch.token_ids.begin() + end);
    s.script = script_of[static_cast<std::size_t>(b)];
    const auto& script = scripts_[static_cast<std::size_t>(s.script)];
    auto row_next = [&](std::int64_t i) {
      const std::int64_t p = L + depth[static_cast<std::size_t>(i)] + 1;  // the sequence index the row predicts
      return p < static_cast<std::int64_t>(script.size()) ? script[static_cast<std::size_t>(p)] : std::int64_t{0};
    };
    if (batch.last_logits_only) {
      next.push_back(row_next(end - begin - 1));
    } else {
      for (std::int64_t i = 0; i < end - begin; ++i) next.push_back(row_next(i));
    }
  }
  if (!batch.last_logits_only) {
    seconds_ += cost_(B, N);
    ++forwards_;
  }
  models::ForwardOutput out;
  out.logits = Rows::host_float32(static_cast<std::int64_t>(next.size()), vocab_);
  float* p = out.logits.mutable_host_float32_data();
  for (std::size_t r = 0; r < next.size(); ++r) p[static_cast<std::int64_t>(r) * vocab_ + next[r]] = 1.0f;
  return out;
}

}  // namespace specdec::decoder
