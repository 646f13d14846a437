// The host-callable CUDA entries (cuda/verify_api.hpp, cuda/logits_api.hpp) from a plain C++ translation unit that
// links specdec::cuda alone: the argument checks name the argument at fault and accept good arguments, the launchers
// refuse bad arguments and bad workspaces before touching the device, and the workspace sizes are positive and
// non-decreasing in B, N and V, for every instantiated probability and id type. Pointers given to the host checks are
// host addresses standing in for device ones (the checks never dereference them). One test launches the three
// verifiers on a device; without one (cudaGetDeviceCount fails or reports 0) it is skipped and says so.
#if defined(__CUDACC__)
#error "test_cuda_host_api checks the host-only headers under a plain C++ compiler; compile it as C++, not CUDA"
#endif

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/cuda/logits_api.hpp"
#include "specdec/cuda/verify_api.hpp"

// verify_api.hpp must stay free of the device headers (common.cuh defines SPECDEC_UNROLL).
#if defined(SPECDEC_UNROLL)
#error "verify_api.hpp pulled in the .cuh headers"
#endif

namespace specdec::cuda {
namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string argument_of(const VerifyResult& r) { return r.argument ? r.argument : ""; }

/// Host storage whose addresses stand in for device pointers in the host checks.
template <class ProbT, class IdT>
struct FakeBuffers {
  std::array<IdT, 8> cu{}, ids{}, parents{}, out{}, nodes{};
  std::array<ProbT, 8> draft{}, target{};
  std::array<std::uint64_t, 8> seeds{};
  std::array<std::int64_t, 8> positions{};
  std::array<std::int32_t, 8> accepted_count{};
  std::array<Status, 8> status{};
  alignas(256) std::array<unsigned char, 1 << 16> workspace{};
};

/// Arguments that pass every host check: B = 2, N = 3, V = 10, all pointers set, the element counts given.
template <class Params, class Buffers>
Params good_params(Buffers& f) {
  Params a;
  a.batch_size = 2;
  a.vocab_size = 10;
  a.num_draft_tokens = 3;
  a.cu_num_draft_tokens = f.cu.data();
  a.draft_token_ids = f.ids.data();
  a.draft_probs = f.draft.data();
  a.target_probs = f.target.data();
  a.seeds = f.seeds.data();
  a.positions = f.positions.data();
  a.output_token_ids = f.out.data();
  a.output_stride = 4;
  a.num_accepted = f.accepted_count.data();
  a.status = f.status.data();
  a.draft_token_ids_size = 3;
  a.draft_probs_size = 30;
  a.target_probs_size = 50;
  if constexpr (requires { a.parents; }) {
    a.parents = f.parents.data();
    a.parents_size = 3;
  }
  return a;
}

// One fixture per verifier, so every check runs for the three kinds alike.
template <class ProbT, class IdT>
struct Chain {
  using Params = ChainVerifyParams<ProbT, IdT>;
  static constexpr const char* kName = "chain";
  static constexpr std::int64_t kMaxBatch = 65535;
  static VerifyResult check(const Params& a) { return chain_verify_check_arguments(a); }
  static Status can_implement(const Params& a) { return chain_verify_can_implement(a); }
  static std::size_t workspace(std::int64_t b, std::int64_t n, std::int64_t v) {
    return chain_verify_workspace_size(b, n, v);
  }
  static Status launch(const Params& a, void* ws, std::size_t bytes) { return chain_verify(a, ws, bytes, nullptr); }
};
template <class ProbT, class IdT>
struct Tree {
  using Params = TreeVerifyParams<ProbT, IdT>;
  static constexpr const char* kName = "tree";
  static constexpr std::int64_t kMaxBatch = 0x7fffffffLL;
  static VerifyResult check(const Params& a) { return tree_verify_check_arguments(a); }
  static Status can_implement(const Params& a) { return tree_verify_can_implement(a); }
  static std::size_t workspace(std::int64_t b, std::int64_t n, std::int64_t v) {
    return tree_verify_workspace_size(b, n, v);
  }
  static Status launch(const Params& a, void* ws, std::size_t bytes) { return tree_verify(a, ws, bytes, nullptr); }
};
template <class ProbT, class IdT>
struct Block {
  using Params = BlockVerifyParams<ProbT, IdT>;
  static constexpr const char* kName = "block";
  static constexpr std::int64_t kMaxBatch = 65535;
  static VerifyResult check(const Params& a) { return block_verify_check_arguments(a); }
  static Status can_implement(const Params& a) { return block_verify_can_implement(a); }
  static std::size_t workspace(std::int64_t b, std::int64_t n, std::int64_t v) {
    return block_verify_workspace_size(b, n, v);
  }
  static Status launch(const Params& a, void* ws, std::size_t bytes) { return block_verify(a, ws, bytes, nullptr); }
};

template <class K, class P, class I>
struct Case {
  using Kind = K;
  using ProbT = P;
  using IdT = I;
};

#define SPECDEC_HOST_API_CASES(Kind)                                                                         \
  Case<Kind<float, std::int32_t>, float, std::int32_t>, Case<Kind<float, std::int64_t>, float, std::int64_t>, \
      Case<Kind<__half, std::int32_t>, __half, std::int32_t>,                                                 \
      Case<Kind<__half, std::int64_t>, __half, std::int64_t>,                                                 \
      Case<Kind<__nv_bfloat16, std::int32_t>, __nv_bfloat16, std::int32_t>,                                   \
      Case<Kind<__nv_bfloat16, std::int64_t>, __nv_bfloat16, std::int64_t>
using AllCases = ::testing::Types<SPECDEC_HOST_API_CASES(Chain), SPECDEC_HOST_API_CASES(Tree),
                                  SPECDEC_HOST_API_CASES(Block)>;
#undef SPECDEC_HOST_API_CASES

template <class T>
constexpr const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, __half>) return "f16";
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return "bf16";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "i32";
  else return "i64";
}

/// Test names: chain_f32_i32, tree_bf16_i64, ...
struct CaseName {
  template <class C>
  static std::string GetName(int) {
    return std::string(C::Kind::kName) + "_" + type_name<typename C::ProbT>() + "_" + type_name<typename C::IdT>();
  }
};

template <class C>
class cuda_host_api : public ::testing::Test {};
TYPED_TEST_SUITE(cuda_host_api, AllCases, CaseName);

TYPED_TEST(cuda_host_api, ChecksAcceptGoodArguments) {
  using K = typename TypeParam::Kind;
  FakeBuffers<typename TypeParam::ProbT, typename TypeParam::IdT> f;
  auto a = good_params<typename K::Params>(f);
  EXPECT_TRUE(K::check(a).ok()) << K::kName << ": " << to_string(K::check(a));
  EXPECT_EQ(K::can_implement(a), Status::kSuccess);
  a.draft_probs = nullptr;  // deterministic drafts
  EXPECT_TRUE(K::check(a).ok()) << K::kName << ": " << to_string(K::check(a));
  a.num_draft_tokens = 0;  // no drafts: the draft ids (and parents) may be null
  a.draft_token_ids = nullptr;
  a.draft_token_ids_size = 0;
  a.target_probs_size = 20;
  if constexpr (requires { a.parents; }) {
    a.parents = nullptr;
    a.parents_size = 0;
  }
  EXPECT_TRUE(K::check(a).ok()) << K::kName << ": " << to_string(K::check(a));
  typename K::Params empty;  // an empty batch needs no pointers
  empty.vocab_size = 1;
  empty.output_stride = 1;
  EXPECT_TRUE(K::check(empty).ok()) << K::kName << ": " << to_string(K::check(empty));
}

TYPED_TEST(cuda_host_api, ChecksNameTheBadArgument) {
  using K = typename TypeParam::Kind;
  using Params = typename K::Params;
  FakeBuffers<typename TypeParam::ProbT, typename TypeParam::IdT> f;
  const Params good = good_params<Params>(f);
  auto expect_bad = [&](const Params& a, const char* argument) {
    const VerifyResult r = K::check(a);
    EXPECT_EQ(r.status, Status::kInvalidArgument) << K::kName << ", " << argument;
    EXPECT_EQ(argument_of(r), argument) << K::kName << ": " << to_string(r);
    EXPECT_EQ(K::can_implement(a), Status::kInvalidArgument) << K::kName << ", " << argument;
  };

  Params a = Params{};  // everything zero: vocab_size is the first thing wrong
  expect_bad(a, "vocab_size");
  EXPECT_EQ(to_string(K::check(a)), "invalid argument: vocab_size: expected a value in [1, 2^31), got 0");
  a = good;
  a.vocab_size = 0x80000000LL;
  expect_bad(a, "vocab_size");
  a = good;
  a.batch_size = -1;
  expect_bad(a, "batch_size");
  a = good;
  a.batch_size = K::kMaxBatch + 1;
  expect_bad(a, "batch_size");
  a = good;
  a.num_draft_tokens = -1;
  expect_bad(a, "num_draft_tokens");
  a = good;
  a.output_stride = 0;
  expect_bad(a, "output_stride");
  a = good;
  a.target_probs_size = 49;
  expect_bad(a, "target_probs_size");
  EXPECT_EQ(to_string(K::check(a)),
            "invalid argument: target_probs_size: expected (num_draft_tokens + batch_size) * vocab_size = 50, got 49");
  a = good;
  a.draft_probs_size = 31;
  expect_bad(a, "draft_probs_size");
  a = good;
  a.draft_token_ids_size = 2;
  expect_bad(a, "draft_token_ids_size");

  // Every required pointer, one at a time.
  a = good;
  a.cu_num_draft_tokens = nullptr;
  expect_bad(a, "cu_num_draft_tokens");
  EXPECT_EQ(to_string(K::check(a)), "invalid argument: cu_num_draft_tokens: expected a non-null pointer, got null");
  a = good;
  a.target_probs = nullptr;
  expect_bad(a, "target_probs");
  a = good;
  a.seeds = nullptr;
  expect_bad(a, "seeds");
  a = good;
  a.positions = nullptr;
  expect_bad(a, "positions");
  a = good;
  a.output_token_ids = nullptr;
  expect_bad(a, "output_token_ids");
  a = good;
  a.num_accepted = nullptr;
  expect_bad(a, "num_accepted");
  a = good;
  a.status = nullptr;
  expect_bad(a, "status");
  a = good;
  a.draft_token_ids = nullptr;
  expect_bad(a, "draft_token_ids");
  if constexpr (requires { a.parents; }) {
    a = good;
    a.parents = nullptr;
    expect_bad(a, "parents");
    a = good;
    a.parents_size = 4;
    expect_bad(a, "parents_size");
  }
  if constexpr (requires { a.lenience; }) {
    a = good;
    a.lenience = 0.0f;
    expect_bad(a, "lenience");
    a.lenience = 1.5f;
    expect_bad(a, "lenience");
  }
}

// The launchers return before any device access for bad arguments, an empty batch and a bad workspace.
TYPED_TEST(cuda_host_api, LaunchersRefuseBeforeTheDevice) {
  using K = typename TypeParam::Kind;
  using Params = typename K::Params;
  FakeBuffers<typename TypeParam::ProbT, typename TypeParam::IdT> f;
  const Params good = good_params<Params>(f);
  const std::size_t need = K::workspace(good.batch_size, good.num_draft_tokens, good.vocab_size);
  ASSERT_GT(need, 0u);
  ASSERT_LE(need + 16, f.workspace.size());
  void* ws = f.workspace.data();

  Params a = good;
  a.seeds = nullptr;
  EXPECT_EQ(K::launch(a, ws, need), Status::kInvalidArgument) << K::kName;
  a = good;
  a.vocab_size = 0;
  EXPECT_EQ(K::launch(a, ws, need), Status::kInvalidArgument) << K::kName;
  a = Params{};
  a.vocab_size = 8;
  a.output_stride = 1;
  EXPECT_EQ(K::launch(a, nullptr, 0), Status::kSuccess) << K::kName << ": an empty batch launches nothing";
  EXPECT_EQ(K::launch(good, nullptr, need), Status::kWorkspaceTooSmall) << K::kName;
  EXPECT_EQ(K::launch(good, ws, need - 1), Status::kWorkspaceTooSmall) << K::kName;
  EXPECT_EQ(K::launch(good, f.workspace.data() + 8, need), Status::kWorkspaceTooSmall) << K::kName << ": misaligned";
}

TYPED_TEST(cuda_host_api, WorkspaceSizesArePositiveAndMonotone) {
  using K = typename TypeParam::Kind;
  const std::int64_t batches[] = {1, 2, 7, 64, 256};
  const std::int64_t drafts[] = {0, 1, 5, 64, 1000};
  const std::int64_t vocabs[] = {1, 1024, 1025, 32000, 151936};
  for (std::int64_t b : batches)
    for (std::int64_t n : drafts)
      for (std::int64_t v : vocabs) {
        const std::size_t s = K::workspace(b, n, v);
        EXPECT_GT(s, 0u) << K::kName << " B=" << b << " N=" << n << " V=" << v;
        EXPECT_EQ(s % 256, 0u) << K::kName << " B=" << b << " N=" << n << " V=" << v;
        EXPECT_EQ(s, K::workspace(b, n, v)) << K::kName << ": not a pure function";
        EXPECT_GE(K::workspace(b + 1, n, v), s) << K::kName << " B=" << b << " N=" << n << " V=" << v;
        EXPECT_GE(K::workspace(b, n + 1, v), s) << K::kName << " B=" << b << " N=" << n << " V=" << v;
        EXPECT_GE(K::workspace(b, n, v + 1), s) << K::kName << " B=" << b << " N=" << n << " V=" << v;
      }
  // Each dimension matters once it grows enough.
  EXPECT_GT(K::workspace(256, 64, 32000), K::workspace(1, 64, 32000)) << K::kName;
  EXPECT_GT(K::workspace(4, 4096, 32000), K::workspace(4, 0, 32000)) << K::kName;
  EXPECT_GT(K::workspace(4, 64, 151936), K::workspace(4, 64, 1024)) << K::kName;
}

// ---------------------------------------------------------------------------------------------------------------
// logits_api.hpp from the same translation unit.

struct LogitsFake {
  std::array<float, 64> logits{}, probs{}, temperature{};
  std::array<Status, 8> status{};
  alignas(256) std::array<unsigned char, 1 << 16> workspace{};
};

LogitsToProbsArgs good_logits_args(LogitsFake& f) {
  LogitsToProbsArgs a;
  a.num_rows = 4;
  a.vocab_size = 16;
  a.logits = f.logits.data();
  a.probs = f.probs.data();
  a.num_requests = 4;
  a.temperature = f.temperature.data();
  a.status = f.status.data();
  return a;
}

TEST(cuda_host_api_logits, ChecksNameTheBadArgument) {
  LogitsFake f;
  const LogitsToProbsArgs good = good_logits_args(f);
  EXPECT_TRUE(logits_to_probs_check_arguments(good).ok()) << to_string(logits_to_probs_check_arguments(good));
  auto expect_bad = [](const LogitsToProbsArgs& a, const char* argument) {
    const VerifyResult r = logits_to_probs_check_arguments(a);
    EXPECT_EQ(r.status, Status::kInvalidArgument) << argument;
    EXPECT_EQ(argument_of(r), argument) << to_string(r);
  };
  LogitsToProbsArgs a = good;
  a.vocab_size = 0;
  expect_bad(a, "vocab_size");
  EXPECT_EQ(to_string(logits_to_probs_check_arguments(a)),
            "invalid argument: vocab_size: expected a value in [1, 2^31), got 0");
  a = good;
  a.num_rows = -1;
  expect_bad(a, "num_rows");
  a = good;
  a.num_requests = 3;  // no cu: one request per row
  expect_bad(a, "num_requests");
  a = good;
  a.logits_stride = 15;
  expect_bad(a, "logits_stride");
  a = good;
  a.rows_extra = 2;
  expect_bad(a, "rows_extra");
  a = good;
  a.logits = nullptr;
  expect_bad(a, "logits");
  a = good;
  a.probs = nullptr;
  expect_bad(a, "probs");
  a = good;
  a.status = nullptr;
  expect_bad(a, "status");
}

TEST(cuda_host_api_logits, LauncherRefusesBeforeTheDevice) {
  LogitsFake f;
  const LogitsToProbsArgs good = good_logits_args(f);
  const std::size_t need = logits_to_probs_workspace_size(good.num_rows, good.vocab_size);
  ASSERT_GT(need, 0u);
  ASSERT_LE(need + 16, f.workspace.size());
  LogitsToProbsArgs a = good;
  a.vocab_size = 0;
  EXPECT_EQ(logits_to_probs(a, f.workspace.data(), need, nullptr), Status::kInvalidArgument);
  EXPECT_EQ(logits_to_probs(good, nullptr, need, nullptr), Status::kWorkspaceTooSmall);
  EXPECT_EQ(logits_to_probs(good, f.workspace.data(), need - 1, nullptr), Status::kWorkspaceTooSmall);
  EXPECT_EQ(logits_to_probs(good, f.workspace.data() + 8, need, nullptr), Status::kWorkspaceTooSmall);
  a = good;
  a.num_rows = 0;
  a.num_requests = 0;
  EXPECT_EQ(logits_to_probs(a, nullptr, 0, nullptr), Status::kSuccess) << "no rows: nothing to launch";
}

TEST(cuda_host_api_logits, WorkspaceSizesArePositiveAndMonotone) {
  const std::int64_t rows[] = {1, 2, 9, 64, 512};
  const std::int64_t vocabs[] = {1, 1000, 32000, 151936};
  for (std::int64_t r : rows)
    for (std::int64_t v : vocabs) {
      const std::size_t s = logits_to_probs_workspace_size(r, v);
      EXPECT_GT(s, 0u) << "R=" << r << " V=" << v;
      EXPECT_GE(logits_to_probs_workspace_size(r + 1, v), s) << "R=" << r << " V=" << v;
      EXPECT_GE(logits_to_probs_workspace_size(r, v + 1), s) << "R=" << r << " V=" << v;
    }
  EXPECT_GT(logits_to_probs_workspace_size(64, 32000), logits_to_probs_workspace_size(1, 32000));
  EXPECT_GT(logits_to_probs_workspace_size(4, 151936), logits_to_probs_workspace_size(4, 1000));
  EXPECT_EQ(logits_to_probs_workspace_size(0, 32000), 0u);
}

// ---------------------------------------------------------------------------------------------------------------
// On a device: the three launchers, called from this C++ translation unit, verify one greedy request. Drafts 5, 6;
// target rows argmax 5, 2, 7: draft 5 is accepted, draft 6 rejected, the target's token 2 follows.

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(const std::vector<T>& host) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), host.size() * sizeof(T)) != cudaSuccess) {
      ptr = nullptr;
      return;
    }
    if (cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(ptr);
      ptr = nullptr;
    }
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> to_host(std::size_t n) const {
    std::vector<T> h(n);
    if (cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) h.clear();
    return h;
  }
};

TEST(cuda_host_api_device, GreedyRequestThroughEveryLauncher) {
  if (!have_device())
    GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or reported 0): the launches are not run";
  constexpr std::int64_t V = 8, N = 2, B = 1, kStride = 3;
  std::vector<float> target((N + B) * V, 0.01f);
  target[0 * V + 5] = 0.9f;
  target[1 * V + 2] = 0.9f;
  target[2 * V + 7] = 0.9f;
  DeviceArray<float> d_target(target);
  DeviceArray<std::int32_t> d_cu(std::vector<std::int32_t>{0, 2});
  DeviceArray<std::int32_t> d_ids(std::vector<std::int32_t>{5, 6});
  DeviceArray<std::int32_t> d_parents(std::vector<std::int32_t>{0, 1});  // a chain: draft j hangs below node j
  DeviceArray<std::uint64_t> d_seeds(std::vector<std::uint64_t>{7});
  DeviceArray<std::int64_t> d_positions(std::vector<std::int64_t>{0});
  DeviceArray<std::uint8_t> d_greedy(std::vector<std::uint8_t>{1});
  DeviceArray<std::int32_t> d_out(std::vector<std::int32_t>(kStride, 99));
  DeviceArray<std::int32_t> d_count(std::vector<std::int32_t>{99});
  DeviceArray<Status> d_status(std::vector<Status>{Status::kInvalidArgument});
  const std::size_t ws_bytes = std::max({chain_verify_workspace_size(B, N, V), tree_verify_workspace_size(B, N, V),
                                         block_verify_workspace_size(B, N, V)});
  DeviceArray<unsigned char> d_ws{std::vector<unsigned char>(ws_bytes)};
  for (void* p : {static_cast<void*>(d_target.ptr), static_cast<void*>(d_cu.ptr), static_cast<void*>(d_ids.ptr),
                  static_cast<void*>(d_parents.ptr), static_cast<void*>(d_seeds.ptr),
                  static_cast<void*>(d_positions.ptr), static_cast<void*>(d_greedy.ptr), static_cast<void*>(d_out.ptr),
                  static_cast<void*>(d_count.ptr), static_cast<void*>(d_status.ptr), static_cast<void*>(d_ws.ptr)})
    ASSERT_NE(p, nullptr) << "device allocation or copy failed";

  auto fill = [&](auto& a) {
    a.batch_size = B;
    a.vocab_size = V;
    a.num_draft_tokens = N;
    a.cu_num_draft_tokens = d_cu.ptr;
    a.draft_token_ids = d_ids.ptr;
    a.target_probs = d_target.ptr;
    a.seeds = d_seeds.ptr;
    a.positions = d_positions.ptr;
    a.greedy = d_greedy.ptr;
    a.output_token_ids = d_out.ptr;
    a.output_stride = kStride;
    a.num_accepted = d_count.ptr;
    a.status = d_status.ptr;
  };
  auto expect_result = [&](const char* kind) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << kind;
    EXPECT_EQ(d_status.to_host(1), std::vector<Status>{Status::kSuccess}) << kind;
    EXPECT_EQ(d_count.to_host(1), std::vector<std::int32_t>{1}) << kind;
    EXPECT_EQ(d_out.to_host(kStride), (std::vector<std::int32_t>{5, 2, -1})) << kind;
    ASSERT_EQ(cudaMemset(d_out.ptr, 0x7f, kStride * sizeof(std::int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_count.ptr, 0x7f, sizeof(std::int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_status.ptr, 0x7f, sizeof(Status)), cudaSuccess);
  };

  ChainVerifyParams<float, std::int32_t> chain;
  fill(chain);
  ASSERT_EQ(chain_verify(chain, d_ws.ptr, ws_bytes, nullptr), Status::kSuccess);
  expect_result("chain");
  TreeVerifyParams<float, std::int32_t> tree;
  fill(tree);
  tree.parents = d_parents.ptr;
  ASSERT_EQ(tree_verify(tree, d_ws.ptr, ws_bytes, nullptr), Status::kSuccess);
  expect_result("tree");
  BlockVerifyParams<float, std::int32_t> block;
  fill(block);
  ASSERT_EQ(block_verify(block, d_ws.ptr, ws_bytes, nullptr), Status::kSuccess);
  expect_result("block");
}

}  // namespace
}  // namespace specdec::cuda
