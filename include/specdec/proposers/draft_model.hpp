// DraftModelProposer: any CausalLM as the draft.
//
// Per step and request it runs up to g sequential batched draft forwards and samples each draft from the draft's processed
// distribution q (the request's own SamplingParams applied exactly as to the target; temperature 0 = argmax), returning q's
// rows with the drafts (none for a call whose requests are all greedy: its drafts are deterministic argmaxes). Sampling uses its own deterministic stream: the race of sampling/residual.hpp keyed by a seed derived
// from the request's seed with Philox under a purpose tag the verifier never uses (kDraftSeedPurpose), at the draft token's
// sequence position. So drafts do not depend on the batch, and they share no bits with the verifier.
//
// KV cache: the draft's slot always holds a prefix of the request's context. At propose, the context tokens it lacks (the
// emitted token of the last step, plus the last draft when every draft was accepted — it was never fed) go into the first draft
// forward; observe() rolls the slot back to the accepted prefix. So after verification the draft cache holds only accepted
// tokens, and the emitted token is fed at the next step.
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
#include "specdec/models/output_ids.hpp"
#include "specdec/proposers/process_logits.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/logits_simd.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/row_scan.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

/// Purpose tag of the draft-seed derivation (outside the verifier's purposes kAccept .. kBonus).
inline constexpr std::uint32_t kDraftSeedPurpose = 0x44524654u;  // "DRFT"

/// The seed of a request's draft-sampling stream: two Philox words keyed by the request's seed.
inline std::uint64_t draft_seed(std::uint64_t seed) {
  const Philox4x32 r = random_block(seed, 0, static_cast<Purpose>(kDraftSeedPurpose), 0);
  return (static_cast<std::uint64_t>(r.v[1]) << 32) | r.v[0];
}

/// A greedy draft from a row of draft logits: its argmax (lowest id on ties) and the draft's confidence in it, the
/// largest probability at temperature 1. Throws specdec::error naming `who` for NaN/inf values or no finite logit.
struct GreedyDraft {
  std::int64_t token = -1;
  double confidence = 0.0;
};
inline GreedyDraft greedy_draft(const float* logits, std::int64_t vocab_size, std::vector<float>& scratch, const char* who) {
  const specdec::detail::RowArgmax scan = specdec::detail::row_argmax<specdec::detail::RowValues::kLogits>(logits, vocab_size);
  if (!scan.all_valid || scan.max == -std::numeric_limits<float>::infinity())
    throw error(Status::kInvalidProbability, std::string(who) + ": draft logits: a row has NaN/inf values or no finite logit");
  return {scan.index, specdec::detail::top_probability(logits, vocab_size, scan.max, scratch)};
}

/// Draws a token from the probability row p (V entries) with the race of residual.hpp at `position` under key `seed`; the
/// argmax (lowest id on ties) when `greedy`. Throws specdec::error for a row with invalid values or no mass.
inline std::int64_t sample_row(const float* p, std::int64_t vocab_size, std::uint64_t seed, std::int64_t position, bool greedy,
                               std::vector<float>& tile_scratch) {
  std::int64_t token = -1;
  Status s;
  if (greedy) {
    s = detail::argmax_row(p, vocab_size, token);
  } else {
    tile_scratch.resize(static_cast<std::size_t>(num_tiles(vocab_size)));
    s = detail::draw(detail::RowWeight{p}, vocab_size, seed, position, kBonusRace, tile_scratch.data(), token);
  }
  if (s != Status::kSuccess) throw error(s, std::string("DraftModelProposer: draft distribution: ") + to_string(s));
  return token;
}

struct DraftModelOptions {
  /// Return q's rows with the drafts (needed for lossless verification at temperature > 0). Off: drafts are verified as
  /// deterministic (accepted with probability p(x)), which is lossless only if they do not depend on random numbers, i.e. at
  /// temperature 0.
  bool return_probs = true;
  /// A request's chain stops where the product of the draft distributions' largest probabilities so far (this step's
  /// included) falls below this; that step's draft is dropped. Each factor is a function of the distribution at its
  /// step, never of the drawn token, so the output keeps the target's law (as EagleProposerOptions::min_path_prob).
  /// 0 = off.
  double min_path_prob = 0.0;
  /// The draft's logits as float32 rows in host memory, for a draft whose forward returns them elsewhere (on a GPU, or
  /// float16): the torch layer's specdec::torch::rows_to_host_float32 for an AtenLlamaModel draft. Empty: such rows are
  /// refused with a specdec::error naming this option (LlamaModel's rows are host float32 already).
  std::function<Rows(const Rows&)> rows_to_host;
  /// The draft's reduced output vocabulary: column j of its logits scores target token output_ids[j] (distinct ids in
  /// [0, vocab); a LlamaModel built with the same LlamaOptions::output_ids). Drafts are drawn over those columns and
  /// mapped back; q's rows returned to the verifier hold 0 for every other token, so rejection sampling keeps the
  /// target's law. Empty: the logits score the whole vocabulary.
  std::vector<std::int64_t> output_ids;
};

/// A draft's logits `r` as float32 host rows: as they are, or through `to_host` (DraftModelOptions::rows_to_host).
/// Throws specdec::error naming `who` and the option when the rows are elsewhere and no hook is set, or when the hook
/// returns anything but float32 host rows of the same shape.
inline Rows draft_rows_on_host(const Rows& r, const std::function<Rows(const Rows&)>& to_host, const char* who) {
  if (r.is_host_float32()) return r;
  if (!to_host)
    throw error(Status::kInvalidArgument, std::string(who) + ": the draft's logits are " + to_string(r.dtype()) +
                                              (r.device().is_cpu() ? " rows on the CPU" : " rows on a GPU") +
                                              "; set DraftModelOptions::rows_to_host to bring them to host float32");
  Rows h = to_host(r);
  if (!h.is_host_float32() || h.rows() != r.rows() || h.cols() != r.cols())
    throw error(Status::kInvalidArgument, std::string(who) + ": DraftModelOptions::rows_to_host: expected float32 host "
                                                             "rows of the same shape");
  return h;
}

template <class Model>
  requires models::CausalLM<Model> && models::HasSequenceLength<Model>
class DraftModelProposer {
 public:
  /// Throws specdec::error naming DraftModelOptions::output_ids when its ids are not distinct tokens of the vocabulary.
  explicit DraftModelProposer(Model& model, DraftModelOptions options = {}) : model_(&model), options_(std::move(options)) {
    if (const std::int64_t j = models::first_invalid_output_id(options_.output_ids, vocab_size()); j >= 0)
      throw error(Status::kInvalidArgument, "DraftModelProposer: DraftModelOptions::output_ids[" + std::to_string(j) +
                                                "] = " + std::to_string(options_.output_ids[static_cast<std::size_t>(j)]) +
                                                ": expected distinct token ids in [0, " + std::to_string(vocab_size()) + ")");
  }
  /// Refuses (specdec::error) a draft whose vocabulary differs from `target_vocab_size`.
  DraftModelProposer(Model& model, std::int64_t target_vocab_size, DraftModelOptions options = {})
      : DraftModelProposer(model, options) {
    if (static_cast<std::int64_t>(model.vocab_size()) != target_vocab_size)
      throw error(Status::kInvalidArgument, "DraftModelProposer: the draft model's vocabulary has " +
                                                std::to_string(static_cast<std::int64_t>(model.vocab_size())) +
                                                " tokens but the target's has " + std::to_string(target_vocab_size) +
                                                "; a draft model must share the target's vocabulary (tokenizer)");
  }
  ~DraftModelProposer() {
    for (auto& [id, s] : states_) model_->free_sequence(s.slot);
  }
  DraftModelProposer(const DraftModelProposer&) = delete;
  DraftModelProposer& operator=(const DraftModelProposer&) = delete;

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(model_->vocab_size()); }
  Model& model() { return *model_; }
  /// The draft slot of a live request (its cache holds a prefix of the context).
  std::int64_t slot(RequestId id) const { return state(id).slot; }

  /// Takes a draft slot and prefills it with context[0 .. n-1).
  void begin_request(const RequestContext& ctx) {
    if (states_.count(ctx.id))
      throw error(Status::kInvalidArgument, "DraftModelProposer::begin_request: request " + std::to_string(ctx.id) + " is already live");
    State s;
    s.slot = static_cast<std::int64_t>(model_->allocate_sequence());
    s.seed = draft_seed(ctx.params ? ctx.params->seed : 0);
    try {
      if (ctx.context.size() > 1) {
        models::ForwardBatch fb =
            models::make_chain_batch(s.slot, std::vector<std::int64_t>(ctx.context.begin(), ctx.context.end() - 1));
        fb.last_logits_only = true;
        (void)model_->forward(fb);
      }
    } catch (...) {
      model_->free_sequence(s.slot);
      throw;
    }
    states_.emplace(ctx.id, s);
  }

  void end_request(RequestId id) {
    auto it = states_.find(id);
    if (it == states_.end()) return;
    model_->free_sequence(it->second.slot);
    states_.erase(it);
  }

  /// Every chain draft comes with the draft distribution's largest probability at its step (DraftBatch::confidence: the
  /// model's softmax at temperature 1 for greedy requests, the processed row for sampled ones).
  bool reports_confidence() const { return true; }

  DraftBatch propose(std::span<const ProposeRequest> requests) {
    const auto B = static_cast<std::int64_t>(requests.size());
    const std::int64_t V = vocab_size();
    std::vector<std::vector<std::int64_t>> tokens(static_cast<std::size_t>(B));
    std::vector<std::vector<float>> confidence(static_cast<std::size_t>(B));
    std::vector<double> path(static_cast<std::size_t>(B), 1.0);
    std::vector<std::uint8_t> stopped(static_cast<std::size_t>(B), 0);
    // Keeps draft x of request b with confidence c unless the chain's path probability falls below min_path_prob.
    auto keep = [&](std::int64_t b, std::int64_t x, double c) {
      const auto i = static_cast<std::size_t>(b);
      if (path[i] * c < options_.min_path_prob) {
        stopped[i] = 1;
        return false;
      }
      path[i] *= c;
      tokens[i].push_back(x);
      confidence[i].push_back(static_cast<float>(c));
      return true;
    };
    // The processed rows kept for each request: (the step's rows, the request's row in them).
    std::vector<std::vector<std::pair<Rows, std::int64_t>>> rows(static_cast<std::size_t>(B));
    std::int32_t max_g = 0;
    bool all_greedy = true;
    for (const auto& r : requests) {
      max_g = std::max(max_g, r.max_drafts);
      all_greedy = all_greedy && r.params->greedy();
    }
    // Every request greedy: each draft is the argmax of the draft's logits (what q's one-hot row would give), and the
    // drafts are deterministic, so no row is processed or returned (the verifier accepts each draft exactly when it is
    // the target's argmax either way).
    const bool keep_rows = options_.return_probs && !all_greedy;
    std::vector<float> scratch;
    for (std::int32_t d = 0; d < max_g; ++d) {
      models::ForwardBatch fb;
      fb.last_logits_only = true;
      fb.cu_num_tokens.push_back(0);
      std::vector<std::int64_t> members;
      for (std::int64_t b = 0; b < B; ++b) {
        const auto& r = requests[static_cast<std::size_t>(b)];
        if (d >= r.max_drafts || stopped[static_cast<std::size_t>(b)]) continue;
        State& s = state(r.id);
        if (d == 0) {
          const auto cached = static_cast<std::int64_t>(model_->sequence_length(s.slot));
          const auto n = static_cast<std::int64_t>(r.context.size());
          if (cached >= n)
            throw error(Status::kInvalidArgument, "DraftModelProposer: request " + std::to_string(r.id) +
                                                      ": the draft cache is not a strict prefix of the context");
          fb.token_ids.insert(fb.token_ids.end(), r.context.begin() + cached, r.context.end());
        } else {
          fb.token_ids.push_back(tokens[static_cast<std::size_t>(b)].back());
        }
        fb.slots.push_back(s.slot);
        fb.cu_num_tokens.push_back(static_cast<std::int64_t>(fb.token_ids.size()));
        members.push_back(b);
      }
      if (members.empty()) break;  // every chain stopped
      const models::ForwardOutput out = model_->forward(fb);
      // The argmax and the processing run on the host: a draft model on a device sends its float32 logits down once
      // per draft (options_.rows_to_host).
      const Rows l = host_rows(out.logits);
      const std::int64_t Vd = output_columns(l);
      if (all_greedy) {
        for (std::size_t i = 0; i < members.size(); ++i) {
          const GreedyDraft x = greedy_draft(l.host_row(static_cast<std::int64_t>(i)), Vd, scratch, "DraftModelProposer");
          (void)keep(members[i], token_of(x.token), x.confidence);
        }
        continue;
      }
      std::vector<const SamplingParams*> params;
      for (auto b : members) params.push_back(requests[static_cast<std::size_t>(b)].params);
      ParallelFor parallel;
      if constexpr (models::HasParallelFor<Model>)
        parallel = [this](std::int64_t n, const std::function<void(std::int64_t)>& fn) { model_->parallel_for(n, fn); };
      const Rows q = process_logits(l, params, parallel);
      const float* qp = q.host_float32_data();
      for (std::size_t i = 0; i < members.size(); ++i) {
        const auto b = members[i];
        const auto& r = requests[static_cast<std::size_t>(b)];
        const State& s = state(r.id);
        const float* qrow = qp + static_cast<std::int64_t>(i) * Vd;
        const std::int64_t x = token_of(sample_row(qrow, Vd, s.seed, r.position + d, r.params->greedy(), scratch));
        if (!keep(b, x, *std::max_element(qrow, qrow + Vd))) continue;
        if (keep_rows) rows[static_cast<std::size_t>(b)].emplace_back(q, static_cast<std::int64_t>(i));
      }
    }
    DraftBatch batch;
    batch.cu_num_drafts.push_back(0);
    std::int64_t kept = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      batch.append(tokens[static_cast<std::size_t>(b)]);
      batch.confidence.insert(batch.confidence.end(), confidence[static_cast<std::size_t>(b)].begin(),
                              confidence[static_cast<std::size_t>(b)].end());
      kept += static_cast<std::int64_t>(rows[static_cast<std::size_t>(b)].size());
    }
    if (keep_rows && kept > 0) {  // the kept rows in draft order, one [drafts, V] block
      batch.probs = Rows::host_float32_for_overwrite(kept, V);
      float* dst = batch.probs.mutable_host_float32_data();
      const std::vector<std::int64_t>& ids = options_.output_ids;
      for (const auto& request_rows : rows)
        for (const auto& [step_rows, i] : request_rows) {
          if (ids.empty()) {
            dst = std::copy_n(step_rows.host_row(i), V, dst);
          } else {  // q's mass on the draft's columns, 0 on every other token
            std::fill_n(dst, V, 0.f);
            const float* src = step_rows.host_row(i);
            for (std::size_t j = 0; j < ids.size(); ++j) dst[ids[j]] = src[j];
            dst += V;
          }
        }
    }
    return batch;
  }

  /// Rolls each draft slot back to the accepted prefix: root + accepted drafts of what it cached.
  void observe(std::span<const StepFeedback> feedback) {
    for (const auto& f : feedback) {
      State& s = state(f.id);
      const auto accepted_prefix = static_cast<std::int64_t>(f.context.size()) - 1;  // everything but the emitted token
      const auto cached = static_cast<std::int64_t>(model_->sequence_length(s.slot));
      if (cached > accepted_prefix) model_->truncate(s.slot, accepted_prefix);
    }
  }

 private:
  struct State {
    std::int64_t slot = -1;
    std::uint64_t seed = 0;
  };
  State& state(RequestId id) {
    auto it = states_.find(id);
    if (it == states_.end())
      throw error(Status::kInvalidArgument, "DraftModelProposer: request " + std::to_string(id) + " is not live (begin_request?)");
    return it->second;
  }
  const State& state(RequestId id) const { return const_cast<DraftModelProposer*>(this)->state(id); }
  Rows host_rows(const Rows& r) const { return draft_rows_on_host(r, options_.rows_to_host, "DraftModelProposer"); }
  // Columns of the draft's logits, checked against the vocabulary or DraftModelOptions::output_ids.
  std::int64_t output_columns(const Rows& l) const {
    const std::int64_t want = options_.output_ids.empty() ? vocab_size() : static_cast<std::int64_t>(options_.output_ids.size());
    if (l.cols() != want)
      throw error(Status::kInvalidArgument,
                  "DraftModelProposer: the draft's logits have " + std::to_string(l.cols()) + " columns, expected " +
                      std::to_string(want) + (options_.output_ids.empty() ? " (its vocabulary)" : " (DraftModelOptions::output_ids)"));
    return want;
  }
  // The target token of a column of the draft's logits.
  std::int64_t token_of(std::int64_t column) const {
    return options_.output_ids.empty() ? column : options_.output_ids[static_cast<std::size_t>(column)];
  }

  Model* model_;
  DraftModelOptions options_;
  std::unordered_map<RequestId, State> states_;
};

}  // namespace specdec::proposers
