// The adaptive draft-length policy (decoder/length_policy.hpp): acceptance by position, the learned cost model, the
// choice of g against the theory, and the decoder with the policy on (fixed cost models and synthetic acceptance, so
// nothing here depends on timings).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "specdec/decoder/cost_profile.hpp"
#include "specdec/decoder/length_policy.hpp"
#include "specdec/proposers/proposer_chain.hpp"
#include "specdec/proposers/suffix.hpp"
#include "specdec/proposers/synthetic.hpp"
#include "specdec/sampling/theory.hpp"
#include "specdec/torch/rows.hpp"

namespace {

using namespace specdec::test;

std::int32_t choose_one(const sd::AcceptanceEstimate& e, std::int32_t max_g, double slope, double draft = 0.0) {
  std::vector<double> tokens(static_cast<std::size_t>(max_g) + 1);
  e.expected_tokens(tokens);
  const sd::LengthChoice c{max_g, false, 1.0, tokens};
  return sd::choose_draft_lengths({&c, 1}, [slope](std::int64_t b, std::int64_t t) { return 1.0 + slope * (t - b); },
                                  draft)[0];
}

TEST(LengthPolicy, AcceptanceByPosition) {
  sd::AcceptanceEstimate prior;
  EXPECT_DOUBLE_EQ(prior.h(1), 0.5);
  EXPECT_DOUBLE_EQ(prior.expected_tokens(0), 1.0);
  EXPECT_DOUBLE_EQ(prior.expected_tokens(2), 1.75);

  sd::AcceptanceEstimate all;
  for (int i = 0; i < 60; ++i) all.observe(4, 4);
  for (int i = 1; i <= 4; ++i) EXPECT_GT(all.h(i), 0.9) << i;
  EXPECT_DOUBLE_EQ(all.h(9), all.h(4));  // depths never tried inherit the deepest estimate
  EXPECT_GT(all.expected_tokens(8), 7.0);

  sd::AcceptanceEstimate none;
  for (int i = 0; i < 60; ++i) none.observe(4, 0);
  EXPECT_LT(none.h(1), 0.05);
  EXPECT_LT(none.expected_tokens(4), 1.06);

  // copied runs: half the steps reject the first draft, the other half accept all four. One rate would say 0.8;
  // by position the first draft is a coin flip and the later ones are certain once it is accepted.
  sd::AcceptanceEstimate runs;
  for (int i = 0; i < 60; ++i) runs.observe(4, i % 2 ? 4 : 0);
  EXPECT_NEAR(runs.h(1), 0.5, 0.06);
  for (int i = 2; i <= 4; ++i) EXPECT_GT(runs.h(i), 0.9) << i;

  // chains accepted until their first rejection, each draft with probability 0.7: h(i) = 0.7 at every position
  sd::AcceptanceEstimate geo(0.999);
  std::uint64_t state = 12345;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  for (int i = 0; i < 4000; ++i) {
    int n = 0;
    while (n < 6 && uniform() < 0.7) ++n;
    geo.observe(6, n);
  }
  for (int i = 1; i <= 3; ++i) EXPECT_NEAR(geo.h(i), 0.7, 0.05) << i;  // decay 0.999: ~1000 effective chains
}

TEST(LengthPolicy, CostModelLearnsTheVerificationLine) {
  sd::ForwardCostModel m;
  EXPECT_TRUE(m.empty());
  EXPECT_DOUBLE_EQ(m.ratio(1, 4), 1.4);  // the prior before any step
  // one request: 4 ms plus 0.3 ms per draft row, drafts 0..8
  for (int i = 0; i < 300; ++i) m.observe(1, 1 + i % 9, 4e-3 + 3e-4 * (i % 9));
  EXPECT_NEAR(m.predict(1, 1), 4e-3, 4e-5);
  EXPECT_NEAR(m.predict(1, 9), 4e-3 + 8 * 3e-4, 4e-5);
  EXPECT_NEAR(m.ratio(1, 5), (4e-3 + 1.5e-3) / 4e-3, 0.01);
  // eight requests: a separate line; an unseen batch size uses the nearest one seen
  for (int i = 0; i < 300; ++i) m.observe(8, 8 + 4 * (i % 5), 10e-3 + 2e-4 * 4 * (i % 5));
  EXPECT_NEAR(m.predict(8, 8), 10e-3, 1e-4);
  EXPECT_NEAR(m.predict(6, 6 + 10), 10e-3 + 2e-3, 1e-4);
  EXPECT_NEAR(m.predict(2, 3), 4e-3 + 3e-4, 4e-5);
  // only one size of step seen: the slope is the prior's
  sd::ForwardCostModel one;
  for (int i = 0; i < 50; ++i) one.observe(2, 6, 5e-3);
  EXPECT_NEAR(one.ratio(2, 4), 1.4, 1e-6);
  EXPECT_NEAR(one.predict(2, 6), 5e-3, 1e-9);
  // a cost that is not linear in the rows (the first extra row costs most): the sizes seen are predicted by their own
  // means, so a size between them is not mistaken for a cheap one
  sd::ForwardCostModel bent;
  const double cost[] = {1.0, 1.4, 1.55, 2.0, 2.4};
  for (int i = 0; i < 500; ++i) bent.observe(1, 1 + i % 5, cost[i % 5] * 1e-3);
  for (int x = 0; x < 5; ++x) EXPECT_NEAR(bent.predict(1, 1 + x), cost[x] * 1e-3, 0.03e-3) << x;
  // bad observations are ignored
  one.observe(2, 1, 1.0);
  one.observe(0, 1, 1.0);
  one.observe(2, 6, -1.0);
  one.observe(2, 6, std::nan(""));
  EXPECT_NEAR(one.predict(2, 6), 5e-3, 1e-9);
}

TEST(LengthPolicy, ConstantAcceptanceChoosesTheTheorysOptimum) {
  for (double a : {0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.97}) {
    for (double c : {0.0, 0.02, 0.1, 0.3}) {
      for (double slope : {0.0, 0.05, 0.1, 0.3}) {
        constexpr std::int32_t kMax = 12;
        std::vector<double> tokens(kMax + 1);
        for (int g = 0; g <= kMax; ++g) tokens[static_cast<std::size_t>(g)] = specdec::theory::expected_tokens_per_step(a, g);
        const sd::LengthChoice choice{kMax, false, 1.0, tokens};
        const auto g = sd::choose_draft_lengths(
            {&choice, 1}, [slope](std::int64_t b, std::int64_t t) { return 1.0 + slope * (t - b); }, c)[0];
        const auto w = [&](int k) { return k == 0 ? 1.0 : specdec::theory::walltime_improvement(a, k, c, 1.0 + slope * k); };
        int best = 0;
        for (int k = 1; k <= kMax; ++k)
          if (w(k) > w(best)) best = k;
        // the theory's optimum, up to ties within rounding (a^g below 1e-12 at a = 0.1)
        EXPECT_NEAR(w(g), w(best), 1e-9 * w(best)) << "a " << a << " c " << c << " slope " << slope << " g " << g;
        if (w(best) - w(best == 0 ? 1 : best - 1) > 1e-6 && (best == kMax || w(best) - w(best + 1) > 1e-6)) {
          EXPECT_EQ(g, best) << "a " << a << " c " << c << " slope " << slope;
        }
        if (slope == 0.0) {
          EXPECT_NEAR(w(g), w(specdec::theory::optimal_gamma(a, c, 1.0, kMax)), 1e-9 * w(best)) << a << " " << c;
        }
      }
    }
  }
}

TEST(LengthPolicy, ZeroWhenDraftsFailAndVerificationCosts) {
  sd::AcceptanceEstimate e;
  for (int i = 0; i < 20; ++i) e.observe(4, 0);
  EXPECT_EQ(choose_one(e, 8, 0.1), 0);
  EXPECT_EQ(choose_one(e, 8, 0.02, 0.01), 0);  // the prior fades: no floor on a request's estimate
  EXPECT_LT(e.h(1), 0.01);
  // the prior alone drafts (a new request tries)
  EXPECT_GT(choose_one(sd::AcceptanceEstimate{}, 8, 0.1), 0);
  // a free verification still pays for a draft that is sometimes accepted
  sd::AcceptanceEstimate rare;
  for (int i = 0; i < 20; ++i) rare.observe(1, i % 5 == 0 ? 1 : 0);
  EXPECT_GT(choose_one(rare, 8, 0.0), 0);
  EXPECT_EQ(choose_one(rare, 8, 0.3), 0);
}

TEST(LengthPolicy, LongDraftsWhenDraftsAreAccepted) {
  sd::AcceptanceEstimate e;
  for (int i = 0; i < 40; ++i) e.observe(8, 8);
  EXPECT_EQ(choose_one(e, 8, 0.1), 8);
  EXPECT_EQ(choose_one(e, 16, 0.1), 16);  // inherited estimates carry it past the depth tried
  // copied runs (first draft a coin flip, then certain): long drafts, where one rate of 0.8 would stop earlier
  sd::AcceptanceEstimate runs;
  for (int i = 0; i < 60; ++i) runs.observe(8, i % 2 ? 8 : 0);
  EXPECT_EQ(choose_one(runs, 8, 0.1), 8);
  int one_rate = 0;  // what a single rate of 0.8 would choose with the same costs
  for (int k = 1; k <= 8; ++k)
    if (specdec::theory::walltime_improvement(0.8, k, 0.0, 1.0 + 0.1 * k) >
        specdec::theory::walltime_improvement(0.8, std::max(one_rate, 1), 0.0, 1.0 + 0.1 * std::max(one_rate, 1)))
      one_rate = k;
  EXPECT_LT(one_rate, 8);
}

TEST(LengthPolicy, DraftingYieldPaysWhileDraftingStepsEmitMoreThanTheyCost) {
  const std::function<double(std::int64_t)> cost = [](std::int64_t rows) { return 1.0 + 0.25 * static_cast<double>(rows); };
  sd::DraftingYield y(0.5);  // prior: 1.5 tokens for 1 row (1.25 plain steps): drafting pays
  EXPECT_DOUBLE_EQ(y.tokens(), 1.5);
  EXPECT_DOUBLE_EQ(y.rows(), 1.0);
  EXPECT_TRUE(y.pays(cost, 0.0));
  EXPECT_FALSE(y.pays(cost, 0.3));  // 1.5 < 1.25 + 0.3
  y.observe(8, 1);  // 8 drafts, none accepted: (0.75 + 1) / 1.5 tokens for (0.5 + 8) / 1.5 rows
  EXPECT_NEAR(y.tokens(), 1.75 / 1.5, 1e-12);
  EXPECT_NEAR(y.rows(), 8.5 / 1.5, 1e-12);
  EXPECT_FALSE(y.pays(cost, 0.0));
  for (int i = 0; i < 6; ++i) y.observe(4, 4);  // copying: 3 of 4 drafts accepted a step
  EXPECT_TRUE(y.pays(cost, 0.02));
  // the cost between whole rows is interpolated: 2.5 rows cost 1.625 plain steps
  sd::DraftingYield z(0.5, 1.625, 2.5);
  EXPECT_FALSE(z.pays(cost, 0.0));
  sd::DraftingYield z2(0.5, 1.626, 2.5);
  EXPECT_TRUE(z2.pays(cost, 0.0));
  // Trees: the draft cost counts draft positions (levels), not rows. 4-node trees of depth 2 emitting 3 tokens a step
  // cost 2 + 2 * 0.3 = 2.6 plain steps; charged per row they would cost 2 + 4 * 0.3 = 3.2 and not pay.
  sd::DraftingYield tree(0.5), chain(0.5);
  for (int i = 0; i < 30; ++i) {
    tree.observe(4, 3, 2);
    chain.observe(4, 3);
  }
  EXPECT_NEAR(tree.positions(), 2.0, 1e-6);
  EXPECT_NEAR(chain.positions(), 4.0, 1e-6);
  EXPECT_TRUE(tree.pays(cost, 0.3));
  EXPECT_FALSE(chain.pays(cost, 0.3));
}

TEST(LengthPolicy, BatchKeepsFixedRequestsAndSharesTheForward) {
  sd::AcceptanceEstimate good, bad;
  for (int i = 0; i < 40; ++i) good.observe(6, 6), bad.observe(6, 0);
  std::vector<double> tg(7), tb(7);
  good.expected_tokens(tg);
  bad.expected_tokens(tb);
  const auto linear = [](std::int64_t b, std::int64_t t) { return 1.0 + 0.05 * (t - b); };
  std::vector<sd::LengthChoice> cs = {{6, false, 1.0, tg}, {6, false, 1.0, tb}, {4, true, 1.0, tb}};
  const auto g = sd::choose_draft_lengths(cs, linear, 0.0);
  EXPECT_EQ(g[0], 6);
  EXPECT_EQ(g[1], 0);
  EXPECT_EQ(g[2], 4);  // fixed: kept whatever it costs
  // trees: a depth costs its rows, so an expensive tree is cut shorter than a chain with the same acceptance
  std::vector<double> mid(9);
  for (int k = 0; k <= 8; ++k) mid[static_cast<std::size_t>(k)] = specdec::theory::expected_tokens_per_step(0.7, k);
  const sd::LengthChoice chain{8, false, 1.0, mid}, tree{8, false, 6.0, mid};
  EXPECT_LT(sd::choose_draft_lengths({&tree, 1}, linear, 0.0)[0], sd::choose_draft_lengths({&chain, 1}, linear, 0.0)[0]);
}

// The decoder with the policy: a tiny target, synthetic drafts accepted at a chosen rate, a fixed cost model.
struct Fixture {
  sm::LlamaModel target = tiny_model(31);
  std::vector<sd::GenerationRequest> requests;
  std::vector<std::vector<std::int64_t>> reference;

  explicit Fixture(std::int64_t batch, std::int64_t max_new = 64) {
    for (std::int64_t b = 0; b < batch; ++b)
      requests.push_back(make_request(make_prompt(6 + 3 * b, 64, 40 + static_cast<std::uint64_t>(b)), max_new));
    sp::NoProposer none;
    sd::DecoderOptions o;
    o.num_speculative_tokens = 0;
    sd::SpeculativeDecoder<sp::NoProposer, sm::LlamaModel> plain(none, target, o);
    for (auto& r : plain.generate(requests)) reference.push_back(r.tokens);
  }
  sp::SyntheticProposer synthetic(double alpha) const {
    sp::SyntheticProposer p(64, alpha, 5);
    for (std::size_t b = 0; b < requests.size(); ++b) p.set_reference(requests[b].prompt, reference[b]);
    return p;
  }
  static sd::DecoderOptions options(std::int32_t g, double slope) {
    sd::DecoderOptions o;
    o.num_speculative_tokens = g;
    o.calibrate = false;
    o.adaptive.enabled = true;
    o.adaptive.forward_seconds = [slope](std::int64_t b, std::int64_t t) { return 1.0 + slope * static_cast<double>(t - b); };
    o.adaptive.draft_seconds_per_position = 0.0;
    return o;
  }
};

TEST(DecoderAdaptive, PlainStepsAndProbesWhenDraftsAreNeverAccepted) {
  Fixture f(1, 80);
  // Probes after 4 plain steps (first_probe_interval), then after twice the wait each time one is rejected, up to
  // probe_backoff * 16: with probe_backoff 1 after 4, 4 + 8, 4 + 8 + 16, then every 16; by default after 4, 12, 28, 60,
  // 124, ... Two drafting steps first bring the estimate down (prior 0.5, then 0.25, then below break-even).
  auto probes_due = [](std::int64_t plain, std::int64_t cap) {
    std::int64_t probes = 0;
    for (std::int64_t due = 4, wait = 4; due <= plain; wait = std::min<std::int64_t>(2 * wait, cap), due += wait) ++probes;
    return probes;
  };
  for (const std::int32_t backoff : {1, 8}) {
    SCOPED_TRACE(backoff);
    auto p = f.synthetic(0.0);
    sd::DecoderOptions o = Fixture::options(6, 0.2);
    o.adaptive.probe_backoff = backoff;
    sd::SpeculativeDecoder dec(p, f.target, o);
    const auto res = dec.generate(f.requests);
    EXPECT_EQ(res[0].tokens, f.reference[0]);
    const auto& m = res[0].metrics;
    EXPECT_EQ(m.accepted, 0);
    const std::int64_t plain = m.target_forwards - m.steps_with_drafts;
    const std::int64_t probes = probes_due(plain, 16 * backoff);
    EXPECT_GE(plain, 60);  // the run reaches the fourth probe
    EXPECT_GE(m.steps_with_drafts, 2 + probes);
    EXPECT_LE(m.steps_with_drafts, 2 + probes + 1);
    EXPECT_GE(m.steps_with_drafts, 5);              // probes happened
    EXPECT_LE(m.drafted, 2 + m.steps_with_drafts);  // a probe drafts one token
  }
}

// A request whose drafts are right (alpha 0.9) for 20 steps, wrong for 60, then all right until it finishes, under a
// costly verification (each draft half a forward, so one accepted draft does not make drafting pay again); lookups:
// whether the synthetic drafts count as lookups (shadow probes). Returns the steps, the first step after the switch
// (step 80) that emitted more than one token, and the tokens.
struct SwitchBack {
  std::int64_t steps = 0, first_gain = -1;
  std::vector<std::int64_t> tokens;
};
SwitchBack run_switch_back(Fixture& f, bool lookups) {
  auto p = f.synthetic(0.9);
  p.set_drafts_are_lookups(lookups);
  sd::SpeculativeDecoder dec(p, f.target, Fixture::options(6, 0.5));
  const auto id = dec.add_request(f.requests[0]);
  SwitchBack out;
  auto run = [&](std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i, ++out.steps) EXPECT_TRUE(dec.step().empty()) << out.steps;
  };
  run(20);
  p.set_alpha(0.0);
  run(60);
  p.set_alpha(1.0);
  bool done = false;
  while (!done && out.steps < 1000) {
    const std::size_t before = dec.context(id).size();
    done = !dec.step().empty();
    ++out.steps;
    if (out.first_gain < 0 && !done && dec.context(id).size() > before + 1) out.first_gain = out.steps;
  }
  EXPECT_TRUE(done);
  if (done) out.tokens = dec.take_result(id).tokens;
  return out;
}

TEST(DecoderAdaptive, BackToDraftingSoonAfterAProbeIsAccepted) {
  // The first accepted probe is followed by probes on the next plain steps, so the estimate climbs back within a few
  // steps instead of one probe per probe_interval (16).
  Fixture f(1, 400);
  const SwitchBack s = run_switch_back(f, false);
  EXPECT_EQ(s.tokens, f.reference[0]);
  // Deterministic (synthetic draws, a fixed cost model): 176 steps; with one probe per interval after an accepted
  // probe, 202. Most of the rest is the backoff's wait for the first probe after the switch.
  EXPECT_LE(s.steps, 190);
}

TEST(DecoderAdaptive, ShadowProbesReplaceProbesForLookupDrafts) {
  // Lookup drafts (has_lookup_drafts): a plain step compares its unverified proposal with the token it emits instead of
  // verifying a probe. Drafts that are never right: after the first drafting steps bring the estimate below break-even
  // no step drafts again, yet every plain step is observed; the tokens are plain decoding's.
  Fixture f(1, 80);
  auto p = f.synthetic(0.0);
  p.set_drafts_are_lookups(true);
  sd::SpeculativeDecoder dec(p, f.target, Fixture::options(6, 0.2));
  const auto res = dec.generate(f.requests);
  EXPECT_EQ(res[0].tokens, f.reference[0]);
  const auto& m = res[0].metrics;
  EXPECT_EQ(m.accepted, 0);
  EXPECT_EQ(m.steps_with_drafts, 2);  // prior 0.5, then 0.25, then below break-even: no probe steps
  EXPECT_EQ(m.shadow_accepted, 0);
  // every plain step but the last (no room left to draft there): the synthetic proposer always drafts
  EXPECT_EQ(m.shadow_probes, m.target_forwards - m.steps_with_drafts - 1);

  // shadow_probes off: the verified probes of PlainStepsAndProbesWhenDraftsAreNeverAccepted
  auto q = f.synthetic(0.0);
  q.set_drafts_are_lookups(true);
  auto o = Fixture::options(6, 0.2);
  o.adaptive.shadow_probes = false;
  sd::SpeculativeDecoder dec2(q, f.target, o);
  const auto res2 = dec2.generate(f.requests);
  EXPECT_EQ(res2[0].tokens, f.reference[0]);
  EXPECT_EQ(res2[0].metrics.shadow_probes, 0);
  EXPECT_GE(res2[0].metrics.steps_with_drafts, 5);
}

TEST(DecoderAdaptive, ShadowProbesFindTheSwitchBackAtOnce) {
  // BackToDraftingSoonAfterAProbeIsAccepted with lookup drafts: shadow probes see the switch on the first plain step
  // after it, so drafting resumes within a few steps.
  Fixture f(1, 400);
  const SwitchBack s = run_switch_back(f, true);
  EXPECT_EQ(s.tokens, f.reference[0]);
  // Drafting pays again 8 steps after the switch (step 80): from an estimate near 0 (tested about 1 / (1 - 0.9) times
  // in the decay's memory), k right shadow probes lift h(1) to about 1 - 0.9^k, over the break-even r(2) - 1 = 0.5 at
  // k = 7, and the 8th step drafts.
  ASSERT_GE(s.first_gain, 0);
  EXPECT_LE(s.first_gain, 80 + 8);
  // 134 steps (deterministic: synthetic draws, a fixed cost model); the probe version takes 176
  EXPECT_LE(s.steps, 140);
}

TEST(DecoderAdaptive, ShadowProbesBesideDraftingRequests) {
  // One batch: two requests whose lookup drafts are always right draft every step while the third, whose drafts are
  // never right, goes plain with a shadow probe each step (its proposal in the same call, cut to nothing); every
  // request's tokens are plain decoding's.
  Fixture f(3, 48);
  sp::SyntheticProposer p(64, 1.0, 5);
  for (std::size_t b = 0; b < 2; ++b) p.set_reference(f.requests[b].prompt, f.reference[b]);  // the third has none
  p.set_drafts_are_lookups(true);
  sd::SpeculativeDecoder dec(p, f.target, Fixture::options(4, 0.1));
  const auto res = dec.generate(f.requests);
  for (std::size_t b = 0; b < res.size(); ++b) EXPECT_EQ(res[b].tokens, f.reference[b]) << b;
  for (std::size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(res[b].metrics.accepted, res[b].metrics.drafted) << b;
    EXPECT_GE(res[b].metrics.steps_with_drafts, res[b].metrics.target_forwards - 1) << b;
    EXPECT_EQ(res[b].metrics.shadow_probes, 0) << b;
  }
  const auto& m = res[2].metrics;
  EXPECT_EQ(m.accepted, 0);
  EXPECT_LE(m.steps_with_drafts, 2);
  EXPECT_GE(m.shadow_probes, m.target_forwards - m.steps_with_drafts - 1);
  EXPECT_EQ(m.shadow_accepted, 0);
}

// A lookup proposer whose drafts are two siblings under the root, a wrong token first and the reference's next token
// second (a tree's first level, as the n-gram and suffix proposers' trees have).
struct SiblingLookup {
  static constexpr bool supports_trees = true;
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> references;  // prompt -> prompt + continuation
  std::map<sp::RequestId, const std::vector<std::int64_t>*> live;
  bool drafts_are_lookups() const { return true; }
  void begin_request(const sp::RequestContext& c) {
    auto it = references.find(std::vector<std::int64_t>(c.context.begin(), c.context.end()));
    live[c.id] = it == references.end() ? nullptr : &it->second;
  }
  void end_request(sp::RequestId id) { live.erase(id); }
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> requests) {
    sp::DraftBatch d;
    d.cu_num_drafts.push_back(0);
    for (const auto& r : requests) {
      const std::vector<std::int64_t>* ref = live.at(r.id);
      const auto p = static_cast<std::size_t>(r.position);
      if (r.max_drafts < 1 || ref == nullptr || p >= ref->size()) {
        d.append({});
        continue;
      }
      const std::int64_t right = (*ref)[p];
      const std::vector<std::int64_t> tokens = {(right + 1) % 64, right}, parents = {0, 0};
      d.append(tokens, parents);
    }
    return d;
  }
  void observe(std::span<const sp::StepFeedback>) {}
};

TEST(DecoderAdaptive, ShadowProbesCompareATreesFirstLevel) {
  // Drafts never pay (each costs two forwards), so every step is plain with a shadow probe; the emitted token is
  // always the second sibling, and the probe counts as right: a verification would have accepted that level.
  Fixture f(1, 40);
  SiblingLookup p;
  p.references[f.requests[0].prompt] = f.requests[0].prompt;
  p.references[f.requests[0].prompt].insert(p.references[f.requests[0].prompt].end(), f.reference[0].begin(),
                                            f.reference[0].end());
  sd::SpeculativeDecoder dec(p, f.target, Fixture::options(4, 2.0));
  const auto res = dec.generate(f.requests);
  EXPECT_EQ(res[0].tokens, f.reference[0]);
  const auto& m = res[0].metrics;
  EXPECT_EQ(m.steps_with_drafts, 0);
  EXPECT_EQ(m.shadow_probes, m.target_forwards - 1);  // every step but the last (no room left to draft)
  EXPECT_EQ(m.shadow_accepted, m.shadow_probes);
}

// A tree's step trace carries its parents and the accepted path's nodes: here two siblings under the root every step,
// the second one right, verified every step (no adaptive policy).
TEST(DecoderAdaptive, StepObserverSeesATreesParentsAndAcceptedPath) {
  Fixture f(1, 30);
  SiblingLookup p;
  auto& ref = p.references[f.requests[0].prompt];
  ref = f.requests[0].prompt;
  ref.insert(ref.end(), f.reference[0].begin(), f.reference[0].end());
  sd::DecoderOptions o;
  o.num_speculative_tokens = 2;
  o.calibrate = false;
  sd::SpeculativeDecoder dec(p, f.target, o);
  std::int64_t trees = 0;
  dec.set_step_observer([&](const sd::StepTrace& t) {
    if (t.proposed == 0) return;  // no room left to draft
    ++trees;
    EXPECT_TRUE(t.tree);
    EXPECT_EQ(t.proposed, 2);
    EXPECT_EQ(t.verified, 2);
    EXPECT_EQ(std::vector<std::int64_t>(t.parents.begin(), t.parents.end()), (std::vector<std::int64_t>{0, 0}));
    EXPECT_EQ(std::vector<std::int64_t>(t.accepted_nodes.begin(), t.accepted_nodes.end()), (std::vector<std::int64_t>{2}));
    EXPECT_EQ(t.accepted, 1);
    EXPECT_TRUE(t.confidence.empty());
  });
  const auto res = dec.generate(f.requests);
  EXPECT_EQ(res[0].tokens, f.reference[0]);
  EXPECT_GT(trees, 5);
}

// A tree cut to its n best nodes by path confidence (EAGLE-2's rerank): the kept nodes form a tree (ancestors first),
// in their order, parents renumbered, with their confidences; other requests are cut by depth as before.
TEST(DecoderDetail, CutDraftsKeepsATreesBestNodesByPathConfidence) {
  sp::DraftBatch d;
  // node:       1    2    3    4    5    6
  // parent:     0    0    1    1    2    3
  // confidence: 0.5  0.4  0.9  0.1  0.9  0.5  -> paths 0.5, 0.4, 0.45, 0.05, 0.36, 0.225
  d.append(std::vector<std::int64_t>{10, 11, 12, 13, 14, 15}, std::vector<std::int64_t>{0, 0, 1, 1, 2, 3});
  d.append(std::vector<std::int64_t>{20, 21, 22});  // a chain
  d.confidence = {0.5f, 0.4f, 0.9f, 0.1f, 0.9f, 0.5f, 0.9f, 0.9f, 0.9f};
  EXPECT_EQ(sd::detail::best_tree_nodes(d, 0), (std::vector<std::int64_t>{0, 2, 1, 4, 5, 3}));
  const std::vector<std::uint8_t> best = {1, 0};
  const auto cut = sd::detail::cut_drafts(d, std::vector<std::int32_t>{4, 2}, best);
  // the 4 best: nodes 1, 3, 2, 5 -> in their order 1, 2, 3, 5 (tokens 10, 11, 12, 14), parents 0, 0, 1, 2
  ASSERT_EQ(cut.num_requests(), 2);
  EXPECT_EQ(cut.num_drafts(0), 4);
  EXPECT_EQ(std::vector<std::int64_t>(cut.token_ids.begin(), cut.token_ids.begin() + 4), (std::vector<std::int64_t>{10, 11, 12, 14}));
  EXPECT_EQ(cut.parents[0], (std::vector<std::int64_t>{0, 0, 1, 2}));
  EXPECT_EQ(cut.num_drafts(1), 2);  // the chain by depth
  EXPECT_EQ(cut.confidence, (std::vector<float>{0.5f, 0.4f, 0.9f, 0.9f, 0.9f, 0.9f}));
  // n = every node keeps the tree whole; n = 0 keeps nothing
  EXPECT_EQ(sd::detail::cut_drafts(d, std::vector<std::int32_t>{6, 3}, best).num_drafts(0), 6);
  EXPECT_EQ(sd::detail::cut_drafts(d, std::vector<std::int32_t>{0, 3}, best).num_drafts(0), 0);
}

TEST(DecoderDetail, CutDraftsKeepsEachRequestsDraftsDownToItsDepth) {
  sp::DraftBatch d;
  d.append(std::vector<std::int64_t>{10, 11, 12, 13});                                         // a chain
  d.append(std::vector<std::int64_t>{20, 21, 22, 23, 24}, std::vector<std::int64_t>{0, 0, 1, 3, 2});  // a tree
  d.append(std::vector<std::int64_t>{});                                                       // nothing
  const std::vector<std::int32_t> limit = {2, 2, 5};
  const sp::DraftBatch c = sd::detail::cut_drafts(d, limit);
  EXPECT_EQ(c.cu_num_drafts, (std::vector<std::int64_t>{0, 2, 6, 6}));
  EXPECT_EQ(c.token_ids, (std::vector<std::int64_t>{10, 11, 20, 21, 22, 24}));
  ASSERT_EQ(c.parents.size(), 3u);
  EXPECT_TRUE(c.parents[0].empty());
  // nodes 1 (20, depth 1), 2 (21, depth 1), 3 (22, under 1), 5 (24, under 2); node 4 (23, under 3: depth 3) goes
  EXPECT_EQ(c.parents[1], (std::vector<std::int64_t>{0, 0, 1, 2}));
  const sp::DraftBatch none = sd::detail::cut_drafts(d, std::vector<std::int32_t>{0, 0, 0});
  EXPECT_EQ(none.cu_num_drafts, (std::vector<std::int64_t>{0, 0, 0, 0}));
  const sp::DraftBatch all = sd::detail::cut_drafts(d, std::vector<std::int32_t>{8, 8, 8});
  EXPECT_EQ(all.token_ids, d.token_ids);
  EXPECT_EQ(all.parents[1], d.parents[1]);
  // a batch with draft probabilities is never cut (its rows follow the drafts)
  sp::DraftBatch q = d;
  q.probs = specdec::Rows::host_float32(9, 64);
  EXPECT_THROW(sd::detail::cut_drafts(q, limit), specdec::error);
  EXPECT_EQ(sd::detail::cut_drafts(q, std::vector<std::int32_t>{8, 8, 8}).probs.rows(), 9);
}

TEST(DecoderDetail, MatchedDepthFollowsTheEmittedTokensDownOnePath) {
  sp::DraftBatch d;
  d.append(std::vector<std::int64_t>{10, 11, 12, 13});
  d.append(std::vector<std::int64_t>{20, 21, 22, 23, 24}, std::vector<std::int64_t>{0, 0, 1, 3, 2});
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(sd::detail::matched_depth(d, 0, V{10, 11, 99}), 2);
  EXPECT_EQ(sd::detail::matched_depth(d, 0, V{10, 11}), 2);  // the emitted tokens end first
  EXPECT_EQ(sd::detail::matched_depth(d, 0, V{10, 11, 12, 13, 14}), 4);
  EXPECT_EQ(sd::detail::matched_depth(d, 0, V{99}), 0);
  EXPECT_EQ(sd::detail::matched_depth(d, 1, V{20, 22, 23, 7}), 3);  // 20 -> 22 -> 23
  EXPECT_EQ(sd::detail::matched_depth(d, 1, V{21, 24, 5}), 2);      // the second sibling's branch
  EXPECT_EQ(sd::detail::matched_depth(d, 1, V{21, 22}), 1);         // 22 is under 20, not 21
  EXPECT_EQ(sd::detail::matched_depth(d, 1, V{}), 0);
}

// A lookup proposer that records every ProposeRequest's max_drafts and drafts the reference's next g tokens, right
// while the position is below `right_until` and wrong (token + 1) from there.
// Drafts a reference continuation: right up to position right_until, and wrong at positions p with
// p % wrong_every == wrong_every - 1 when wrong_every > 0. A lookup unless `lookups` is off; with `confident` it reports
// confidences (has_draft_confidence): 0.95 for a right draft, 0.05 for a wrong one.
struct RecordingLookup {
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> references;
  std::map<sp::RequestId, const std::vector<std::int64_t>*> live;
  std::vector<std::int32_t> asked;  // max_drafts of every request of every call
  std::int64_t calls = 0, right_until = 1 << 30, wrong_every = 0;
  bool lookups = true, confident = false;
  bool drafts_are_lookups() const { return lookups; }
  bool reports_confidence() const { return confident; }
  void begin_request(const sp::RequestContext& c) {
    live[c.id] = &references.at(std::vector<std::int64_t>(c.context.begin(), c.context.end()));
  }
  void end_request(sp::RequestId id) { live.erase(id); }
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> requests) {
    ++calls;
    sp::DraftBatch d;
    d.cu_num_drafts.push_back(0);
    for (const auto& r : requests) {
      asked.push_back(r.max_drafts);
      const auto& ref = *live.at(r.id);
      std::vector<std::int64_t> tokens;
      for (std::int64_t p = r.position; p < r.position + r.max_drafts && p < static_cast<std::int64_t>(ref.size()); ++p) {
        const bool right = p < right_until && (wrong_every <= 0 || p % wrong_every != wrong_every - 1);
        tokens.push_back(right ? ref[static_cast<std::size_t>(p)] : (ref[static_cast<std::size_t>(p)] + 1) % 64);
        if (confident) d.confidence.push_back(right ? 0.95f : 0.05f);
      }
      d.append(tokens);
    }
    return d;
  }
  void observe(std::span<const sp::StepFeedback>) {}
};

TEST(DecoderAdaptive, CutLookupsProposeAtTheBoundOnceAStepAndLearnFromEveryEmittedPosition) {
  Fixture f(1, 60);
  auto reference_of = [&](std::size_t b) {
    std::vector<std::int64_t> r = f.requests[b].prompt;
    r.insert(r.end(), f.reference[b].begin(), f.reference[b].end());
    return r;
  };
  // Right drafts, verification priced so that few drafts pay at the prior: each step still proposes its bound, 6
  // (fewer at the end), in one call, and learns from every proposed position the step emitted, the bonus token against
  // the first draft cut included; so its drafts grow faster than when only verified drafts teach the estimate
  // (deterministic: a fixed cost model; 12 steps against 14).
  auto run_right = [&](bool cut) {
    RecordingLookup p;
    p.references[f.requests[0].prompt] = reference_of(0);
    auto o = Fixture::options(6, 0.8);
    o.adaptive.cut_lookups = cut;
    sd::SpeculativeDecoder dec(p, f.target, o);
    auto res = dec.generate(f.requests);
    EXPECT_EQ(res[0].tokens, f.reference[0]);
    EXPECT_EQ(res[0].metrics.accepted, res[0].metrics.drafted);
    return std::make_pair(p, res[0].metrics);
  };
  const auto [p, m] = run_right(true);
  const auto [p_old, m_old] = run_right(false);
  // one call a step (none when no room is left to draft)
  EXPECT_LE(p.calls, m.target_forwards);
  EXPECT_GE(p.calls, m.target_forwards - 1);
  for (std::size_t i = 0; i + 6 < p.asked.size(); ++i) EXPECT_EQ(p.asked[i], 6) << i;
  EXPECT_LT(m.target_forwards, m_old.target_forwards);

  // The old way (cut_lookups off): g is chosen before proposing, and a plain step asks for one draft to compare.
  RecordingLookup q;
  q.references[f.requests[0].prompt] = reference_of(0);
  q.right_until = static_cast<std::int64_t>(f.requests[0].prompt.size());  // never right: every step plain after two
  auto o2 = Fixture::options(6, 0.2);
  o2.adaptive.cut_lookups = false;
  sd::SpeculativeDecoder dec2(q, f.target, o2);
  const auto res2 = dec2.generate(f.requests);
  EXPECT_EQ(res2[0].tokens, f.reference[0]);
  EXPECT_GE(std::count(q.asked.begin(), q.asked.end(), 1), res2[0].metrics.shadow_probes);
  // ... and cut: never right, so no step verifies a draft after the first ones, yet each proposes its bound and
  // counts as a shadow probe.
  RecordingLookup w;
  w.references[f.requests[0].prompt] = reference_of(0);
  w.right_until = q.right_until;
  sd::SpeculativeDecoder dec3(w, f.target, Fixture::options(6, 0.2));
  const auto res3 = dec3.generate(f.requests);
  EXPECT_EQ(res3[0].tokens, f.reference[0]);
  EXPECT_LE(w.calls, res3[0].metrics.target_forwards);
  EXPECT_GE(w.calls, res3[0].metrics.target_forwards - 1);
  for (const auto asked : w.asked) EXPECT_GE(asked, 1);
  EXPECT_EQ(res3[0].metrics.accepted, 0);
  EXPECT_LE(res3[0].metrics.steps_with_drafts, 2);
  EXPECT_EQ(res3[0].metrics.shadow_probes, res3[0].metrics.target_forwards - res3[0].metrics.steps_with_drafts - 1);
  EXPECT_EQ(res3[0].metrics.shadow_accepted, 0);
}

// Not a lookup: drafts each fixture request's reference continuation, right except every 4th position; with
// `reports`, sure (0.95) of the right drafts and unsure (0.05) of the wrong ones.
RecordingLookup unsure_every_fourth(const Fixture& f, bool reports) {
  RecordingLookup p;
  p.lookups = false;
  p.wrong_every = 4;
  p.confident = reports;
  for (std::size_t b = 0; b < f.requests.size(); ++b) {
    std::vector<std::int64_t> r = f.requests[b].prompt;
    r.insert(r.end(), f.reference[b].begin(), f.reference[b].end());
    p.references[f.requests[b].prompt] = r;
  }
  return p;
}

// With confidences, every step proposes at the bound and the policy cuts each chain where its expected tokens per second
// peak: here just before the first wrong draft, so every verified draft is accepted. Without them (or with
// confidence_cut off) g is chosen before proposing from the history, and wrong drafts get verified.
TEST(DecoderAdaptive, ConfidenceCutVerifiesTheDraftsTheProposerIsSureOf) {
  Fixture f(2, 60);
  auto run = [&](bool reports, bool cut) {
    RecordingLookup p = unsure_every_fourth(f, reports);
    auto o = Fixture::options(6, 0.2);
    o.adaptive.confidence_cut = cut;
    sd::SpeculativeDecoder dec(p, f.target, o);
    const auto res = dec.generate(f.requests);
    for (std::size_t b = 0; b < res.size(); ++b) EXPECT_EQ(res[b].tokens, f.reference[b]) << "request " << b;
    return std::make_pair(p, res);
  };
  const auto [p, res] = run(true, true);
  for (const auto& r : res) {
    EXPECT_GT(r.metrics.accepted, 20);
    EXPECT_EQ(r.metrics.accepted, r.metrics.drafted);  // cut before every wrong draft
  }
  std::int64_t at_bound = 0;
  for (const auto a : p.asked) at_bound += a == 6 ? 1 : 0;
  EXPECT_GE(at_bound, static_cast<std::int64_t>(p.asked.size()) - 4) << "steps did not propose at the bound";
  for (const bool reports : {false, true}) {
    SCOPED_TRACE(reports ? "confidence_cut off" : "no confidences");
    const auto [q, res2] = run(reports, false);
    std::int64_t wrong = 0;
    for (const auto& r : res2) wrong += r.metrics.drafted - r.metrics.accepted;
    EXPECT_GT(wrong, 0);
  }
}

// The step observer sees, for every request of every step, the whole proposal (before the cut), how much of it was
// verified and what the target accepted: here every step proposes at the bound, the cut stops just before the first
// unsure (wrong) draft, and the trace adds up to the request's metrics.
TEST(DecoderAdaptive, StepObserverSeesEachProposalItsCutAndWhatWasAccepted) {
  Fixture f(2, 60);
  RecordingLookup p = unsure_every_fourth(f, true);
  sd::SpeculativeDecoder dec(p, f.target, Fixture::options(6, 0.2));
  struct Seen {
    std::int64_t step, position;
    std::int32_t proposed, verified, accepted, emitted;
    std::vector<float> confidence;
  };
  std::map<sd::RequestId, std::vector<Seen>> seen;
  std::int64_t calls = 0;
  dec.set_step_observer([&](const sd::StepTrace& t) {
    ++calls;
    EXPECT_FALSE(t.tree);
    EXPECT_TRUE(t.parents.empty());
    for (std::size_t i = 0; i < t.accepted_nodes.size(); ++i) EXPECT_EQ(t.accepted_nodes[i], static_cast<std::int64_t>(i) + 1);
    seen[t.id].push_back({t.step, t.position, t.proposed, t.verified, t.accepted, t.emitted,
                          std::vector<float>(t.confidence.begin(), t.confidence.end())});
  });
  const auto res = dec.generate(f.requests);
  ASSERT_EQ(seen.size(), res.size());
  std::int64_t cut_at_unsure = 0;
  for (std::size_t b = 0; b < res.size(); ++b) {
    SCOPED_TRACE("request " + std::to_string(b));
    EXPECT_EQ(res[b].tokens, f.reference[b]);
    const auto& steps = seen.at(res[b].id);
    EXPECT_EQ(static_cast<std::int64_t>(steps.size()), res[b].metrics.target_forwards);
    std::int64_t verified = 0, accepted = 0, emitted = 0;
    std::int64_t position = static_cast<std::int64_t>(f.requests[b].prompt.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Seen& s = steps[i];
      if (i > 0) EXPECT_GT(s.step, steps[i - 1].step);
      EXPECT_EQ(s.position, position) << "step " << i;
      EXPECT_LE(s.verified, s.proposed);
      EXPECT_LE(s.accepted, s.verified);
      EXPECT_EQ(s.accepted, s.verified);  // cut before every wrong draft
      EXPECT_EQ(static_cast<std::int32_t>(s.confidence.size()), s.proposed);
      for (std::int32_t j = 0; j < s.proposed; ++j) {
        // the fixture's drafts: right (0.95) except at positions p with p % 4 == 3 (0.05)
        const bool right = (s.position + j) % 4 != 3;
        EXPECT_FLOAT_EQ(s.confidence[static_cast<std::size_t>(j)], right ? 0.95f : 0.05f) << "step " << i << " draft " << j;
      }
      if (s.verified < s.proposed) {
        EXPECT_FLOAT_EQ(s.confidence[static_cast<std::size_t>(s.verified)], 0.05f);
        ++cut_at_unsure;
      }
      verified += s.verified;
      accepted += s.accepted;
      emitted += s.emitted;
      position += s.emitted;
    }
    EXPECT_EQ(verified, res[b].metrics.drafted);
    EXPECT_EQ(accepted, res[b].metrics.accepted);
    EXPECT_EQ(emitted, static_cast<std::int64_t>(res[b].tokens.size()));
  }
  EXPECT_GT(cut_at_unsure, 10);
  // Unset: no more calls.
  const std::int64_t before = calls;
  dec.set_step_observer({});
  (void)dec.generate(f.requests);
  EXPECT_EQ(calls, before);
}

// A sampled request choosing alone against the fixed sampled cost, whose proposer drafts deterministic chains with
// confidences (EAGLE's argmax drafts): each chain is cut where its expected tokens per fixed cost peak, here just before
// the unsure draft every 4th position, so at most 3 drafts are verified a step and (at a temperature this low, where
// the target's top token has nearly all the mass) few are rejected; with confidence_cut off whole chains are
// verified. The cut reads only the request's own drafts, so its tokens are the same alone and beside other requests.
TEST(DecoderAdaptive, SampledRequestsCutTheirConfidentChainsAlone) {
  Fixture f(3, 60);
  auto sampled = f.requests;
  for (std::size_t b = 0; b < sampled.size(); ++b) {
    sampled[b].params.temperature = 1e-5f;  // sampled, but the target's top token takes nearly all the mass
    sampled[b].params.seed = 200 + b;
  }
  auto run = [&](const std::vector<sd::GenerationRequest>& rs, bool cut) {
    RecordingLookup p = unsure_every_fourth(f, true);
    auto o = Fixture::options(6, 0.2);
    o.adaptive.sampled_cost = [](std::int64_t rows) { return 1.0 + 0.2 * static_cast<double>(rows); };
    o.adaptive.confidence_cut = cut;
    sd::SpeculativeDecoder dec(p, f.target, o);
    return dec.generate(rs);
  };
  const auto together = run(sampled, true);
  std::int64_t rejected = 0;
  for (std::size_t b = 0; b < sampled.size(); ++b) {
    const auto& m = together[b].metrics;
    EXPECT_GT(m.accepted, 20) << b;
    EXPECT_LE(m.drafted, 3 * m.steps_with_drafts) << b;
    rejected += m.drafted - m.accepted;
    EXPECT_EQ(run(std::vector<sd::GenerationRequest>{sampled[b]}, true)[0].tokens, together[b].tokens) << "alone " << b;
  }
  std::int64_t rejected_uncut = 0, drafted_uncut = 0, steps_uncut = 0;
  for (const auto& r : run(sampled, false)) {
    rejected_uncut += r.metrics.drafted - r.metrics.accepted;
    drafted_uncut += r.metrics.drafted;
    steps_uncut += r.metrics.steps_with_drafts;
  }
  EXPECT_GT(drafted_uncut, 3 * steps_uncut);
  EXPECT_LT(3 * rejected, rejected_uncut);
}

// A chain reports confidences when a member does: its drafts carry them, and -1 where a member without them drafted.
TEST(ProposerChain, ConfidencesOfTheMemberThatDrafted) {
  Fixture f(1, 8);
  RecordingLookup c;
  c.lookups = false;
  c.wrong_every = 4;
  c.confident = true;
  std::vector<std::int64_t> ref = f.requests[0].prompt;
  ref.insert(ref.end(), f.reference[0].begin(), f.reference[0].end());
  c.references[f.requests[0].prompt] = ref;
  RecordingLookup l;
  l.references[f.requests[0].prompt] = ref;
  sp::ProposerChain lookups;
  lookups.add(l, "lookup");
  EXPECT_FALSE(lookups.reports_confidence());
  sp::ProposerChain chain;
  chain.add(l, "lookup").add(c, "confident");
  EXPECT_TRUE(chain.reports_confidence());
  sp::RequestContext ctx;
  ctx.id = 1;
  ctx.context = f.requests[0].prompt;
  ctx.params = &f.requests[0].params;
  chain.begin_request(ctx);
  sp::ProposeRequest q;
  q.id = 1;
  q.context = f.requests[0].prompt;
  q.params = &f.requests[0].params;
  q.max_drafts = 3;
  q.position = static_cast<std::int64_t>(f.requests[0].prompt.size());
  const auto d = chain.propose(std::span(&q, 1));  // the lookup member drafts
  ASSERT_EQ(d.num_drafts(0), 3);
  EXPECT_EQ(d.confidence, std::vector<float>(3, -1.f));
  const std::int32_t confident_first[] = {1, 0};
  q.members = confident_first;
  const auto d2 = chain.propose(std::span(&q, 1));
  ASSERT_EQ(d2.num_drafts(0), 3);
  ASSERT_EQ(d2.confidence.size(), 3u);
  for (std::int64_t j = 0; j < 3; ++j)
    EXPECT_EQ(d2.confidence[static_cast<std::size_t>(j)], (q.position + j) % 4 != 3 ? 0.95f : 0.05f);
  chain.end_request(1);
}

// cut_drafts keeps the confidences and probability rows of the drafts it keeps (a deterministic request beside a sampled
// one), and refuses to cut a sampled request.
TEST(DecoderDetail, CutDraftsKeepsConfidencesAndRowsOfTheDraftsKept) {
  sp::DraftBatch d;
  d.append(std::vector<std::int64_t>{1, 2, 3});
  d.append(std::vector<std::int64_t>{4, 5});
  d.confidence = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f};
  d.probs = specdec::torch::rows_of(at::arange(5 * 4, at::kFloat).view({5, 4}));
  d.has_probs = {0, 1};
  const std::int32_t limit[] = {1, 2};
  const auto c = sd::detail::cut_drafts(d, limit);
  EXPECT_EQ(c.token_ids, (std::vector<std::int64_t>{1, 4, 5}));
  EXPECT_EQ(c.confidence, (std::vector<float>{0.9f, 0.6f, 0.5f}));
  ASSERT_EQ(c.probs.rows(), 3);
  const at::Tensor cut = specdec::torch::tensor_of(c.probs), all = specdec::torch::tensor_of(d.probs);
  EXPECT_TRUE(at::equal(cut[1], all[3]));
  EXPECT_TRUE(at::equal(cut[2], all[4]));
  const std::int32_t cut_sampled[] = {3, 1};
  EXPECT_THROW(sd::detail::cut_drafts(d, cut_sampled), specdec::error);
}

TEST(ProposerChain, DraftsAreLookupsWhenEveryMemberSaysSo) {
  sp::NgramProposer ngram;
  sp::SuffixProposer suffix;
  sp::SyntheticProposer synthetic(64, 0.5);
  sp::ProposerChain empty;
  EXPECT_FALSE(empty.drafts_are_lookups());
  sp::ProposerChain lookups;
  lookups.add(suffix, "suffix").add(ngram, "ngram");
  EXPECT_TRUE(lookups.drafts_are_lookups());
  sp::ProposerChain mixed;
  mixed.add(suffix, "suffix").add(synthetic, "synthetic");  // not a lookup unless it says so
  EXPECT_FALSE(mixed.drafts_are_lookups());
  sp::NoProposer none;
  sp::ProposerChain other;
  other.add(ngram, "ngram").add(none, "none");  // no has_lookup_drafts at all
  EXPECT_FALSE(other.drafts_are_lookups());
}

TEST(DecoderAdaptive, FullLengthWhenDraftsAreAlwaysAccepted) {
  Fixture f(1, 80);
  auto p = f.synthetic(1.0);
  sd::SpeculativeDecoder dec(p, f.target, Fixture::options(6, 0.1));
  const auto res = dec.generate(f.requests);
  EXPECT_EQ(res[0].tokens, f.reference[0]);
  const auto& m = res[0].metrics;
  EXPECT_EQ(m.accepted, m.drafted);
  EXPECT_GE(m.steps_with_drafts, m.target_forwards - 1);
  // after the first steps every step drafts g = 6 (the room left cuts the last): 80 tokens in at most 14 forwards
  EXPECT_LE(m.target_forwards, 14);
  EXPECT_EQ(m.proposed_at.size(), 6u);
}

TEST(DecoderAdaptive, FollowsAChangeOfAcceptance) {
  // the same request twice with a cheap verification: a good proposer drafts long, a useless one drops to plain steps
  Fixture f(1, 80);
  for (double alpha : {0.9, 0.05}) {
    auto p = f.synthetic(alpha);
    sd::SpeculativeDecoder dec(p, f.target, Fixture::options(8, 0.1));
    const auto res = dec.generate(f.requests);
    EXPECT_EQ(res[0].tokens, f.reference[0]);
    if (alpha > 0.5) {
      EXPECT_GT(dec.metrics().mean_gamma(), 4.0);
    } else {
      EXPECT_LT(res[0].metrics.steps_with_drafts, res[0].metrics.target_forwards / 3);
    }
  }
}

TEST(DecoderAdaptive, OptOutAndOptIn) {
  Fixture f(3, 40);
  auto rs = f.requests;
  rs[1].adaptive = false;  // opts out: drafts g every step even though nothing is accepted
  rs[2].params.temperature = 0.7f;  // sampled: fixed g unless the decoder's `sampled` or the request says otherwise
  auto p = f.synthetic(0.0);
  sd::SpeculativeDecoder dec(p, f.target, Fixture::options(4, 0.2));
  const auto res = dec.generate(rs);
  EXPECT_EQ(res[0].tokens, f.reference[0]);
  EXPECT_EQ(res[1].tokens, f.reference[1]);
  EXPECT_LT(res[0].metrics.steps_with_drafts, res[0].metrics.target_forwards / 3);
  for (const auto* m : {&res[1].metrics, &res[2].metrics}) {
    // 4 drafts every step; only the last steps may draft fewer (or none), where max_new_tokens leaves less room
    EXPECT_GE(m->steps_with_drafts, m->target_forwards - 1);
    EXPECT_GE(m->drafted, 4 * (m->target_forwards - 4));
  }

  // the decoder's policy off, one request opting in (and a sampled one opting in)
  auto o = Fixture::options(4, 0.2);
  o.adaptive.enabled = false;
  rs = f.requests;
  rs[0].adaptive = true;
  rs[2].params.temperature = 0.7f;
  rs[2].adaptive = true;
  auto p2 = f.synthetic(0.0);
  sd::SpeculativeDecoder dec2(p2, f.target, o);
  const auto res2 = dec2.generate(rs);
  EXPECT_EQ(res2[0].tokens, f.reference[0]);
  EXPECT_LT(res2[0].metrics.steps_with_drafts, res2[0].metrics.target_forwards / 3);
  EXPECT_GE(res2[1].metrics.steps_with_drafts, res2[1].metrics.target_forwards - 1);
  EXPECT_LT(res2[2].metrics.steps_with_drafts, res2[2].metrics.target_forwards / 3);

  // bad policy options are refused
  for (auto bad : {+[](sd::DecoderOptions& x) { x.adaptive.acceptance_decay = 0; },
                   +[](sd::DecoderOptions& x) { x.adaptive.cost_decay = 1.5; },
                   +[](sd::DecoderOptions& x) { x.adaptive.probe_interval = 0; },
                   +[](sd::DecoderOptions& x) { x.adaptive.first_probe_interval = 0; },
                   +[](sd::DecoderOptions& x) { x.adaptive.probe_backoff = 0; }}) {
    sd::DecoderOptions x;
    bad(x);
    sp::NoProposer none;
    EXPECT_THROW((sd::SpeculativeDecoder<sp::NoProposer, sm::LlamaModel>(none, f.target, x)), specdec::error);
  }
}

TEST(DecoderAdaptive, SampledRequestsChooseAloneAgainstAFixedCost) {
  // Sampled requests under AdaptiveSpeculation::sampled_cost: drafts that are rejected stop being drafted (plain steps
  // and probes), and each request's g is a function of its own tokens, so its tokens are the same alone, beside other
  // sampled requests, beside a greedy request under the timed (learned) cost model, and run after run.
  Fixture f(3, 60);
  auto sampled = f.requests;
  for (std::size_t b = 0; b < sampled.size(); ++b) {
    sampled[b].params.temperature = 0.7f;
    sampled[b].params.seed = 100 + b;
  }
  auto options = [](bool learned) {
    sd::DecoderOptions o = Fixture::options(6, 0.2);
    if (learned) o.adaptive.forward_seconds = nullptr;  // greedy requests: timed costs
    o.adaptive.sampled_cost = [](std::int64_t rows) { return 1.0 + 0.2 * static_cast<double>(rows); };
    return o;
  };
  auto run = [&](const std::vector<sd::GenerationRequest>& rs, bool learned) {
    auto p = f.synthetic(0.0);
    sd::SpeculativeDecoder dec(p, f.target, options(learned));
    return dec.generate(rs);
  };
  const auto together = run(sampled, false);
  for (std::size_t b = 0; b < sampled.size(); ++b) {
    const auto& m = together[b].metrics;
    EXPECT_LT(m.steps_with_drafts, m.target_forwards / 3) << b;
    EXPECT_GE(m.steps_with_drafts, 3) << b;  // the first steps and probes draft
    EXPECT_EQ(run(std::vector<sd::GenerationRequest>{sampled[b]}, false)[0].tokens, together[b].tokens) << "alone " << b;
  }
  auto mixed = sampled;
  mixed.push_back(f.requests[0]);  // greedy, chosen jointly with timed costs
  for (int round = 0; round < 2; ++round) {
    const auto res = run(mixed, true);
    for (std::size_t b = 0; b < sampled.size(); ++b) EXPECT_EQ(res[b].tokens, together[b].tokens) << "mixed " << b;
    EXPECT_EQ(res.back().tokens, f.reference[0]);
  }
  // without the fixed cost a sampled request drafts g every step
  auto o = options(false);
  o.adaptive.sampled_cost = nullptr;
  auto p = f.synthetic(0.0);
  sd::SpeculativeDecoder dec(p, f.target, o);
  const auto fixed = dec.generate(std::vector<sd::GenerationRequest>{sampled[0]});
  EXPECT_GE(fixed[0].metrics.steps_with_drafts, fixed[0].metrics.target_forwards - 1);
  // a draft cost that is not a finite value >= 0 is refused
  for (const double bad : {-1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    sd::DecoderOptions x;
    x.adaptive.sampled_draft_cost = bad;
    sp::NoProposer none;
    EXPECT_THROW((sd::SpeculativeDecoder<sp::NoProposer, sm::LlamaModel>(none, f.target, x)), specdec::error) << bad;
  }
}

TEST(DecoderAdaptive, GreedyOutputEqualsPlainDecodingWithLearnedCosts) {
  // the policy with costs learned from this run's timed steps: whatever g the timings lead to, greedy output is plain
  // decoding's
  Fixture f(4, 48);
  for (int g : {3, 8}) {
    sd::DecoderOptions o;
    o.num_speculative_tokens = g;
    o.adaptive.enabled = true;
    for (std::int32_t candidates : {1, 3}) {  // chains, and trees (shadow probes compare the first level)
      sp::NgramOptions no;
      no.num_candidates = candidates;
      sp::NgramProposer ngram(no);
      sd::SpeculativeDecoder dec(ngram, f.target, o);
      const auto res = dec.generate(f.requests);
      for (std::size_t b = 0; b < res.size(); ++b)
        EXPECT_EQ(res[b].tokens, f.reference[b]) << "ngram g " << g << " candidates " << candidates << " " << b;
    }
    // The draft model reports confidences: the policy proposes at the bound and cuts by them (confidence_cut), also with
    // chains stopped by min_path_prob.
    for (double min_path : {0.0, 0.2}) {
      auto other = tiny_model(32);
      sp::DraftModelOptions dopt;
      dopt.min_path_prob = min_path;
      sp::DraftModelProposer<sm::LlamaModel> draft(other, dopt);
      sd::SpeculativeDecoder dec2(draft, f.target, o);
      const auto res2 = dec2.generate(f.requests);
      for (std::size_t b = 0; b < res2.size(); ++b)
        EXPECT_EQ(res2[b].tokens, f.reference[b]) << "draft g " << g << " min_path_prob " << min_path << " " << b;
    }
  }
}

TEST(SyntheticProposer, DraftsAreAcceptedAtTheChosenRate) {
  // per draft position i, P(accepted) = alpha^i: the geometric model of theory::expected_tokens_per_step
  Fixture f(2, 200);
  for (double alpha : {0.0, 0.5, 0.8, 1.0}) {
    auto p = f.synthetic(alpha);
    auto o = Fixture::options(4, 0.1);
    o.adaptive.enabled = false;
    sd::SpeculativeDecoder dec(p, f.target, o);
    const auto res = dec.generate(f.requests);
    for (std::size_t b = 0; b < res.size(); ++b) EXPECT_EQ(res[b].tokens, f.reference[b]) << alpha;
    const auto by_pos = dec.metrics().total.acceptance_by_position();
    ASSERT_EQ(by_pos.size(), 4u);
    // ~100 steps: accepted_at[0] / proposed_at[0] estimates alpha with sd <= 0.05
    EXPECT_NEAR(by_pos[0], alpha, 0.16) << alpha;
    EXPECT_NEAR(dec.metrics().total.mean_accepted_length(), specdec::theory::expected_tokens_per_step(alpha, 4),
                0.35 + 0.1 * alpha * 4)
        << alpha;
  }
  EXPECT_THROW(sp::SyntheticProposer(64, 1.5), specdec::error);
  EXPECT_THROW(sp::SyntheticProposer(1, 0.5), specdec::error);
}


// A CausalLM that records what the profiler asks of it (no arithmetic, so nothing below depends on timings).
struct RecordingModel {
  std::int64_t vocab = 50, allocated = 0, freed = 0, length = 0, throw_at = -1;
  std::vector<std::int64_t> rows;        // new rows of each forward
  std::vector<std::int64_t> truncated;   // lengths truncated to
  std::int64_t vocab_size() const { return vocab; }
  specdec::models::ForwardOutput forward(const specdec::models::ForwardBatch& b) {
    if (static_cast<std::int64_t>(rows.size()) == throw_at) throw std::runtime_error("forward failed");
    EXPECT_EQ(b.slots.size(), 1u);
    EXPECT_EQ(b.cu_num_tokens.size(), 2u);
    for (const auto t : b.token_ids) EXPECT_TRUE(t >= 0 && t < vocab);
    rows.push_back(static_cast<std::int64_t>(b.token_ids.size()));
    length += rows.back();
    return {};
  }
  std::int64_t allocate_sequence() { return ++allocated; }
  void free_sequence(std::int64_t) { ++freed; }
  void truncate(std::int64_t, std::int64_t l) {
    truncated.push_back(l);
    length = l;
  }
};
static_assert(specdec::models::CausalLM<RecordingModel>);

TEST(CostProfile, TimesEverySizeBetweenOneRowForwardsAndReleasesTheSlot) {
  RecordingModel m;
  const auto p = sd::profile_forward_seconds(m, 5, 32, 3);
  ASSERT_EQ(p.size(), 5u);
  for (std::size_t i = 1; i < p.size(); ++i) EXPECT_GE(p[i], p[i - 1]) << i;  // non-decreasing
  EXPECT_GT(p[0], 0.0);
  // the context once, a warm-up of sizes 1..5, then 3 rounds of (1, 1, t, 1) for t = 1..5, each rolled back
  ASSERT_EQ(m.rows.size(), 1u + 5u + 3u * 5u * 4u);
  EXPECT_EQ(m.rows[0], 32);
  for (std::size_t i = 1; i <= 5; ++i) EXPECT_EQ(m.rows[i], static_cast<std::int64_t>(i)) << i;
  for (std::size_t i = 6; i < m.rows.size(); ++i) {
    const std::size_t k = i - 6, t = k / 4 % 5 + 1;
    EXPECT_EQ(m.rows[i], k % 4 == 2 ? static_cast<std::int64_t>(t) : 1) << i;
  }
  ASSERT_EQ(m.truncated.size(), 65u);
  for (const auto l : m.truncated) EXPECT_EQ(l, 32);
  EXPECT_EQ(m.allocated, 1);
  EXPECT_EQ(m.freed, 1);
}

// A clock that only moves when TimedModel says its forward took time.
struct ModelClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ModelClock>;
  static constexpr bool is_steady = true;
  static inline duration elapsed{0};
  static time_point now() { return time_point(elapsed); }
};

// A model whose forwards take known times on ModelClock: 1 ms for a 1-row forward, 1 + 0.25 (t - 1) ms for t rows, and
// 0.5 ms more for a 1-row forward right after a forward of several rows (what this project's host does after dense
// work).
struct TimedModel : RecordingModel {
  std::int64_t last_rows = 1;
  specdec::models::ForwardOutput forward(const specdec::models::ForwardBatch& b) {
    const auto t = static_cast<std::int64_t>(b.token_ids.size());
    const double ms = t == 1 ? (last_rows > 1 ? 1.5 : 1.0) : 1.0 + 0.25 * static_cast<double>(t - 1);
    last_rows = t;
    ModelClock::elapsed += std::chrono::nanoseconds(static_cast<std::int64_t>(ms * 1e6));
    return RecordingModel::forward(b);
  }
};

// The profile prices what a step costs a mostly plain decode: a 1-row forward among 1-row forwards, and a t-row
// forward plus what it adds to the 1-row forward after it. (Timing sizes 1, 2, .. back to back priced the 1-row forward
// after the largest one: 1.5 ms here, and every verification at or below it.)
TEST(CostProfile, PricesOneRowForwardsAmongOneRowForwardsAndChargesAVerificationItsAfterEffect) {
  TimedModel m;
  const auto p = sd::profile_forward_seconds<ModelClock>(m, 4, 16, 5);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_NEAR(p[0], 1.0e-3, 1e-9);  // not the 1.5 ms a 1-row forward takes after a larger one
  for (std::size_t i = 1; i < p.size(); ++i)  // the t-row forward and the next one's extra 0.5 ms
    EXPECT_NEAR(p[i], (1.0 + 0.25 * static_cast<double>(i) + 0.5) * 1e-3, 1e-9) << i;
}

// The same with a context window (models::HasMaxSequenceLength): the profile fits inside it.
struct ShortWindowModel : RecordingModel {
  std::int64_t window = 6;
  std::int64_t max_sequence_length() const { return window; }
};

TEST(CostProfile, StaysInsideTheModelsContextWindow) {
  ShortWindowModel m;
  const auto p = sd::profile_forward_seconds(m, 9, 128, 1);
  ASSERT_EQ(p.size(), 5u);  // at most window - 1 rows after at least one cached token
  EXPECT_EQ(m.rows[0], 1);  // the context shrank to what is left
  for (std::size_t i = 1; i < m.rows.size(); ++i) EXPECT_LE(m.rows[0] + m.rows[i], m.window) << i;
}

// The progress callback sees the warm-up round and every timed round, in order, after its forwards ran.
TEST(CostProfile, ReportsProgressAfterEachRound) {
  RecordingModel m;
  std::vector<std::pair<int, int>> calls;
  std::vector<std::size_t> forwards_at_call;
  const auto p = sd::profile_forward_seconds(m, 3, 8, 2, [&](int done, int total) {
    calls.emplace_back(done, total);
    forwards_at_call.push_back(m.rows.size());
  });
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(calls, (std::vector<std::pair<int, int>>{{1, 3}, {2, 3}, {3, 3}}));
  ASSERT_EQ(forwards_at_call.size(), 3u);
  EXPECT_EQ(forwards_at_call.back(), m.rows.size());  // the last call comes after the last forward
  EXPECT_LT(forwards_at_call[0], forwards_at_call[1]);
}

TEST(CostProfile, ReleasesTheSlotWhenAForwardThrows) {
  RecordingModel m;
  m.throw_at = 3;
  EXPECT_THROW(sd::profile_forward_seconds(m, 4, 8, 2), std::runtime_error);
  EXPECT_EQ(m.allocated, 1);
  EXPECT_EQ(m.freed, 1);
}

TEST(CostProfile, CostFunctionReadsTheProfileAndExtendsItByTheLastSlope) {
  const auto f = sd::forward_cost_from_profile({1.0, 1.1, 1.3, 1.6});
  EXPECT_DOUBLE_EQ(f(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(f(1, 3), 1.3);
  EXPECT_DOUBLE_EQ(f(2, 4), 1.6);  // rows of the whole batch
  EXPECT_DOUBLE_EQ(f(1, 6), 1.6 + 2 * 0.3);
  EXPECT_DOUBLE_EQ(f(1, 0), 1.0);
  const auto one = sd::forward_cost_from_profile({2.0});
  EXPECT_DOUBLE_EQ(one(1, 3), 6.0);
  // the policy over a profile: cheap rows up to 4, expensive after, all drafts accepted -> stops where the rows jump
  sd::AcceptanceEstimate all;
  for (int i = 0; i < 60; ++i) all.observe(8, 8);
  std::vector<double> tokens(9);
  all.expected_tokens(tokens);
  const sd::LengthChoice c{8, false, 1.0, tokens};
  const auto jump = sd::forward_cost_from_profile({1.0, 1.05, 1.1, 1.15, 3.0, 3.1, 3.2, 3.3, 3.4});
  EXPECT_EQ(sd::choose_draft_lengths({&c, 1}, jump, 0.0)[0], 3);
}

}  // namespace
