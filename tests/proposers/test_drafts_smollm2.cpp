// The bundled drafts of SmolLM2-135M-Instruct (models/smollm2-135m-eagle, models/smollm2-135m-draft) on the target's packed
// kernels, against the real target (skipped when the GGUF file is absent):
//  - the packed EAGLE head (Q8_0 weights, 16- and 8-bit activations) agrees with the float32 head on the target's own
//    features of a real text, and the packed draft model with the float32 draft model: the argmax of nearly every row,
//    and logits within a few percent of their range;
//  - a request's draft logits are bit-identical alone and beside other requests (a chain step, a tree level, a batch of
//    draft-model steps);
//  - greedy speculative decoding with either packed draft (EAGLE chains and trees, the draft model; 2 requests in a batch)
//    emits exactly the tokens of greedy autoregressive decoding.
// Tolerances: Q8_0 rounds each weight to a step of max|w| / 127 per block of 32; through a layer and the LM head that
// moves logits by about 1% of their range, and changes the argmax only where the best two are that close. 8-bit
// activations add the same again.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "eagle_tensors.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/eagle.hpp"
#include "specdec/torch/rows.hpp"

namespace sp = specdec::proposers;
namespace sm = specdec::models;
namespace sd = specdec::decoder;
namespace fs = std::filesystem;

using specdec::test::forward;
using specdec::test::rows;

namespace {

fs::path models_dir() { return fs::path(SPECDEC_MODELS_DIR); }
fs::path target_path() { return models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"; }

class DraftsSmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(target_path())) return;
    target_ = std::make_unique<sm::LlamaModel>(sm::load_llama_gguf(target_path()));
    const sm::GgufFile file(target_path());
    tokenizer_ = std::make_unique<sm::Tokenizer>(sm::Tokenizer::from_gguf(file));
    weights_ = std::make_unique<sp::EagleTargetWeights>(sp::eagle_target_weights_from_gguf(target_path()));
  }
  static void TearDownTestSuite() {
    target_.reset();
    tokenizer_.reset();
    weights_.reset();
  }
  void SetUp() override {
    if (!target_) GTEST_SKIP() << "model file " << target_path() << " is absent (run scripts/setup.sh to download it)";
  }
  static std::vector<std::int64_t> tokens(const std::string& text) {
    const auto ids = tokenizer_->encode(text);
    return {ids.begin(), ids.end()};
  }
  static sp::EagleHead eagle(bool packed, int bits = 16) {
    sp::EagleHeadOptions o;
    o.quantize_weights = packed;
    o.activation_bits = bits;
    return sp::load_eagle_head(models_dir() / "smollm2-135m-eagle", *weights_, o);
  }
  // The draft model as specdec-generate loads it: scoring its checkpoint's output vocabulary (d2t).
  static sm::LlamaModel draft_model(bool packed) {
    sm::LlamaOptions o;
    o.quantize_float_weights = packed;
    o.output_ids = sm::read_output_ids(models_dir() / "smollm2-135m-draft");
    return sm::load_llama_safetensors(models_dir() / "smollm2-135m-draft", o);
  }
  // The target's post-norm final hidden state of every token of `ids` ([n, H]: what the EAGLE-1 head reads).
  static at::Tensor features(const std::vector<std::int64_t>& ids) {
    const std::int64_t slot = target_->allocate_sequence();
    sm::ForwardBatch b = sm::make_chain_batch(slot, ids);
    b.return_final_hidden = true;
    at::Tensor f = specdec::torch::tensor_of(target_->forward(b).hidden_post_norm);
    target_->free_sequence(slot);
    return f;
  }
  static std::unique_ptr<sm::LlamaModel> target_;
  static std::unique_ptr<sm::Tokenizer> tokenizer_;
  static std::unique_ptr<sp::EagleTargetWeights> weights_;
};
std::unique_ptr<sm::LlamaModel> DraftsSmolLM2::target_;
std::unique_ptr<sm::Tokenizer> DraftsSmolLM2::tokenizer_;
std::unique_ptr<sp::EagleTargetWeights> DraftsSmolLM2::weights_;

const char* kText =
    "The old lighthouse keeper climbed the spiral stairs every evening to light the lamp. Ships passing the rocky coast "
    "relied on its beam, and for forty years it had never failed. One stormy night the wind howled so loudly that he could "
    "not hear the waves, but he kept the light burning until dawn.";

// The head's logits over a real text: row i reads the target's feature of token i and the embedding of token i + 1.
at::Tensor head_logits(sp::EagleHead& head, const std::vector<std::int64_t>& ids, const at::Tensor& f) {
  const auto n = static_cast<std::int64_t>(ids.size()) - 1;
  sp::EagleHeadBatch b;
  b.slots = {head.allocate_sequence()};
  b.cu_num_tokens = {0, n};
  b.token_ids.assign(ids.begin() + 1, ids.end());
  b.features = rows(f.narrow(0, 0, n));
  b.commit = true;
  return forward(head, b).logits;
}

// Share of rows whose argmax agrees, and max |a - b| / max |a|.
std::pair<double, double> agreement(const at::Tensor& a, const at::Tensor& b) {
  const double top1 = a.argmax(1).eq(b.argmax(1)).to(at::kDouble).mean().item<double>();
  const double rel = (a - b).abs().max().item<double>() / a.abs().max().item<double>();
  return {top1, rel};
}

}  // namespace

TEST_F(DraftsSmolLM2, PackedEagleHeadAgreesWithTheFloatHead) {
  const auto ids = tokens(kText);
  ASSERT_GT(ids.size(), 40u);
  const at::Tensor f = features(ids);
  sp::EagleHead reference = eagle(false);
  const at::Tensor want = head_logits(reference, ids, f);
  for (int bits : {16, 8}) {
    SCOPED_TRACE("activations " + std::to_string(bits) + " bits");
    sp::EagleHead packed = eagle(true, bits);
    const at::Tensor got = head_logits(packed, ids, f);
    ASSERT_EQ(got.sizes(), want.sizes());
    const auto [top1, rel] = agreement(want, got);
    std::printf("EAGLE head, Q8_0, %d-bit activations: top-1 agreement %.3f, max |diff| %.4f of the logits' range\n", bits, top1, rel);
    EXPECT_GE(top1, 0.9);
    EXPECT_LT(rel, 0.05);
    EXPECT_GT(rel, 0.0) << "the packed head should not be the float head";
  }
}

TEST_F(DraftsSmolLM2, PackedDraftModelAgreesWithTheFloatModel) {
  const auto ids = tokens(kText);
  sm::LlamaModel reference = draft_model(false), packed = draft_model(true);
  EXPECT_EQ(reference.kernel_name(), "float32");
  EXPECT_NE(packed.kernel_name(), "float32");
  const at::Tensor want = specdec::torch::tensor_of(reference.forward(sm::make_chain_batch(reference.allocate_sequence(), ids)).logits);
  const at::Tensor got = specdec::torch::tensor_of(packed.forward(sm::make_chain_batch(packed.allocate_sequence(), ids)).logits);
  const auto [top1, rel] = agreement(want, got);
  std::printf("draft model, Q8_0: top-1 agreement %.3f, max |diff| %.4f of the logits' range\n", top1, rel);
  EXPECT_GE(top1, 0.9);
  EXPECT_LT(rel, 0.05);
  EXPECT_GT(rel, 0.0);
}

// (ctest runs this again on the other instruction sets.)
TEST_F(DraftsSmolLM2, PackedDraftLogitsAreBatchInvariant) {
  const auto a = tokens(kText), b = tokens("Write a haiku about autumn leaves falling into a quiet river.");
  const at::Tensor fa = features(a), fb = features(b);
  for (int bits : {16, 8}) {
    SCOPED_TRACE("EAGLE head, activations " + std::to_string(bits) + " bits");
    sp::EagleHead head = eagle(true, bits);
    const std::int64_t sa = head.allocate_sequence(), sb = head.allocate_sequence();
    auto commit = [&](std::int64_t slot, const std::vector<std::int64_t>& ids, const at::Tensor& f) {
      sp::EagleHeadBatch c;
      c.slots = {slot};
      const auto n = static_cast<std::int64_t>(ids.size()) - 1;
      c.cu_num_tokens = {0, n};
      c.token_ids.assign(ids.begin() + 1, ids.end());
      c.features = rows(f.narrow(0, 0, n));
      c.commit = true;
      return forward(head, c);
    };
    const auto ca = commit(sa, a, fa), cb = commit(sb, b, fb);
    const at::Tensor ha = ca.hidden.narrow(0, ca.hidden.size(0) - 1, 1), hb = cb.hidden.narrow(0, cb.hidden.size(0) - 1, 1);
    const std::int64_t la = head.sequence_length(sa), lb = head.sequence_length(sb);
    // A's tree level of 4 children alone, then beside B's chain step.
    sp::EagleHeadBatch alone;
    alone.slots = {sa};
    alone.cu_num_tokens = {0, 4};
    alone.token_ids = {504, 1098, 30, 7};
    alone.features = rows(ha.expand({4, ha.size(1)}));
    alone.features_are_head_hidden = true;
    alone.parents = {{-1, -1, -1, -1}};
    const at::Tensor want = forward(head, alone).logits;
    head.truncate(sa, la);
    sp::EagleHeadBatch both;
    both.slots = {sb, sa};
    both.cu_num_tokens = {0, 1, 5};
    both.token_ids = {11, 504, 1098, 30, 7};
    both.features = rows(at::cat({hb, specdec::torch::tensor_of(alone.features)}, 0));
    both.features_are_head_hidden = true;
    both.parents = {{-1}, {-1, -1, -1, -1}};
    EXPECT_TRUE(at::equal(forward(head, both).logits.narrow(0, 1, 4), want));
    head.truncate(sa, la);
    head.truncate(sb, lb);
  }
  {
    SCOPED_TRACE("draft model");
    sm::LlamaModel m = draft_model(true);
    std::vector<std::int64_t> slots;
    for (const auto* ids : {&a, &b, &a}) {
      slots.push_back(m.allocate_sequence());
      m.forward(sm::make_chain_batch(slots.back(), *ids));
    }
    const at::Tensor alone = specdec::torch::tensor_of(m.forward(sm::make_chain_batch(slots[0], {42})).logits);
    m.truncate(slots[0], static_cast<std::int64_t>(a.size()));
    sm::ForwardBatch batch;
    batch.slots = {slots[1], slots[0], slots[2]};
    batch.cu_num_tokens = {0, 1, 2, 3};
    batch.token_ids = {7, 42, 9};
    const at::Tensor together = specdec::torch::tensor_of(m.forward(batch).logits);
    EXPECT_TRUE(at::equal(together.narrow(0, 1, 1), alone));
  }
}

TEST_F(DraftsSmolLM2, GreedySpeculationWithPackedDraftsEqualsAutoregressive) {
  std::vector<sd::GenerationRequest> requests;
  for (const char* text : {"Question: what do bees make from flower nectar? Answer:", "A short list of fruits: apples,"}) {
    sd::GenerationRequest r;
    r.prompt = tokens(text);
    r.max_new_tokens = 32;
    r.params.temperature = 0.f;
    requests.push_back(r);
  }
  std::vector<std::vector<std::int64_t>> want;
  {
    sp::NoProposer none;
    sd::SpeculativeDecoder dec(none, *target_);
    for (const auto& r : dec.generate(requests)) want.push_back(r.tokens);
  }
  sd::DecoderOptions o;
  o.num_speculative_tokens = 4;
  for (auto mode : {sp::EagleDraftMode::kChain, sp::EagleDraftMode::kTree}) {
    SCOPED_TRACE(mode == sp::EagleDraftMode::kChain ? "EAGLE chain" : "EAGLE tree");
    sp::EagleProposerOptions eo;
    eo.mode = mode;
    eo.target_num_layers = target_->config().num_layers;
    sp::EagleProposer eagle_proposer(eagle(true), eo);
    sd::SpeculativeDecoder dec(eagle_proposer, *target_, o);
    const auto res = dec.generate(requests);
    for (std::size_t i = 0; i < res.size(); ++i) EXPECT_EQ(res[i].tokens, want[i]) << "request " << i;
    EXPECT_GT(dec.metrics().total.accepted, 0);
  }
  {
    SCOPED_TRACE("draft model");
    sm::LlamaModel m = draft_model(true);
    sp::DraftModelOptions d;
    d.output_ids = m.output_ids();
    sp::DraftModelProposer<sm::LlamaModel> draft(m, target_->vocab_size(), d);
    sd::SpeculativeDecoder dec(draft, *target_, o);
    const auto res = dec.generate(requests);
    for (std::size_t i = 0; i < res.size(); ++i) EXPECT_EQ(res[i].tokens, want[i]) << "request " << i;
    EXPECT_GT(dec.metrics().total.accepted, 0);
  }
}
