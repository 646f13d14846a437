// specdec bench — the CUDA kernels of one verification step: chain, tree and block verification and the logits kernel,
// alone and as one step replayed from a CUDA graph (logits of target and draft rows, then the chain). Reported: GB/s of
// probabilities (logits) actually read (written), and the fraction of the device's copy bandwidth (measured in this
// binary with a device-to-device cudaMemcpy, read + write bytes), CUDA events after warm-up, inputs rotated through
// enough copies to exceed twice the L2 cache. With a CUDA libtorch (SPECDEC_BENCH_WITH_TORCH), the
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

#include "specdec/cuda/block_verify.cuh"
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/logits_api.hpp"
#include "specdec/cuda/tree_verify.cuh"

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
__global__ void fill_kernel(T* out, std::size_t n, std::uint64_t salt, float scale = 1e-4f) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const auto r = specdec::random_block(salt, static_cast<std::int64_t>(i >> 2), specdec::Purpose::kAccept, 0);
    const float u = specdec::bits_to_uniform(r.v[i & 3]);
    if constexpr (std::is_same_v<T, float>) out[i] = u * scale;
    else if constexpr (std::is_same_v<T, __half>) out[i] = __float2half_rn(u * scale);
    else out[i] = __float2bfloat16_rn(u * scale);
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
  DeviceBuffer<std::int32_t> cu, ids, out, nacc, parents, nodes;
  DeviceBuffer<std::uint64_t> seeds;
  DeviceBuffer<std::int64_t> positions;
  DeviceBuffer<std::uint8_t> flags;
  DeviceBuffer<Status> status;
  DeviceBuffer<char> workspace;
  std::size_t ws_bytes;
  std::vector<std::int32_t> parents_host;

  /// One workspace serves every verifier of the problem.
  static std::size_t workspace_bytes(std::int64_t b, std::int64_t k, std::int64_t v) {
    return std::max({sc::chain_verify_workspace_size(b, b * k, v), sc::tree_verify_workspace_size(b, b * k, v),
                     sc::block_verify_workspace_size(b, b * k, v)});
  }

  Problem(std::int64_t b, std::int64_t k, std::int64_t v)
      : B(b), K(k), V(v), N(b * k), cu(b + 1), ids(b * k), out(b * (k + 1)), nacc(b), parents(b * k), nodes(b * (k + 1)),
        seeds(b), positions(b), flags(b * k), status(b), workspace(workspace_bytes(b, k, v)),
        ws_bytes(workspace_bytes(b, k, v)) {
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
    std::vector<std::int32_t> h_cu(B + 1), h_ids(N), h_parents(N);
    std::vector<std::uint64_t> h_seeds(B);
    std::vector<std::int64_t> h_pos(B);
    std::mt19937_64 rng(7);
    for (std::int64_t i = 0; i <= B; ++i) h_cu[i] = static_cast<std::int32_t>(i * K);
    for (auto& x : h_ids) x = static_cast<std::int32_t>(rng() % V);
    // Tree shape: draft j (node j + 1) hangs under a node in [0, j]; the root gets about a third of the drafts.
    for (std::int64_t i = 0; i < N; ++i) {
      const std::int64_t j = i % K;
      h_parents[i] = rng() % 3 == 0 ? 0 : static_cast<std::int32_t>(rng() % (j + 1));
    }
    for (std::int64_t i = 0; i < B; ++i) {
      h_seeds[i] = rng();
      h_pos[i] = static_cast<std::int64_t>(rng() % 4096);
    }
    cudaMemcpy(cu.ptr, h_cu.data(), h_cu.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(ids.ptr, h_ids.data(), h_ids.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(parents.ptr, h_parents.data(), h_parents.size() * 4, cudaMemcpyHostToDevice);
    parents_host = h_parents;
    cudaMemcpy(seeds.ptr, h_seeds.data(), h_seeds.size() * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(positions.ptr, h_pos.data(), h_pos.size() * 8, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }

  /// The fields every verifier's parameters share, for input copy c.
  template <class P>
  P common_params(int c) const {
    P a;
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
    a.status = status.ptr;
    return a;
  }

  sc::ChainVerifyParams<T, std::int32_t> params(int c) const {
    auto a = common_params<sc::ChainVerifyParams<T, std::int32_t>>(c);
    a.accepted = flags.ptr;
    return a;
  }

  sc::TreeVerifyParams<T, std::int32_t> tree_params(int c) const {
    auto a = common_params<sc::TreeVerifyParams<T, std::int32_t>>(c);
    a.parents = parents.ptr;
    a.accepted_nodes = nodes.ptr;
    return a;
  }

  sc::BlockVerifyParams<T, std::int32_t> block_params(int c) const {
    auto a = common_params<sc::BlockVerifyParams<T, std::int32_t>>(c);
    a.accepted = flags.ptr;
    return a;
  }

  /// Probability bytes the last tree call read: per request the final node's target row and the draft rows of its
  /// rejected children (the residual), or the target row alone (the bonus), the winning tile once more, and the
  /// accept-test scalars of every child tested on the path.
  double tree_bytes_read() const {
    std::vector<std::int32_t> h(B), path(B * (K + 1));
    cudaMemcpy(h.data(), nacc.ptr, B * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(path.data(), nodes.ptr, path.size() * 4, cudaMemcpyDeviceToHost);
    double bytes = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int32_t last = h[b] > 0 ? path[b * (K + 1) + h[b] - 1] : 0;
      std::int64_t children = 0, tested = 0;
      for (std::int64_t j = 0; j < K; ++j) {
        const std::int32_t parent = parents_host[b * K + j];
        children += parent == last;
        for (std::int32_t i = 0; i < h[b]; ++i) tested += parent == (i == 0 ? 0 : path[b * (K + 1) + i - 1]);
      }
      const double rows = 1.0 + static_cast<double>(children);
      bytes += (rows * V + rows * std::min<std::int64_t>(V, specdec::kTileSize)) * sizeof(T);
      bytes += 2.0 * static_cast<double>(tested + children) * sizeof(T);
    }
    return bytes;
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

/// Whether every request of the last call succeeded (the kernels report per request).
template <class T>
bool all_succeeded(const Problem<T>& pb) {
  std::vector<Status> h(pb.B);
  cudaMemcpy(h.data(), pb.status.ptr, pb.B * sizeof(Status), cudaMemcpyDeviceToHost);
  return std::all_of(h.begin(), h.end(), [](Status s) { return s == Status::kSuccess; });
}

/// Times launch(copy, stream) with CUDA events after five warm-up calls, rotating through `copies` input copies;
/// returns the mean seconds per call (0 after an error, which skips the benchmark).
template <class Launch>
double time_calls(benchmark::State& state, int copies, Launch launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  Status s = Status::kSuccess;
  for (int w = 0; w < 5 && s == Status::kSuccess; ++w) s = launch(w % copies, stream);
  cudaStreamSynchronize(stream);
  double total_s = 0;
  std::int64_t calls = 0;
  int c = 0;
  for (auto _ : state) {
    if (s != Status::kSuccess) break;
    cudaEventRecord(e0, stream);
    s = launch(c, stream);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(ms * 1e-3);
    total_s += ms * 1e-3;
    ++calls;
    c = (c + 1) % copies;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  if (s != Status::kSuccess || cudaGetLastError() != cudaSuccess) {
    state.SkipWithError(s != Status::kSuccess ? specdec::to_string(s) : "CUDA error");
    return 0;
  }
  return calls > 0 ? total_s / calls : 0;
}

#define SPECDEC_REQUIRE_DEVICE_OR_SKIP(state)  \
  if (!have_device()) {                        \
    (state).SkipWithError("no CUDA device");   \
    return;                                    \
  }

template <class T>
void bench_chain(benchmark::State& state) {
  SPECDEC_REQUIRE_DEVICE_OR_SKIP(state)
  Problem<T> pb(state.range(0), state.range(1), state.range(2));
  const double s = time_calls(state, pb.copies, [&](int c, cudaStream_t st) {
    return sc::chain_verify(pb.params(c), pb.workspace.ptr, pb.ws_bytes, st);
  });
  if (s <= 0) return;
  if (!all_succeeded(pb)) return state.SkipWithError("a request failed");
  report<T>(state, pb.bytes_read(), s);
}

template <class T>
void bench_tree(benchmark::State& state) {
  SPECDEC_REQUIRE_DEVICE_OR_SKIP(state)
  Problem<T> pb(state.range(0), state.range(1), state.range(2));
  const double s = time_calls(state, pb.copies, [&](int c, cudaStream_t st) {
    return sc::tree_verify(pb.tree_params(c), pb.workspace.ptr, pb.ws_bytes, st);
  });
  if (s <= 0) return;
  if (!all_succeeded(pb)) return state.SkipWithError("a request failed");
  report<T>(state, pb.tree_bytes_read(), s);
}

/// Block verification, with the chain rule's byte count (the rows a chain verification of the same outcome reads;
/// the block kernel reads the residual's rows too, so its fraction is a lower bound).
template <class T>
void bench_block(benchmark::State& state) {
  SPECDEC_REQUIRE_DEVICE_OR_SKIP(state)
  Problem<T> pb(state.range(0), state.range(1), state.range(2));
  const double s = time_calls(state, pb.copies, [&](int c, cudaStream_t st) {
    return sc::block_verify(pb.block_params(c), pb.workspace.ptr, pb.ws_bytes, st);
  });
  if (s <= 0) return;
  if (!all_succeeded(pb)) return state.SkipWithError("a request failed");
  report<T>(state, pb.bytes_read(), s);
}

/// The logits kernel's inputs for the B requests' target rows (K + 1 each): bf16 logits, temperature 0.7 and top-p
/// 0.9 per request (the cut path), float probabilities out.
struct LogitsProblem {
  std::int64_t B, K, V, R;
  int copies = 1;
  std::vector<std::unique_ptr<DeviceBuffer<__nv_bfloat16>>> logits;
  DeviceBuffer<float> probs, temperature, top_p;
  DeviceBuffer<std::int32_t> cu;
  DeviceBuffer<Status> status;
  DeviceBuffer<std::uint8_t> greedy;
  DeviceBuffer<char> workspace;
  std::size_t ws_bytes;
  LogitsProblem(std::int64_t b, std::int64_t k, std::int64_t v)
      : B(b), K(k), V(v), R(b * (k + 1)), probs(R * v), temperature(b), top_p(b), cu(b + 1), status(R), greedy(b),
        workspace(sc::logits_to_probs_workspace_size(R, v)), ws_bytes(sc::logits_to_probs_workspace_size(R, v)) {
    int device = 0, l2 = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    const std::size_t per_copy = static_cast<std::size_t>(R * V) * 2;
    copies = static_cast<int>(std::min<std::size_t>(16, (2 * static_cast<std::size_t>(l2)) / per_copy + 1));
    for (int c = 0; c < copies; ++c) {
      logits.push_back(std::make_unique<DeviceBuffer<__nv_bfloat16>>(R * V));
      fill_kernel<<<1024, 256>>>(logits.back()->ptr, static_cast<std::size_t>(R * V), 3000 + c, 16.0f);
    }
    std::vector<float> t(B, 0.7f), p(B, 0.9f);
    std::vector<std::int32_t> h_cu(B + 1);
    for (std::int64_t i = 0; i <= B; ++i) h_cu[i] = static_cast<std::int32_t>(i * K);
    cudaMemcpy(temperature.ptr, t.data(), B * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(top_p.ptr, p.data(), B * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(cu.ptr, h_cu.data(), (B + 1) * 4, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  sc::LogitsToProbsArgs args(int c) const {
    sc::LogitsToProbsArgs a;
    a.num_rows = R;
    a.vocab_size = V;
    a.logits = logits[c]->ptr;
    a.logits_type = sc::LogitsType::kBFloat16;
    a.probs = probs.ptr;
    a.num_requests = B;
    a.temperature = temperature.ptr;
    a.top_p = top_p.ptr;
    a.cu = cu.ptr;
    a.cu_type = sc::OffsetType::kInt32;
    a.rows_extra = 1;
    a.status = status.ptr;
    a.greedy = greedy.ptr;
    return a;
  }
  bool all_succeeded() const {
    std::vector<Status> h(R);
    cudaMemcpy(h.data(), status.ptr, R * sizeof(Status), cudaMemcpyDeviceToHost);
    return std::all_of(h.begin(), h.end(), [](Status s) { return s == Status::kSuccess; });
  }
};

/// The logits kernel: bytes = bf16 logits read once + float probabilities written once.
void bench_logits(benchmark::State& state) {
  SPECDEC_REQUIRE_DEVICE_OR_SKIP(state)
  LogitsProblem pb(state.range(0), state.range(1), state.range(2));
  const double s = time_calls(state, pb.copies, [&](int c, cudaStream_t st) {
    return sc::logits_to_probs(pb.args(c), pb.workspace.ptr, pb.ws_bytes, st);
  });
  if (s <= 0) return;
  if (!pb.all_succeeded()) return state.SkipWithError("a row failed");
  report<float>(state, static_cast<double>(pb.R * pb.V) * (2 + 4), s);
}

/// One whole verification step replayed from a CUDA graph: the logits kernel over the target rows [N + B, V] and the
/// draft rows [N, V] (bf16, temperature 0.7, top-p 0.9), then the chain verifier on the probabilities. us_per_call
/// is the step; the bytes are the logits read, the probabilities written and the chain's reads.
void bench_step_graph(benchmark::State& state) {
  SPECDEC_REQUIRE_DEVICE_OR_SKIP(state)
  const std::int64_t B = state.range(0), K = state.range(1), V = state.range(2);
  LogitsProblem target(B, K, V), draft(B, K - 1, V);  // draft rows: K per request (K - 1 + 1)
  Problem<float> pb(B, K, V);
  // Draft rows use rows_extra 0 over cu = i * K; the probabilities land in the chain's own buffers.
  auto draft_args = [&](int c) {
    sc::LogitsToProbsArgs a = draft.args(c);
    a.cu = target.cu.ptr;
    a.rows_extra = 0;
    a.probs = pb.draft[0]->ptr;
    return a;
  };
  auto target_args = [&](int c) {
    sc::LogitsToProbsArgs a = target.args(c);
    a.probs = pb.target[0]->ptr;
    return a;
  };
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  Status s = sc::logits_to_probs(target_args(0), target.workspace.ptr, target.ws_bytes, stream);
  if (s == Status::kSuccess) s = sc::logits_to_probs(draft_args(0), draft.workspace.ptr, draft.ws_bytes, stream);
  sc::ChainVerifyParams<float, std::int32_t> a = pb.params(0);
  a.greedy = target.greedy.ptr;
  if (s == Status::kSuccess) s = sc::chain_verify(a, pb.workspace.ptr, pb.ws_bytes, stream);
  const bool captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  if (s != Status::kSuccess || !captured || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    cudaStreamDestroy(stream);
    return state.SkipWithError("capture failed");
  }
  const double t = time_calls(state, 1, [&](int, cudaStream_t st) {
    return cudaGraphLaunch(exec, st) == cudaSuccess ? Status::kSuccess : Status::kCudaError;
  });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (t <= 0) return;
  if (!target.all_succeeded() || !all_succeeded(pb)) return state.SkipWithError("a row or request failed");
  const double logits_bytes = static_cast<double>((target.R + B * K) * V) * (2 + 4);
  report<float>(state, logits_bytes + pb.bytes_read(), t);
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

/// The step shapes of the device check: g = 4 drafts per request, B 1-256, V 32k-256k.
void step_shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t B : {1, 8, 64, 256})
    for (std::int64_t V : {32000, 128256, 262144}) b->Args({B, 4, V});
  b->ArgNames({"B", "K", "V"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(bench_chain<float>)->Name("cuda_chain/f32")->Apply(shapes);
BENCHMARK(bench_chain<__nv_bfloat16>)->Name("cuda_chain/bf16")->Apply(shapes);
BENCHMARK(bench_chain<float>)->Name("cuda_chain_g4/f32")->Apply(step_shapes);
BENCHMARK(bench_tree<float>)->Name("cuda_tree_g4/f32")->Apply(step_shapes);
BENCHMARK(bench_block<float>)->Name("cuda_block_g4/f32")->Apply(step_shapes);
BENCHMARK(bench_logits)->Name("cuda_logits_g4/bf16")->Apply(step_shapes);
BENCHMARK(bench_step_graph)->Name("cuda_step_graph_g4/bf16")->Apply(step_shapes);
#if defined(SPECDEC_BENCH_WITH_TORCH)
BENCHMARK(bench_chain_torch<float>)->Name("cuda_chain_torch_ops/f32")->Apply(shapes);
BENCHMARK(bench_chain_torch<__nv_bfloat16>)->Name("cuda_chain_torch_ops/bf16")->Apply(shapes);
#endif

}  // namespace

BENCHMARK_MAIN();
