// specdec tests — the CUDA verifiers on a device against the CPU core: identical tokens, counts, flags and
// per-request statuses on thousands of random requests (vocabularies 7 .. 151936, greedy and sampled rows mixed,
// with and without draft probs, trees), sentinel guards around every output and the workspace, bad input reported
// per request. Every test skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "device_buffers.cuh"
#include "cases.hpp"
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/tree_verify.cuh"

namespace specdec::cuda {
namespace {

using testing::Batch;
using testing::Guarded;
using testing::kGuard;
using testing::kSentinel;
using testing::upload;







template <class T, class IdT>
void run_chain(const Batch& c, const char* what) {
  const std::vector<T> p = testing::convert<T>(c.p), q = testing::convert<T>(c.q);
  auto dp = upload(p), dq = upload(q), dcu = upload(testing::convert_ids<IdT>(c.cu)),
       dids = upload(testing::convert_ids<IdT>(c.ids)), dseeds = upload(c.seeds), dpos = upload(c.positions),
       dgreedy = upload(c.greedy), dkinds = upload(c.has_q_req);
  Guarded out(static_cast<std::size_t>(c.B * c.stride) * sizeof(IdT)), nacc(c.B * 4), flags(c.N + 1, 0),
      status(c.B * sizeof(Status));
  ChainVerifyParams<T, IdT> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.num_draft_tokens = c.N;
  a.cu_num_draft_tokens = dcu->template get<IdT>();
  a.draft_token_ids = dids->template get<IdT>();
  a.draft_probs = c.has_q ? dq->template get<T>() : nullptr;
  a.target_probs = dp->template get<T>();
  a.seeds = dseeds->template get<std::uint64_t>();
  a.positions = dpos->template get<std::int64_t>();
  a.greedy = dgreedy->template get<std::uint8_t>();
  a.has_draft_probs = c.has_q_req.empty() ? nullptr : dkinds->template get<std::uint8_t>();
  a.lenience = c.lenience;
  a.output_token_ids = out.get<IdT>();
  a.output_stride = c.stride;
  a.num_accepted = nacc.get<std::int32_t>();
  a.accepted = flags.get<std::uint8_t>();
  a.status = status.get<Status>();
  const std::size_t ws_bytes = chain_verify_workspace_size(c.B, c.N, c.V);
  Guarded ws(ws_bytes);
  ASSERT_EQ(chain_verify(a, ws.get<void>(), ws_bytes, nullptr), Status::kSuccess) << what;
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = out.download<IdT>(static_cast<std::size_t>(c.B * c.stride));
  const auto got_n = nacc.download<std::int32_t>(c.B);
  const auto got_f = flags.download<std::uint8_t>(c.N);
  const auto got_s = status.download<Status>(c.B);
  std::vector<IdT> want(static_cast<std::size_t>(c.stride));
  std::vector<std::uint8_t> want_f(static_cast<std::size_t>(c.N) + 1, 0);
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int32_t wn = 0;
    const Status ws_ = testing::cpu_chain<IdT>(c, b, want.data(), wn, want_f.data());
    ASSERT_EQ(got_s[b], ws_) << what << " request " << b << " V=" << c.V;
    ASSERT_EQ(std::vector<IdT>(got.begin() + b * c.stride, got.begin() + (b + 1) * c.stride), want)
        << what << " request " << b << " V=" << c.V;
    ASSERT_EQ(got_n[b], wn) << what << " request " << b;
  }
  // Flags of requests whose range is valid (a request with a broken cu writes none). A decreasing cu (the bad-input
  // cases) can give two requests with locally valid ranges overlapping flag slots; their CTAs write those slots in
  // an unspecified order, so only slots claimed by at most one request are compared.
  const std::vector<IdT> cu_ids = testing::convert_ids<IdT>(c.cu);
  std::vector<int> claims(static_cast<std::size_t>(c.N) + 1, 0);
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int64_t start = 0, k = -1;
    detail::check_request_range(cu_ids.data(), b, c.B, c.N, c.stride, c.positions.data(), start, k);
    for (std::int64_t j = start; j < start + k; ++j) ++claims[j];
  }
  for (std::int64_t j = 0; j < c.N; ++j)
    if (claims[j] <= 1) ASSERT_EQ(got_f[j], want_f[j]) << what << " flag " << j;
  for (const Guarded* g : {&out, &nacc, &flags, &status, &ws, dp.get(), dq.get(), dcu.get(), dids.get()})
    EXPECT_TRUE(g->guards_intact()) << what << ": a guard byte changed";
}

template <class T, class IdT>
void run_tree(const Batch& c, const char* what) {
  const std::vector<T> p = testing::convert<T>(c.p), q = testing::convert<T>(c.q);
  auto dp = upload(p), dq = upload(q), dcu = upload(testing::convert_ids<IdT>(c.cu)),
       dids = upload(testing::convert_ids<IdT>(c.ids)), dpar = upload(testing::convert_ids<IdT>(c.parents)),
       dseeds = upload(c.seeds), dpos = upload(c.positions), dgreedy = upload(c.greedy), dkinds = upload(c.has_q_req);
  Guarded out(static_cast<std::size_t>(c.B * c.stride) * sizeof(IdT)),
      nodes(static_cast<std::size_t>(c.B * c.stride) * sizeof(IdT)), nacc(c.B * 4), status(c.B * sizeof(Status));
  TreeVerifyParams<T, IdT> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.num_draft_tokens = c.N;
  a.cu_num_draft_tokens = dcu->template get<IdT>();
  a.draft_token_ids = dids->template get<IdT>();
  a.parents = dpar->template get<IdT>();
  a.draft_probs = c.has_q ? dq->template get<T>() : nullptr;
  a.target_probs = dp->template get<T>();
  a.seeds = dseeds->template get<std::uint64_t>();
  a.positions = dpos->template get<std::int64_t>();
  a.greedy = dgreedy->template get<std::uint8_t>();
  a.has_draft_probs = c.has_q_req.empty() ? nullptr : dkinds->template get<std::uint8_t>();
  a.output_token_ids = out.get<IdT>();
  a.output_stride = c.stride;
  a.num_accepted = nacc.get<std::int32_t>();
  a.accepted_nodes = nodes.get<IdT>();
  a.status = status.get<Status>();
  const std::size_t ws_bytes = tree_verify_workspace_size(c.B, c.N, c.V);
  Guarded ws(ws_bytes);
  ASSERT_EQ(tree_verify(a, ws.get<void>(), ws_bytes, nullptr), Status::kSuccess) << what;
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = out.download<IdT>(static_cast<std::size_t>(c.B * c.stride));
  const auto got_nodes = nodes.download<IdT>(static_cast<std::size_t>(c.B * c.stride));
  const auto got_n = nacc.download<std::int32_t>(c.B);
  const auto got_s = status.download<Status>(c.B);
  std::vector<IdT> want(static_cast<std::size_t>(c.stride)), want_nodes(want.size());
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int32_t wn = 0;
    const Status ws_ = testing::cpu_tree<IdT>(c, b, want.data(), want_nodes.data(), wn);
    ASSERT_EQ(got_s[b], ws_) << what << " request " << b << " V=" << c.V;
    ASSERT_EQ(std::vector<IdT>(got.begin() + b * c.stride, got.begin() + (b + 1) * c.stride), want) << what << " " << b;
    ASSERT_EQ(std::vector<IdT>(got_nodes.begin() + b * c.stride, got_nodes.begin() + (b + 1) * c.stride), want_nodes)
        << what << " " << b;
    ASSERT_EQ(got_n[b], wn) << what << " request " << b;
  }
  for (const Guarded* g : {&out, &nodes, &nacc, &status, &ws, dp.get(), dq.get(), dpar.get()})
    EXPECT_TRUE(g->guards_intact()) << what << ": a guard byte changed";
}

template <class T>
class cuda_verify : public ::testing::Test {};
using ProbTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(cuda_verify, ProbTypes);

constexpr std::int64_t kVocabs[] = {7, 33, 1025, 8193, 32000, 151936};

TYPED_TEST(cuda_verify, ChainMatchesCpu) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(101);
  for (int rep = 0; rep < 240; ++rep) {
    const std::int64_t V = kVocabs[rep % 6];
    const int B = V > 100000 ? 3 : 1 + static_cast<int>(rng() % 16);
    Batch c = testing::make_batch<TypeParam>(rng, V, B, 8, rep % 3 != 0, false, 0.25);
    if (rep % 7 == 0) c.lenience = 0.7f;
    if (rep % 2) run_chain<TypeParam, std::int32_t>(c, "chain");
    else run_chain<TypeParam, std::int64_t>(c, "chain");
  }
}

TYPED_TEST(cuda_verify, ChainBadInputPerRequest) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(102);
  for (int rep = 0; rep < 200; ++rep) {
    Batch c = testing::make_batch<TypeParam>(rng, kVocabs[rep % 4], 4, 5, rep % 2 == 0, false, 0.3);
    testing::corrupt(rng, c, static_cast<std::int64_t>(rng() % 4), false);
    if (rep % 20 == 0) c.cu[2] = c.cu[1] - 1;
    if (rep % 20 == 1) c.cu[4] = c.N + 5;  // past N: must be refused without reading
    run_chain<TypeParam, std::int32_t>(c, "chain bad input");
  }
}

TYPED_TEST(cuda_verify, TreeMatchesCpu) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(103);
  for (int rep = 0; rep < 150; ++rep) {
    const std::int64_t V = kVocabs[rep % 6];
    Batch c = testing::make_batch<TypeParam>(rng, V, V > 100000 ? 2 : 1 + static_cast<int>(rng() % 6), 10,
                                             rep % 3 != 0, true, 0.2);
    if (rep % 2) run_tree<TypeParam, std::int32_t>(c, "tree");
    else run_tree<TypeParam, std::int64_t>(c, "tree");
  }
}

TYPED_TEST(cuda_verify, TreeBadInputPerRequest) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(104);
  for (int rep = 0; rep < 150; ++rep) {
    Batch c = testing::make_batch<TypeParam>(rng, kVocabs[rep % 4], 4, 6, rep % 2 == 0, true, 0.2);
    testing::corrupt(rng, c, static_cast<std::int64_t>(rng() % 4), true);
    run_tree<TypeParam, std::int64_t>(c, "tree bad input");
  }
}

// Greedy rows with no mass are kZeroMass on the device too (never token 0).
TYPED_TEST(cuda_verify, GreedyZeroMassRows) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(105);
  for (int rep = 0; rep < 120; ++rep) {
    const bool tree = rep % 2 == 1;
    Batch c = testing::make_batch<TypeParam>(rng, kVocabs[rep % 5], 4, 5, rep % 4 < 2, tree, 1.0);
    const std::int64_t b = static_cast<std::int64_t>(rng() % 4), start = c.cu[b], k = c.cu[b + 1] - start;
    const std::int64_t r = rep % 3 == 0 ? 0 : static_cast<std::int64_t>(rng() % (k + 1));
    std::fill(&c.p[(start + b + r) * c.V], &c.p[(start + b + r + 1) * c.V], 0.0f);
    if (tree) run_tree<TypeParam, std::int32_t>(c, "tree greedy zero mass");
    else run_chain<TypeParam, std::int32_t>(c, "chain greedy zero mass");
  }
}

// Requests with and without draft probabilities in one batch (has_draft_probs; the unused rows hold NaN).
TYPED_TEST(cuda_verify, MixedDraftKinds) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(106);
  for (int rep = 0; rep < 160; ++rep) {
    const std::int64_t V = kVocabs[rep % 6];
    const int B = V > 100000 ? 3 : 2 + static_cast<int>(rng() % 12);
    Batch c = testing::make_batch<TypeParam>(rng, V, B, 7, true, rep % 2 == 1, 0.2, 0.5);
    if (rep % 10 == 0) c.has_q = false;  // flagged requests with drafts but no draft probs: kInvalidArgument
    if (rep % 2) run_tree<TypeParam, std::int32_t>(c, "tree mixed kinds");
    else run_chain<TypeParam, std::int64_t>(c, "chain mixed kinds");
  }
}

// Empty batch, workspace too small, bad lenience: host-side statuses, nothing launched.
TEST(cuda_verify_args, HostChecks) {
  SPECDEC_REQUIRE_DEVICE();
  ChainVerifyParams<float, std::int32_t> a;
  a.vocab_size = 10;
  a.output_stride = 1;
  EXPECT_EQ(chain_verify(a, nullptr, 0, nullptr), Status::kSuccess);  // B = 0
  a.lenience = 0.0f;
  EXPECT_EQ(chain_verify_can_implement(a), Status::kInvalidArgument);
  a.lenience = 1.0f;
  a.batch_size = 1;
  EXPECT_EQ(chain_verify_can_implement(a), Status::kInvalidArgument);  // null pointers
}

// The device's exponential variates have the host's bits (the build's -fmad=false and shared log_positive).
__global__ void exponentials_kernel(std::uint64_t seed, std::int64_t pos, std::uint32_t n, float* out) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = exponential(seed, pos, Purpose::kResidual, i);
}

TEST(cuda_verify_rng, ExponentialBitsMatchHost) {
  SPECDEC_REQUIRE_DEVICE();
  constexpr std::uint32_t kN = 1u << 22;
  Guarded d(kN * sizeof(float));
  exponentials_kernel<<<256, 256>>>(1234567, 42, kN, d.get<float>());
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = d.download<float>(kN);
  for (std::uint32_t i = 0; i < kN; ++i) {
    const float want = exponential(1234567, 42, Purpose::kResidual, i);
    ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "index " << i;
  }
}

// A captured CUDA graph replays the verification with the same results (no hidden allocation or host sync).
TEST(cuda_verify_graph, CapturedStepReplays) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(105);
  const Batch c = testing::make_batch<float>(rng, 32000, 8, 5, true, false, 0.25);
  auto dp = upload(c.p), dq = upload(c.q), dcu = upload(testing::convert_ids<std::int32_t>(c.cu)),
       dids = upload(testing::convert_ids<std::int32_t>(c.ids)), dseeds = upload(c.seeds), dpos = upload(c.positions),
       dgreedy = upload(c.greedy);
  Guarded out(c.B * c.stride * 4), nacc(c.B * 4), status(c.B * 4);
  ChainVerifyParams<float, std::int32_t> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.num_draft_tokens = c.N;
  a.cu_num_draft_tokens = dcu->get<std::int32_t>();
  a.draft_token_ids = dids->get<std::int32_t>();
  a.draft_probs = dq->get<float>();
  a.target_probs = dp->get<float>();
  a.seeds = dseeds->get<std::uint64_t>();
  a.positions = dpos->get<std::int64_t>();
  a.greedy = dgreedy->get<std::uint8_t>();
  a.output_token_ids = out.get<std::int32_t>();
  a.output_stride = c.stride;
  a.num_accepted = nacc.get<std::int32_t>();
  a.status = status.get<Status>();
  const std::size_t bytes = ChainVerify<float, std::int32_t>::get_workspace_size(a);
  Guarded ws(bytes);
  ChainVerify<float, std::int32_t> op;
  ASSERT_EQ(op.initialize(a, ws.get<void>(), bytes), Status::kSuccess);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ASSERT_EQ(op.run(stream), Status::kSuccess);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  const auto got = out.download<std::int32_t>(c.B * c.stride);
  std::vector<std::int32_t> want(c.stride);
  std::vector<std::uint8_t> f(c.N + 1);
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int32_t wn;
    ASSERT_EQ(testing::cpu_chain<std::int32_t>(c, b, want.data(), wn, f.data()), Status::kSuccess);
    ASSERT_EQ(std::vector<std::int32_t>(got.begin() + b * c.stride, got.begin() + (b + 1) * c.stride), want);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace specdec::cuda
