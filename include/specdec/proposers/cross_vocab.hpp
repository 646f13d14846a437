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
// Each request drafts through its own forwards (one per draft token, after the catch-up), so the class suits a draft
// model much cheaper than the target; see docs/models.md ("Drafting across tokenizers").
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
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

/// Which draft tokens stand for which target tokens: draft token d is target token to_target[d] (-1: no target token has
/// its text, it is never drafted).
struct VocabBridge {
  std::vector<std::int64_t> to_target;  ///< [draft vocabulary]
  std::int64_t target_vocab_size = 0;
  std::int64_t shared = 0;  ///< draft tokens with an image

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
    for (std::size_t d = 0; d < draft_texts.size(); ++d) {
      if (!draft_usable.empty() && draft_usable[d] == 0) continue;
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

template <class Model>
  requires models::CausalLM<Model> && models::HasSequenceLength<Model>
class CrossVocabDraftProposer {
 public:
  /// Throws specdec::error when the bridge does not cover the draft's vocabulary.
  CrossVocabDraftProposer(Model& model, VocabBridge bridge, Retokenize retokenize, DraftModelOptions options = {})
      : model_(&model), bridge_(std::move(bridge)), retokenize_(std::move(retokenize)), options_(options) {
    if (static_cast<std::int64_t>(bridge_.to_target.size()) != static_cast<std::int64_t>(model.vocab_size()))
      throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: bridge: covers " +
                                                std::to_string(bridge_.to_target.size()) + " draft tokens, the draft model has " +
                                                std::to_string(static_cast<std::int64_t>(model.vocab_size())));
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
    const std::int64_t Vd = static_cast<std::int64_t>(model_->vocab_size()), Vt = bridge_.target_vocab_size;
    DraftBatch batch;
    batch.cu_num_drafts.push_back(0);
    std::vector<std::vector<float>> rows;  // q over the target's vocabulary, one per kept draft
    std::vector<float> scratch, logits(static_cast<std::size_t>(Vd));
    for (const auto& r : requests) {
      State& s = state(r.id);
      std::vector<std::int64_t> drafts;
      if (r.max_drafts > 0) {
        const std::vector<std::int64_t> ids = retokenize_(r.context);
        if (ids.empty()) throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: retokenize gave no token");
        // The longest prefix of ids the cache holds, leaving at least the last id to feed.
        std::size_t common = 0;
        while (common < s.ids.size() && common + 1 < ids.size() && s.ids[common] == ids[common]) ++common;
        if (static_cast<std::int64_t>(model_->sequence_length(s.slot)) > static_cast<std::int64_t>(common))
          model_->truncate(s.slot, static_cast<std::int64_t>(common));
        s.ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(common));
        std::vector<std::int64_t> feed(ids.begin() + static_cast<std::ptrdiff_t>(common), ids.end());
        double path = 1.0;
        for (std::int32_t k = 0; k < r.max_drafts; ++k) {
          models::ForwardBatch fb = models::make_chain_batch(s.slot, feed);
          fb.last_logits_only = true;
          const Rows out = draft_rows_on_host(model_->forward(fb).logits, options_.rows_to_host, "CrossVocabDraftProposer");
          s.ids.insert(s.ids.end(), feed.begin(), feed.end());
          std::copy_n(out.host_row(0), Vd, logits.data());
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
          const std::int64_t d = sample_row(qp, Vd, s.seed, r.position + k, r.params->greedy(), scratch);
          const double top = *std::max_element(qp, qp + Vd);
          if (path * top < options_.min_path_prob) break;  // a function of the distribution, not of the draw
          path *= top;
          drafts.push_back(bridge_.to_target[static_cast<std::size_t>(d)]);
          if (keep_rows) {
            std::vector<float>& row = rows.emplace_back(static_cast<std::size_t>(Vt), 0.f);
            for (std::int64_t i = 0; i < Vd; ++i)
              if (qp[i] > 0.f && bridge_.to_target[static_cast<std::size_t>(i)] >= 0)
                row[static_cast<std::size_t>(bridge_.to_target[static_cast<std::size_t>(i)])] += qp[i];
          }
          feed.assign(1, d);
        }
      }
      batch.append(drafts);
    }
    if (keep_rows) {
      batch.probs = Rows::host_float32(static_cast<std::int64_t>(rows.size()), Vt);
      float* dst = batch.probs.mutable_host_float32_data();
      for (const auto& row : rows) dst = std::copy(row.begin(), row.end(), dst);
    }
    return batch;
  }

 private:
  struct State {
    std::int64_t slot = -1;
    std::uint64_t seed = 0;
    std::vector<std::int64_t> ids;  // the draft tokens the slot holds
  };
  State& state(RequestId id) {
    auto it = states_.find(id);
    if (it == states_.end())
      throw error(Status::kInvalidArgument, "CrossVocabDraftProposer: request " + std::to_string(id) + " is not live (begin_request?)");
    return it->second;
  }

  Model* model_;
  VocabBridge bridge_;
  Retokenize retokenize_;
  DraftModelOptions options_;
  std::unordered_map<RequestId, State> states_;
};

}  // namespace specdec::proposers
