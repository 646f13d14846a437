// specdec tests — a whole verification step captured in one CUDA graph and replayed: the logits kernel turns the
// target's bf16 logits [N + B, V] and the draft's [N, V] into probabilities under each request's temperature, top-k,
// top-p and min-p, then the chain verifier accepts and samples. Nothing in the step allocates or synchronises, so the
// three launches capture; every replay must give the CPU reference's tokens, counts and greedy flags bit for bit
// (specdec::logits_to_probs_batch, then verify_chain_request on those probabilities). Skips without a device.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "device_buffers.cuh"
#include "logits_cases.hpp"
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/logits_api.hpp"

namespace specdec::cuda {
namespace {

using testing::Guarded;
using testing::LogitsBatch;
using testing::upload;

/// Logits for one step: target rows (rows_extra 1) and draft rows (rows_extra 0) over the same requests and cu.
struct StepCase {
  LogitsBatch target, draft;
  std::vector<std::int64_t> ids;
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> positions;
};

StepCase make_step(std::mt19937_64& rng, std::int64_t B, std::int64_t V) {
  StepCase s;
  s.target = testing::random_batch<__nv_bfloat16>(rng, B, V, true);
  s.draft = s.target;
  const std::int64_t N = s.target.cu.back();
  s.draft.R = N;
  s.draft.rows_extra = 0;
  s.draft.logits.assign(static_cast<std::size_t>(N * s.draft.stride), 0.0f);
  for (std::int64_t r = 0; r < N; ++r)
    testing::fill_logits<__nv_bfloat16>(rng, s.draft.logits.data() + r * s.draft.stride, V, static_cast<int>(rng() % 3));
  for (std::int64_t j = 0; j < N; ++j) s.ids.push_back(static_cast<std::int64_t>(rng() % V));
  for (std::int64_t b = 0; b < B; ++b) {
    s.seeds.push_back(rng());
    s.positions.push_back(static_cast<std::int64_t>(rng() % 10000));
  }
  return s;
}

LogitsToProbsArgs logits_args(const LogitsBatch& c, const Guarded& logits, const Guarded& t, const Guarded& k,
                              const Guarded& p, const Guarded& m, const Guarded& cu, Guarded& probs, Guarded& status,
                              std::uint8_t* greedy) {
  LogitsToProbsArgs a;
  a.num_rows = c.R;
  a.vocab_size = c.V;
  a.logits = logits.get<__nv_bfloat16>();
  a.logits_type = LogitsType::kBFloat16;
  a.logits_stride = c.stride;
  a.probs = probs.get<float>();
  a.num_requests = c.B;
  a.temperature = t.get<float>();
  a.top_k = k.get<std::int32_t>();
  a.top_p = p.get<float>();
  a.min_p = m.get<float>();
  a.cu = cu.get<std::int32_t>();
  a.cu_type = OffsetType::kInt32;
  a.rows_extra = c.rows_extra;
  a.status = status.get<Status>();
  a.greedy = greedy;
  return a;
}

TEST(cuda_step_graph, LogitsAndChainVerificationReplayAsOneGraph) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(2026);
  for (const std::int64_t V : {32000, 151936}) {
    const StepCase s = make_step(rng, 6, V);
    const std::int64_t B = s.target.B, N = s.target.cu.back();
    std::int64_t max_k = 0;
    for (std::int64_t b = 0; b < B; ++b) max_k = std::max(max_k, s.target.cu[b + 1] - s.target.cu[b]);
    const std::int64_t stride = max_k + 1;

    // The CPU reference: probabilities, then the chain per request.
    testing::Batch ref;
    std::vector<Status> st_t, st_q;
    testing::reference(s.target, ref.p, st_t);
    testing::reference(s.draft, ref.q, st_q);
    for (const Status x : st_t) ASSERT_EQ(x, Status::kSuccess);
    for (const Status x : st_q) ASSERT_EQ(x, Status::kSuccess);
    ref.B = B;
    ref.V = V;
    ref.N = N;
    ref.stride = stride;
    ref.cu = s.target.cu;
    ref.ids = s.ids;
    ref.has_q = true;
    ref.seeds = s.seeds;
    ref.positions = s.positions;
    for (std::int64_t b = 0; b < B; ++b) ref.greedy.push_back(s.target.temperature[b] == 0.0f ? 1 : 0);

    // Device buffers, all allocated before capture.
    auto logits_t = upload(testing::convert<__nv_bfloat16>(s.target.logits));
    auto logits_q = upload(testing::convert<__nv_bfloat16>(s.draft.logits));
    auto t = upload(s.target.temperature), k = upload(s.target.top_k), p = upload(s.target.top_p),
         m = upload(s.target.min_p);
    auto cu = upload(std::vector<std::int32_t>(s.target.cu.begin(), s.target.cu.end()));
    auto ids = upload(std::vector<std::int32_t>(s.ids.begin(), s.ids.end()));
    auto seeds = upload(s.seeds), positions = upload(s.positions);
    Guarded probs_t(static_cast<std::size_t>((N + B) * V) * 4), probs_q(static_cast<std::size_t>(N * V) * 4);
    Guarded status_t(static_cast<std::size_t>(N + B) * sizeof(Status)), status_q(static_cast<std::size_t>(N) * sizeof(Status));
    Guarded greedy(static_cast<std::size_t>(B)), greedy_q(static_cast<std::size_t>(B));
    Guarded out(static_cast<std::size_t>(B * stride) * 4), nacc(static_cast<std::size_t>(B) * 4),
        status(static_cast<std::size_t>(B) * sizeof(Status));
    const LogitsToProbsArgs at = logits_args(s.target, *logits_t, *t, *k, *p, *m, *cu, probs_t, status_t,
                                             greedy.get<std::uint8_t>());
    const LogitsToProbsArgs aq = logits_args(s.draft, *logits_q, *t, *k, *p, *m, *cu, probs_q, status_q,
                                             greedy_q.get<std::uint8_t>());
    const std::size_t ws_logits = std::max(logits_to_probs_workspace_size(N + B, V), logits_to_probs_workspace_size(N, V));
    Guarded ws_l(ws_logits);
    ChainVerifyParams<float, std::int32_t> a;
    a.batch_size = B;
    a.vocab_size = V;
    a.num_draft_tokens = N;
    a.cu_num_draft_tokens = cu->get<std::int32_t>();
    a.draft_token_ids = ids->get<std::int32_t>();
    a.draft_probs = probs_q.get<float>();
    a.target_probs = probs_t.get<float>();
    a.seeds = seeds->get<std::uint64_t>();
    a.positions = positions->get<std::int64_t>();
    a.greedy = greedy.get<std::uint8_t>();
    a.output_token_ids = out.get<std::int32_t>();
    a.output_stride = stride;
    a.num_accepted = nacc.get<std::int32_t>();
    a.status = status.get<Status>();
    const std::size_t ws_chain = chain_verify_workspace_size(B, N, V);
    Guarded ws_c(ws_chain);

    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    ASSERT_EQ(logits_to_probs(at, ws_l.get<void>(), ws_logits, stream), Status::kSuccess);
    ASSERT_EQ(logits_to_probs(aq, ws_l.get<void>(), ws_logits, stream), Status::kSuccess);
    ASSERT_EQ(chain_verify(a, ws_c.get<void>(), ws_chain, stream), Status::kSuccess);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      CUDA_OK(cudaMemsetAsync(out.get<void>(), 0x7f, static_cast<std::size_t>(B * stride) * 4, stream));
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      const auto got = out.download<std::int32_t>(static_cast<std::size_t>(B * stride));
      const auto got_n = nacc.download<std::int32_t>(static_cast<std::size_t>(B));
      const auto got_s = status.download<Status>(static_cast<std::size_t>(B));
      const auto got_g = greedy.download<std::uint8_t>(static_cast<std::size_t>(B));
      std::vector<std::int32_t> want(static_cast<std::size_t>(stride));
      std::vector<std::uint8_t> flags(static_cast<std::size_t>(N + 1));
      for (std::int64_t b = 0; b < B; ++b) {
        std::int32_t wn = 0;
        ASSERT_EQ(got_s[b], testing::cpu_chain<std::int32_t>(ref, b, want.data(), wn, flags.data())) << "request " << b;
        ASSERT_EQ(got_n[b], wn) << "request " << b << " V " << V << " replay " << replay;
        ASSERT_EQ(std::vector<std::int32_t>(got.begin() + b * stride, got.begin() + (b + 1) * stride), want)
            << "request " << b << " V " << V << " replay " << replay;
        ASSERT_EQ(got_g[b], ref.greedy[b]) << b;
      }
    }
    for (const Guarded* g : {&probs_t, &probs_q, &ws_l, &ws_c, &out, &nacc, &status}) EXPECT_TRUE(g->guards_intact());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace specdec::cuda
