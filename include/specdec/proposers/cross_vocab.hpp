// CrossVocabDraftProposer: a draft model whose tokenizer differs from the target's, by token-level intersection (TLI;
// Timor et al., "Accelerating LLM Inference with Lossless Speculative Decoding Algorithms for Heterogeneous
// Vocabularies", ICML 2025).
//
// A VocabBridge maps each draft token to the target token with the same text (its decoded bytes), where there is one.
// Each step the target's context is re-tokenized for the draft (a Retokenize function: the target ids' text encoded by
// the draft's tokenizer), the draft's KV cache is rolled back to the longest prefix it shares with that and fed the
// rest, and each draft comes from the draft distribution restricted to the bridged tokens and renormalised (the
// request's SamplingParams applied to the restricted logits, temperature 0 = argmax). The drafts are target tokens
// (their bridge images), and q's rows are that distribution moved onto the target's vocabulary (tokens bridged to the
// same target token add up), so standard verification keeps the target's law exactly, whatever the draft computes.
// Sampling draws from the request's draft stream (draft_seed, at the draft token's target position), as
// DraftModelProposer does, so drafts do not depend on the batch.
//
// Greedy requests can draft by string-level exact match instead (SLEM, the same paper), given a ToTarget function (the
// drafted draft tokens' text encoded by the target's tokenizer): the draft runs greedily over its whole vocabulary,
// its text is written in target tokens, and the last of those is dropped (the text after it could still change it).
// Any drafts keep a greedy request lossless (a draft is accepted only where it is the target's argmax), and SLEM
// drafts the target tokens the draft's vocabulary lacks (longer ones, most often) that token-level intersection cannot.
//
// The requests of a call draft together, one draft forward a step (the first one with each request's catch-up), so a
// draft costs about one small forward per token, whatever the batch; see docs/models.md ("Drafting across tokenizers").
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "specdec/models/causal_lm.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/logits_simd.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

/// Which draft tokens stand for which target tokens: draft token d is target token to_target[d] (-1: no target token has
/// its text, it is never drafted).
struct VocabBridge {
  std::vector<std::int64_t> to_target;  ///< [draft vocabulary]
  std::int64_t target_vocab_size = 0;
  std::int64_t shared = 0;  ///< draft tokens with an image
  /// [draft vocabulary]: 1 where the draft token is text (usable, non-empty), bridged or not. SLEM drafting stops at a
  /// draft token without text (an end-of-turn, say).
  std::vector<std::uint8_t> draft_is_text;

  /// Bridges tokens whose texts (`draft_texts[d]`, `target_texts[t]`: each token's decoded bytes) are equal and
  /// non-empty; `draft_usable[d]` / `target_usable[t]` 0 (control tokens, say) keeps a token out (empty: all usable). Where several target
  /// tokens share a text, the lowest id is the image. Throws specdec::error for mismatched sizes or no shared token.
  static VocabBridge from_texts(std::span<const std::string> draft_texts, std::span<const std::string> target_texts,
                                std::span<const std::uint8_t> draft_usable = {},
                                std::span<const std::uint8_t> target_usable = {}) {
    if (!draft_usable.empty() && draft_usable.size() != draft_texts.size())
      throw error(Status::kInvalidArgument, "VocabBridge::from_texts: draft_usable: expected " +
                                                std::to_string(draft_texts.size()) + " entries, got " +
                                                std::to_string(draft_usable.size()));
    if (!target_usable.empty() && target_usable.size() != target_texts.size())
      throw error(Status::kInvalidArgument, "VocabBridge::from_texts: target_usable: expected " +
                                                std::to_string(target_texts.size()) + " entries, got " +
                                                std::to_string(target_usable.size()));
    std::unordered_map<std::string, std::int64_t> target_of;
    for (std::size_t t = 0; t < target_texts.size(); ++t)
      if (!target_texts[t].empty() && (target_usable.empty() || target_usable[t] != 0))
        target_of.emplace(target_texts[t], static_cast<std::int64_t>(t));  // keeps the lowest id
    VocabBridge b;
    b.target_vocab_size = static_cast<std::int64_t>(target_texts.size());
    b.to_target.assign(draft_texts.size(), -1);
    b.draft_is_text.assign(draft_texts.size(), 0);
    for (std::size_t d = 0; d < draft_texts.size(); ++d) {
      if (draft_texts[d].empty() || (!draft_usable.empty() && draft_usable[d] == 0)) continue;
      b.draft_is_text[d] = 1;
      if (auto it = target_of.find(draft_texts[d]); it != target_of.end()) {
        b.to_target[d] = it->second;
        ++b.shared;
      }
    }
    if (b.shared == 0) throw error(Status::kInvalidArgument, "VocabBridge::from_texts: the vocabularies share no token text");
    return b;
  }
};

/// The target context's ids as the draft model's tokenizer writes the same text.
using Retokenize = std::function<std::vector<std::int64_t>(std::span<const std::int64_t> target_ids)>;

/// Draft tokens' text (they continue the context: no BOS, no space prefix) as the target's tokenizer writes it; the
/// text of a trailing incomplete UTF-8 character may be left out. For string-level exact match (SLEM).
using ToTarget = std::function<std::vector<std::int64_t>(std::span<const std::int64_t> draft_ids)>;

template <class Model>
  requires models::CausalLM<Model> && models::HasSequenceLength<Model>
class CrossVocabDraftProposer {
 public:
  /// With `to_target`, greedy requests draft by string-level exact match (SLEM); empty: every request drafts by
  /// token-level intersection. Throws specdec::error when the bridge does not cover the draft's vocabulary.
  CrossVocabDraftProposer(Model& model, VocabBridge bridge, Retokenize retokenize, DraftModelOptions options = {},
                          ToTarget to_target = {})
      : model_(&model),
        bridge_(std::move(bridge)),
        retokenize_(std::move(retokenize)),
        to_target_(std::move(to_target)),
        options_(options) {
    if (static_cast<std::int64_t>(bridge_.to_target.size()) != static_cast<std::int64_t>(model.vocab_size()))
      throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: bridge: covers " +
                                                std::to_string(bridge_.to_target.size()) + " draft tokens, the draft model has " +
                                                std::to_string(static_cast<std::int64_t>(model.vocab_size())));
    if (to_target_ && bridge_.draft_is_text.size() != bridge_.to_target.size())
      throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: bridge: draft_is_text: expected " +
                                                std::to_string(bridge_.to_target.size()) + " entries (SLEM needs it), got " +
                                                std::to_string(bridge_.draft_is_text.size()));
    if (!retokenize_) throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: retokenize: expected a function");
  }
  ~CrossVocabDraftProposer() {
    for (auto& [id, s] : states_) model_->free_sequence(s.slot);
  }
  CrossVocabDraftProposer(const CrossVocabDraftProposer&) = delete;
  CrossVocabDraftProposer& operator=(const CrossVocabDraftProposer&) = delete;

  /// The target's vocabulary (drafts and q's rows are over it).
  std::int64_t vocab_size() const { return bridge_.target_vocab_size; }
  const VocabBridge& bridge() const { return bridge_; }
  /// Whether greedy requests draft by string-level exact match (a ToTarget function was given).
  bool string_level_greedy() const { return static_cast<bool>(to_target_); }

  void begin_request(const RequestContext& ctx) {
    if (states_.count(ctx.id))
      throw error(Status::kInvalidArgument,
                  "CrossVocabDraftProposer::begin_request: request " + std::to_string(ctx.id) + " is already live");
    State s;
    s.slot = static_cast<std::int64_t>(model_->allocate_sequence());
    s.seed = draft_seed(ctx.params ? ctx.params->seed : 0);
    states_.emplace(ctx.id, s);
  }
  void end_request(RequestId id) {
    auto it = states_.find(id);
    if (it == states_.end()) return;
    model_->free_sequence(it->second.slot);
    states_.erase(it);
  }
  void observe(std::span<const StepFeedback>) {}  // the next propose re-tokenizes the context

  DraftBatch propose(std::span<const ProposeRequest> requests) {
    bool all_greedy = true;
    for (const auto& r : requests) all_greedy = all_greedy && r.params->greedy();
    const bool keep_rows = options_.return_probs && !all_greedy;
    const std::int64_t Vt = bridge_.target_vocab_size;
    std::vector<Job> jobs(requests.size());
    for (std::size_t b = 0; b < requests.size(); ++b) {
      Job& j = jobs[b];
      j.r = &requests[b];
      j.s = &state(requests[b].id);
      j.slem = to_target_ && requests[b].params->greedy();
      j.done = requests[b].max_drafts <= 0;
      if (!j.done) j.feed = catch_up(*j.s, requests[b].context);
    }
    // One draft forward a step for every request still drafting: the catch-up first, then one token each.
    std::vector<float> scratch, logits;
    for (;;) {
      models::ForwardBatch fb;
      fb.last_logits_only = true;
      fb.cu_num_tokens.push_back(0);
      std::vector<Job*> members;
      for (Job& j : jobs) {
        if (j.done) continue;
        fb.token_ids.insert(fb.token_ids.end(), j.feed.begin(), j.feed.end());
        fb.slots.push_back(j.s->slot);
        fb.cu_num_tokens.push_back(static_cast<std::int64_t>(fb.token_ids.size()));
        members.push_back(&j);
      }
      if (members.empty()) break;
      const Rows out = draft_rows_on_host(model_->forward(fb).logits, options_.rows_to_host, "CrossVocabDraftProposer");
      for (std::size_t i = 0; i < members.size(); ++i) {
        Job& j = *members[i];
        j.s->ids.insert(j.s->ids.end(), j.feed.begin(), j.feed.end());
        const float* row = out.host_row(static_cast<std::int64_t>(i));
        if (j.slem)
          string_level_step(j, row, scratch);
        else
          intersection_step(j, row, keep_rows, logits, scratch);
        ++j.steps;
      }
    }
    DraftBatch batch;
    batch.cu_num_drafts.push_back(0);
    std::int64_t num_rows = 0;
    for (Job& j : jobs) {
      if (j.slem) finish_string_level(j);
      batch.append(j.drafts);
      num_rows += static_cast<std::int64_t>(j.drafts.size());
    }
    if (keep_rows) {
      batch.probs = Rows::host_float32(num_rows, Vt);  // zeros
      float* dst = batch.probs.mutable_host_float32_data();
      for (const Job& j : jobs) {
        if (j.slem) {  // a deterministic draft's distribution: all its mass on it
          for (const auto t : j.drafts) {
            dst[t] = 1.f;
            dst += Vt;
          }
        } else {
          for (const auto& row : j.rows) dst = std::copy(row.begin(), row.end(), dst);
        }
      }
    }
    return batch;
  }

 private:
  struct State {
    std::int64_t slot = -1;
    std::uint64_t seed = 0;
    std::vector<std::int64_t> ids;  // the draft tokens the slot holds
  };

  /// One request's drafting within a propose() call.
  struct Job {
    const ProposeRequest* r = nullptr;
    State* s = nullptr;
    bool slem = false;  // string-level exact match (else token-level intersection)
    bool done = false;
    std::int32_t steps = 0;            // draft forwards so far
    std::vector<std::int64_t> feed;    // draft tokens the next forward feeds
    double path = 1.0;                 // product of the draft's largest probabilities so far
    std::vector<std::int64_t> drafts;  // target tokens (string-level: the drafted text's, until finish_string_level)
    std::vector<std::vector<float>> rows;  // intersection: q on the target's vocabulary, one per draft
    std::vector<std::int64_t> text_ids;    // string-level: the drafted draft tokens
    bool ended = false;  // the draft's text ended at a token without text
  };

  /// Re-tokenizes the target's context for the draft, rolls the draft's cache back to the longest prefix it shares with
  /// that (leaving at least the last id to feed) and returns the ids still to feed.
  std::vector<std::int64_t> catch_up(State& s, std::span<const std::int64_t> context) {
    const std::vector<std::int64_t> ids = retokenize_(context);
    if (ids.empty()) throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: retokenize gave no token");
    std::size_t common = 0;
    while (common < s.ids.size() && common + 1 < ids.size() && s.ids[common] == ids[common]) ++common;
    if (static_cast<std::int64_t>(model_->sequence_length(s.slot)) > static_cast<std::int64_t>(common))
      model_->truncate(s.slot, static_cast<std::int64_t>(common));
    s.ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(common));
    return std::vector<std::int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(common), ids.end());
  }

  /// Token-level intersection: the draft from the draft distribution (`row`, logits) restricted to the bridged tokens.
  void intersection_step(Job& j, const float* row, bool keep_rows, std::vector<float>& logits, std::vector<float>& scratch) {
    const ProposeRequest& r = *j.r;
    const std::int64_t Vd = static_cast<std::int64_t>(model_->vocab_size()), Vt = bridge_.target_vocab_size;
    logits.assign(row, row + Vd);
    for (std::int64_t d = 0; d < Vd; ++d)
      if (bridge_.to_target[static_cast<std::size_t>(d)] < 0)
        logits[static_cast<std::size_t>(d)] = -std::numeric_limits<float>::infinity();
    RowsView lv;
    lv.data = logits.data();
    lv.rows = 1;
    lv.cols = Vd;
    lv.row_stride = Vd;
    const SamplingParams* params[] = {r.params};
    const Rows q = process_logits(Rows(lv, nullptr), params);
    const float* qp = q.host_float32_data();
    const std::int64_t d = sample_row(qp, Vd, j.s->seed, r.position + j.steps, r.params->greedy(), scratch);
    // A function of the distribution, not of the draw; a greedy row is one-hot, so the cut reads the restricted
    // distribution's largest probability at temperature 1 (as DraftModelProposer's).
    const double top = r.params->greedy()
                           ? specdec::detail::top_probability(logits.data(), Vd, logits[static_cast<std::size_t>(d)], scratch)
                           : *std::max_element(qp, qp + Vd);
    if (j.path * top < options_.min_path_prob) {
      j.done = true;
      return;
    }
    j.path *= top;
    j.drafts.push_back(bridge_.to_target[static_cast<std::size_t>(d)]);
    if (keep_rows) {
      std::vector<float>& out = j.rows.emplace_back(static_cast<std::size_t>(Vt), 0.f);
      for (std::int64_t i = 0; i < Vd; ++i)
        if (qp[i] > 0.f && bridge_.to_target[static_cast<std::size_t>(i)] >= 0)
          out[static_cast<std::size_t>(bridge_.to_target[static_cast<std::size_t>(i)])] += qp[i];
    }
    j.feed.assign(1, d);
    j.done = static_cast<std::int32_t>(j.drafts.size()) >= r.max_drafts;
  }

  /// String-level exact match (greedy requests): the draft's argmax over its whole vocabulary extends its text, which is
  /// written in target tokens, until that text holds more than g of them or 2 g draft tokens were drafted; the
  /// confidence cut applies to the product of the draft's largest probabilities (temperature 1).
  void string_level_step(Job& j, const float* row, std::vector<float>& scratch) {
    const GreedyDraft x = greedy_draft(row, static_cast<std::int64_t>(model_->vocab_size()), scratch, "CrossVocabDraftProposer");
    j.done = true;
    if (j.path * x.confidence < options_.min_path_prob) return;
    if (bridge_.draft_is_text[static_cast<std::size_t>(x.token)] == 0) {
      j.ended = true;
      return;
    }
    j.path *= x.confidence;
    j.text_ids.push_back(x.token);
    j.drafts = to_target_(j.text_ids);
    if (j.drafts.size() > static_cast<std::size_t>(j.r->max_drafts)) return;  // enough whole tokens
    if (j.steps + 1 >= 2 * j.r->max_drafts) return;
    j.feed.assign(1, x.token);
    j.done = false;
  }

  /// The string-level drafts: the text's target tokens without the last (the text after it could still change it)
  /// unless the text ended, at most g.
  void finish_string_level(Job& j) {
    const std::int64_t Vt = bridge_.target_vocab_size;
    if (!j.ended && !j.drafts.empty()) j.drafts.pop_back();
    if (j.drafts.size() > static_cast<std::size_t>(std::max(j.r->max_drafts, 0)))
      j.drafts.resize(static_cast<std::size_t>(std::max(j.r->max_drafts, 0)));
    for (const auto t : j.drafts)
      if (t < 0 || t >= Vt)
        throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: to_target gave token " + std::to_string(t) +
                                                  ", outside the target's vocabulary of " + std::to_string(Vt));
  }

  State& state(RequestId id) {
    auto it = states_.find(id);
    if (it == states_.end())
      throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: request " + std::to_string(id) + " is not live (begin_request?)");
    return it->second;
  }

  Model* model_;
  VocabBridge bridge_;
  Retokenize retokenize_;
  ToTarget to_target_;
  DraftModelOptions options_;
  std::unordered_map<RequestId, State> states_;
};

}  // namespace specdec::proposers
