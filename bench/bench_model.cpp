// Decode throughput of LlamaModel on SmolLM2-135M-Instruct (the Q4_1 GGUF, weights kept in their block formats; random
// float32 weights of the same shape when the file is absent), with 1 and 6 new tokens per forward at a fixed context
// length, and prefill throughput.
//
// A decode forward reads every layer matrix and the output projection once (~96 MB packed), so it is bound by memory
// bandwidth. Counters:
//   tokens_per_second      new tokens processed per second
//   ms_per_forward         wall time of one forward (mean); ms_per_forward_median: the median forward (robust to this
//                          shared machine's stalls)
//   weight_gb_per_forward  bytes of weights one forward reads
//   roofline_fraction      (weight bytes / forward time) / the multi-thread read bandwidth of a buffer as large as the
//                          weights (read_probe_GBps: what this machine streams for that working set, caches included)
//   roofline_fraction_dram the same against the 512 MiB probe (the context's read_bandwidth_mt_GBps: past the caches)
//   roofline_fraction_1t   the same against the single-thread 512 MiB probe
//   peak_rss_mib           peak resident memory of the process so far (includes the 512 MiB bandwidth-probe buffer)
//   rss_mib                resident memory after the run (model, KV cache, libtorch); the context's rss_mib_at_start
//                          is the process before any model is loaded (libtorch's share)
//   cost_vs_1_token        (6-token rows) median time of this forward / median 1-token forward at the same context
//   ms_<step>              ms per forward spent in each step (qkv, rope, attention, attn_out, gate_up, down, lm_head,
//                          other; LlamaOptions::time_phases, ForwardPhaseTimes): where the time goes
// BM_Prefill: a prompt of `tokens` tokens in one forward (logits of the last token only), tokens_per_second.
// BM_LoadToFirstToken: parse the GGUF, read its tokenizer, build the model, forward "Hello": milliseconds (median of 11).
// BM_Attention: one layer's few-token attention (detail::attention_rows), microseconds.
// BM_PackedLinear: one packed product per instruction set and token-row count on one thread, weights in cache (GMAC/s).
// BM_PackedLinearFormat: the same for every block format (Q4_0 ... IQ4_XS).
// BM_ReadBandwidth reports the yardsticks themselves (measured in this binary, bench/bandwidth.hpp). The label names the
// products' instruction set (SPECDEC_CPU_ISA=portable|avx2|avx-vnni|avx512-vnni|amx picks another that the CPU supports).
//
//   bench_model [--benchmark_filter=...]      environment: SPECDEC_MODEL (GGUF path), SPECDEC_BENCH_THREADS (default: cores),
//                                             SPECDEC_ACTIVATION_BITS (16 default, 8, or per kind: 16,attn_out=8),
//                                             SPECDEC_KV_CACHE (f16 default, f32)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "bandwidth.hpp"
#include "specdec/models/detail/cpu_kernels.hpp"
#include "specdec/models/detail/packed_matrix.hpp"
#include "specdec/models/detail/pooled_linear.hpp"
#include "specdec/models/detail/row_pool.hpp"
#include "specdec/torch/host_threads.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"

namespace sm = specdec::models;

namespace {

// The benchmarks' synthetic data: the next 24 bits of a linear congruential generator whose state is `seed`.
std::uint32_t lcg_next(std::uint32_t& seed) { return (seed = seed * 1664525u + 1013904223u) >> 8; }

int g_threads = 1;
double g_bw_1t = 0, g_bw_mt = 0;

// The multi-thread read bandwidth of a buffer of `bytes` (rounded up to 2 MiB pages), measured once per size.
double working_set_bandwidth(std::int64_t bytes) {
  static std::map<std::int64_t, double> measured;
  const std::int64_t rounded = (bytes + (std::int64_t{2} << 20) - 1) / (std::int64_t{2} << 20) * (std::int64_t{2} << 20);
  auto it = measured.find(rounded);
  if (it == measured.end())
    it = measured.emplace(rounded, specdec::bench::measure_read_bandwidth(g_threads, static_cast<std::size_t>(rounded), 10)).first;
  return it->second;
}
std::string g_model_label;
std::map<std::int64_t, double> g_one_token_seconds;  // context -> seconds per 1-token forward (for cost_vs_1_token)

sm::LlamaModel& model() {
  static std::unique_ptr<sm::LlamaModel> m = [] {
    std::filesystem::path path = std::filesystem::path(SPECDEC_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (const char* env = std::getenv("SPECDEC_MODEL")) path = env;
    if (std::filesystem::exists(path)) {
      g_model_label = path.filename().string();
      sm::LlamaOptions o;
      o.num_threads = g_threads;
      o.time_phases = true;
      if (const char* bits = std::getenv("SPECDEC_ACTIVATION_BITS")) o.activation_bits = specdec::models::ActivationBits::parse(bits);
      if (const char* kv = std::getenv("SPECDEC_KV_CACHE")) o.kv_cache_half = sm::parse_kv_cache_type(kv);
      return std::make_unique<sm::LlamaModel>(sm::load_llama_gguf(path, o));
    }
    g_model_label = "random weights, SmolLM2-135M shape (model file absent)";
    sm::LlamaConfig c;
    c.vocab_size = 49152;
    c.hidden_size = 576;
    c.intermediate_size = 1536;
    c.num_layers = 30;
    c.num_heads = 9;
    c.num_kv_heads = 3;
    c.rope_theta = 100000.0;
    c.tie_word_embeddings = true;
    sm::LlamaOptions o;
    o.num_threads = g_threads;
    o.time_phases = true;
    return std::make_unique<sm::LlamaModel>(sm::LlamaModel::random(c, 1, o));
  }();
  return *m;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double current_rss_mib() {
  std::ifstream statm("/proc/self/statm");
  double pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// A fresh slot of `m` holding `context` synthetic tokens (prefilled, last logits only).
std::int64_t prefilled_slot(sm::LlamaModel& m, std::int64_t context) {
  const std::int64_t slot = m.allocate_sequence();
  std::vector<std::int64_t> prompt(static_cast<std::size_t>(context));
  for (std::int64_t i = 0; i < context; ++i) prompt[static_cast<std::size_t>(i)] = (i * 7919 + 13) % m.vocab_size();
  sm::ForwardBatch prefill = sm::make_chain_batch(slot, prompt);
  prefill.last_logits_only = true;
  m.forward(prefill);
  return slot;
}

// A chain of `n` synthetic new tokens for `slot`.
sm::ForwardBatch synthetic_step(const sm::LlamaModel& m, std::int64_t slot, std::int64_t n) {
  std::vector<std::int64_t> block(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) block[static_cast<std::size_t>(i)] = (i * 104729 + 7) % m.vocab_size();
  return sm::make_chain_batch(slot, block);
}

// The median of `v` (reordered), 0 when empty.
double median_of(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Where the forwards since m.reset_phase_times() went: ms per forward in each step (LlamaOptions::time_phases), as the
// "ms_" counters.
void report_phases(benchmark::State& state, const sm::LlamaModel& m) {
  const sm::ForwardPhaseTimes& ph = m.phase_times();
  for (int p = 0; p < sm::ForwardPhaseTimes::kCount && ph.forwards > 0; ++p)
    state.counters[std::string("ms_") + sm::ForwardPhaseTimes::kNames[p]] = ph.seconds[p] / static_cast<double>(ph.forwards) * 1e3;
}

// Args: new tokens per forward, context length (cached tokens before the forward).
void BM_Decode(benchmark::State& state) {
  sm::LlamaModel& m = model();
  const std::int64_t n = state.range(0), context = state.range(1);
  const std::int64_t slot = prefilled_slot(m, context);
  const sm::ForwardBatch step = synthetic_step(m, slot, n);
  m.reset_phase_times();
  std::int64_t forwards = 0;
  std::vector<double> each;  // seconds of every forward, for the median
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const auto f0 = std::chrono::steady_clock::now();
    sm::ForwardOutput out = m.forward(step);
    benchmark::DoNotOptimize(out.logits.view().data);
    each.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count());
    m.truncate(slot, context);  // keep the context length fixed
    ++forwards;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double median = median_of(each);
  m.free_sequence(slot);
  const double per_forward = seconds / static_cast<double>(std::max<std::int64_t>(forwards, 1));
  const double bytes = static_cast<double>(m.weight_bytes_per_forward());
  state.counters["tokens_per_second"] = static_cast<double>(n) / per_forward;
  state.counters["ms_per_forward"] = per_forward * 1e3;
  state.counters["ms_per_forward_median"] = median * 1e3;
  state.counters["weight_gb_per_forward"] = bytes / 1e9;
  const double ws_bw = working_set_bandwidth(static_cast<std::int64_t>(bytes));
  state.counters["read_probe_GBps"] = ws_bw / 1e9;
  state.counters["roofline_fraction"] = bytes / per_forward / ws_bw;
  state.counters["roofline_fraction_dram"] = bytes / per_forward / g_bw_mt;
  state.counters["roofline_fraction_1t"] = bytes / per_forward / g_bw_1t;
  state.counters["peak_rss_mib"] = peak_rss_mib();
  state.counters["rss_mib"] = current_rss_mib();
  report_phases(state, m);
  if (n == 1) g_one_token_seconds[context] = median;
  if (auto it = g_one_token_seconds.find(context); n > 1 && it != g_one_token_seconds.end())
    state.counters["cost_vs_1_token"] = median / it->second;
  state.SetLabel(g_model_label + ", " + m.kernel_name());
}
BENCHMARK(BM_Decode)
    ->ArgNames({"new_tokens", "context"})
    ->Args({1, 128})
    ->Args({2, 128})
    ->Args({3, 128})
    ->Args({4, 128})
    ->Args({5, 128})
    ->Args({6, 128})
    ->Args({8, 128})
    ->Args({9, 128})
    ->Args({1, 1024})
    ->Args({6, 1024})
    ->Args({1, 4096})
    ->Args({6, 4096})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

void BM_Prefill(benchmark::State& state) {
  sm::LlamaModel& m = model();
  const std::int64_t n = state.range(0);
  const std::int64_t slot = m.allocate_sequence();
  std::vector<std::int64_t> prompt(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) prompt[static_cast<std::size_t>(i)] = (i * 7919 + 13) % m.vocab_size();
  sm::ForwardBatch batch = sm::make_chain_batch(slot, prompt);
  batch.last_logits_only = true;
  std::int64_t forwards = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    sm::ForwardOutput out = m.forward(batch);
    benchmark::DoNotOptimize(out.logits.view().data);
    m.truncate(slot, 0);
    ++forwards;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.free_sequence(slot);
  state.counters["tokens_per_second"] = static_cast<double>(n * forwards) / seconds;
  state.counters["peak_rss_mib"] = peak_rss_mib();
  state.SetLabel(g_model_label + ", " + m.kernel_name());
}
BENCHMARK(BM_Prefill)
    ->ArgName("tokens")
    ->Arg(128)
    ->Arg(512)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

// Load to first token, as an engine starts: open and parse the GGUF, read its tokenizer, build the model from the same
// parsed file (blocks repacked, float tensors converted), encode "Hello" and forward it (last logits only). Each
// iteration starts from nothing (the file in the page cache, as a second start of a program finds it).
// ms_median: the median iteration; ms_<part>_median: the parse, the tokenizer, the model and the first forward.
void BM_LoadToFirstToken(benchmark::State& state) {
  std::filesystem::path path = std::filesystem::path(SPECDEC_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* env = std::getenv("SPECDEC_MODEL")) path = env;
  if (!std::filesystem::exists(path)) {
    state.SkipWithError("the model file is absent");
    return;
  }
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count() * 1e3; };
  std::vector<double> total, parse, tokenizer, load, first;
  for (auto _ : state) {
    const auto t0 = clock::now();
    const sm::GgufFile file(path);
    const auto t1 = clock::now();
    const sm::Tokenizer tok = sm::Tokenizer::from_gguf(file);
    const auto t2 = clock::now();
    sm::LlamaOptions o;
    o.num_threads = g_threads;
    sm::LlamaModel m = sm::load_llama_gguf(file, o);
    const auto t3 = clock::now();
    const std::vector<std::int32_t> ids = tok.encode("Hello");
    sm::ForwardBatch b = sm::make_chain_batch(m.allocate_sequence(), std::vector<std::int64_t>(ids.begin(), ids.end()));
    b.last_logits_only = true;
    sm::ForwardOutput out = m.forward(b);
    benchmark::DoNotOptimize(out.logits.view().data);
    const auto t4 = clock::now();
    total.push_back(ms(t0, t4));
    parse.push_back(ms(t0, t1));
    tokenizer.push_back(ms(t1, t2));
    load.push_back(ms(t2, t3));
    first.push_back(ms(t3, t4));
  }
  state.counters["ms_median"] = median_of(total);
  state.counters["ms_parse_median"] = median_of(parse);
  state.counters["ms_tokenizer_median"] = median_of(tokenizer);
  state.counters["ms_model_median"] = median_of(load);
  state.counters["ms_first_forward_median"] = median_of(first);
  state.counters["peak_rss_mib"] = peak_rss_mib();
  state.SetLabel(path.filename().string());
}
BENCHMARK(BM_LoadToFirstToken)->Iterations(11)->Unit(benchmark::kMillisecond)->UseRealTime();

// A batched verification: `batch` sequences at context 128, each with a chain of `new_tokens` new tokens, in one forward
// (what SpeculativeDecoder runs for a batch of requests). cost_vs_batch_of_1_token is its median against the median of the
// same batch with one new token each (plain decoding of the batch), the r of a batched step; rows_cost_vs_1_token against a
// 1-token forward of one sequence at context 128 (BM_Decode/new_tokens:1/context:128, when it ran first).
void BM_DecodeBatch(benchmark::State& state) {
  sm::LlamaModel& m = model();
  const std::int64_t batch = state.range(0), n = state.range(1), context = 128;
  std::vector<std::int64_t> slots;
  for (std::int64_t b = 0; b < batch; ++b) slots.push_back(prefilled_slot(m, context));
  auto step_of = [&](std::int64_t rows) {
    sm::ForwardBatch f;
    f.cu_num_tokens.push_back(0);
    for (const auto slot : slots) {  // each sequence's chain as BM_Decode's
      const sm::ForwardBatch one = synthetic_step(m, slot, rows);
      f.slots.push_back(slot);
      f.token_ids.insert(f.token_ids.end(), one.token_ids.begin(), one.token_ids.end());
      f.cu_num_tokens.push_back(static_cast<std::int64_t>(f.token_ids.size()));
    }
    return f;
  };
  const sm::ForwardBatch step = step_of(n), plain = step_of(1);
  auto timed = [&](const sm::ForwardBatch& f) {
    const auto f0 = std::chrono::steady_clock::now();
    sm::ForwardOutput out = m.forward(f);
    benchmark::DoNotOptimize(out.logits.view().data);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
    for (auto slot : slots) m.truncate(slot, context);
    return s;
  };
  std::vector<double> each, each_plain;
  for (auto _ : state) {  // alternated, so both sizes see the same phases of the host
    each.push_back(timed(step));
    each_plain.push_back(timed(plain));
  }
  // Where the batched forward's time goes: 20 more of it alone, phases timed (LlamaOptions::time_phases).
  m.reset_phase_times();
  for (int i = 0; i < 20; ++i) timed(step);
  report_phases(state, m);
  for (auto slot : slots) m.free_sequence(slot);
  const double median = median_of(each), median_plain = median_of(each_plain);
  state.counters["ms_per_forward_median"] = median * 1e3;
  state.counters["ms_batch_of_1_token_median"] = median_plain * 1e3;
  state.counters["cost_vs_batch_of_1_token"] = median / median_plain;
  if (auto it = g_one_token_seconds.find(context); it != g_one_token_seconds.end())
    state.counters["rows_cost_vs_1_token"] = median / it->second;
  state.SetLabel(g_model_label + ", " + m.kernel_name());
}
BENCHMARK(BM_DecodeBatch)
    ->ArgNames({"batch", "new_tokens"})
    ->ArgsProduct({{1, 2, 4}, {1, 2, 3, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// A 1-token forward right after something else, at context 128: after a forward of `before` new tokens (rolled back),
// then a pause of `pause_us` microseconds on the calling thread (a busy wait: the pool's threads go to sleep past their
// spin). ms_after_median is the 1-token forward's median; against BM_DecodeAfter/before:1/pause_us:0 (a 1-token forward
// among 1-token forwards) it shows what a larger forward, or time without reads of the weights, costs the next one:
// what the decoder's startup cost profile charges a verification (specdec/decoder/cost_profile.hpp).
void BM_DecodeAfter(benchmark::State& state) {
  sm::LlamaModel& m = model();
  const std::int64_t before = state.range(0), pause_us = state.range(1), context = 128;
  const std::int64_t slot = prefilled_slot(m, context);
  const sm::ForwardBatch first = synthetic_step(m, slot, before), next = sm::make_chain_batch(slot, {11});
  std::vector<double> each;
  for (auto _ : state) {
    m.forward(first);
    m.truncate(slot, context);
    for (const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(pause_us);
         std::chrono::steady_clock::now() < end;) {
    }
    const auto f0 = std::chrono::steady_clock::now();
    sm::ForwardOutput out = m.forward(next);
    benchmark::DoNotOptimize(out.logits.view().data);
    each.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count());
    m.truncate(slot, context);
  }
  m.free_sequence(slot);
  state.counters["ms_after_median"] = median_of(each) * 1e3;
  state.SetLabel(g_model_label + ", " + m.kernel_name());
}
BENCHMARK(BM_DecodeAfter)
    ->ArgNames({"before", "pause_us"})
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({4, 0})
    ->Args({9, 0})
    ->Args({1, 3000})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// The attention of `new_tokens` query tokens (SmolLM2's shape: 9 heads in 3 kv groups of head size 64; head_size:256,
// Gemma 3 270M's: 4 heads in 1 kv group) over `context` cached keys, one thread, one layer per iteration (random data
// resident in cache, or copies:128 from memory): detail::attention_rows as the forward calls it (with the key blocks where
// the kernel reads them), over float16 keys and values (half 1, the forward's default KV cache) or float32 (half 0).
// SPECDEC_CPU_ISA=avx2 measures the 8-lane kernel instead of AVX-512.
void BM_Attention(benchmark::State& state) {
  const bool gemma = state.range(4) == 256;
  const std::int64_t n = state.range(0), context = state.range(1), hd = gemma ? 256 : 64, group = gemma ? 4 : 3,
                     kv = gemma ? 1 : 3, rows = group * n;
  const std::int64_t total = context + n, ld = (total + 15) / 16 * 16;
  std::vector<float> q(static_cast<std::size_t>(kv * rows * hd)), k(static_cast<std::size_t>(kv * total * hd)),
      v(k.size()), scores(static_cast<std::size_t>(rows * ld)), out(static_cast<std::size_t>(n * kv * group * hd));
  std::uint32_t seed = 1;
  auto next = [&] { return static_cast<float>(lcg_next(seed)) / 16777216.f - 0.5f; };
  for (auto* buf : {&q, &k, &v})
    for (auto& x : *buf) x = next();
  std::vector<std::int32_t> visible(static_cast<std::size_t>(n * n)), count(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    count[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i + 1);
    for (std::int64_t a = 0; a <= i; ++a) visible[static_cast<std::size_t>(i * n + a)] = static_cast<std::int32_t>(a);
  }
  // copies > 1: that many copies of the layer's keys and values used in turn, so each call reads them from memory (as a
  // forward does, between whose layers the weights stream through the caches).
  const std::int64_t copies = state.range(3), layer = kv * total * hd;
  // Key blocks as the forward's cache keeps them where the kernel reads them (KvCache's key blocks: key p of a kv head at
  // [p / 16][d][p % 16]); the 8-lane kernel transposes the keys itself.
  const bool blocks = sm::detail::attention_reads_key_blocks(hd);
  const std::int64_t head_blocks = ld * hd;
  auto run = [&](const auto* kp, const auto* vp, const auto* kb) {
    std::int64_t c = 0;
    for (auto _ : state) {
      for (std::int64_t h = 0; h < kv; ++h) {
        sm::detail::AttentionPart part;
        if (blocks) part.key_blocks = kb + (c * kv + h) * head_blocks;
        sm::detail::attention_rows(q.data() + h * rows * hd, 0, rows, n, group, hd, kp + c * layer + h * total * hd,
                                   vp + c * layer + h * total * hd, total, context, visible.data(), count.data(),
                                   scores.data(), ld, out.data() + h * group * hd, kv * group * hd, hd, part);
      }
      c = c + 1 == copies ? 0 : c + 1;
    }
  };
  auto replicate = [&](const auto& x) {
    std::vector<std::decay_t<decltype(x[0])>> r;
    for (std::int64_t c = 0; c < copies; ++c) r.insert(r.end(), x.begin(), x.end());
    return r;
  };
  auto transposed = [&](const auto& x) {  // every copy's heads' key blocks, 64-byte aligned as the cache's
    using T = std::decay_t<decltype(x[0])>;
    const std::size_t bytes = static_cast<std::size_t>(copies * kv * head_blocks) * sizeof(T);
    std::unique_ptr<T[], decltype(&std::free)> r(static_cast<T*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)), &std::free);
    for (std::int64_t c = 0; c < copies; ++c)
      for (std::int64_t h = 0; h < kv; ++h)
        for (std::int64_t p = 0; p < total; ++p)
          for (std::int64_t d = 0; d < hd; ++d)
            r[static_cast<std::size_t>((c * kv + h) * head_blocks + (p / 16 * hd + d) * 16 + p % 16)] =
                x[static_cast<std::size_t>((h * total + p) * hd + d)];
    return r;
  };
  if (state.range(2) != 0) {
    std::vector<std::uint16_t> kh(k.size()), vh(v.size());
    sm::detail::floats_to_halves(k.data(), kh.data(), static_cast<std::int64_t>(k.size()));
    sm::detail::floats_to_halves(v.data(), vh.data(), static_cast<std::int64_t>(v.size()));
    const auto kc = replicate(kh), vc = replicate(vh);
    const auto kbc = transposed(kh);
    run(kc.data(), vc.data(), kbc.get());
  } else {
    const auto kc = replicate(k), vc = replicate(v);
    const auto kbc = transposed(k);
    run(kc.data(), vc.data(), kbc.get());
  }
  state.counters["us_per_layer"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1e-6,
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"new_tokens", "context", "half", "copies", "head_size"})
    ->ArgsProduct({{1, 6}, {128, 1024}, {1, 0}, {1}, {64}})
    ->Unit(benchmark::kMicrosecond);
// The same from memory: 128 copies of a layer's cache at context 1024 (100 MB in float16), 32 at context 4096 (150 MB),
// float16 only.
BENCHMARK(BM_Attention)
    ->ArgNames({"new_tokens", "context", "half", "copies", "head_size"})
    ->ArgsProduct({{1, 6}, {1024}, {1}, {128}, {64}})
    ->ArgsProduct({{1, 6}, {4096}, {1}, {32}, {64}})
    ->Unit(benchmark::kMicrosecond);
// Gemma 3 270M's shape (head size 256, one kv group of 4 heads), float16 cache: in cache at 128 and 512 keys (a sliding
// layer's window), from memory at 4096 (32 copies, 128 MB; a global layer).
BENCHMARK(BM_Attention)
    ->ArgNames({"new_tokens", "context", "half", "copies", "head_size"})
    ->ArgsProduct({{1, 6}, {128, 512}, {1}, {1}, {256}})
    ->ArgsProduct({{1, 6}, {4096}, {1}, {32}, {256}})
    ->Unit(benchmark::kMicrosecond);

// One packed product on one thread, the weights in cache (a [3072, 576] Q4_1 matrix, SmolLM2's gate and up projections,
// 1.1 MB; copies 1): the arithmetic of each instruction set for 1 to 64 token rows, as multiply-adds per second (int8 MACs of the
// activation planes, 2 per value with two planes). Arguments: instruction set (CpuIsa), token rows, planes. isa 3 (amx)
// runs the VNNI product below amx_min_rows() rows, as PackedMatrix::linear does.
// Times m's product of n token rows (x quantised in `planes` planes) on `isa`, cycling through the copies in `ms` (one
// copy: in cache), and reports GMAC/s (multiply-adds of every plane) under `label`.
void time_packed_product(benchmark::State& state, const std::vector<sm::detail::PackedMatrix>& ms, std::int64_t n,
                         std::int64_t planes, sm::detail::CpuIsa isa, std::uint32_t seed, const std::string& label) {
  namespace d = sm::detail;
  const d::PackedMatrix& m0 = ms.front();
  std::vector<float> x(static_cast<std::size_t>(n * m0.cols())), y(static_cast<std::size_t>(n * m0.rows()));
  for (auto& v : x) v = static_cast<float>(lcg_next(seed) % 2001) / 1000.f - 1.f;
  d::QuantizedRows q;
  d::quantize_rows(x.data(), n, m0.cols(), m0.cols(), m0.block(), q, planes);
  std::size_t c = 0;
  for (auto _ : state) {
    ms[c].linear(q, 0, ms[c].tiles(), y.data(), m0.rows(), false, isa);
    c = c + 1 == ms.size() ? 0 : c + 1;
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(label);
  state.counters["GMAC_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(m0.rows() * m0.cols() * n * planes) / 1e9,
      benchmark::Counter::kIsRate);
}

// A Q4_1 matrix of pseudo-random values with small half scales and minimums, packed (into `arena` when given). `seed` is
// a linear congruential state, continued.
sm::detail::PackedMatrix synthetic_q4_1(std::int64_t rows, std::int64_t cols, std::uint32_t& seed,
                                        sm::detail::WeightArena* arena = nullptr) {
  namespace d = sm::detail;
  std::vector<std::byte> data(static_cast<std::size_t>(rows * cols / 32 * 20));
  for (std::size_t i = 0; i < data.size(); i += 20) {
    const std::uint16_t dh = 0x2000, mh = 0xA000;
    std::memcpy(&data[i], &dh, 2);
    std::memcpy(&data[i + 2], &mh, 2);
    for (std::size_t j = 4; j < 20; ++j) data[i + j] = static_cast<std::byte>(lcg_next(seed) & 0xFF);
  }
  const d::PackedMatrix::Source src{"bench", specdec::models::GgmlType::kQ4_1, data, rows, cols, {}};
  return d::PackedMatrix::pack(std::span(&src, 1), arena);
}

// A packed matrix of `type` (any block format PackedMatrix holds) of random values with small half scales; Q8_0's values
// in [-127, 127], as llama.cpp's quantiser writes them.
sm::detail::PackedMatrix synthetic_format(specdec::models::GgmlType type, std::int64_t rows, std::int64_t cols,
                                          std::uint32_t& seed) {
  namespace d = sm::detail;
  using T = specdec::models::GgmlType;
  const auto traits = *specdec::models::ggml_type_traits(static_cast<std::uint32_t>(type));
  const auto per_block = static_cast<std::int64_t>(traits.block_elements);
  const auto block_bytes = static_cast<std::int64_t>(traits.block_bytes);
  std::vector<std::byte> data(static_cast<std::size_t>(rows * cols / per_block * block_bytes));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(lcg_next(seed) & 0xFF);
  std::vector<std::int64_t> halves = {0};  // offsets of the block's half scales (d, then dmin or m)
  if (type == T::kQ4_1 || type == T::kQ5_1 || type == T::kQ4_K || type == T::kQ5_K) halves = {0, 2};
  if (type == T::kQ6_K) halves = {208};
  if (type == T::kQ3_K) halves = {108};
  if (type == T::kQ2_K) halves = {80, 82};
  const std::uint16_t dh = 0x2000;
  for (std::size_t i = 0; i < data.size(); i += static_cast<std::size_t>(block_bytes))
    for (const auto off : halves) std::memcpy(&data[i + static_cast<std::size_t>(off)], &dh, 2);
  if (type == T::kQ8_0)
    for (auto& byte : data)
      if (byte == std::byte{0x80}) byte = std::byte{0x81};
  const d::PackedMatrix::Source src{"bench", type, data, rows, cols, {}};
  return d::PackedMatrix::pack(std::span(&src, 1));
}

void BM_PackedLinear(benchmark::State& state) {
  namespace d = sm::detail;
  const auto isa = static_cast<d::CpuIsa>(state.range(0));
  const std::int64_t n = state.range(1), planes = state.range(2), rows = 3072, cols = 576;
  if (!d::cpu_supports(isa)) {
    state.SkipWithError("instruction set not supported here");
    return;
  }
  std::uint32_t seed = 7;
  // copies > 1: that many packed copies used in turn, so every product reads its weights from memory (as a forward does).
  const std::int64_t copies = state.range(3);
  std::vector<d::PackedMatrix> ms;
  for (std::int64_t c = 0; c < copies; ++c) ms.push_back(synthetic_q4_1(rows, cols, seed));
  time_packed_product(state, ms, n, planes, isa, seed, d::to_string(isa));
}
BENCHMARK(BM_PackedLinear)
    ->ArgNames({"isa", "rows", "planes", "copies"})
    ->ArgsProduct({{1, 4, 2, 3}, {1, 2, 4, 6, 8, 16, 64}, {1, 2}, {1}})
    ->Unit(benchmark::kMicrosecond);
// The same from memory: 64 copies (70 MB, past any L3 here) in turn, on each instruction set.
BENCHMARK(BM_PackedLinear)
    ->ArgNames({"isa", "rows", "planes", "copies"})
    ->ArgsProduct({{1, 4, 2, 3}, {1, 6}, {2}, {64}})
    ->Unit(benchmark::kMicrosecond);

// BM_PackedLinearFormat: every block format's product (Q8_0, Q6_K: a Q4_K_M model's output and part of its FFN; the
// others: what other files hold) on one thread, a [2048, 1536] matrix in cache, per instruction set, token-row count and
// plane count (GMAC/s as above; one plane is what the Llama forward gives a Q8_0 matrix such as SmolLM2's output head).
// Types by ggml id: 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0, 10 Q2_K, 11 Q3_K, 12 Q4_K, 13 Q5_K, 14 Q6_K, 20 IQ4_NL,
// 23 IQ4_XS.
void BM_PackedLinearFormat(benchmark::State& state) {
  namespace d = sm::detail;
  const auto type = static_cast<specdec::models::GgmlType>(state.range(0));
  const auto isa = static_cast<d::CpuIsa>(state.range(1));
  const std::int64_t n = state.range(2), planes = state.range(3), rows = 2048, cols = 1536;
  if (!d::cpu_supports(isa)) {
    state.SkipWithError("instruction set not supported here");
    return;
  }
  std::uint32_t seed = 11;
  std::vector<d::PackedMatrix> ms;
  ms.push_back(synthetic_format(type, rows, cols, seed));
  std::string label = specdec::models::to_string(type);
  for (char& c : label) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  time_packed_product(state, ms, n, planes, isa, seed, fmt::format("{} {}", label, d::to_string(isa)));
}
BENCHMARK(BM_PackedLinearFormat)
    ->ArgNames({"type", "isa", "rows", "planes"})
    ->ArgsProduct({{2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23}, {1, 4, 2}, {1, 6}, {1, 2}})
    ->Unit(benchmark::kMicrosecond);

// The activations' quantisation before every product (QuantizedRows: each block's max and scales, two int8 planes), one
// thread: `rows` token rows of `cols` values in blocks of 32, portable (isa 0), AVX2 (isa 1, also AVX-VNNI's) or AVX-512
// (isa 2, also AMX's). A 1-token forward of SmolLM2 quantises 30 x (3 x 576 + 1536) values, on the
// calling thread while the workers wait.
void BM_QuantizeRows(benchmark::State& state) {
  namespace d = sm::detail;
  const auto isa = static_cast<d::CpuIsa>(state.range(0));
  const std::int64_t n = state.range(1), cols = state.range(2);
  if (!d::cpu_supports(isa)) {
    state.SkipWithError("instruction set not supported here");
    return;
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(n * cols));
  for (auto& v : x) v = nd(rng);
  d::QuantizedRows q;
  d::prepare_rows(q, n, cols, 32, 2);
  for (auto _ : state) {
    d::quantize_rows(x.data(), 0, n, cols, q, isa);
    benchmark::DoNotOptimize(q.data.data());
  }
  state.counters["ns_per_value"] = benchmark::Counter(static_cast<double>(n * cols) * 1e-9,
                                                      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_QuantizeRows)
    ->ArgNames({"isa", "rows", "cols"})
    ->ArgsProduct({{0, 1, 2}, {1, 6}, {576, 1536}})
    ->Unit(benchmark::kMicrosecond);

// SiLU(gate) * up before the down product (its RowPrep), one thread: `rows` rows of f = 1536 (SmolLM2's), 8 lanes
// (isa 1, AVX2) or 16 (isa 2, AVX-512F).
void BM_SiluMul(benchmark::State& state) {
  namespace d = sm::detail;
  const bool wide = state.range(0) == 2;
  const std::int64_t rows = state.range(1), f = 1536;
  if (!(wide ? d::silu_mul_has_avx512() : d::silu_mul_has_avx2())) {
    state.SkipWithError("instruction set not supported here");
    return;
  }
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> gu(static_cast<std::size_t>(rows * 2 * f)), out(static_cast<std::size_t>(rows * f));
  for (auto& v : gu) v = nd(rng);
  for (auto _ : state) {
    (wide ? d::silu_mul_avx512 : d::silu_mul_avx2)(gu.data(), out.data(), rows, f);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_SiluMul)->ArgNames({"isa", "rows"})->ArgsProduct({{1, 2}, {1, 3}})->Unit(benchmark::kMicrosecond);

// The products of a SmolLM2-135M forward without the rest of it: 30 layers' Q4_1 matrices of its shapes (q/k/v [960,
// 576], output [576, 576], gate and up [3072, 576], down [576, 1536]; 72.5 MB packed, synthetic values) one after the
// other on the pool's threads, `rows` token rows in two planes, each through the forward's own pooled call
// (detail::pooled_packed_linear: the rows quantised in its prologue, the tiles split in shares and pieces). hot 0:
// every layer its own matrices, read from memory as a forward reads them; hot 1: one layer's matrices 30 times (in
// cache). The forward's products take
// about what this takes (bench_model BM_Decode's ms_qkv + ms_attn_out + ms_gate_up + ms_down, which add the RMSNorm and
// SiLU steps), so it separates the products' own limits (arithmetic at 6 rows, the weights' bytes at 1: GB_per_second
// against BM_ReadBandwidth) from the rest of the forward.
void BM_ProductStream(benchmark::State& state) {
  namespace d = sm::detail;
  const std::int64_t n = state.range(0);
  const bool hot = state.range(1) != 0;
  static d::RowPool pool(g_threads);
  std::uint32_t seed = 11;
  d::WeightArena arena;
  std::vector<d::PackedMatrix> ms;
  for (int l = 0; l < (hot ? 1 : 30); ++l)
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{960, 576}, {576, 576}, {3072, 576}, {576, 1536}})
      ms.push_back(synthetic_q4_1(rows, cols, seed, &arena));
  std::vector<float> x(static_cast<std::size_t>(n * 1536)), y(static_cast<std::size_t>(n * 3072));
  for (auto& v : x) v = static_cast<float>(lcg_next(seed) & 1023) / 512.f - 1.f;
  d::QuantizedRows q;
  std::int64_t bytes = 0, macs = 0;
  for (const auto& m : ms) bytes += m.bytes(), macs += m.rows() * m.cols() * n * 2;
  const int passes = hot ? 30 : 1;
  for (auto _ : state) {
    for (int p = 0; p < passes; ++p)
      for (const auto& m : ms) d::pooled_packed_linear(pool, m, x.data(), n, 2, q, y.data(), m.rows(), false);
    benchmark::DoNotOptimize(y.data());
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["ms_per_pass"] = benchmark::Counter(it * 1e-3, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["GB_per_second"] = benchmark::Counter(it * static_cast<double>(bytes * passes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GMAC_per_second"] = benchmark::Counter(it * static_cast<double>(macs * passes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["MB_weights"] = static_cast<double>(bytes * passes) / 1e6;
}
BENCHMARK(BM_ProductStream)
    ->ArgNames({"rows", "hot"})
    ->ArgsProduct({{1, 2, 3, 6}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// SmolLM2-135M's output head alone: a [49152, 576] Q8_0 matrix (30 MB, synthetic values), `rows` token rows in
// `planes` planes, through the forward's own pooled call (detail::pooled_packed_linear). Beside
// BM_Decode's ms_lm_head it tells the product's own cost from what the forward around it adds.
void BM_OutputHead(benchmark::State& state) {
  namespace d = sm::detail;
  const std::int64_t n = state.range(0), planes = state.range(1), V = 49152, H = 576;
  static d::RowPool pool(g_threads);
  std::uint32_t seed = 13;
  const d::PackedMatrix m = synthetic_format(specdec::models::GgmlType::kQ8_0, V, H, seed);
  std::vector<float> x(static_cast<std::size_t>(n * H)), y(static_cast<std::size_t>(n * V));
  for (auto& v : x) v = static_cast<float>(lcg_next(seed) & 1023) / 512.f - 1.f;
  d::QuantizedRows q;
  for (auto _ : state) {
    d::pooled_packed_linear(pool, m, x.data(), n, planes, q, y.data(), V, false);
    benchmark::DoNotOptimize(y.data());
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["GB_per_second"] = benchmark::Counter(it * static_cast<double>(m.bytes()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GMAC_per_second"] =
      benchmark::Counter(it * static_cast<double>(V * H * n * planes) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_OutputHead)
    ->ArgNames({"rows", "planes"})
    ->ArgsProduct({{1, 2, 6}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The cost of one parallel step of the forward's thread pool with no work in it (the hand-off to the workers and the wait
// for the last of them): run() with 16 chunks from the shared counter (kind 0), or run_ranges() over 64 units in pieces
// of 4 (kind 1). A forward takes 2 such steps per product (the row step before it, the product) and 1-2 for attention.
void BM_PoolStep(benchmark::State& state) {
  static sm::detail::RowPool pool(g_threads);
  std::atomic<std::int64_t> sink{0};
  for (auto _ : state) {
    if (state.range(0) == 0)
      pool.run(16, [&](std::int64_t c) { sink.fetch_add(c, std::memory_order_relaxed); });
    else
      pool.run_ranges(64, 4, [&](std::int64_t b, std::int64_t) { sink.fetch_add(b, std::memory_order_relaxed); });
  }
  state.counters["threads"] = pool.size();
}
BENCHMARK(BM_PoolStep)->ArgName("kind")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double bw = 0;
  for (auto _ : state)
    bw = specdec::bench::measure_read_bandwidth(threads, std::size_t(512) << 20, 5, state.range(1) != 0);
  state.counters["GB_per_second"] = bw / 1e9;
}
// huge 1: the buffer in 2 MiB pages (the roofline the counters above use, as the weights are); 0: in 4 KiB pages.
BENCHMARK(BM_ReadBandwidth)
    ->ArgNames({"threads", "huge"})
    ->ArgsProduct({{1, 2}, {1, 0}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // Resident memory before any model or buffer exists: the runtime's own (libtorch's libraries and their initialisers).
  benchmark::AddCustomContext("rss_mib_at_start", std::to_string(current_rss_mib()));
  g_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (const char* env = std::getenv("SPECDEC_BENCH_THREADS")) g_threads = std::max(1, std::atoi(env));
  // ATen's own pool runs only what the forward leaves to ATen (the attention of long prompts); the CLI keeps it to one
  // thread (--aten-threads), so its spinning OpenMP workers do not take the cores from the model's pool.
  int aten_threads = 1;
  if (const char* env = std::getenv("SPECDEC_BENCH_ATEN_THREADS")) aten_threads = std::max(1, std::atoi(env));
  specdec::models::set_host_library_threads(aten_threads);  // ATen's pool and OpenBLAS's
  g_bw_1t = specdec::bench::measure_read_bandwidth(1);
  g_bw_mt = specdec::bench::measure_read_bandwidth(g_threads);
  benchmark::AddCustomContext("model_threads", std::to_string(g_threads));
  benchmark::AddCustomContext("aten_threads", std::to_string(aten_threads));
  benchmark::AddCustomContext("read_bandwidth_1t_GBps", std::to_string(g_bw_1t / 1e9));
  benchmark::AddCustomContext("read_bandwidth_mt_GBps", std::to_string(g_bw_mt / 1e9));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
