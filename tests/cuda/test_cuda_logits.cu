// specdec tests — the logits kernel on a device against the CPU reference (specdec::logits_to_probs_batch): identical
// probability bits and per-row statuses for float, half and bfloat16 logits (vocabularies 1 .. 151,936, ties at the
// cuts, near-zero temperatures, bad rows), sentinel guards around every output and the workspace, the greedy flags,
// and a captured CUDA graph replaying the step. Every test skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "device_buffers.cuh"
#include "logits_cases.hpp"
#include "specdec/cuda/logits_api.hpp"

namespace specdec::cuda {
namespace {

using testing::LogitsBatch;
using testing::Guarded;
using testing::kGuard;
using testing::kSentinel;
using testing::upload;







template <class T>
LogitsType type_of() {
  if constexpr (std::is_same_v<T, float>) return LogitsType::kFloat32;
  else if constexpr (std::is_same_v<T, __half>) return LogitsType::kFloat16;
  else return LogitsType::kBFloat16;
}

/// The device buffers and arguments of one batch.
template <class T, class IdT>
struct DeviceBatch {
  std::unique_ptr<Guarded> logits, t, k, p, m, cu, probs, status, greedy, ws;
  LogitsToProbsArgs a;
  std::size_t ws_bytes = 0;
  explicit DeviceBatch(const LogitsBatch& c) {
    logits = upload(testing::convert<T>(c.logits));
    t = upload(c.temperature);
    k = upload(c.top_k);
    p = upload(c.top_p);
    m = upload(c.min_p);
    cu = upload(std::vector<IdT>(c.cu.begin(), c.cu.end()));
    probs = std::make_unique<Guarded>(static_cast<std::size_t>(c.R * c.V) * sizeof(float));
    status = std::make_unique<Guarded>(static_cast<std::size_t>(c.R) * sizeof(Status));
    greedy = std::make_unique<Guarded>(static_cast<std::size_t>(c.B));
    ws_bytes = logits_to_probs_workspace_size(c.R, c.V);
    ws = std::make_unique<Guarded>(ws_bytes);
    a.num_rows = c.R;
    a.vocab_size = c.V;
    a.logits = logits->get<T>();
    a.logits_type = type_of<T>();
    a.logits_stride = c.stride;
    a.probs = probs->get<float>();
    a.num_requests = c.B;
    a.temperature = t->get<float>();
    a.top_k = k->get<std::int32_t>();
    a.top_p = p->get<float>();
    a.min_p = m->get<float>();
    a.cu = c.use_cu ? cu->get<IdT>() : nullptr;
    a.cu_type = sizeof(IdT) == 4 ? OffsetType::kInt32 : OffsetType::kInt64;
    a.rows_extra = c.rows_extra;
    a.status = status->get<Status>();
    a.greedy = greedy->get<std::uint8_t>();
  }
  void expect_matches(const LogitsBatch& c) const {
    std::vector<float> want;
    std::vector<Status> want_status;
    testing::reference(c, want, want_status);
    const auto got = probs->download<float>(static_cast<std::size_t>(c.R * c.V));
    const auto got_status = status->download<Status>(static_cast<std::size_t>(c.R));
    const auto got_greedy = greedy->download<std::uint8_t>(static_cast<std::size_t>(c.B));
    for (std::int64_t r = 0; r < c.R; ++r) {
      ASSERT_EQ(got_status[r], want_status[r]) << "row " << r;
      ASSERT_EQ(0, std::memcmp(got.data() + r * c.V, want.data() + r * c.V, static_cast<std::size_t>(c.V) * 4))
          << "row " << r << " V " << c.V;
    }
    for (std::int64_t b = 0; b < c.B; ++b) ASSERT_EQ(got_greedy[b], c.temperature[b] == 0.0f ? 1 : 0) << b;
    for (const auto* g : {probs.get(), status.get(), greedy.get(), ws.get(), logits.get()})
      EXPECT_TRUE(g->guards_intact());
  }
};

template <class T, class IdT>
void run(const LogitsBatch& c, const char* what) {
  SCOPED_TRACE(what);
  DeviceBatch<T, IdT> d(c);
  ASSERT_EQ(logits_to_probs(d.a, d.ws->template get<void>(), d.ws_bytes, nullptr), Status::kSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  d.expect_matches(c);
}

TEST(cuda_logits, EdgeRowsMatchCpu) {
  SPECDEC_REQUIRE_DEVICE();
  for (std::int64_t V : {1, 2, 7, 1023, 1024, 1025, 3001, 32000, 151936})
    run<float, std::int64_t>(testing::edge_batch<float>(V), "edge float");
  run<__half, std::int64_t>(testing::edge_batch<__half>(5000), "edge half");
  run<__nv_bfloat16, std::int64_t>(testing::edge_batch<__nv_bfloat16>(128256), "edge bfloat16");
}

TEST(cuda_logits, RandomBatchesMatchCpu) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(77);
  for (std::int64_t V : {3, 64, 1000, 1031, 4096, 32000, 128256, 151936}) {
    for (int rep = 0; rep < 2; ++rep) {
      run<float, std::int32_t>(testing::random_batch<float>(rng, 8, V, true), "random float");
      run<__half, std::int64_t>(testing::random_batch<__half>(rng, 6, V, rep == 0), "random half");
      run<__nv_bfloat16, std::int64_t>(testing::random_batch<__nv_bfloat16>(rng, 6, V, rep != 0), "random bf16");
    }
  }
}

TEST(cuda_logits, WorkspaceTooSmallAndBadArgumentsLaunchNothing) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(3);
  const LogitsBatch c = testing::random_batch<float>(rng, 3, 2000, true);
  DeviceBatch<float, std::int64_t> d(c);
  EXPECT_EQ(logits_to_probs(d.a, d.ws->get<void>(), d.ws_bytes - 1, nullptr), Status::kWorkspaceTooSmall);
  EXPECT_EQ(logits_to_probs(d.a, nullptr, d.ws_bytes, nullptr), Status::kWorkspaceTooSmall);
  LogitsToProbsArgs bad = d.a;
  bad.logits_stride = 5;
  EXPECT_EQ(logits_to_probs(bad, d.ws->get<void>(), d.ws_bytes, nullptr), Status::kInvalidArgument);
  CUDA_OK(cudaDeviceSynchronize());
  const auto got_status = d.status->download<unsigned char>(static_cast<std::size_t>(c.R) * sizeof(Status));
  for (unsigned char v : got_status) EXPECT_EQ(v, kSentinel);  // nothing was launched
}

// A captured CUDA graph replays the processing with the same results (no allocation, no host sync inside).
TEST(cuda_logits_graph, CapturedStepReplays) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(8);
  const LogitsBatch c = testing::random_batch<__nv_bfloat16>(rng, 8, 32000, true);
  DeviceBatch<__nv_bfloat16, std::int32_t> d(c);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ASSERT_EQ(logits_to_probs(d.a, d.ws->get<void>(), d.ws_bytes, stream), Status::kSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  d.expect_matches(c);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace specdec::cuda
