// What a draft token costs beside the target it drafts for: the bundled EAGLE head (models/smollm2-135m-eagle) and the
// distilled draft model (models/smollm2-135m-draft) against a 1-token forward of SmolLM2-135M-Instruct (the Q4_1 GGUF), all
// in this binary, on the same thread pool.
//
// BM_Target: the 1-token target forward at context 128 (median), the unit of every c below.
// BM_Eagle: one head forward of `rows` rows per request for `batch` requests, each request's slot holding 128 committed
//   rows (real target features of a synthetic prompt): rows 1 is a chain's draft step, rows k > 1 one level of a tree
//   (k children of the committed prefix); `weights` 2 = Q4_0 on the packed products (EagleHeadOptions::quantize_weights
//   and quantized_type, the CLI's default), 1 = Q8_0, 0 = float32; `bits` the activations' precision against them.
// BM_DraftModel: one draft-model forward of one token per request for `batch` requests at context 128 (a chain's draft
//   step), logits of every row; `weights` 2 = Q4_0 (LlamaOptions::quantize_float_weights and quantized_float_type, the
//   CLI's default), 1 = Q8_0, 0 = float32.
// BM_Decode: speculative decoding of `batch` synthetic prompts (96 new tokens each) at temperature `temp` / 100 (0:
//   greedy) with g drafts per step (fixed) by the EAGLE proposer (proposer 0) or the draft-model proposer (1), Q4_0
//   weights: the decoder's c, forwards and the proposer's own work together. Each step's draft time (propose + observe, as
//   DecoderMetrics counts it) is timed alone; c = median step draft time / g / the target's 1-token median (a draft
//   position's cost, as specdec-generate reports c; a batch's step drafts g positions for every request).
// `cold` 1: a target forward runs (untimed) before every timed step, so the draft's weights come from memory as for a
//   chain's first draft after a verification; 0: steps back to back (the later drafts of a chain, weights in cache).
// Counters: us_per_step (median), c_step = us_per_step / the target's 1-token median, c_per_row = c_step / (rows * batch)
// (a draft token's cost: what the decoder's c measures for chains), weight_mb (bytes a step reads, as held).
//
//   bench_drafts [--benchmark_filter=...]      environment: SPECDEC_BENCH_THREADS (default: cores),
//                                              SPECDEC_BENCH_DRAFT_MODEL (a draft model directory; default the bundled one)
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/torch/host_threads.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/eagle.hpp"
#include "specdec/torch/rows.hpp"

namespace sm = specdec::models;
namespace sp = specdec::proposers;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kContext = 128;
int g_threads = 1;
double g_target_seconds = 0;  // median 1-token target forward (BM_Target, or measured on first use)

fs::path models_dir() { return fs::path(SPECDEC_MODELS_DIR); }
// The draft model measured: SPECDEC_BENCH_DRAFT_MODEL, or the bundled one.
fs::path draft_model_dir() {
  const char* e = std::getenv("SPECDEC_BENCH_DRAFT_MODEL");
  return e && *e ? fs::path(e) : models_dir() / "smollm2-135m-draft";
}
fs::path target_path() { return models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"; }

sm::LlamaModel& target() {
  static std::unique_ptr<sm::LlamaModel> m = [] {
    sm::LlamaOptions o;
    o.num_threads = g_threads;
    return std::make_unique<sm::LlamaModel>(sm::load_llama_gguf(target_path(), o));
  }();
  return *m;
}

std::vector<std::int64_t> synthetic_tokens(std::int64_t n, std::int64_t salt) {
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (i * 7919 + 13 + salt * 104729) % 49152;
  return t;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// A slot of the target at kContext tokens, and one 1-token forward on it (rolled back).
struct TargetStep {
  std::int64_t slot;
  TargetStep() : slot(target().allocate_sequence()) {
    sm::ForwardBatch b = sm::make_chain_batch(slot, synthetic_tokens(kContext, 0));
    b.last_logits_only = true;
    target().forward(b);
  }
  ~TargetStep() { target().free_sequence(slot); }
  void run() {
    sm::ForwardOutput out = target().forward(sm::make_chain_batch(slot, {11}));
    benchmark::DoNotOptimize(out.logits.view().data);
    target().truncate(slot, kContext);
  }
};

double target_seconds() {
  if (g_target_seconds > 0) return g_target_seconds;
  TargetStep t;
  std::vector<double> each;
  for (int i = 0; i < 60; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    t.run();
    if (i >= 10) each.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return g_target_seconds = median_of(each);
}

void BM_Target(benchmark::State& state) {
  TargetStep t;
  std::vector<double> each;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    t.run();
    each.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  g_target_seconds = median_of(each);
  state.counters["us_per_step"] = g_target_seconds * 1e6;
  state.counters["weight_mb"] = static_cast<double>(target().weight_bytes_per_forward()) / 1e6;
  state.SetLabel(target().kernel_name());
}
BENCHMARK(BM_Target)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(2.0);

// Times `step` (median over the iterations), a target forward before each when `cold`, and sets the c counters.
template <class Step>
void time_steps(benchmark::State& state, bool cold, std::int64_t tokens, double weight_bytes, Step&& step) {
  const double t1 = target_seconds();
  std::unique_ptr<TargetStep> t;
  if (cold) t = std::make_unique<TargetStep>();
  std::vector<double> each;
  for (auto _ : state) {
    if (t) t->run();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    each.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double m = median_of(each);
  state.counters["us_per_step"] = m * 1e6;
  state.counters["c_step"] = m / t1;
  state.counters["c_per_row"] = m / t1 / static_cast<double>(tokens);
  state.counters["weight_mb"] = weight_bytes / 1e6;
}

// The `weights` argument: 0 float32, 1 Q8_0, 2 Q4_0.
sm::GgmlType weight_type(std::int64_t weights) {
  return weights == 2 ? sm::GgmlType::kQ4_0 : weights == 1 ? sm::GgmlType::kQ8_0 : sm::GgmlType::kF32;
}

// The bundled head with `weights` (0 float32, 1 Q8_0, 2 Q4_0) and `bits` activations, one head per combination.
sp::EagleHead& eagle_head(int weights, int bits) {
  static std::map<std::pair<int, int>, std::unique_ptr<sp::EagleHead>> heads;
  auto& h = heads[{weights, bits}];
  if (!h) {
    static const sp::EagleTargetWeights weights_of_target = sp::eagle_target_weights_from_gguf(target_path());
    sp::EagleHeadOptions o;
    o.quantize_weights = weights != 0;
    o.quantized_type = weight_type(weights);
    o.activation_bits = bits;
    o.num_threads = g_threads;
    h = std::make_unique<sp::EagleHead>(sp::load_eagle_head(models_dir() / "smollm2-135m-eagle", weights_of_target, o));
  }
  return *h;
}

// The target's post-norm hidden states of a synthetic prompt (what an EAGLE-1 head reads), [kContext, H].
const at::Tensor& target_features() {
  static const at::Tensor f = [] {
    const std::int64_t slot = target().allocate_sequence();
    sm::ForwardBatch b = sm::make_chain_batch(slot, synthetic_tokens(kContext + 1, 1));
    b.return_final_hidden = true;
    at::Tensor h = specdec::torch::tensor_of(target().forward(b).hidden_post_norm).narrow(0, 0, kContext).contiguous();
    target().free_sequence(slot);
    return h;
  }();
  return f;
}

// Bytes of the head's matrices a step reads: fc, the layer's four products and the LM head's draft-vocabulary rows.
double eagle_weight_bytes(const sp::EagleHead& h, int weights) {
  double values = 0;
  for (const auto& [name, t] : h.named_weights())
    if (t.dim() == 2 && name != "embed_tokens.weight") values += static_cast<double>(t.numel());
  const std::int64_t H = h.hidden_size();
  values += static_cast<double>(h.draft_vocab_size() * H);  // EAGLE-1 scores the target's rows (not among named_weights)
  return weights == 2 ? values * 18.0 / 32.0 : weights == 1 ? values * 34.0 / 32.0 : values * 4.0;
}

// Args: weights (0 float32, 1 Q8_0, 2 Q4_0), bits, rows per request, batch, cold.
void BM_Eagle(benchmark::State& state) {
  const int q8 = static_cast<int>(state.range(0));
  const int bits = static_cast<int>(state.range(1));
  const std::int64_t rows = state.range(2), batch = state.range(3);
  sp::EagleHead& h = eagle_head(q8, bits);
  const at::Tensor& f = target_features();
  std::vector<std::int64_t> slots;
  for (std::int64_t b = 0; b < batch; ++b) {
    slots.push_back(h.allocate_sequence());
    sp::EagleHeadBatch c;
    c.slots = {slots.back()};
    c.cu_num_tokens = {0, kContext};
    c.token_ids = synthetic_tokens(kContext + 1, 1);
    c.token_ids.erase(c.token_ids.begin());
    c.features = specdec::torch::rows_of(f);
    c.commit = true;
    c.last_logits_only = true;
    h.forward(c);
  }
  sp::EagleHeadBatch step;
  step.cu_num_tokens = {0};
  for (std::int64_t b = 0; b < batch; ++b) {
    step.slots.push_back(slots[static_cast<std::size_t>(b)]);
    for (std::int64_t r = 0; r < rows; ++r) step.token_ids.push_back((b * 31 + r * 17 + 5) % 49152);
    step.cu_num_tokens.push_back(static_cast<std::int64_t>(step.token_ids.size()));
    if (rows > 1) step.parents.push_back(std::vector<std::int64_t>(static_cast<std::size_t>(rows), -1));  // a tree level
  }
  step.features = specdec::torch::rows_of(f.narrow(0, kContext - rows * batch, rows * batch).contiguous());
  step.features_are_head_hidden = true;
  time_steps(state, state.range(4) != 0, rows * batch, eagle_weight_bytes(h, q8), [&] {
    sp::EagleHeadOutput out = h.forward(step);
    benchmark::DoNotOptimize(out.logits.view().data);
    for (auto s : slots) h.truncate(s, kContext);
  });
  for (auto s : slots) h.free_sequence(s);
}
BENCHMARK(BM_Eagle)
    ->ArgNames({"weights", "bits", "rows", "batch", "cold"})
    ->ArgsProduct({{2, 1}, {16, 8}, {1, 2, 4, 8}, {1}, {0, 1}})
    ->ArgsProduct({{1}, {16, 8}, {1}, {2, 4, 8}, {0, 1}})
    ->ArgsProduct({{0}, {16}, {1, 8}, {1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.5);

sm::LlamaModel& draft_model(int weights, int bits) {
  static std::map<std::pair<int, int>, std::unique_ptr<sm::LlamaModel>> models;
  auto& m = models[{weights, bits}];
  if (!m) {
    sm::LlamaOptions o;
    o.num_threads = g_threads;
    o.quantize_float_weights = weights != 0;
    o.quantized_float_type = weight_type(weights);
    o.activation_bits = bits;
    o.output_ids = sm::read_output_ids(draft_model_dir());  // its output vocabulary, as specdec-generate loads it
    m = std::make_unique<sm::LlamaModel>(sm::load_llama_safetensors(draft_model_dir(), o));
  }
  return *m;
}

// Args: weights (0 float32, 1 Q8_0, 2 Q4_0), bits, batch, cold.
void BM_DraftModel(benchmark::State& state) {
  const int q8 = static_cast<int>(state.range(0));
  const int bits = static_cast<int>(state.range(1));
  const std::int64_t batch = state.range(2);
  sm::LlamaModel& m = draft_model(q8, bits);
  std::vector<std::int64_t> slots;
  sm::ForwardBatch step;
  step.cu_num_tokens = {0};
  for (std::int64_t b = 0; b < batch; ++b) {
    slots.push_back(m.allocate_sequence());
    sm::ForwardBatch p = sm::make_chain_batch(slots.back(), synthetic_tokens(kContext, b));
    p.last_logits_only = true;
    m.forward(p);
    step.slots.push_back(slots.back());
    step.token_ids.push_back((b * 31 + 5) % 49152);
    step.cu_num_tokens.push_back(b + 1);
  }
  time_steps(state, state.range(3) != 0, batch, static_cast<double>(m.weight_bytes_per_forward()), [&] {
    sm::ForwardOutput out = m.forward(step);
    benchmark::DoNotOptimize(out.logits.view().data);
    for (auto s : slots) m.truncate(s, kContext);
  });
  for (auto s : slots) m.free_sequence(s);
  state.SetLabel(m.kernel_name());
}
BENCHMARK(BM_DraftModel)
    ->ArgNames({"weights", "bits", "batch", "cold"})
    ->ArgsProduct({{2, 1}, {16, 8}, {1, 2, 4, 8}, {0, 1}})
    ->ArgsProduct({{0}, {16}, {1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.5);

// A proposer that times each propose() and observe() of the one it wraps (DecoderMetrics's draft time, step by step).
template <class P>
class TimedProposer {
 public:
  static constexpr bool supports_trees = sp::supports_trees<P>;
  explicit TimedProposer(P& inner) : inner_(&inner) {}
  void begin_request(const sp::RequestContext& ctx) { inner_->begin_request(ctx); }
  void end_request(sp::RequestId id) { inner_->end_request(id); }
  sp::DraftBatch propose(std::span<const sp::ProposeRequest> requests) {
    const auto t0 = std::chrono::steady_clock::now();
    sp::DraftBatch b = inner_->propose(requests);
    pending_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    steps_.push_back(pending_);
    pending_ = 0;
    return b;
  }
  void observe(std::span<const sp::StepFeedback> feedback) {
    const auto t0 = std::chrono::steady_clock::now();
    inner_->observe(feedback);
    pending_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  sp::TargetFeatureSpec target_feature_spec() const
    requires sp::wants_target_features<P>
  {
    return inner_->target_feature_spec();
  }
  std::int64_t vocab_size() const { return inner_->vocab_size(); }
  /// Draft seconds of every step (the observe before a propose counted with it).
  const std::vector<double>& steps() const { return steps_; }

 private:
  P* inner_;
  double pending_ = 0;
  std::vector<double> steps_;
};

template <class P>
void decode_with(benchmark::State& state, P& proposer, std::int32_t g) {
  const double t1 = target_seconds();
  TimedProposer<P> timed(proposer);
  specdec::decoder::DecoderOptions o;
  o.num_speculative_tokens = g;
  specdec::decoder::SpeculativeDecoder<TimedProposer<P>, sm::LlamaModel> dec(timed, target(), o);
  std::vector<specdec::decoder::GenerationRequest> requests(static_cast<std::size_t>(state.range(3)));
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt = synthetic_tokens(kContext, static_cast<std::int64_t>(i) + 2);
    requests[i].max_new_tokens = 96;
    requests[i].params.temperature = static_cast<float>(state.range(2)) / 100.f;
    requests[i].params.seed = i + 1;
  }
  for (auto _ : state) benchmark::DoNotOptimize(dec.generate(requests));
  const double m = median_of(timed.steps());
  state.counters["us_per_step"] = m * 1e6;
  state.counters["c"] = m / g / t1;
  state.counters["tau"] = dec.metrics().total.mean_accepted_length();
}

// Args: proposer (0 EAGLE, 1 draft model), g, temperature in hundredths, batch.
void BM_Decode(benchmark::State& state) {
  const auto g = static_cast<std::int32_t>(state.range(1));
  if (state.range(0) == 0) {
    sp::EagleProposerOptions eo;
    eo.target_num_layers = target().config().num_layers;
    static const sp::EagleTargetWeights weights = sp::eagle_target_weights_from_gguf(target_path());
    sp::EagleHeadOptions ho;
    ho.quantize_weights = true;
    ho.quantized_type = sm::GgmlType::kQ4_0;  // the CLI's default
    ho.num_threads = g_threads;
    sp::EagleProposer eagle(sp::load_eagle_head(models_dir() / "smollm2-135m-eagle", weights, ho), eo);
    decode_with(state, eagle, g);
  } else {
    sm::LlamaModel& dm = draft_model(2, 16);
    sp::DraftModelOptions dopt;
    dopt.output_ids = dm.output_ids();
    sp::DraftModelProposer<sm::LlamaModel> draft(dm, dopt);
    decode_with(state, draft, g);
  }
}
BENCHMARK(BM_Decode)
    ->ArgNames({"proposer", "g", "temp", "batch"})
    ->ArgsProduct({{0, 1}, {4}, {0, 70}, {1, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

}  // namespace

int main(int argc, char** argv) {
  g_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (const char* env = std::getenv("SPECDEC_BENCH_THREADS")) g_threads = std::max(1, std::atoi(env));
  specdec::models::set_host_library_threads(1);  // ATen's pool and OpenBLAS's, as the CLI keeps them
  benchmark::AddCustomContext("model_threads", std::to_string(g_threads));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!fs::exists(target_path())) {
    std::fprintf(stderr, "bench_drafts: %s is absent (run scripts/setup.sh to download it)\n", target_path().c_str());
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
