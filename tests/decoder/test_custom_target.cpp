// The worked example examples/custom-target/: a user's own CausalLM on ATen ops, driven by SpeculativeDecoder. Greedy
// speculative output (n-gram chains and trees, a draft model of the same kind) equals plain decoding of the same model,
// a request's sampled tokens do not depend on its batch, and the same holds on CUDA where a device is present.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/torch/device_backend.hpp"
#include "specdec/torch/rows.hpp"
#include "tiny_transformer.hpp"

namespace {

namespace sd = specdec::decoder;
namespace sp = specdec::proposers;

std::vector<sd::GenerationRequest> requests(float temperature) {
  std::vector<sd::GenerationRequest> rs;
  for (int b = 0; b < 3; ++b) {
    sd::GenerationRequest r;
    for (int i = 0; i < 20 + 7 * b; ++i) r.prompt.push_back((i * (5 + b)) % (11 + b) + 3);
    r.max_new_tokens = 40;
    r.params.temperature = temperature;
    r.params.seed = 100 + static_cast<std::uint64_t>(b);
    rs.push_back(r);
  }
  return rs;
}

template <class Proposer>
std::vector<std::vector<std::int64_t>> generate(Proposer& p, custom::TinyTransformer& target,
                                                const std::vector<sd::GenerationRequest>& rs, int g) {
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  o.device_backend = specdec::torch::make_device_backend;  // the target's rows on CUDA (unused on the CPU)
  sd::SpeculativeDecoder dec(p, target, o);
  std::vector<std::vector<std::int64_t>> out;
  for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
  return out;
}

void greedy_equals_plain(at::Device device) {
  custom::TinyTransformer target(256, 32, 3, device);
  const auto rs = requests(0.0f);
  sp::NoProposer none;
  const auto plain = generate(none, target, rs, 0);
  for (int candidates : {1, 3}) {  // 3: n-gram matches as sibling branches of a tree
    sp::NgramOptions no;
    no.num_candidates = candidates;
    sp::NgramProposer ngram(no);
    for (int g : {1, 4, 8}) EXPECT_EQ(generate(ngram, target, rs, g), plain) << "candidates " << candidates << " g " << g;
  }
  custom::TinyTransformer draft_model(256, 32, 4, device);  // an unrelated draft: mostly rejected, still exact
  sp::DraftModelOptions dopts;
  dopts.rows_to_host = specdec::torch::rows_to_host_float32;  // the draft's logits on the device come down per draft
  sp::DraftModelProposer<custom::TinyTransformer> draft(draft_model, dopts);
  EXPECT_EQ(generate(draft, target, rs, 3), plain);
}

TEST(CustomTarget, GreedySpeculativeEqualsPlainOnCpu) { greedy_equals_plain(at::kCPU); }

TEST(CustomTarget, SampledTokensDoNotDependOnTheBatch) {
  custom::TinyTransformer target(256, 32, 5, at::kCPU);
  const auto rs = requests(1.0f);
  sp::NgramProposer ngram;
  const auto together = generate(ngram, target, rs, 4);
  for (std::size_t b = 0; b < rs.size(); ++b) EXPECT_EQ(generate(ngram, target, {rs[b]}, 4)[0], together[b]) << b;
}

TEST(CustomTarget, GreedySpeculativeEqualsPlainOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  greedy_equals_plain(at::Device(at::kCUDA, 0));
}

// A target with only the members every target needs: no keep_path, no sequence_length, no hidden_size.
struct ChainOnly {
  custom::TinyTransformer* m;
  std::int64_t vocab_size() const { return m->vocab_size(); }
  specdec::models::ForwardOutput forward(const specdec::models::ForwardBatch& b) { return m->forward(b); }
  std::int64_t allocate_sequence() { return m->allocate_sequence(); }
  void free_sequence(std::int64_t slot) { m->free_sequence(slot); }
  void truncate(std::int64_t slot, std::int64_t length) { m->truncate(slot, length); }
};
static_assert(specdec::models::CausalLM<ChainOnly> && !specdec::models::TreeCausalLM<ChainOnly>);
static_assert(specdec::models::TreeCausalLM<custom::TinyTransformer>);

TEST(CustomTarget, ChainOnlyTargetRunsChainsAndRefusesTrees) {
  custom::TinyTransformer model(256, 32, 3);
  ChainOnly target{&model};
  const auto rs = requests(0.0f);
  sp::NoProposer none;
  sd::SpeculativeDecoder plain_dec(none, target);
  std::vector<std::vector<std::int64_t>> plain;
  for (auto& r : plain_dec.generate(rs)) plain.push_back(r.tokens);
  sp::NgramProposer chains;
  sd::DecoderOptions o;
  o.num_speculative_tokens = 4;
  o.adaptive.enabled = false;  // draft every step, so the tree proposer reaches the target
  sd::SpeculativeDecoder dec(chains, target, o);
  std::vector<std::vector<std::int64_t>> spec;
  for (auto& r : dec.generate(rs)) spec.push_back(r.tokens);
  EXPECT_EQ(spec, plain);
  sp::NgramOptions no;
  no.num_candidates = 3;  // sibling branches: a tree the target cannot take back
  sp::NgramProposer trees(no);
  sd::SpeculativeDecoder tree_dec(trees, target, o);
  try {
    (void)tree_dec.generate(rs);
    ADD_FAILURE() << "no error";
  } catch (const specdec::error& e) {
    EXPECT_NE(std::string(e.what()).find("TreeCausalLM"), std::string::npos) << e.what();
  }
}

TEST(CustomTarget, BadSlotIsAnError) {
  custom::TinyTransformer target(64, 16, 1);
  EXPECT_THROW(target.sequence_length(0), std::invalid_argument);
  const auto slot = target.allocate_sequence();
  EXPECT_THROW(target.forward(specdec::models::make_chain_batch(slot, {1, 64})), specdec::error);  // id out of range
  EXPECT_EQ(target.sequence_length(slot), 0);
}

}  // namespace
