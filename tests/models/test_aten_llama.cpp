// AtenLlamaModel, the Llama block on ATen ops: against LlamaModel on the same weights (float32 CPU: the same function to
// float rounding), its own chain / tree / cache consistency, hidden states, bad input, the bundled SmolLM2 GGUF (logits
// against the packed CPU forward, greedy speculative output equal to plain decoding) and, where a GPU is present, CUDA.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/torch/aten_llama.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/proposers/ngram.hpp"
#include "specdec/torch/rows.hpp"

#if defined(SPECDEC_TORCH_HAS_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#endif

namespace {

namespace sm = specdec::models;

sm::LlamaConfig tiny_config() {
  sm::LlamaConfig c;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.max_position_embeddings = 256;
  c.rope_theta = 10000.0;
  return c;
}

sm::ForwardOutput run(auto& m, std::int64_t slot, std::vector<std::int64_t> tokens, std::vector<std::int32_t> parents = {},
                      std::vector<std::int64_t> hidden_layers = {}) {
  sm::ForwardBatch b = sm::make_chain_batch(slot, std::move(tokens));
  if (!parents.empty()) b.parents = {std::move(parents)};
  b.hidden_layers = std::move(hidden_layers);
  b.return_final_hidden = !b.hidden_layers.empty();
  return m.forward(b);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a.cpu() - b.cpu()).abs().max().item<double>(); }

TEST(AtenLlama, MatchesLlamaModelOnTheSameWeights) {
  const auto c = tiny_config();
  const auto weights = sm::random_llama_weights(c, 11);
  sm::LlamaOptions float_cache;  // AtenLlamaModel keeps float32 keys and values: compare with the same cache
  float_cache.kv_cache_half = false;
  sm::LlamaModel ref(c, weights, float_cache);
  sm::AtenLlamaModel m(c, weights);
  const auto rs = ref.allocate_sequence(), ms = m.allocate_sequence();
  const std::vector<std::int64_t> prompt = {5, 17, 3, 88, 42, 42, 7, 1, 60, 2, 9};
  auto a = run(ref, rs, prompt, {}, {0, 2}), b = run(m, ms, prompt, {}, {0, 2});
  EXPECT_LT(max_diff(specdec::torch::tensor_of(a.logits), specdec::torch::tensor_of(b.logits)), 2e-4);
  for (int i = 0; i < 2; ++i) EXPECT_LT(max_diff(specdec::torch::tensor_of(a.layer_hidden[i]), specdec::torch::tensor_of(b.layer_hidden[i])), 2e-4) << i;
  EXPECT_LT(max_diff(specdec::torch::tensor_of(a.hidden_pre_norm), specdec::torch::tensor_of(b.hidden_pre_norm)), 2e-4);
  EXPECT_LT(max_diff(specdec::torch::tensor_of(a.hidden_post_norm), specdec::torch::tensor_of(b.hidden_post_norm)), 2e-4);
  // Incremental: a tree over the cached prompt, then keep one path and continue.
  const std::vector<std::int64_t> tree = {4, 30, 31, 32, 50};
  const std::vector<std::int32_t> parents = {-1, 0, 0, 1, 3};
  EXPECT_LT(max_diff(specdec::torch::tensor_of(run(ref, rs, tree, parents).logits), specdec::torch::tensor_of(run(m, ms, tree, parents).logits)), 2e-4);
  const std::vector<std::int64_t> path = {0, 1, 3};
  ref.keep_path(rs, 11, path);
  m.keep_path(ms, 11, path);
  EXPECT_EQ(m.sequence_length(ms), 14);
  EXPECT_LT(max_diff(specdec::torch::tensor_of(run(ref, rs, {12, 13}).logits), specdec::torch::tensor_of(run(m, ms, {12, 13}).logits)), 2e-4);
}

TEST(AtenLlama, TreeRowsEqualTheirChainsAndTruncateRollsBack) {
  const auto c = tiny_config();
  sm::AtenLlamaModel m(c, sm::random_llama_weights(c, 12));
  const std::vector<std::int64_t> prompt = {1, 2, 3, 4, 5, 6};
  const auto s = m.allocate_sequence();
  run(m, s, prompt);
  // Tree: root 10 with children 20 (-> 40) and 30: the rows of path (10, 30) equal the chain forward of [10, 30].
  const auto tree = specdec::torch::tensor_of(run(m, s, {10, 20, 30, 40}, {-1, 0, 0, 1}).logits);
  m.truncate(s, 6);
  const auto chain = specdec::torch::tensor_of(run(m, s, {10, 30}).logits);
  EXPECT_LT(max_diff(tree[0], chain[0]), 1e-5);
  EXPECT_LT(max_diff(tree[2], chain[1]), 1e-5);
  m.truncate(s, 6);
  const auto chain2 = specdec::torch::tensor_of(run(m, s, {10, 20, 40}).logits);
  EXPECT_LT(max_diff(tree[3], chain2[2]), 1e-5);
  // A fresh prefill of the whole sequence gives the cached forward's last row.
  const auto t = m.allocate_sequence();
  const auto full = specdec::torch::tensor_of(run(m, t, {1, 2, 3, 4, 5, 6, 10, 20, 40}).logits);
  EXPECT_LT(max_diff(full[8], chain2[2]), 1e-4);
}

TEST(AtenLlama, BadInputIsRefusedWithoutChangingTheCache) {
  auto c = tiny_config();
  c.max_position_embeddings = 8;
  sm::AtenLlamaModel m(c, sm::random_llama_weights(c, 13));
  const auto s = m.allocate_sequence();
  EXPECT_THROW(run(m, s, {1, 2, 96}), specdec::error);                       // id out of range
  EXPECT_THROW(run(m, s, {1, 2, 3}, {-1, 0, 2}), specdec::error);            // parent not earlier
  EXPECT_THROW(run(m, s, {1, 2, 3, 4, 5, 6, 7, 8, 9}), specdec::error);      // past the context window
  EXPECT_THROW(m.forward(sm::make_chain_batch(s + 1, {1})), specdec::error);  // unallocated slot
  EXPECT_EQ(m.sequence_length(s), 0);
  EXPECT_THROW(m.truncate(s, 1), specdec::error);
  sm::AtenLlamaOptions o;
  o.dtype = at::kInt;
  EXPECT_THROW(sm::AtenLlamaModel(c, sm::random_llama_weights(c, 13), o), specdec::error);
  EXPECT_THROW(sm::AtenLlamaModel(tiny_config(), [](const std::string&) { return sm::FloatTensor(); }), specdec::error);
}

TEST(AtenLlama, GreedySpeculativeEqualsPlainDecoding) {
  const auto c = tiny_config();
  sm::AtenLlamaModel m(c, sm::random_llama_weights(c, 14));
  std::vector<specdec::decoder::GenerationRequest> rs(3);
  for (int b = 0; b < 3; ++b) {
    for (int i = 0; i < 12 + 5 * b; ++i) rs[b].prompt.push_back((i * (3 + b)) % 9 + 1);
    rs[b].max_new_tokens = 24;
    rs[b].params.temperature = 0.0f;
  }
  auto generate = [&](auto& proposer, int g) {
    specdec::decoder::DecoderOptions o;
    o.num_speculative_tokens = g;
    specdec::decoder::SpeculativeDecoder dec(proposer, m, o);
    std::vector<std::vector<std::int64_t>> out;
    for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
    return out;
  };
  specdec::proposers::NoProposer none;
  const auto plain = generate(none, 0);
  for (int candidates : {1, 3}) {
    specdec::proposers::NgramOptions no;
    no.num_candidates = candidates;
    specdec::proposers::NgramProposer ngram(no);
    EXPECT_EQ(generate(ngram, 4), plain) << candidates;
  }
}

std::filesystem::path smollm2() { return std::filesystem::path(SPECDEC_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf"; }

// Teacher-forced logits of the GGUF on `m` against the packed CPU forward: the same weights (dequantised here, in their
// blocks there with 16-bit activations; float32 keys and values on both sides), so the same top-1 and logits within the
// activation quantisation's ~1e-2.
void check_against_packed(sm::AtenLlamaModel& m, double tolerance) {
  sm::LlamaOptions float_cache;
  float_cache.kv_cache_half = false;
  auto ref = sm::load_llama_gguf(smollm2(), float_cache);
  const std::vector<std::int64_t> text = {1, 504, 3458, 282, 4649, 314, 3210, 30, 378, 3458, 282, 4649, 314, 7042, 30,
                                          378, 3458, 282, 4649, 314, 1345, 30, 378, 3458, 282, 2896, 314};
  const auto a = specdec::torch::tensor_of(run(ref, ref.allocate_sequence(), text).logits);
  const auto b = specdec::torch::tensor_of(run(m, m.allocate_sequence(), text).logits).cpu();
  EXPECT_LT(max_diff(a, b), tolerance);
  EXPECT_TRUE(at::equal(a.argmax(-1), b.argmax(-1)));
}

TEST(AtenLlama, SmolLM2MatchesThePackedForward) {
  if (!std::filesystem::exists(smollm2())) GTEST_SKIP() << "model not downloaded (scripts/setup.sh)";
  auto m = sm::load_aten_llama_gguf(smollm2());
  EXPECT_EQ(m.max_sequence_length(), 8192);
  check_against_packed(m, 0.05);
}

TEST(AtenLlama, SmolLM2OnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(smollm2())) GTEST_SKIP() << "model not downloaded";
  sm::AtenLlamaOptions o;
  o.device = at::Device(at::kCUDA, 0);
  auto m = sm::load_aten_llama_gguf(smollm2(), o);
  check_against_packed(m, 0.05);
  o.dtype = at::kBFloat16;
  auto half = sm::load_aten_llama_gguf(smollm2(), o);
  check_against_packed(half, 1.0);  // bfloat16 weights and activations: logits within about one unit
}

// The committed draft checkpoint (a small Llama, float16 safetensors, tracked in git so it travels to a GPU machine that
// cannot download the bundled GGUF) on `device`, and a text of its vocabulary.
sm::AtenLlamaModel draft_checkpoint(at::Device device) {
  sm::AtenLlamaOptions o;
  o.device = device;
  return sm::load_aten_llama_safetensors(std::filesystem::path(SPECDEC_MODELS_DIR) / "smollm2-135m-draft", o);
}
const std::vector<std::int64_t> kDraftText = {1, 504, 3458, 282, 4649, 314, 3210, 30, 378, 3458, 282, 4649, 314, 7042};

// The draft checkpoint: CUDA logits against the CPU ones, and greedy speculative decoding on CUDA equal to plain
// decoding there.
TEST(AtenLlama, DraftCheckpointOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  auto cpu = draft_checkpoint(at::kCPU);
  auto gpu = draft_checkpoint(at::Device(at::kCUDA, 0));
  const std::vector<std::int64_t>& text = kDraftText;
  const auto a = specdec::torch::tensor_of(run(cpu, cpu.allocate_sequence(), text).logits);
  const auto b = specdec::torch::tensor_of(run(gpu, gpu.allocate_sequence(), text).logits);
  EXPECT_TRUE(b.is_cuda());
  EXPECT_LT(max_diff(a, b), 2e-3);
  std::vector<specdec::decoder::GenerationRequest> rs(2);
  for (int i = 0; i < 2; ++i) {
    rs[i].prompt = text;
    rs[i].prompt.resize(text.size() - 4 * i);
    rs[i].max_new_tokens = 32;
    rs[i].params.temperature = 0.0f;
  }
  auto generate = [&](auto& proposer, int g) {
    specdec::decoder::DecoderOptions opts;
    opts.num_speculative_tokens = g;
    specdec::decoder::SpeculativeDecoder dec(proposer, gpu, opts);
    std::vector<std::vector<std::int64_t>> out;
    for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
    return out;
  };
  specdec::proposers::NoProposer none;
  const auto plain = generate(none, 0);
  specdec::proposers::NgramProposer ngram;
  EXPECT_EQ(generate(ngram, 5), plain);
}



/// timed_forward runs the forward (the cache advances) and returns its time on the model's device (CUDA events on a
/// GPU, the host clock on the CPU).
TEST(AtenLlama, TimedForwardTimesTheDeviceWork) {
  std::vector<at::Device> devices{at::kCPU};
  if (at::hasCUDA()) devices.push_back(at::Device(at::kCUDA, 0));
  for (const at::Device device : devices) {
    auto m = draft_checkpoint(device);
    const std::int64_t slot = m.allocate_sequence();
    sm::ForwardBatch b;
    b.slots = {slot};
    for (std::int64_t i = 0; i < 64; ++i) b.token_ids.push_back((i * 37 + 5) % m.vocab_size());
    b.cu_num_tokens = {0, 64};
    (void)m.timed_forward(b);  // warm-up
    m.truncate(slot, 0);
    const double s = m.timed_forward(b);
    EXPECT_EQ(m.sequence_length(slot), 64) << device;
    EXPECT_GT(s, 0.0) << device;
    EXPECT_LT(s, 10.0) << device;
  }
}

#if defined(SPECDEC_TORCH_HAS_CUDA)
/// Counts the host synchronisations torch reports while alive (c10's sync debug mode turned to warnings: every
/// device-to-host copy, stream or device synchronisation, .item(), nonzero, ... that goes through ATen).
class SyncCounter : public c10::WarningHandler {
 public:
  SyncCounter() : guard_(this) { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN); }
  ~SyncCounter() override { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
  SyncCounter(const SyncCounter&) = delete;
  SyncCounter& operator=(const SyncCounter&) = delete;
  void process(const c10::Warning& w) override {
    if (w.msg().find("synchroniz") != std::string::npos) ++count;
  }
  std::int64_t count = 0;

 private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

/// cudaMalloc calls so far on the current device (segments the caching allocator took from the driver).
std::int64_t device_segments_allocated() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).segment[0].allocated;
}

/// The bound of the GPU path: a decoding step with the target on CUDA synchronises the host at most once (the download
/// of the packed results), and after a warm-up generation of the same shapes no step allocates device memory.
/// Counted over whole generations (prefill included, one allowance per request) for one and four requests, greedy and
/// sampled, n-gram drafts.
TEST(AtenLlama, AtMostOneHostSyncPerDecodeStepOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  auto gpu = draft_checkpoint(at::Device(at::kCUDA, 0));
  const std::vector<std::int64_t>& text = kDraftText;
  for (const int batch : {1, 4}) {
    for (const float temperature : {0.0f, 0.7f}) {
      std::vector<specdec::decoder::GenerationRequest> rs(static_cast<std::size_t>(batch));
      for (int i = 0; i < batch; ++i) {
        rs[i].prompt = text;
        rs[i].prompt.resize(text.size() - 2 * i);
        rs[i].max_new_tokens = 24;
        rs[i].params.temperature = temperature;
        rs[i].params.seed = 7 + static_cast<std::uint64_t>(i);
      }
      specdec::decoder::DecoderOptions opts;
      opts.num_speculative_tokens = 4;
      specdec::proposers::NgramProposer ngram;
      specdec::decoder::SpeculativeDecoder dec(ngram, gpu, opts);
      dec.generate(rs);  // warm-up: persistent buffers sized, kernels loaded
      dec.reset_metrics();
      std::int64_t syncs = 0;
      const std::int64_t segments = device_segments_allocated();
      {
        SyncCounter counter;
        dec.generate(rs);
        syncs = counter.count;
      }
      EXPECT_EQ(device_segments_allocated(), segments) << "device allocations after warm-up, B " << batch;
      const std::int64_t steps = dec.metrics().steps;
      std::cout << "[ syncs    ] B " << batch << " T " << temperature << ": " << syncs << " host syncs over " << steps
                << " steps (" << static_cast<double>(syncs) / static_cast<double>(std::max<std::int64_t>(steps, 1))
                << " per step)\n";
      EXPECT_LE(syncs, steps + batch) << "B " << batch << " temperature " << temperature;
    }
  }
}

/// The same greedy and sampled generations with the target on the CPU and on CUDA (float32 both): the verifiers draw
/// the same bits from the same probabilities, so the tokens agree wherever the two devices' logits pick the same
/// tokens; the report gives how many of the tokens agreed, and greedy runs must agree in full.
TEST(AtenLlama, CpuAndCudaGiveTheSameTokens) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  auto cpu = draft_checkpoint(at::kCPU);
  auto gpu = draft_checkpoint(at::Device(at::kCUDA, 0));
  const std::vector<std::int64_t>& text = kDraftText;
  for (const float temperature : {0.0f, 1.0f}) {
    std::vector<specdec::decoder::GenerationRequest> rs(3);
    for (int i = 0; i < 3; ++i) {
      rs[i].prompt = text;
      rs[i].prompt.resize(text.size() - 3 * i);
      rs[i].max_new_tokens = 32;
      rs[i].params.temperature = temperature;
      rs[i].params.seed = 11 + static_cast<std::uint64_t>(i);
    }
    auto generate = [&](auto& model) {
      specdec::decoder::DecoderOptions opts;
      opts.num_speculative_tokens = 4;
      specdec::proposers::NgramProposer ngram;
      specdec::decoder::SpeculativeDecoder dec(ngram, model, opts);
      std::vector<std::vector<std::int64_t>> out;
      for (auto& r : dec.generate(rs)) out.push_back(r.tokens);
      return out;
    };
    const auto a = generate(cpu), b = generate(gpu);
    std::int64_t same = 0, total = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::size_t j = 0;
      while (j < a[i].size() && j < b[i].size() && a[i][j] == b[i][j]) ++j;
      same += static_cast<std::int64_t>(j);
      total += static_cast<std::int64_t>(std::max(a[i].size(), b[i].size()));
    }
    std::cout << "[ cpu=cuda ] temperature " << temperature << ": " << same << " / " << total
              << " tokens agree before the first difference\n";
    if (temperature == 0.0f) EXPECT_EQ(a, b);
  }
}
#endif

}  // namespace
