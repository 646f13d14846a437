// ProposerChain: several proposers in priority order (llama.cpp's --spec-type lists; suffix decoding then a draft model).
//
// Each step, the first member drafts for every request that may draft (max_drafts > 0); the requests it leaves without a
// draft go to the next member, and so on. A request may name its own members and order (ProposeRequest::members, from
// GenerationRequest::proposers by member_index): then each turn asks every member once, for the requests whose turn it
// is, so a batch whose requests order the members differently still asks each member at most once a turn. A request's
// drafts therefore come from exactly one member per step, chosen from that request's own context by the members before
// it, so verification stays lossless: given the context, the drafts are either a lookup's deterministic tokens (accepted
// with probability p(x)) or a sampling member's draws with their distributions, and the DraftBatch says which per
// request (DraftBatch::has_probs when the batch mixes them).
//
// Every member sees every request: begin_request, observe (the whole step's feedback, whichever member drafted: members
// keep their own state in step with the context, as the draft model's cache catches up with tokens it did not draft) and
// end_request. Members are held by reference and must outlive the chain.
//
// Capabilities: the chain may return trees (a member that does not support them never returns one). A member that reads
// target hidden states (EAGLE) makes the chain ask for them: target_feature_spec() is that member's (members that read
// features must all want the same ones), and the decoder then hands every member the rows at begin_request and observe;
// the others ignore them. A feature member keeps its own state in step when another member drafted (EAGLE queues the
// rows and runs them through its head when it next drafts). Add every member before the decoder is built: the decoder
// reads the spec once. Without a feature member the spec is empty and the decoder computes no features. The chain has no
// vocab_size(): the decoder's per-step check of draft ids and probability rows against the target's vocabulary still
// applies, and add() refuses members whose vocabularies differ from each other.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

class ProposerChain {
 public:
  static constexpr bool supports_trees = true;

  ProposerChain() = default;
  ProposerChain(const ProposerChain&) = delete;
  ProposerChain& operator=(const ProposerChain&) = delete;

  /// Appends a member (lowest priority so far). Refuses members that want target features, members added after requests
  /// began, and a vocabulary that differs from an earlier member's.
  template <Proposer P>
  ProposerChain& add(P& member, std::string name = "member") {
    if (live_ > 0) throw error(Status::kInvalidArgument, "ProposerChain::add: " + name + ": requests are live; add members first");
    if constexpr (wants_target_features<P>) {
      const TargetFeatureSpec spec = member.target_feature_spec();
      if (wants_features_ && (spec.final_hidden != spec_.final_hidden || spec.layers != spec_.layers))
        throw error(Status::kInvalidArgument, "ProposerChain::add: " + name +
                                                  ": reads other target hidden states than an earlier member; members that "
                                                  "read features must want the same ones");
      spec_ = spec;
      wants_features_ = spec.final_hidden || !spec.layers.empty();
    }
    if constexpr (has_draft_confidence<P>) confidence_ = confidence_ || member.reports_confidence();
    {
      if constexpr (has_vocab_size<P>) {
        const std::int64_t v = member.vocab_size();
        if (vocab_size_ >= 0 && v != vocab_size_)
          throw error(Status::kInvalidArgument, "ProposerChain::add: " + name + ": vocab_size " + std::to_string(v) +
                                                    "; expected " + std::to_string(vocab_size_) + " as the earlier members");
        vocab_size_ = v;
      }
      members_.push_back(std::make_unique<Model<P>>(member, std::move(name)));
      drafted_by_.push_back(0);
      if constexpr (has_lookup_drafts<P>) {
        lookups_ = lookups_ && member.drafts_are_lookups();
      } else {
        lookups_ = false;
      }
    }
    return *this;
  }

  std::size_t size() const { return members_.size(); }
  /// Whether any member reports draft confidences (has_draft_confidence), as each said when it was added; the chain's
  /// DraftBatch::confidence then holds them for its drafts and -1 for the other members' drafts.
  bool reports_confidence() const { return confidence_; }
  /// The target hidden states the chain's feature members read (empty when none does: the decoder then computes none).
  TargetFeatureSpec target_feature_spec() const { return spec_; }
  /// Whether every member's drafts are lookups (has_lookup_drafts), as each said when it was added.
  bool drafts_are_lookups() const { return !members_.empty() && lookups_; }
  const std::string& name(std::size_t i) const { return members_.at(i)->name; }
  /// (request, step) pairs whose drafts member i supplied, since construction.
  std::int64_t drafted_by(std::size_t i) const { return drafted_by_.at(i); }

  void begin_request(const RequestContext& ctx) {
    if (members_.empty()) throw error(Status::kInvalidArgument, "ProposerChain::begin_request: the chain has no members");
    std::size_t begun = 0;
    try {
      for (; begun < members_.size(); ++begun) members_[begun]->begin_request(ctx);
    } catch (...) {
      for (std::size_t i = 0; i < begun; ++i) members_[i]->end_request(ctx.id);  // leave no member holding the request
      throw;
    }
    ++live_;
  }

  void end_request(RequestId id) {
    for (auto& m : members_) m->end_request(id);
    if (live_ > 0) --live_;
  }

  void observe(std::span<const StepFeedback> feedback) {
    for (auto& m : members_) m->observe(feedback);
  }

  /// The index of the member added under `name` (for ProposeRequest::members). Throws specdec::error when no member or
  /// more than one has that name.
  std::int32_t member_index(std::string_view name) const {
    std::int32_t found = -1, count = 0;
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (members_[i]->name == name) found = static_cast<std::int32_t>(i), ++count;
    if (count == 1) return found;
    std::string names;
    for (std::size_t i = 0; i < members_.size(); ++i) names += (i == 0 ? "" : ", ") + members_[i]->name;
    throw error(Status::kInvalidArgument, "ProposerChain: " +
                                              (count == 0 ? "no member is named '" + std::string(name) + "'"
                                                          : std::to_string(count) + " members are named '" + std::string(name) + "'") +
                                              " (members: " + names + ")");
  }

  DraftBatch propose(std::span<const ProposeRequest> requests) {
    const auto B = static_cast<std::int64_t>(requests.size());
    const auto M = static_cast<std::int32_t>(members_.size());
    for (const ProposeRequest& r : requests) {  // a request's own member order: valid and without repeats
      if (r.members.empty()) continue;
      std::vector<bool> seen(static_cast<std::size_t>(M));
      for (const std::int32_t m : r.members) {
        if (m < 0 || m >= M || seen[static_cast<std::size_t>(m)])
          throw error(Status::kInvalidArgument, "ProposerChain::propose: request " + std::to_string(r.id) + ": member " +
                                                    std::to_string(m) + (m < 0 || m >= M ? " out of range [0, " + std::to_string(M) + ")"
                                                                                         : " named twice"));
        seen[static_cast<std::size_t>(m)] = true;
      }
    }
    // The member request r asks at its rank-th turn: its own list's, or the chain's order; -1 past its list.
    auto member_at = [M](const ProposeRequest& r, std::int32_t rank) -> std::int32_t {
      if (r.members.empty()) return rank < M ? rank : -1;
      return rank < static_cast<std::int32_t>(r.members.size()) ? r.members[static_cast<std::size_t>(rank)] : -1;
    };
    struct Owned {
      std::int64_t member = -1;
      std::vector<std::int64_t> drafts, parents;
      std::vector<float> confidence;  // the member's, or empty
      at::Tensor probs;  // [k, V] rows when the member's drafts came with probabilities
    };
    std::vector<Owned> owned(static_cast<std::size_t>(B));
    std::vector<std::int64_t> waiting;  // indices of requests still without drafts, in order
    for (std::int64_t b = 0; b < B; ++b)
      if (requests[static_cast<std::size_t>(b)].max_drafts > 0) waiting.push_back(b);
    std::vector<ProposeRequest> sub;
    std::vector<std::int64_t> asked, still;
    // Turn by turn: at each rank every member is asked once, for the waiting requests whose rank-th member it is (all of
    // them at rank m for member m when no request has its own list: the chain's order).
    for (std::int32_t rank = 0; rank < M && !waiting.empty(); ++rank) {
      still.clear();
      for (std::int32_t m = 0; m < M; ++m) {
        sub.clear();
        asked.clear();
        for (auto b : waiting)
          if (member_at(requests[static_cast<std::size_t>(b)], rank) == m) {
            sub.push_back(requests[static_cast<std::size_t>(b)]);
            asked.push_back(b);
          }
        if (sub.empty()) continue;
        const DraftBatch d = members_[static_cast<std::size_t>(m)]->propose(sub);
        if (d.num_requests() != static_cast<std::int64_t>(sub.size()))
          throw error(Status::kInvalidArgument, "ProposerChain::propose: " + members_[static_cast<std::size_t>(m)]->name +
                                                    " returned " + std::to_string(d.num_requests()) + " requests; expected " +
                                                    std::to_string(sub.size()));
        for (std::int64_t j = 0; j < d.num_requests(); ++j) {
          const std::int64_t b = asked[static_cast<std::size_t>(j)], k = d.num_drafts(j);
          if (k == 0) {
            still.push_back(b);
            continue;
          }
          Owned& o = owned[static_cast<std::size_t>(b)];
          o.member = m;
          const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(j)];
          o.drafts.assign(d.token_ids.begin() + s, d.token_ids.begin() + s + k);
          if (!d.parents.empty()) o.parents = d.parents[static_cast<std::size_t>(j)];
          if (d.request_has_probs(j)) o.probs = d.probs.narrow(0, s, k);
          if (!d.confidence.empty()) o.confidence.assign(d.confidence.begin() + s, d.confidence.begin() + s + k);
          ++drafted_by_[static_cast<std::size_t>(m)];
        }
      }
      std::sort(still.begin(), still.end());
      waiting.swap(still);
    }
    DraftBatch out;
    out.cu_num_drafts.push_back(0);
    bool any_probs = false, any_plain = false;
    at::Tensor like;
    for (const auto& o : owned) {
      out.append(o.drafts, o.parents);
      if (confidence_) {
        if (o.confidence.empty()) out.confidence.insert(out.confidence.end(), o.drafts.size(), -1.f);
        else out.confidence.insert(out.confidence.end(), o.confidence.begin(), o.confidence.end());
      }
      if (o.drafts.empty()) continue;
      if (o.probs.defined()) {
        any_probs = true;
        like = o.probs;
      } else {
        any_plain = true;
      }
    }
    if (!out.parents.empty()) out.parents.resize(static_cast<std::size_t>(B));
    if (any_probs) {
      const auto N = static_cast<std::int64_t>(out.token_ids.size());
      out.probs = at::zeros({N, like.size(1)}, like.options());  // rows of deterministic requests stay 0 and are never read
      for (std::int64_t b = 0; b < B; ++b) {
        const Owned& o = owned[static_cast<std::size_t>(b)];
        if (o.probs.defined()) out.probs.narrow(0, out.cu_num_drafts[static_cast<std::size_t>(b)], o.probs.size(0)).copy_(o.probs);
      }
      if (any_plain) {
        out.has_probs.resize(static_cast<std::size_t>(B));
        for (std::int64_t b = 0; b < B; ++b) out.has_probs[static_cast<std::size_t>(b)] = owned[static_cast<std::size_t>(b)].probs.defined();
      }
    }
    return out;
  }

 private:
  struct Member {
    explicit Member(std::string n) : name(std::move(n)) {}
    virtual ~Member() = default;
    virtual void begin_request(const RequestContext& ctx) = 0;
    virtual void end_request(RequestId id) = 0;
    virtual DraftBatch propose(std::span<const ProposeRequest> requests) = 0;
    virtual void observe(std::span<const StepFeedback> feedback) = 0;
    std::string name;
  };
  template <class P>
  struct Model final : Member {
    Model(P& p, std::string n) : Member(std::move(n)), p(&p) {}
    void begin_request(const RequestContext& ctx) override { p->begin_request(ctx); }
    void end_request(RequestId id) override { p->end_request(id); }
    DraftBatch propose(std::span<const ProposeRequest> requests) override {
      DraftBatch d = p->propose(requests);
      if constexpr (!proposers::supports_trees<P>) {
        if (!d.parents.empty())
          throw error(Status::kInvalidArgument, "ProposerChain::propose: " + name + " returned a tree but does not declare trees");
      }
      return d;
    }
    void observe(std::span<const StepFeedback> feedback) override { p->observe(feedback); }
    P* p;
  };

  std::vector<std::unique_ptr<Member>> members_;
  std::vector<std::int64_t> drafted_by_;
  std::int64_t vocab_size_ = -1;
  std::int64_t live_ = 0;
  TargetFeatureSpec spec_;
  bool wants_features_ = false;
  bool confidence_ = false;
  bool lookups_ = true;
};

}  // namespace specdec::proposers
