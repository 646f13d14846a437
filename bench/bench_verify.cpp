// bench_verify — CPU chain verification at B = 64, K = 5, V = 128256 (float32), reported as bytes of
// probabilities actually read per second and as a fraction of this machine's read bandwidth measured in the same
// process (`bw_fraction`: single-core bandwidth for one-thread cases, all-core bandwidth for the threaded one).
//
// Bytes read per call: the verifier reads the accept-test scalars (negligible) and, per request, the full rows it
// samples from: the residual max(p - q, 0) reads p_i and q_i (2 V floats) after a rejection, the bonus reads p_K
// (V floats). The count is taken from the call's own outcome. Times are wall-clock (UseRealTime); bw_fraction is
// a plain ratio even though Google Benchmark prints rate counters with a "/s" suffix.
#include <benchmark/benchmark.h>

#include <random>
#include <thread>
#include <vector>

#include "bandwidth.hpp"
#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#if defined(SPECDEC_BENCH_WITH_TORCH)
#include <ATen/Parallel.h>
#include <torch/torch.h>

// The probabilities-in entry (deprecated) is measured beside the others.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "specdec/torch/rejection_sample.hpp"
#include "specdec/torch/verify_logits.hpp"
#endif

namespace {

double g_bw_1 = 0, g_bw_all = 0;

struct Problem {
  std::int64_t B, K, V;
  std::vector<std::int64_t> cu, ids, positions;
  std::vector<std::uint64_t> seeds;
  std::vector<float> q, p;
};

// LLM-like rows: a few heavy tokens over a long light tail; the draft is a perturbation of the target, giving
// an acceptance rate around 0.7.
Problem make_problem(std::int64_t B, std::int64_t K, std::int64_t V) {
  Problem pr{B, K, V, {0}, {}, {}, {}, {}, {}};
  std::mt19937_64 rng(1);
  std::exponential_distribution<float> e(1.0f);
  std::uniform_int_distribution<std::int64_t> tok(0, V - 1);
  pr.p.resize(static_cast<std::size_t>((B * K + B) * V));
  pr.q.resize(static_cast<std::size_t>(B * K * V));
  auto fill = [&](float* row, const float* base, float noise) {
    double s = 0;
    for (std::int64_t x = 0; x < V; ++x) {
      row[x] = base ? base[x] * (1.0f + noise * (e(rng) - 1.0f)) : e(rng) * 1e-3f;
      s += row[x];
    }
    if (!base)
      for (int h = 0; h < 4; ++h) {
        row[tok(rng)] += 0.2f;
        s += 0.2;
      }
    for (std::int64_t x = 0; x < V; ++x) row[x] = static_cast<float>(row[x] / s);
  };
  for (std::int64_t b = 0; b < B; ++b) {
    pr.cu.push_back(pr.cu.back() + K);
    pr.seeds.push_back(1000 + b);
    pr.positions.push_back(17);
    for (std::int64_t i = 0; i <= K; ++i) fill(&pr.p[((b * K + b) + i) * V], nullptr, 0);
    for (std::int64_t i = 0; i < K; ++i) {
      float* q = &pr.q[(b * K + i) * V];
      fill(q, &pr.p[((b * K + b) + i) * V], 0.6f);
      std::discrete_distribution<std::int64_t> d(q, q + V);
      pr.ids.push_back(d(rng));
    }
  }
  return pr;
}

double bytes_read(const Problem& pr, const std::vector<std::int32_t>& n_acc) {
  double bytes = 0;
  for (std::int64_t b = 0; b < pr.B; ++b) bytes += (n_acc[b] < pr.K ? 2.0 : 1.0) * pr.V * sizeof(float);
  return bytes;
}

void BM_verify_chain_cpu_1thread(benchmark::State& state) {
  const Problem pr = make_problem(state.range(0), state.range(1), state.range(2));
  specdec::ChainVerifyArgs<std::int64_t, std::int64_t> a{pr.B, pr.V, pr.cu.data(), pr.ids.data(), pr.q.data(),
                                                         pr.p.data(), pr.seeds.data(), pr.positions.data(), nullptr,
                                                         1.0f};
  std::vector<std::int64_t> out(pr.B * (pr.K + 1));
  std::vector<std::int32_t> n(pr.B);
  const specdec::ChainVerifyOutputs<std::int64_t> o{out.data(), pr.K + 1, n.data(), nullptr};
  for (auto _ : state) {
    if (!specdec::verify_chain(a, o).ok()) state.SkipWithError("verify failed");
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = bytes_read(pr, n);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes * state.iterations()));
  double acc = 0;
  for (auto k : n) acc += k;
  state.counters["acceptance"] = acc / (pr.B * pr.K);
  state.counters["bw_fraction"] = benchmark::Counter(bytes / g_bw_1, benchmark::Counter::kIsIterationInvariantRate);
}

#if defined(SPECDEC_BENCH_WITH_TORCH)
void BM_verify_chain_cpu_torch_threads(benchmark::State& state) {
  const Problem pr = make_problem(state.range(0), state.range(1), state.range(2));
  at::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  const auto ids = torch::tensor(pr.ids), cu = torch::tensor(pr.cu);
  const auto q = torch::from_blob(const_cast<float*>(pr.q.data()), {pr.B * pr.K, pr.V});
  const auto p = torch::from_blob(const_cast<float*>(pr.p.data()), {pr.B * pr.K + pr.B, pr.V});
  std::vector<std::int64_t> seeds(pr.seeds.begin(), pr.seeds.end());
  const auto s = torch::tensor(seeds), pos = torch::tensor(pr.positions);
  specdec::torch::RejectionSampleResult r;
  for (auto _ : state) {
    r = specdec::torch::rejection_sample(ids, cu, q, p, s, pos, std::nullopt, {1.0, false});
    benchmark::DoNotOptimize(r.output_token_ids.data_ptr());
  }
  std::vector<std::int32_t> n(r.num_accepted.data_ptr<std::int32_t>(), r.num_accepted.data_ptr<std::int32_t>() + pr.B);
  const double bytes = bytes_read(pr, n);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes * state.iterations()));
  state.counters["threads"] = at::get_num_threads();
  state.counters["bw_fraction"] = benchmark::Counter(bytes / g_bw_all, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_verify_chain_cpu_torch_threads)->ArgNames({"B", "K", "V"})->Args({64, 5, 128256})->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The decoder's verification of one step through the engine entry, on ATen's current thread count (1 in specdec-generate):
// float32 logits [B (K + 1), V] processed into probabilities and verified against deterministic drafts (n-gram style),
// greedy (temp_x10 = 0) or sampled at temperature 0.7 or 1. SmolLM2's vocabulary by default. ws = 1 calls it as the decoder
// does: a workspace kept across calls and all_target_probs = false (rows processed as the chain rule reaches them);
// ws = 0: fresh [N + B, V] rows per call, every row processed; ws = 2: specdec::verify_logits_host on the same step as
// plain arrays, the decoder's call for a CPU target (kept workspace, rows as reached, greedy argmaxes from the scans).
// Microseconds per step: compare with bench_decoder's ms_per_step for the share of a step it takes; ns_per_value is
// per logit processed (V (K + 1) B of them).
void BM_verify_logits_step(benchmark::State& state) {
  const std::int64_t B = state.range(0), K = state.range(1), V = state.range(2);
  const float temperature = static_cast<float>(state.range(3)) / 10.f;
  const std::int64_t N = B * K;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor logits = at::randn({N + B, V}, gen, at::TensorOptions().dtype(at::kFloat)) * 3;
  std::vector<std::int64_t> cu(static_cast<std::size_t>(B + 1)), ids(static_cast<std::size_t>(N));
  for (std::int64_t b = 0; b <= B; ++b) cu[static_cast<std::size_t>(b)] = b * K;
  const at::Tensor argmax = logits.argmax(1);
  for (std::int64_t b = 0; b < B; ++b)  // drafts that agree with the target's argmax for the first K / 2 positions
    for (std::int64_t k = 0; k < K; ++k)
      ids[static_cast<std::size_t>(b * K + k)] = k < K / 2 ? argmax[b * (K + 1) + k].item<std::int64_t>() : (k * 7919) % V;
  specdec::torch::VerifyLogitsArgs a;
  a.target_logits = logits;
  a.draft_token_ids = torch::tensor(ids);
  a.cu_num_draft_tokens = torch::tensor(cu);
  a.temperature = torch::full({B}, temperature);
  a.seeds = torch::arange(B);
  a.positions = torch::full({B}, 100, torch::kLong);
  a.max_num_draft_tokens = K;
  if (state.range(4) != 0) {  // as the decoder calls it: a kept workspace, rows processed as the chain rule reaches them
    a.workspace = at::empty({specdec::torch::verify_logits_workspace_bytes(B, N, V, false, false)}, at::kByte);
    a.all_target_probs = false;
  }
  if (state.range(4) == 2) {
    const std::vector<float> temps(static_cast<std::size_t>(B), temperature);
    std::vector<std::int64_t> seeds(static_cast<std::size_t>(B)), positions(static_cast<std::size_t>(B), 100);
    for (std::int64_t b = 0; b < B; ++b) seeds[static_cast<std::size_t>(b)] = b;
    std::vector<float> ws(static_cast<std::size_t>((N + B) * V));
    specdec::HostVerifyArgs h;
    h.target_logits = logits.data_ptr<float>();
    h.target_logits_stride = V;
    h.vocab_size = V;
    h.draft_token_ids = ids;
    h.cu_num_draft_tokens = cu;
    h.temperature = temps;
    h.seeds = seeds;
    h.positions = positions;
    h.max_num_draft_tokens = K;
    h.all_target_probs = false;
    h.workspace = ws.data();
    for (auto _ : state) {
      auto r = specdec::verify_logits_host(h);
      benchmark::DoNotOptimize(r.num_accepted.data());
    }
  } else {
    for (auto _ : state) {
      auto r = specdec::torch::verify_logits(a);
      benchmark::DoNotOptimize(r.num_accepted.data_ptr());
    }
  }
  state.counters["aten_threads"] = at::get_num_threads();
  state.counters["ns_per_value"] = benchmark::Counter(
      static_cast<double>((N + B) * V) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_verify_logits_step)
    ->ArgNames({"B", "K", "V", "temp_x10", "ws"})
    ->ArgsProduct({{1, 4}, {4}, {49152}, {0, 7, 10}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
#endif

// The tile masses of one draw's weights over a V-token row (sampling/race_weights.hpp) on one instruction-set path:
// weight 0 = p (a bonus token), 1 = p without the rejected draft, 2 = max(p - q, 0), 3 = block verification's
// max(w p - q, 0); path 0 = one lane, 1 = 4-wide, 2 = AVX-512. The rows stay in cache (2 x 196 KB): this times the
// arithmetic, which the vector forms cut, and gives GB/s of weights read for the roofline.
void BM_race_tile_masses(benchmark::State& state) {
  using specdec::detail::LogitsPath;
  const auto weight = state.range(0);
  const auto path = static_cast<LogitsPath>(state.range(1));
  const std::int64_t V = state.range(2);
  if (!specdec::detail::logits_path_available(path)) {
    state.SkipWithError("path not available here");
    return;
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 2.0f / static_cast<float>(V));
  std::vector<float> p(static_cast<std::size_t>(V)), q(p.size()), masses(static_cast<std::size_t>(specdec::num_tiles(V)));
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = u(rng);
    q[i] = u(rng);
  }
  const auto run = [&](const auto& w) {
    for (auto _ : state) {
      specdec::detail::race_tile_masses(w, V, masses.data(), path);
      benchmark::DoNotOptimize(masses.data());
      benchmark::ClobberMemory();
    }
  };
  switch (weight) {
    case 0: run(specdec::detail::RowWeight{p.data()}); break;
    case 1: run(specdec::detail::RemovedWeight{p.data(), V / 3}); break;
    case 2: run(specdec::detail::ResidualWeight{p.data(), q.data()}); break;
    default: run(specdec::detail::BlockResidualWeight{p.data(), q.data(), 0.37f}); break;
  }
  const double rows = weight >= 2 ? 2.0 : 1.0;
  state.counters["GB_per_s"] = benchmark::Counter(rows * 4.0 * static_cast<double>(V) * static_cast<double>(state.iterations()) / 1e9,
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK(BM_race_tile_masses)
    ->ArgNames({"weight", "path", "V"})
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}, {49152}})
    ->Unit(benchmark::kMicrosecond);

void BM_read_bandwidth_cpu(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double bw = 0;
  for (auto _ : state) bw = specdec::bench::measure_read_bandwidth(threads, std::size_t(256) << 20, 1);
  state.counters["GB_per_s"] = bw / 1e9;
}

}  // namespace

BENCHMARK(BM_verify_chain_cpu_1thread)->ArgNames({"B", "K", "V"})->Args({64, 5, 128256})->Args({8, 5, 32000})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_read_bandwidth_cpu)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)
    ->Iterations(3);

int main(int argc, char** argv) {
  g_bw_1 = specdec::bench::measure_read_bandwidth(1);
  g_bw_all = specdec::bench::measure_read_bandwidth(static_cast<int>(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("read_bandwidth_1thread_GBps", std::to_string(g_bw_1 / 1e9));
  benchmark::AddCustomContext("read_bandwidth_all_threads_GBps", std::to_string(g_bw_all / 1e9));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
