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
// Selection (ChainOptions::selection). kFirst (the default) is the priority order above. kMostExpected asks every member of
// a request's order and keeps the proposal with the most expected accepted drafts: a member that reports confidences
// (EAGLE, the draft model) is valued at the sum over its drafts of the product of the confidences on the path to each
// (its first confidence alone for sampled drafts: the later ones depend on the draws); a lookup member (deterministic
// drafts without confidences) at sum_d prod_{i <= d} a_i over its depths, where a_i is that member's acceptance at depth i
// given depth i - 1 in this request so far (hits + 1) / (trials + 2), measured on its every proposal, kept or not: after
// each step the proposal is walked against the tokens the step emitted, which decide depths up to the accepted drafts
// + 1. Later members are not asked for a request once a proposal is worth more than ChainOptions::enough_expected
// accepted drafts. Ties keep the earlier member. The choice is a function
// of the request's context and its past steps only (never of the target's next tokens, nor of a sampled draft), so
// verification stays lossless, and it depends on no other request of the batch.
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


#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

/// How a ProposerChain picks each request's drafts among its members' proposals (see the file comment).
enum class ChainSelection : std::uint8_t {
  kFirst,         ///< the first member, in the request's order, that drafts
  kMostExpected,  ///< the proposal with the most expected accepted drafts
};

struct ChainOptions {
  ChainSelection selection = ChainSelection::kFirst;
  /// kMostExpected: a request's later members are not asked once a proposal is worth more than this many expected
  /// accepted drafts (a lookup that copies spares the learned drafter its drafting). The default, 2, is above what the
  /// bundled EAGLE head's chains are worth on held-out chat answers (about 0.6 at its measured acceptance 0.40, 0.35,
  /// 0.33 by step) and below a lookup that copies (every draft right: g). >= 0; infinity: ask every member.
  double enough_expected = 2.0;
};

class ProposerChain {
 public:
  static constexpr bool supports_trees = true;

  ProposerChain() = default;
  explicit ProposerChain(ChainOptions options) : options_(options) {
    if (!(options.enough_expected >= 0.0))
      throw error(Status::kInvalidArgument, "ChainOptions.enough_expected: expected >= 0, got " +
                                                std::to_string(options.enough_expected));
  }
  const ChainOptions& options() const { return options_; }
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
    if (options_.selection == ChainSelection::kMostExpected) {
      Track& t = tracks_[ctx.id];
      t = Track{};
      t.trials.assign(members_.size(), {});
      t.hits.assign(members_.size(), {});
    }
  }

  void end_request(RequestId id) {
    for (auto& m : members_) m->end_request(id);
    tracks_.erase(id);
    if (live_ > 0) --live_;
  }

  void observe(std::span<const StepFeedback> feedback) {
    for (auto& m : members_) m->observe(feedback);
    if (options_.selection != ChainSelection::kMostExpected) return;
    for (const StepFeedback& f : feedback) {
      auto it = tracks_.find(f.id);
      if (it == tracks_.end()) continue;
      Track& t = it->second;
      // The tokens this step emitted: the accepted drafts and the recovered/bonus token, the context's last n.
      const auto n = static_cast<std::int64_t>(f.num_accepted) + 1;
      const auto L = static_cast<std::int64_t>(f.context.size());
      if (n <= L) {
        const std::span<const std::int64_t> emitted = f.context.subspan(static_cast<std::size_t>(L - n));
        for (const Shadow& sh : t.shadows) record(t, sh, emitted);
      }
      t.shadows.clear();
    }
  }

  /// kMostExpected: the acceptance a_d (d = 1, 2, ...) this request has measured so far for lookup member i's drafts at
  /// depth d given depth d - 1, (hits + 1) / (trials + 2), for the depths it has tried (empty when none or not live).
  std::vector<double> lookup_acceptance(RequestId id, std::size_t i) const {
    std::vector<double> out;
    auto it = tracks_.find(id);
    if (it == tracks_.end() || i >= it->second.trials.size()) return out;
    for (std::size_t d = 0; d < it->second.trials[i].size(); ++d) out.push_back(rate(it->second, i, d));
    return out;
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
    const bool expected_mode = options_.selection == ChainSelection::kMostExpected;
    std::vector<Owned> owned(static_cast<std::size_t>(B));
    std::vector<double> best(static_cast<std::size_t>(B), -1.0);  // kMostExpected: the kept proposal's value
    std::vector<std::int64_t> waiting;  // indices of requests still asking, in order
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
          Owned o;
          o.member = m;
          const std::int64_t s = d.cu_num_drafts[static_cast<std::size_t>(j)];
          o.drafts.assign(d.token_ids.begin() + s, d.token_ids.begin() + s + k);
          if (!d.parents.empty()) o.parents = d.parents[static_cast<std::size_t>(j)];
          if (d.request_has_probs(j)) o.probs = d.probs.narrow(s, k);
          if (!d.confidence.empty()) o.confidence.assign(d.confidence.begin() + s, d.confidence.begin() + s + k);
          if (!expected_mode) {
            owned[static_cast<std::size_t>(b)] = std::move(o);
            continue;
          }
          const double e = expected_value(requests[static_cast<std::size_t>(b)].id, o);
          if (e > best[static_cast<std::size_t>(b)]) {
            best[static_cast<std::size_t>(b)] = e;
            owned[static_cast<std::size_t>(b)] = std::move(o);
          }
          // Asked on at the next rank (if its order has one) until a proposal is worth enough.
          if (best[static_cast<std::size_t>(b)] <= options_.enough_expected) still.push_back(b);
        }
      }
      std::sort(still.begin(), still.end());
      still.erase(std::unique(still.begin(), still.end()), still.end());
      waiting.swap(still);
    }
    for (const Owned& o : owned)
      if (o.member >= 0) ++drafted_by_[static_cast<std::size_t>(o.member)];
    DraftBatch out;
    out.cu_num_drafts.push_back(0);
    bool any_probs = false, any_plain = false;
    std::int64_t vocab = 0;
    for (const auto& o : owned) {
      out.append(o.drafts, o.parents);
      if (confidence_) {
        if (o.confidence.empty()) out.confidence.insert(out.confidence.end(), o.drafts.size(), -1.f);
        else out.confidence.insert(out.confidence.end(), o.confidence.begin(), o.confidence.end());
      }
      if (o.drafts.empty()) continue;
      if (o.probs.defined()) {
        any_probs = true;
        vocab = o.probs.cols();
      } else {
        any_plain = true;
      }
    }
    if (!out.parents.empty()) out.parents.resize(static_cast<std::size_t>(B));
    if (any_probs) {
      const auto N = static_cast<std::int64_t>(out.token_ids.size());
      out.probs = Rows::host_float32(N, vocab);  // rows of deterministic requests stay 0 and are never read
      float* dst = out.probs.mutable_host_float32_data("ProposerChain::propose");
      for (std::int64_t b = 0; b < B; ++b) {
        const Owned& o = owned[static_cast<std::size_t>(b)];
        if (!o.probs.defined()) continue;
        if (o.probs.cols() != vocab)
          throw error(Status::kInvalidArgument, "ProposerChain::propose: " +
                                                    members_[static_cast<std::size_t>(o.member)]->name +
                                                    ": probs: expected " + std::to_string(vocab) +
                                                    " columns (the other members' rows), got " +
                                                    std::to_string(o.probs.cols()));
        const float* src = o.probs.host_float32_data("ProposerChain::propose: a member's probs");
        float* row = dst + out.cu_num_drafts[static_cast<std::size_t>(b)] * vocab;
        for (std::int64_t r = 0; r < o.probs.rows(); ++r) std::copy_n(src + r * o.probs.row_stride(), vocab, row + r * vocab);
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

  // A member's proposal for one request.
  struct Owned {
    std::int64_t member = -1;
    std::vector<std::int64_t> drafts, parents;
    std::vector<float> confidence;  // the member's, or empty
    Rows probs;        // [k, V] rows when the member's drafts came with probabilities
  };
  // kMostExpected: a lookup proposal of the last step, to be walked against the tokens the step emitted.
  struct Shadow {
    std::size_t member = 0;
    std::vector<std::int64_t> drafts, parents;  // parents empty: a chain
  };
  // kMostExpected, per live request: each member's trials and hits by depth (index d - 1), and the last step's lookups.
  struct Track {
    std::vector<std::vector<std::int64_t>> trials, hits;
    std::vector<Shadow> shadows;
  };

  static double rate(const Track& t, std::size_t m, std::size_t d) {
    const auto& tr = t.trials[m];
    const auto& hi = t.hits[m];
    const double trials = d < tr.size() ? static_cast<double>(tr[d]) : 0.0, hits = d < hi.size() ? static_cast<double>(hi[d]) : 0.0;
    return (hits + 1.0) / (trials + 2.0);
  }

  // Node j's depth (1-based) in drafts with these parents (empty: a chain).
  static std::vector<std::int64_t> depths(const std::vector<std::int64_t>& parents, std::size_t k) {
    std::vector<std::int64_t> out(k);
    for (std::size_t j = 0; j < k; ++j)
      out[j] = parents.empty() ? static_cast<std::int64_t>(j) + 1
                               : (parents[j] == 0 ? 1 : out[static_cast<std::size_t>(parents[j] - 1)] + 1);
    return out;
  }

  // kMostExpected: the expected accepted drafts of a proposal (file comment); queues lookups' proposals as shadows.
  double expected_value(RequestId id, const Owned& o) {
    const std::size_t k = o.drafts.size();
    const bool has_conf = o.confidence.size() == k && k > 0 &&
                          std::all_of(o.confidence.begin(), o.confidence.end(), [](float c) { return c >= 0.f; });
    if (o.probs.defined()) return has_conf ? static_cast<double>(o.confidence[0]) : 0.0;
    if (has_conf) {
      std::vector<double> path(k);
      double e = 0;
      for (std::size_t j = 0; j < k; ++j) {
        const std::int64_t p = o.parents.empty() ? static_cast<std::int64_t>(j) : o.parents[j];
        path[j] = static_cast<double>(o.confidence[j]) * (p == 0 ? 1.0 : path[static_cast<std::size_t>(p - 1)]);
        e += path[j];
      }
      return e;
    }
    auto it = tracks_.find(id);
    if (it == tracks_.end()) return 0.0;
    Track& t = it->second;
    const auto m = static_cast<std::size_t>(o.member);
    // One proposal per member and step (a repeated propose() before the step's feedback replaces it).
    std::erase_if(t.shadows, [m](const Shadow& sh) { return sh.member == m; });
    t.shadows.push_back({m, o.drafts, o.parents});
    const auto dep = depths(o.parents, k);
    const std::int64_t D = *std::max_element(dep.begin(), dep.end());
    double e = 0, path = 1;
    for (std::int64_t d = 0; d < D; ++d) {
      path *= rate(t, m, static_cast<std::size_t>(d));
      e += path;
    }
    return e;
  }

  // Walks a shadow proposal down the emitted tokens: depth d is a trial when the proposal has a node there below the
  // node matched at d - 1 and d <= emitted.size(); a hit when one of them is emitted[d - 1].
  void record(Track& t, const Shadow& sh, std::span<const std::int64_t> emitted) {
    auto& trials = t.trials[sh.member];
    auto& hits = t.hits[sh.member];
    std::int64_t node = 0;  // matched so far (0: the root)
    for (std::size_t d = 1; d <= emitted.size(); ++d) {
      bool any = false, hit = false;
      for (std::size_t j = 0; j < sh.drafts.size(); ++j) {
        const std::int64_t p = sh.parents.empty() ? static_cast<std::int64_t>(j) : sh.parents[j];
        if (p != node) continue;
        any = true;
        if (sh.drafts[j] == emitted[d - 1]) {
          hit = true;
          node = static_cast<std::int64_t>(j) + 1;
          break;
        }
      }
      if (!any) break;
      if (trials.size() < d) trials.resize(d, 0), hits.resize(d, 0);
      ++trials[d - 1];
      if (!hit) break;
      ++hits[d - 1];
    }
  }

  ChainOptions options_;
  std::unordered_map<RequestId, Track> tracks_;
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
