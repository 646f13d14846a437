// ProposerChain: priority order (the first member that drafts for a request wins; the rest are asked only for the requests
// left without drafts), requests naming their own members and order, the merged DraftBatch with per-request draft kinds,
// every member kept in step with the context, protocol errors, and through the decoder: greedy output equal to plain
// decoding for lookup-then-draft-model and suffix-then-n-gram chains and for a batch whose requests order the members
// differently (bad names refused with nothing left behind), and a request's sampled tokens independent of its batch.
// ChainSelection::kMostExpected: the proposal with more expected accepted drafts wins, lookups' acceptance learned from
// their shadow walks over the emitted tokens, enough_expected sparing later members; greedy output and batch independence
// as above. The joint distributions of mixed batches are in tests/decoder/test_decoder_distribution.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "propose_request.hpp"
#include "specdec/proposers/proposer_chain.hpp"
#include "specdec/proposers/suffix.hpp"
#include "specdec/torch/rows.hpp"

namespace {

using namespace specdec::test;

using Tokens = std::vector<std::int64_t>;

std::vector<Tokens> generate_all(sp::ProposerChain& chain, sm::LlamaModel& target, const std::vector<sd::GenerationRequest>& rs,
                                 int g) {
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  o.calibrate = false;
  sd::SpeculativeDecoder dec(chain, target, o);
  std::vector<Tokens> out;
  for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
  return out;
}

std::vector<Tokens> plain(sm::LlamaModel& target, const std::vector<sd::GenerationRequest>& rs) {
  sp::NoProposer none;
  sd::DecoderOptions o;
  o.num_speculative_tokens = 0;
  o.calibrate = false;
  sd::SpeculativeDecoder dec(none, target, o);
  std::vector<Tokens> out;
  for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
  return out;
}

void begin(sp::ProposerChain& c, sp::RequestId id, const Tokens& ctx, const specdec::SamplingParams* params) {
  sp::RequestContext rc;
  rc.id = id;
  rc.context = ctx;
  rc.params = params;
  c.begin_request(rc);
}

TEST(ProposerChain, FirstMemberThatDraftsWinsAndKindsArePerRequest) {
  NgramThenDraft f(31);
  sp::ProposerChain& chain = f.chain;
  specdec::SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.seed = 7;
  const Tokens lookup = {1, 5, 2, 7, 3, 1, 5};  // "1 5" recurs: the n-gram drafts "2 7 3"
  const Tokens fresh = {9, 4, 11, 6};           // nothing recurs: the draft model drafts
  begin(chain, 0, lookup, &sampled);
  begin(chain, 1, fresh, &sampled);
  begin(chain, 2, lookup, &sampled);
  const sp::ProposeRequest rs[] = {specdec::test::propose_request(0, lookup, &sampled, 3), specdec::test::propose_request(1, fresh, &sampled, 3),
                                   specdec::test::propose_request(2, lookup, &sampled, 0)};
  const sp::DraftBatch d = chain.propose(rs);
  ASSERT_EQ(d.num_requests(), 3);
  EXPECT_EQ(Tokens(d.token_ids.begin(), d.token_ids.begin() + 3), (Tokens{2, 7, 3}));
  EXPECT_EQ(d.num_drafts(1), 3);
  EXPECT_EQ(d.num_drafts(2), 0);  // max_drafts 0: nobody is asked
  ASSERT_TRUE(d.probs.is_host_float32());
  const at::Tensor probs = specdec::torch::tensor_of(d.probs);
  EXPECT_EQ(probs.size(0), 6);
  EXPECT_EQ(probs.size(1), f.draft_model.vocab_size());
  EXPECT_EQ(d.has_probs, (std::vector<std::uint8_t>{0, 1, 0}));
  EXPECT_TRUE(probs.narrow(0, 0, 3).eq(0).all().item<bool>());  // the n-gram's rows are never read
  for (int j = 3; j < 6; ++j) EXPECT_NEAR(probs[j].sum().item<float>(), 1.0f, 1e-5f);
  EXPECT_EQ(chain.drafted_by(0), 1);
  EXPECT_EQ(chain.drafted_by(1), 1);
  EXPECT_EQ(chain.name(1), "draft");
  for (sp::RequestId id : {0, 1, 2}) chain.end_request(id);

  // A batch drafted by one member only keeps the whole-batch form.
  begin(chain, 3, lookup, &sampled);
  const sp::ProposeRequest one[] = {specdec::test::propose_request(3, lookup, &sampled, 2)};
  const sp::DraftBatch only = chain.propose(one);
  EXPECT_FALSE(only.probs.defined());
  EXPECT_TRUE(only.has_probs.empty());
  chain.end_request(3);
}

TEST(ProposerChain, RequestsNameTheirOwnMembersAndOrder) {
  NgramThenDraft f(32);
  sp::ProposerChain& chain = f.chain;
  EXPECT_EQ(chain.member_index("ngram"), 0);
  EXPECT_EQ(chain.member_index("draft"), 1);
  EXPECT_THROW((void)chain.member_index("suffix"), specdec::error);
  specdec::SamplingParams greedy;
  const Tokens lookup = {1, 5, 2, 7, 3, 1, 5};  // the n-gram drafts "2 7 3"
  const Tokens fresh = {9, 4, 11, 6};           // the n-gram finds nothing
  for (sp::RequestId id = 0; id < 5; ++id) begin(chain, id, id == 4 ? fresh : lookup, &greedy);
  const std::int32_t just_draft[] = {1}, reversed[] = {1, 0}, just_ngram[] = {0};
  sp::ProposeRequest rs[] = {specdec::test::propose_request(0, lookup, &greedy, 3), specdec::test::propose_request(1, lookup, &greedy, 3), specdec::test::propose_request(2, lookup, &greedy, 3),
                             specdec::test::propose_request(3, lookup, &greedy, 3), specdec::test::propose_request(4, fresh, &greedy, 3)};
  rs[1].members = just_draft;  // the draft model, though the lookup would draft
  rs[2].members = reversed;    // the draft model first
  rs[3].members = just_ngram;
  rs[4].members = just_ngram;  // the lookup finds nothing and nobody else is asked
  const sp::DraftBatch d = chain.propose(rs);
  ASSERT_EQ(d.num_requests(), 5);
  EXPECT_EQ(Tokens(d.token_ids.begin(), d.token_ids.begin() + 3), (Tokens{2, 7, 3}));  // the chain's order
  EXPECT_EQ(d.num_drafts(1), 3);
  EXPECT_EQ(d.num_drafts(2), 3);
  EXPECT_EQ(Tokens(d.token_ids.begin() + 9, d.token_ids.begin() + 12), (Tokens{2, 7, 3}));
  EXPECT_EQ(d.num_drafts(4), 0);
  EXPECT_EQ(d.has_probs, (std::vector<std::uint8_t>{0, 1, 1, 0, 0}));
  EXPECT_EQ(chain.drafted_by(0), 2);
  EXPECT_EQ(chain.drafted_by(1), 2);
  // A member out of range or named twice is refused before any member is asked.
  const std::int32_t out_of_range[] = {2}, twice[] = {0, 0};
  rs[1].members = out_of_range;
  EXPECT_THROW((void)chain.propose(rs), specdec::error);
  rs[1].members = twice;
  EXPECT_THROW((void)chain.propose(rs), specdec::error);
  EXPECT_EQ(chain.drafted_by(0), 2);
  for (sp::RequestId id = 0; id < 5; ++id) chain.end_request(id);
  // Two members under one name cannot be told apart.
  sp::NgramProposer other;
  sp::ProposerChain same_names;
  same_names.add(f.ngram, "lookup").add(other, "lookup");
  EXPECT_THROW((void)same_names.member_index("lookup"), specdec::error);
}

/// A proposer that records its calls and fails on demand.
struct Recorder {
  std::vector<sp::RequestId> begun, ended;
  std::int64_t proposed = 0, observed = 0;
  bool fail_begin = false, wrong_count = false;
  void begin_request(const sp::RequestContext& c) {
    if (fail_begin) throw std::runtime_error("recorder: begin_request failed");
    begun.push_back(c.id);
  }
  void end_request(sp::RequestId id) { ended.push_back(id); }
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> rs) {
    proposed += static_cast<std::int64_t>(rs.size());
    return sp::DraftBatch::empty(static_cast<std::int64_t>(rs.size()) + (wrong_count ? 1 : 0));
  }
  void observe(std::span<const sp::StepFeedback> f) { observed += static_cast<std::int64_t>(f.size()); }
};

struct WantsFeatures : Recorder {
  sp::TargetFeatureSpec target_feature_spec() const { return {true, {}}; }
};
struct WantsLayers : Recorder {
  sp::TargetFeatureSpec target_feature_spec() const { return {false, {1, 2}}; }
};

TEST(ProposerChain, ProtocolErrorsAndRollback) {
  specdec::SamplingParams greedy;
  const Tokens ctx = {1, 2, 3};
  {
    sp::ProposerChain empty;
    EXPECT_THROW(begin(empty, 0, ctx, &greedy), specdec::error);
  }
  {
    // Members that read target features: the chain asks for theirs; two that read different ones are refused.
    WantsFeatures w, w2;
    WantsLayers l;
    sp::ProposerChain c;
    c.add(w, "eagle-like");
    EXPECT_TRUE(c.target_feature_spec().final_hidden);
    EXPECT_THROW(c.add(l, "eagle3-like"), specdec::error);
    EXPECT_EQ(c.size(), 1u);
    c.add(w2, "same-features");
    EXPECT_EQ(c.size(), 2u);
  }
  {
    // A member that fails begin_request leaves no earlier member holding the request.
    Recorder first, second;
    second.fail_begin = true;
    sp::ProposerChain c;
    c.add(first).add(second);
    EXPECT_THROW(begin(c, 4, ctx, &greedy), std::runtime_error);
    EXPECT_EQ(first.begun, (std::vector<sp::RequestId>{4}));
    EXPECT_EQ(first.ended, (std::vector<sp::RequestId>{4}));
    second.fail_begin = false;
    begin(c, 5, ctx, &greedy);
    Recorder late;
    EXPECT_THROW(c.add(late), specdec::error);  // members only before requests begin
    c.end_request(5);
  }
  {
    Recorder bad;
    bad.wrong_count = true;
    sp::ProposerChain c;
    c.add(bad, "bad");
    begin(c, 0, ctx, &greedy);
    const sp::ProposeRequest rs[] = {specdec::test::propose_request(0, ctx, &greedy, 2)};
    try {
      (void)c.propose(rs);
      ADD_FAILURE() << "expected an error";
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find("bad returned 2 requests; expected 1"), std::string::npos) << e.what();
    }
  }
  {
    auto a = tiny_model(1, 64), b = tiny_model(2, 32);
    sp::DraftModelProposer<sm::LlamaModel> da(a), db(b);
    sp::ProposerChain c;
    c.add(da);
    EXPECT_THROW(c.add(db), specdec::error);  // vocabularies differ
  }
}

TEST(ProposerChain, EveryMemberSeesEveryRequestAndStep) {
  auto target = tiny_model(5);
  sp::NgramProposer ngram;
  Recorder tail;
  sp::ProposerChain chain;
  chain.add(ngram).add(tail);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 3; ++b) rs.push_back(make_request(make_prompt(12, 64, static_cast<std::uint64_t>(b)), 10));
  EXPECT_EQ(generate_all(chain, target, rs, 3), plain(target, rs));
  EXPECT_EQ(tail.begun.size(), 3u);
  EXPECT_EQ(tail.ended.size(), 3u);
  EXPECT_GT(tail.observed, 0);
  EXPECT_GT(tail.proposed, 0);                 // asked where the n-gram found nothing
  EXPECT_EQ(chain.drafted_by(1), 0);           // and drafted nothing
}

// A member that always proposes the same chain (up to max_drafts), with confidences when `report`; counts its calls.
struct FixedChain {
  std::vector<std::int64_t> drafts;
  std::vector<float> conf;
  bool report = false;
  int calls = 0;
  void begin_request(const sp::RequestContext&) {}
  void end_request(sp::RequestId) {}
  void observe(std::span<const sp::StepFeedback>) {}
  bool reports_confidence() const { return report; }
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> rs) {
    ++calls;
    sp::DraftBatch d;
    d.cu_num_drafts.push_back(0);
    for (const auto& r : rs) {
      const auto k = std::min<std::size_t>(drafts.size(), static_cast<std::size_t>(r.max_drafts));
      d.append(std::span(drafts).first(k));
      if (report) d.confidence.insert(d.confidence.end(), conf.begin(), conf.begin() + static_cast<std::ptrdiff_t>(k));
    }
    return d;
  }
};

// One step's feedback: `accepted` drafts and the emitted token appended to ctx.
void step(sp::ProposerChain& c, Tokens& ctx, sp::RequestId id, std::int32_t drafts, const Tokens& accepted, std::int64_t emitted) {
  ctx.insert(ctx.end(), accepted.begin(), accepted.end());
  ctx.push_back(emitted);
  sp::StepFeedback f;
  f.id = id;
  f.num_drafts = drafts;
  f.num_accepted = static_cast<std::int32_t>(accepted.size());
  f.emitted_token = emitted;
  f.context = ctx;
  c.observe(std::span(&f, 1));
}

TEST(ProposerChain, MostExpectedKeepsTheProposalWorthMoreAndLearnsLookups) {
  FixedChain lookup{{4, 5, 6, 7}, {}, false};
  FixedChain confident{{8, 9, 10, 11}, {0.6f, 0.5f, 0.5f, 0.5f}, true};
  sp::ChainOptions co;
  co.selection = sp::ChainSelection::kMostExpected;
  co.enough_expected = 1e9;  // every member is asked
  sp::ProposerChain chain(co);
  chain.add(lookup, "lookup").add(confident, "confident");
  EXPECT_TRUE(chain.reports_confidence());
  Tokens ctx = {1, 2, 3};
  begin(chain, 0, ctx, nullptr);
  auto drafts_now = [&] {
    const sp::ProposeRequest r[] = {specdec::test::propose_request(0, ctx, nullptr, 4)};
    const sp::DraftBatch d = chain.propose(r);
    return Tokens(d.token_ids.begin(), d.token_ids.end());
  };
  // No history: the lookup is worth 0.5 + 0.25 + 0.125 + 0.0625 = 0.94 (a = 1/2 at every depth), the confident member
  // 0.6 + 0.3 + 0.15 + 0.075 = 1.125.
  EXPECT_EQ(drafts_now(), (Tokens{8, 9, 10, 11}));
  // The target emits 4 (the confident drafts rejected): the lookup's first draft would have been right: a1 = 2/3, and it
  // is now worth 2/3 + 1/3 + 1/6 + 1/12 = 1.25.
  step(chain, ctx, 0, 4, {}, 4);
  EXPECT_EQ(chain.lookup_acceptance(0, 0), (std::vector<double>{2.0 / 3.0}));
  EXPECT_TRUE(chain.lookup_acceptance(0, 1).empty());  // a member with confidences is not measured
  EXPECT_EQ(drafts_now(), (Tokens{4, 5, 6, 7}));
  // All four lookup drafts accepted and a bonus token: one trial and one hit at every depth.
  step(chain, ctx, 0, 4, {4, 5, 6, 7}, 30);
  EXPECT_EQ(chain.lookup_acceptance(0, 0), (std::vector<double>{3.0 / 4.0, 2.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0}));
  EXPECT_EQ(drafts_now(), (Tokens{4, 5, 6, 7}));
  // Misses at depth 1 (the target emits 99): after three, a1 = 3 / 7 and the lookup is worth 3/7 (1 + 2/3 + 4/9 + 8/27)
  // = 1.03, less than the confident member.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(drafts_now(), (Tokens{4, 5, 6, 7})) << i;
    step(chain, ctx, 0, 4, {}, 99);
  }
  EXPECT_EQ(chain.lookup_acceptance(0, 0)[0], 3.0 / 7.0);
  EXPECT_EQ(drafts_now(), (Tokens{8, 9, 10, 11}));
  step(chain, ctx, 0, 4, {}, 99);  // the lookup's proposal, though not kept, is still measured
  EXPECT_EQ(chain.lookup_acceptance(0, 0)[0], 3.0 / 8.0);
  EXPECT_EQ(chain.drafted_by(0), 5);
  EXPECT_EQ(chain.drafted_by(1), 2);
  // A second request starts from nothing: what request 0 learned is its own.
  Tokens ctx1 = {1, 2, 3};
  begin(chain, 1, ctx1, nullptr);
  EXPECT_TRUE(chain.lookup_acceptance(1, 0).empty());
  chain.end_request(0);
  chain.end_request(1);
  EXPECT_TRUE(chain.lookup_acceptance(0, 0).empty());

  // enough_expected: a proposal worth more than 1.5 drafts spares the later members; otherwise they are asked.
  FixedChain sure{{4, 5}, {0.9f, 0.9f}, true};
  FixedChain second{{8, 9}, {0.95f, 0.95f}, true};
  co.enough_expected = 1.5;
  sp::ProposerChain early(co);
  early.add(sure, "sure").add(second, "second");
  begin(early, 0, ctx, nullptr);
  const sp::ProposeRequest r4[] = {specdec::test::propose_request(0, ctx, nullptr, 4)};
  EXPECT_EQ(early.propose(r4).token_ids, (Tokens{4, 5}));  // 0.9 + 0.81 > 1.5: "second" (worth more) is not asked
  EXPECT_EQ(second.calls, 0);
  const sp::ProposeRequest r1[] = {specdec::test::propose_request(0, ctx, nullptr, 1)};
  EXPECT_EQ(early.propose(r1).token_ids, (Tokens{8}));  // 0.9 <= 1.5: asked, and worth more (0.95)
  EXPECT_EQ(second.calls, 1);
  early.end_request(0);
  co.enough_expected = -1.0;
  EXPECT_THROW((void)sp::ProposerChain(co), specdec::error);
}

TEST(ProposerChain, MostExpectedGreedyOutputEqualsPlainDecodingAndSampledTokensDoNotDependOnTheBatch) {
  auto target = tiny_model(3);
  auto draft_model = tiny_model(8);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 4; ++b) rs.push_back(make_request(make_prompt(14 + 4 * b, 64, static_cast<std::uint64_t>(b)), 24));
  const auto expected = plain(target, rs);
  sp::ChainOptions co;
  co.selection = sp::ChainSelection::kMostExpected;
  for (int g : {2, 5}) {
    sp::SuffixProposer suffix;
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    sp::ProposerChain chain(co);
    chain.add(suffix, "suffix").add(draft, "draft");
    EXPECT_EQ(generate_all(chain, target, rs, g), expected) << "suffix,draft g " << g;
    EXPECT_GT(chain.drafted_by(0), 0);
    EXPECT_GT(chain.drafted_by(1), 0);
  }
  std::vector<sd::GenerationRequest> sampled;
  for (int b = 0; b < 3; ++b)
    sampled.push_back(make_request(make_prompt(20, 64, static_cast<std::uint64_t>(b)), 16, 1.0f, 700 + static_cast<std::uint64_t>(b)));
  auto run = [&](const std::vector<sd::GenerationRequest>& batch) {
    sp::NgramProposer ngram;
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    sp::ProposerChain chain(co);
    chain.add(ngram).add(draft);
    return generate_all(chain, target, batch, 3);
  };
  const auto all = run(sampled);
  for (std::size_t b = 0; b < sampled.size(); ++b) EXPECT_EQ(run({sampled[b]})[0], all[b]) << b;
}

TEST(ProposerChain, GreedyOutputEqualsPlainDecoding) {
  auto target = tiny_model(3);
  auto draft_model = tiny_model(8);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 4; ++b) rs.push_back(make_request(make_prompt(14 + 4 * b, 64, static_cast<std::uint64_t>(b)), 24));
  const auto expected = plain(target, rs);
  for (int g : {2, 5}) {
    sp::NgramProposer ngram;
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    sp::ProposerChain lookup_then_draft;
    lookup_then_draft.add(ngram, "ngram").add(draft, "draft");
    EXPECT_EQ(generate_all(lookup_then_draft, target, rs, g), expected) << "ngram,draft g " << g;
    EXPECT_GT(lookup_then_draft.drafted_by(0), 0);
    EXPECT_GT(lookup_then_draft.drafted_by(1), 0);

    sp::SuffixOptions so;
    so.max_width = 4;
    so.min_path_probability = 0.0;
    sp::SuffixProposer suffix(so);
    sp::NgramProposer ngram2;
    sp::ProposerChain trees_then_chains;
    trees_then_chains.add(suffix, "suffix").add(ngram2, "ngram");
    EXPECT_EQ(generate_all(trees_then_chains, target, rs, g), expected) << "suffix,ngram g " << g;
  }
}

// Requests of one batch naming their own members and orders (GenerationRequest::proposers): greedy output still equals
// plain decoding, each member drafts, and a bad name leaves the decoder as it was.
TEST(ProposerChain, PerRequestOrdersKeepGreedyOutputAndRefuseBadNames) {
  auto target = tiny_model(3);
  auto draft_model = tiny_model(8);
  std::vector<sd::GenerationRequest> rs;
  const std::vector<std::vector<std::string>> orders = {{}, {"draft"}, {"draft", "ngram"}, {"ngram"}, {"suffix", "draft"}};
  for (std::size_t b = 0; b < orders.size(); ++b) {
    rs.push_back(make_request(make_prompt(14 + 4 * static_cast<std::int64_t>(b), 64, static_cast<std::uint64_t>(b)), 24));
    rs.back().proposers = orders[b];
  }
  std::vector<sd::GenerationRequest> unnamed = rs;
  for (auto& r : unnamed) r.proposers.clear();
  const auto expected = plain(target, unnamed);
  sp::NgramProposer ngram;
  sp::SuffixProposer suffix;
  sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
  sp::ProposerChain chain;
  chain.add(ngram, "ngram").add(suffix, "suffix").add(draft, "draft");
  EXPECT_EQ(generate_all(chain, target, rs, 4), expected);
  for (std::size_t m = 0; m < chain.size(); ++m) EXPECT_GT(chain.drafted_by(m), 0) << chain.name(m);

  sd::DecoderOptions o;
  o.num_speculative_tokens = 4;
  sd::SpeculativeDecoder dec(chain, target, o);
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{{"eagle"}, {"draft", "draft"}}) {
    auto r = rs[0];
    r.proposers = bad;
    EXPECT_THROW(dec.add_request(r), specdec::error);
    EXPECT_EQ(dec.num_running(), 0u);
  }
  sd::SpeculativeDecoder alone(ngram, target, o);  // no named members
  auto r = rs[0];
  r.proposers = {"ngram"};
  EXPECT_THROW(alone.add_request(r), specdec::error);
  EXPECT_EQ(alone.num_running(), 0u);
}

TEST(ProposerChain, SampledTokensDoNotDependOnTheBatch) {
  auto target = tiny_model(4);
  auto draft_model = tiny_model(9);
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 3; ++b)
    rs.push_back(make_request(make_prompt(20, 64, static_cast<std::uint64_t>(b)), 16, 1.0f, 500 + static_cast<std::uint64_t>(b)));
  auto run = [&](const std::vector<sd::GenerationRequest>& batch) {
    sp::NgramProposer ngram;
    sp::DraftModelProposer<sm::LlamaModel> draft(draft_model);
    sp::ProposerChain chain;
    chain.add(ngram).add(draft);
    return generate_all(chain, target, batch, 3);
  };
  const auto all = run(rs);
  for (std::size_t b = 0; b < rs.size(); ++b) EXPECT_EQ(run({rs[b]})[0], all[b]) << b;
}

}  // namespace
