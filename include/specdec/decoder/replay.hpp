// specdec — ReplayTarget: a CausalLM that replays recorded greedy outputs, so that draft-length policies and proposers can
// be compared on a real model's real text without the host's timing noise.
//
// At temperature 0 a request's tokens are a function of the target alone (greedy speculative output equals plain
// decoding), so once a prompt's plain greedy continuation is recorded, every speculative run over it emits the same
// tokens and differs only in its steps: how many target forwards it took and how many token rows each verified. A
// ReplayTarget holds such recordings (scripts: prompt + output) and answers each token row with one-hot logits at the
// token its script has next; the decoder's steps then run exactly as on the real model, and each forward is charged a
// cost from a fixed function of its rows (e.g. the real model's startup profile, cost_profile.hpp) instead of being
// timed. Two runs of the same configuration give the same figures, and a run's modelled speedup is
//     tokens emitted / sum over its steps of cost(rows of the step)   (in 1-row forwards, cost(1) = 1).
//
// Which script a sequence follows is decided at its first forward (the prompt's prefill: the script whose prefix is
// the prefilled tokens; with a 1-token prompt, the first forward's root). A row whose token sits at sequence position p
// gets the script's token at p + 1, whatever its ancestors: only rows on the recorded path are ever read for an accepted
// token (a draft is accepted only when it equals its parent row's argmax, so accepted rows follow the script by
// induction). Rows past the script's end get token 0 (the decoder stops at the script's end: its stop token or length).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "specdec/decoder/length_policy.hpp"
#include "specdec/models/causal_lm.hpp"

namespace specdec::decoder {

class ReplayTarget {
 public:
  /// `vocab`: logits per row; `cost`: the modelled seconds of a forward (requests, token rows), e.g.
  /// forward_cost_from_profile(profile). Prefill forwards (ForwardBatch::last_logits_only) are not charged.
  ReplayTarget(std::int64_t vocab, ForwardCostFn cost);

  /// Adds a recording: a prompt followed by its greedy output. Throws specdec::error when it is empty or a token lies
  /// outside the vocabulary.
  void add_script(std::vector<std::int64_t> sequence);

  std::int64_t vocab_size() const { return vocab_; }
  models::ForwardOutput forward(const models::ForwardBatch& batch);
  std::int64_t allocate_sequence();
  void free_sequence(std::int64_t slot);
  void truncate(std::int64_t slot, std::int64_t length);
  void keep_path(std::int64_t slot, std::int64_t length, std::span<const std::int64_t> path);

  /// The script tokens that follow `context` (empty when `context` is not a prefix of a script, or is all of one).
  std::span<const std::int64_t> continuation(std::span<const std::int64_t> context) const;

  /// Modelled seconds of every forward that was not a prefill, and their count.
  double modelled_seconds() const { return seconds_; }
  std::int64_t forwards() const { return forwards_; }
  /// Forgets the charged forwards (the scripts and live sequences stay).
  void reset_counters() {
    seconds_ = 0;
    forwards_ = 0;
  }

 private:
  struct Sequence {
    std::vector<std::int64_t> tokens;  // cached tokens (a tree forward's nodes until keep_path)
    std::int64_t script = -1;          // index into scripts_, fixed at the first forward
  };
  Sequence& sequence(std::int64_t slot, const char* who);
  std::int64_t find_script(std::span<const std::int64_t> prefix) const;

  std::int64_t vocab_;
  ForwardCostFn cost_;
  std::vector<std::vector<std::int64_t>> scripts_;
  std::unordered_map<std::int64_t, Sequence> slots_;
  std::int64_t next_slot_ = 0;
  double seconds_ = 0;
  std::int64_t forwards_ = 0;
};

static_assert(models::TreeCausalLM<ReplayTarget>);

}  // namespace specdec::decoder
