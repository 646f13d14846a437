// SpeculativeDecoder without libtorch: a target written in plain C++ (examples/plain-target/plain_lm.hpp) driven with the
// lookup proposers, linked to specdec::decoder alone. Greedy speculative output equals plain decoding, a request's sampled
// tokens do not depend on its batch, the first sampled token keeps the target's law (6 sigma per category), and rows on
// a device go through DecoderOptions::device_backend (named in the error when it is missing).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "plain_lm.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/proposers/suffix.hpp"

namespace {

namespace sd = specdec::decoder;
namespace sp = specdec::proposers;

constexpr std::int64_t kVocab = 24;

std::vector<sd::GenerationRequest> requests(float temperature, int count = 3) {
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < count; ++b) {
    sd::GenerationRequest r;
    for (int i = 0; i < 12 + 5 * b; ++i) r.prompt.push_back((i * (5 + b)) % (7 + b) + 1);
    r.max_new_tokens = 48;
    r.params.temperature = temperature;
    r.params.seed = 100 + static_cast<std::uint64_t>(b);
    rs.push_back(r);
  }
  return rs;
}

template <class Proposer, class Target>
std::vector<std::vector<std::int64_t>> generate(Proposer& p, Target& target, const std::vector<sd::GenerationRequest>& rs,
                                                int g, sd::DecoderOptions o = {}) {
  o.num_speculative_tokens = g;
  sd::SpeculativeDecoder dec(p, target, o);
  std::vector<std::vector<std::int64_t>> out;
  for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
  return out;
}

TEST(DecoderHost, GreedySpeculativeEqualsPlain) {
  plain::PlainLM target(kVocab, 7);
  const auto rs = requests(0.0f);
  sp::NoProposer none;
  const auto want = generate(none, target, rs, 0);
  std::int64_t accepted = 0;
  for (int g : {1, 4, 8}) {
    sp::NgramProposer ngram;
    sd::SpeculativeDecoder dec(ngram, target, [&] {
      sd::DecoderOptions o;
      o.num_speculative_tokens = g;
      return o;
    }());
    std::vector<std::vector<std::int64_t>> got;
    for (auto& r : dec.generate(rs)) {
      got.push_back(r.tokens);
      accepted += r.metrics.accepted;
    }
    EXPECT_EQ(got, want) << "ngram g " << g;
    sp::SuffixProposer suffix;
    EXPECT_EQ(generate(suffix, target, rs, g), want) << "suffix g " << g;
  }
  EXPECT_GT(accepted, 0);  // the drafts were used, not only proposed
}

TEST(DecoderHost, SampledTokensDoNotDependOnTheBatch) {
  plain::PlainLM target(kVocab, 11, 1.5f);
  const auto rs = requests(1.0f);
  sp::NgramProposer ngram;
  const auto together = generate(ngram, target, rs, 4);
  for (std::size_t b = 0; b < rs.size(); ++b) EXPECT_EQ(generate(ngram, target, {rs[b]}, 4)[0], together[b]) << b;
}

// The first token after a prompt whose n-gram match drafts a continuation: accepted or recovered, it is distributed as
// the target's softmax at temperature 1.
TEST(DecoderHost, FirstSampledTokenKeepsTheTargetsLaw) {
  plain::PlainLM target(kVocab, 3, 1.0f);
  const std::vector<std::int64_t> prompt{1, 2, 3, 1, 2, 3, 1, 2};
  // The target's law after the prompt.
  std::vector<double> p(static_cast<std::size_t>(kVocab));
  {
    const auto slot = target.allocate_sequence();
    auto out = target.forward(specdec::models::make_chain_batch(slot, prompt));
    const float* l = out.logits.host_row(out.logits.rows() - 1);
    double m = l[0], z = 0;
    for (std::int64_t j = 0; j < kVocab; ++j) m = std::max(m, static_cast<double>(l[j]));
    for (std::int64_t j = 0; j < kVocab; ++j) z += p[static_cast<std::size_t>(j)] = std::exp(l[j] - m);
    for (auto& x : p) x /= z;
    target.free_sequence(slot);
  }
  const int n = 6000;
  std::vector<double> count(static_cast<std::size_t>(kVocab), 0);
  std::int64_t drafted = 0;
  sp::NgramProposer ngram;
  sd::DecoderOptions o;
  o.num_speculative_tokens = 3;
  sd::SpeculativeDecoder dec(ngram, target, o);
  for (int start = 0; start < n; start += 500) {
    std::vector<sd::GenerationRequest> rs;
    for (int i = start; i < start + 500; ++i) {
      sd::GenerationRequest r;
      r.prompt = prompt;
      r.max_new_tokens = 2;  // room for a draft (a step drafts at most the tokens left but one)
      r.params.temperature = 1.0f;
      r.params.seed = 1000 + static_cast<std::uint64_t>(i);
      rs.push_back(r);
    }
    for (auto& r : dec.generate(rs)) {
      ++count[static_cast<std::size_t>(r.tokens.at(0))];
      drafted += r.metrics.drafted;
    }
  }
  EXPECT_GT(drafted, 0);
  for (std::int64_t j = 0; j < kVocab; ++j) {
    const double pj = p[static_cast<std::size_t>(j)], sd6 = 6 * std::sqrt(n * pj * (1 - pj)) + 1;
    EXPECT_NEAR(count[static_cast<std::size_t>(j)], n * pj, sd6) << "token " << j;
  }
}

// The plain target's rows labelled as on a GPU (the bytes stay in host memory): the decoder hands them to the backend.
struct FakeDeviceLM : plain::PlainLM {
  using plain::PlainLM::PlainLM;
  specdec::models::ForwardOutput forward(const specdec::models::ForwardBatch& batch) {
    auto out = plain::PlainLM::forward(batch);
    specdec::RowsView v = out.logits.view();
    v.device = {specdec::DeviceType::kCuda, 0};
    out.logits = specdec::Rows(v, out.logits.owner());
    return out;
  }
};

// A backend that relabels the rows as host rows and verifies them on the host: every step must go through it.
struct RelabelBackend : sd::DeviceBackend {
  int* calls;
  explicit RelabelBackend(int* c) : calls(c) {}
  static specdec::Rows host(const specdec::Rows& r) {
    specdec::RowsView v = r.view();
    v.device = {};
    return specdec::Rows(v, r.owner());
  }
  sd::Verified verify(const sp::DraftBatch& d, const specdec::Rows& logits,
                      std::span<const specdec::SamplingParams* const> params, std::span<const std::int64_t> positions,
                      specdec::VerifyMethod method, bool expected) override {
    ++*calls;
    std::vector<std::uint8_t> block(params.size(), method == specdec::VerifyMethod::kBlock ? 1 : 0);
    return sd::detail::verify(d, host(logits), params, positions, block, expected);
  }
  specdec::Rows select_rows(const specdec::Rows&, std::span<const std::int64_t>) override {
    throw specdec::error(specdec::Status::kInvalidArgument, "not used");
  }
  specdec::Rows to_host_float32(const specdec::Rows& r) override { return host(r); }
};

TEST(DecoderHost, RowsOnADeviceGoThroughTheBackend) {
  FakeDeviceLM target(kVocab, 7);
  const auto rs = requests(0.0f);
  sp::NgramProposer ngram;
  try {
    generate(ngram, target, rs, 4);
    ADD_FAILURE() << "rows on a device without a backend were accepted";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("DecoderOptions::device_backend"), std::string::npos) << e.what();
  }
  int calls = 0;
  sd::DecoderOptions o;
  o.device_backend = [&calls] { return std::make_unique<RelabelBackend>(&calls); };
  plain::PlainLM host_target(kVocab, 7);
  sp::NoProposer none;
  EXPECT_EQ(generate(ngram, target, rs, 4, o), generate(none, host_target, rs, 0));
  EXPECT_GT(calls, 0);
}

}  // namespace
