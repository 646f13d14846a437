// SpeculativeDecoder's per-step overhead: the share of a step spent outside the target's forward — proposer bookkeeping
// (n-gram lookups), batching, logits processing, verification, cache truncation, streaming — on SmolLM2-135M (the real GGUF
// when present, else random weights of its shape). Goal: < 3% of a step.
// Counters:
//   overhead_fraction     decoder overhead (step time - target forward - proposer) / step time
//   non_forward_fraction  (step time - target forward) / step time: the overhead plus the n-gram proposer
//   ms_per_step, tokens_per_step (tau), tokens_per_second, acceptance_rate
//
//   bench_decoder [--benchmark_filter=...]      environment: SPECDEC_MODEL (GGUF path), SPECDEC_BENCH_ATEN_THREADS
//                                               (ATen's pool, where logits processing runs; default 1, as specdec-generate),
//                                               SPECDEC_BENCH_ITERS (generate() calls timed per case; default 2, more for
//                                               a steadier overhead_fraction on a noisy host)
#include <benchmark/benchmark.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <filesystem>
#include <memory>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/torch/host_threads.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/proposers/ngram.hpp"

namespace sm = specdec::models;
namespace sp = specdec::proposers;
namespace sd = specdec::decoder;

namespace {

sm::LlamaModel& model() {
  static std::unique_ptr<sm::LlamaModel> m = [] {
    std::filesystem::path path = std::filesystem::path(SPECDEC_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (const char* env = std::getenv("SPECDEC_MODEL")) path = env;
    if (std::filesystem::exists(path)) return std::make_unique<sm::LlamaModel>(sm::load_llama_gguf(path));
    sm::LlamaConfig c;
    c.vocab_size = 49152;
    c.hidden_size = 576;
    c.intermediate_size = 1536;
    c.num_layers = 30;
    c.num_heads = 9;
    c.num_kv_heads = 3;
    c.rope_theta = 100000.0;
    c.tie_word_embeddings = true;
    return std::make_unique<sm::LlamaModel>(sm::LlamaModel::random(c, 1));
  }();
  return *m;
}

/// Args: batch size, g, temperature x 10.
void BM_DecoderStep(benchmark::State& state) {
  const auto batch = state.range(0);
  const auto g = static_cast<std::int32_t>(state.range(1));
  const float temperature = static_cast<float>(state.range(2)) / 10.0f;
  auto& target = model();
  sp::NgramProposer ngram;
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  o.calibrate = false;
  sd::SpeculativeDecoder dec(ngram, target, o);
  std::vector<sd::GenerationRequest> rs;
  for (std::int64_t b = 0; b < batch; ++b) {
    sd::GenerationRequest r;
    // a prompt with recurring phrases, as in summarisation or code editing
    for (int rep = 0; rep < 4; ++rep)
      for (std::int64_t t = 0; t < 24; ++t) r.prompt.push_back(100 + (t * 37 + b * 11) % 900);
    r.max_new_tokens = 32;
    r.params.temperature = temperature;
    r.params.seed = static_cast<std::uint64_t>(b);
    rs.push_back(r);
  }
  dec.generate(rs);  // warm-up (allocations, cache growth)
  dec.reset_metrics();
  for (auto _ : state) dec.generate(rs);
  const auto& m = dec.metrics();
  const double step = m.step_seconds();
  state.counters["overhead_fraction"] = m.overhead_fraction();
  state.counters["non_forward_fraction"] = step > 0 ? (step - m.target_seconds) / step : 0.0;
  state.counters["ms_per_step"] = m.steps ? 1e3 * step / static_cast<double>(m.steps) : 0.0;
  state.counters["tokens_per_step"] = m.total.mean_accepted_length();
  state.counters["tokens_per_second"] = m.tokens_per_second();
  state.counters["acceptance_rate"] = m.total.acceptance_rate();
}
BENCHMARK(BM_DecoderStep)
    ->ArgNames({"batch", "g", "temp_x10"})
    ->Args({1, 0, 0})
    ->Args({1, 4, 0})
    ->Args({4, 0, 0})
    ->Args({4, 4, 0})
    ->Args({4, 4, 10})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(std::getenv("SPECDEC_BENCH_ITERS") ? std::atoi(std::getenv("SPECDEC_BENCH_ITERS")) : 2);

}  // namespace

int main(int argc, char** argv) {
  int aten_threads = 1;
  if (const char* env = std::getenv("SPECDEC_BENCH_ATEN_THREADS")) aten_threads = std::max(1, std::atoi(env));
  specdec::models::set_host_library_threads(aten_threads);  // ATen's pool and OpenBLAS's, as specdec-generate
  benchmark::AddCustomContext("aten_threads", std::to_string(aten_threads));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
