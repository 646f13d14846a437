// specdec bench — CUDA chain verification: GB/s of probabilities actually read and the fraction of the device's
// copy bandwidth (measured in this binary with a device-to-device cudaMemcpy), CUDA events after warm-up, inputs
// rotated through enough copies to exceed twice the L2 cache. With a CUDA libtorch (SPECDEC_BENCH_WITH_TORCH), the
// same algorithm written with torch ops the way Python engines write it is timed too, and the speedup reported.
// Every case skips when no device is present.
//   ./bench_verify_cuda --benchmark_filter=cuda_chain/f32 --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specdec/cuda/chain_verify.cuh"

#if defined(SPECDEC_BENCH_WITH_TORCH)
#include <ATen/ATen.h>
#endif

namespace {

using specdec::Status;
namespace sc = specdec::cuda;

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/// Device copy bandwidth in bytes/s (read + write), measured once with a 1 GiB device-to-device copy.
double copy_bandwidth() {
  static double bw = [] {
    const std::size_t bytes = std::size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0.0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    constexpr int kReps = 10;
    for (int i = 0; i < kReps; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaFree(a);
    cudaFree(b);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 2.0 * bytes * kReps / (ms * 1e-3);
  }();
  return bw;
}

template <class T>
__global__ void fill_kernel(T* out, std::size_t n, std::uint64_t salt) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const auto r = specdec::random_block(salt, static_cast<std::int64_t>(i >> 2), specdec::Purpose::kAccept, 0);
    const float u = specdec::bits_to_uniform(r.v[i & 3]);
    if constexpr (std::is_same_v<T, float>) out[i] = u * 1e-4f;
    else if constexpr (std::is_same_v<T, __half>) out[i] = __float2half_rn(u * 1e-4f);
    else out[i] = __float2bfloat16_rn(u * 1e-4f);
  }
}

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(std::size_t n) {
    if (cudaMalloc(&ptr, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// One verification problem with `copies` copies of the probabilities (rotated between iterations).
template <class T>
struct Problem {
  std::int64_t B, K, V, N;
  int copies = 1;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> target, draft;
  DeviceBuffer<std::int32_t> cu, ids, out, nacc;
  DeviceBuffer<std::uint64_t> seeds;
  DeviceBuffer<std::int64_t> positions;
  DeviceBuffer<std::uint8_t> flags;
  DeviceBuffer<Status> status;
  DeviceBuffer<char> workspace;
  std::size_t ws_bytes;

  Problem(std::int64_t b, std::int64_t k, std::int64_t v)
      : B(b), K(k), V(v), N(b * k), cu(b + 1), ids(b * k), out(b * (k + 1)), nacc(b), seeds(b), positions(b),
        flags(b * k), status(b), workspace(sc::chain_verify_workspace_size(b, b * k, v)),
        ws_bytes(sc::chain_verify_workspace_size(b, b * k, v)) {
    int device = 0, l2 = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    const std::size_t per_copy = static_cast<std::size_t>((N + B) * V + N * V) * sizeof(T);
    copies = static_cast<int>(std::min<std::size_t>(16, (2 * static_cast<std::size_t>(l2)) / per_copy + 1));
    for (int c = 0; c < copies; ++c) {
      target.push_back(std::make_unique<DeviceBuffer<T>>((N + B) * V));
      draft.push_back(std::make_unique<DeviceBuffer<T>>(N * V));
      fill_kernel<<<1024, 256>>>(target.back()->ptr, static_cast<std::size_t>((N + B) * V), 1000 + c);
      fill_kernel<<<1024, 256>>>(draft.back()->ptr, static_cast<std::size_t>(N * V), 2000 + c);
    }
    std::vector<std::int32_t> h_cu(B + 1), h_ids(N);
    std::vector<std::uint64_t> h_seeds(B);
    std::vector<std::int64_t> h_pos(B);
    std::mt19937_64 rng(7);
    for (std::int64_t i = 0; i <= B; ++i) h_cu[i] = static_cast<std::int32_t>(i * K);
    for (auto& x : h_ids) x = static_cast<std::int32_t>(rng() % V);
    for (std::int64_t i = 0; i < B; ++i) {
      h_seeds[i] = rng();
      h_pos[i] = static_cast<std::int64_t>(rng() % 4096);
    }
    cudaMemcpy(cu.ptr, h_cu.data(), h_cu.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(ids.ptr, h_ids.data(), h_ids.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(seeds.ptr, h_seeds.data(), h_seeds.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(positions.ptr, h_pos.data(), h_pos.size() * 8, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }

  sc::ChainVerifyParams<T, std::int32_t> params(int c) const {
    sc::ChainVerifyParams<T, std::int32_t> a;
    a.batch_size = B;
    a.vocab_size = V;
    a.num_draft_tokens = N;
    a.cu_num_draft_tokens = cu.ptr;
    a.draft_token_ids = ids.ptr;
    a.draft_probs = draft[c]->ptr;
    a.target_probs = target[c]->ptr;
    a.seeds = seeds.ptr;
    a.positions = positions.ptr;
    a.output_token_ids = out.ptr;
    a.output_stride = K + 1;
    a.num_accepted = nacc.ptr;
    a.accepted = flags.ptr;
    a.status = status.ptr;
    return a;
  }

  /// Probability bytes the last call read: per request the accept-test scalars, the draw's rows in full (p and q
  /// for a residual, p for the bonus) and the winning tile once more.
  double bytes_read() const {
    std::vector<std::int32_t> h(B);
    cudaMemcpy(h.data(), nacc.ptr, B * 4, cudaMemcpyDeviceToHost);
    double bytes = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      const bool all = h[b] == K;
      const double rows = all ? 1.0 : 2.0;
      bytes += (rows * V + rows * std::min<std::int64_t>(V, specdec::kTileSize)) * sizeof(T);
      bytes += 2.0 * std::min<std::int64_t>(K, h[b] + 1) * sizeof(T);
    }
    return bytes;
  }
};

template <class T>
void report(benchmark::State& state, double bytes_per_call, double seconds_per_call) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes_per_call * state.iterations()));
  const double bw = copy_bandwidth();
  state.counters["read_GBps"] = bytes_per_call / seconds_per_call * 1e-9;
  state.counters["copy_bw_GBps"] = bw * 1e-9;
  state.counters["frac_of_copy_bw"] = bw > 0 ? bytes_per_call / seconds_per_call / bw : 0.0;
  state.counters["us_per_call"] = seconds_per_call * 1e6;
}

template <class T>
void bench_chain(benchmark::State& state) {
  if (!have_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  Problem<T> pb(state.range(0), state.range(1), state.range(2));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  for (int w = 0; w < 5; ++w) sc::chain_verify(pb.params(w % pb.copies), pb.workspace.ptr, pb.ws_bytes, stream);
  cudaStreamSynchronize(stream);
  double total_s = 0;
  std::int64_t calls = 0;
  int c = 0;
  for (auto _ : state) {
    cudaEventRecord(e0, stream);
    const Status s = sc::chain_verify(pb.params(c), pb.workspace.ptr, pb.ws_bytes, stream);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    if (s != Status::kSuccess) {
      state.SkipWithError(specdec::to_string(s));
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(ms * 1e-3);
    total_s += ms * 1e-3;
    ++calls;
    c = (c + 1) % pb.copies;
  }
  if (calls > 0) report<T>(state, pb.bytes_read(), total_s / calls);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
}

#if defined(SPECDEC_BENCH_WITH_TORCH)
/// The same rule written with torch ops the way Python engines write it (gather the draft/target probabilities,
/// accept = u * q < p, first rejection by cumprod, residual max(p - q, 0) renormalised, multinomial; bonus from p).
/// Same work (not the same bits: torch's own RNG). Timed on the same inputs for the speedup.
template <class T>
void bench_chain_torch(benchmark::State& state) {
  if (!have_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  Problem<T> pb(state.range(0), state.range(1), state.range(2));
  const auto dtype = std::is_same_v<T, float> ? at::kFloat : std::is_same_v<T, __half> ? at::kHalf : at::kBFloat16;
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
  const std::int64_t B = pb.B, K = pb.K, V = pb.V;
  std::vector<at::Tensor> target, draft;
  for (int c = 0; c < pb.copies; ++c) {
    target.push_back(at::from_blob(pb.target[c]->ptr, {B, K + 1, V}, opts));
    draft.push_back(at::from_blob(pb.draft[c]->ptr, {B, K, V}, opts));
  }
  const at::Tensor ids = at::from_blob(pb.ids.ptr, {B, K}, at::TensorOptions().device(at::kCUDA).dtype(at::kInt)).to(at::kLong);
  auto step = [&](int c) {
    const at::Tensor p = target[c].narrow(1, 0, K).to(at::kFloat), q = draft[c].to(at::kFloat);
    const at::Tensor px = p.gather(2, ids.unsqueeze(2)).squeeze(2), qx = q.gather(2, ids.unsqueeze(2)).squeeze(2);
    const at::Tensor u = at::rand({B, K}, at::TensorOptions().device(at::kCUDA));
    const at::Tensor accepted = (u * qx < px).to(at::kInt);
    const at::Tensor nacc = accepted.cumprod(1).sum(1);
    const at::Tensor row = nacc.clamp_max(K - 1);
    const at::Tensor pr = p.gather(1, row.view({B, 1, 1}).expand({B, 1, V})).squeeze(1);
    const at::Tensor qr = q.gather(1, row.view({B, 1, 1}).expand({B, 1, V})).squeeze(1);
    at::Tensor residual = (pr - qr).clamp_min(0);
    residual = residual / residual.sum(1, true).clamp_min(1e-30);
    const at::Tensor bonus = target[c].select(1, K).to(at::kFloat);
    const at::Tensor dist = at::where((nacc == K).unsqueeze(1), bonus, residual);
    return at::multinomial(dist, 1);
  };
  for (int w = 0; w < 3; ++w) step(w % pb.copies);
  cudaDeviceSynchronize();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double total_s = 0;
  std::int64_t calls = 0;
  int c = 0;
  for (auto _ : state) {
    cudaEventRecord(e0, nullptr);
    step(c);
    cudaEventRecord(e1, nullptr);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(ms * 1e-3);
    total_s += ms * 1e-3;
    ++calls;
    c = (c + 1) % pb.copies;
  }
  // Speedup against the kernel on the same problem.
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  double kernel_s = 0;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(e0, stream);
    sc::chain_verify(pb.params(i % pb.copies), pb.workspace.ptr, pb.ws_bytes, stream);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    kernel_s += ms * 1e-3 / 20;
  }
  if (calls > 0) {
    state.counters["us_per_call"] = total_s / calls * 1e6;
    state.counters["kernel_us_per_call"] = kernel_s * 1e6;
    state.counters["speedup_of_kernel"] = (total_s / calls) / kernel_s;
  }
  cudaStreamDestroy(stream);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}
#endif

void shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t B : {1, 8, 64, 256})
    for (std::int64_t K : {1, 5, 8})
      for (std::int64_t V : {32000, 128256, 151936}) b->Args({B, K, V});
  b->ArgNames({"B", "K", "V"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(bench_chain<float>)->Name("cuda_chain/f32")->Apply(shapes);
BENCHMARK(bench_chain<__nv_bfloat16>)->Name("cuda_chain/bf16")->Apply(shapes);
#if defined(SPECDEC_BENCH_WITH_TORCH)
BENCHMARK(bench_chain_torch<float>)->Name("cuda_chain_torch_ops/f32")->Apply(shapes);
BENCHMARK(bench_chain_torch<__nv_bfloat16>)->Name("cuda_chain_torch_ops/bf16")->Apply(shapes);
#endif

}  // namespace

BENCHMARK_MAIN();
