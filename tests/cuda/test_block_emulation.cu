// specdec tests — the block verification kernel (include/specdec/cuda/block_verify.cuh) against the CPU reference
// (sampling/block.hpp):
//  - host emulation, everywhere: the kernel's own SPECDEC_HD code (block_plan, the BlockResidualSource loads and lane
//    sums of a tile slot with the shuffles emulated, block_stop, the race candidates) run thread by thread and CTA group by
//    CTA group on the host, compared bit for bit (tokens, counts, flags, statuses) with the CPU core;
//  - on a device (skipped without one): the kernels themselves, same comparison, with guard bytes around every output.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "device_buffers.cuh"
#include "cases.hpp"
#include "specdec/cuda/block_verify.cuh"
#include "specdec/sampling/block.hpp"

namespace specdec::cuda {
namespace {

using detail::Candidate;
using testing::Batch;
using testing::Guarded;
using testing::kGuard;
using testing::kSentinel;
using testing::upload;

/// Tile mass(es) of `src` as a tile slot computes them: kTpt threads' lane sums, then the halving steps with
/// __shfl_down_sync(width = kTpt) emulated (a source lane past the width reads its own value).
template <class Src>
void emulate_tile(Src& src, std::int64_t tile, std::int64_t V, bool vec_ok, float* out) {
  constexpr int kVec = Src::kVec, kOut = Src::kOut, kTpt = kTileLanes / kVec;
  float acc[kTpt][kOut][kVec];
  for (int t = 0; t < kTpt; ++t) detail::tile_lanes<kVec, kOut>(src, tile, V, t, vec_ok, acc[t]);
  for (int off = kTileLanes / 2; off > 0; off /= 2) {
    float snap[kTpt][kOut][kVec];
    std::memcpy(snap, acc, sizeof acc);
    for (int t = 0; t < kTpt; ++t) {
      const int from = t + (off >= kVec ? off / kVec : 0);
      detail::lane_step<kVec, kOut>(acc[t], off, snap[from < kTpt ? from : t]);
    }
  }
  for (int o = 0; o < kOut; ++o) out[o] = acc[0][o][0];
}

Candidate fold_tiles(const float* masses, std::int64_t tiles, std::uint64_t seed, std::int64_t pos, Purpose purpose,
                     bool& ok) {
  Candidate best = detail::no_candidate();
  ok = true;
  for (std::int64_t t = 0; t < tiles; ++t) {
    ok = ok && valid_probability(masses[t]);
    best = detail::better(best, detail::tile_candidate(masses[t], t, seed, pos, purpose));
  }
  return best;
}

template <class Src>
std::int64_t fold_tokens(Src& src, std::int64_t tile, std::int64_t V, std::uint64_t seed, std::int64_t pos,
                         Purpose purpose) {
  const std::int64_t begin = tile * kTileSize, end = std::min<std::int64_t>(begin + kTileSize, V);
  Candidate best = detail::no_candidate();
  for (std::int64_t x0 = begin; x0 < end; x0 += 4)
    best = detail::better(best, detail::token_candidate4(src, x0, end, seed, pos, purpose));
  return best.index;
}

/// finish_draw on the host: tile race over masses0 (then masses1 for a two-weight source), token race in the winner.
template <class Src>
Status emulate_draw(Src& src, const float* masses0, const float* masses1, std::int64_t V, std::uint64_t seed,
                    std::int64_t pos, RacePurposes purposes, std::int64_t& token) {
  const std::int64_t T = num_tiles(V);
  bool ok;
  Candidate tile = fold_tiles(masses0, T, seed, pos, purposes.tile, ok);
  if (!ok) return Status::kInvalidProbability;
  if (tile.index >= 0) {
    token = fold_tokens(src, tile.index, V, seed, pos, purposes.token);
    return Status::kSuccess;
  }
  if constexpr (Src::kOut > 1) {
    tile = fold_tiles(masses1, T, seed, pos, purposes.tile, ok);
    if (!ok) return Status::kInvalidProbability;
    if (tile.index >= 0) {
      detail::PickSource<Src, 1> pick{src};
      token = fold_tokens(pick, tile.index, V, seed, pos, purposes.token);
      return Status::kSuccess;
    }
  }
  return Status::kZeroMass;
}

/// Every tile mass of `src` (masses0, and masses1 when the source has two weights).
template <class Src>
void emulate_pass(Src& src, std::int64_t V, bool vec_ok, float* masses0, float* masses1) {
  for (std::int64_t t = 0; t < num_tiles(V); ++t) {
    float m[2] = {0.0f, 0.0f};
    emulate_tile(src, t, V, vec_ok, m);
    masses0[t] = m[0];
    if (masses1) masses1[t] = m[1];
  }
}

/// block_tiles_kernel + block_finish_kernel for request b, on the host (the greedy rows in `groups` CTA groups).
template <class T, class IdT>
Status emulate_block(const BlockVerifyParams<T, IdT>& a, std::int64_t b, std::int64_t groups, bool vec_ok, IdT* out,
                     std::int32_t& nacc_out, std::uint8_t* flags) {
  using namespace detail;
  const ChainPlan plan = block_plan(a, b);
  const std::int64_t k = plan.num_drafts, V = a.vocab_size, NT = num_tiles(V);
  Status s = plan.status;
  std::int64_t n_acc = 0, token = -1;
  const std::int64_t per = (NT + groups - 1) / groups;
  const std::uint64_t seed = a.seeds[b];
  const std::int64_t pos = a.positions[b];
  std::vector<float> mass(static_cast<std::size_t>(std::max<std::int64_t>(k, 1) * NT)), p_mass(static_cast<std::size_t>(NT));
  const std::int64_t first_row = plan.start + b;
  if (plan.kind == kPlanGreedy) {
    for (std::int64_t r = 0; r <= k; ++r) {
      const T* row = a.target_probs + (first_row + r) * V;
      Candidate best = no_candidate();
      bool valid = true;
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::int64_t lo = g * per * kTileSize, hi = std::min(V, (g + 1) * per * kTileSize);
        Candidate part = no_candidate();
        bool ok = true;
        for (std::int64_t x = lo; x < hi; ++x) argmax_step(part, ok, to_float(row[x]), x);
        const GreedyPartial e =
            ok ? GreedyPartial{part.key, static_cast<std::int32_t>(part.index)} : GreedyPartial{0.0f, -1};
        valid = valid && e.index >= 0;
        best = better(best, Candidate{e.value, e.index});
      }
      if (!valid) {
        s = Status::kInvalidProbability;
        break;
      }
      if (!(best.key > 0.0f)) {
        s = Status::kZeroMass;
        break;
      }
      if (r == k || best.index != static_cast<std::int64_t>(a.draft_token_ids[plan.start + r])) {
        token = best.index;
        n_acc = r;
        break;
      }
    }
  } else if (plan.kind == kPlanRemoved) {
    RemovedSource<T> src{a.target_probs + (first_row + plan.row) * V,
                         static_cast<std::int64_t>(a.draft_token_ids[plan.start + plan.row])};
    emulate_pass(src, V, vec_ok, mass.data(), p_mass.data());
    s = emulate_draw(src, mass.data(), p_mass.data(), V, seed, pos + plan.row, kResidualRace, token);
    n_acc = plan.row;
  } else if (plan.kind == kPlanBonus) {
    RowSource<T> src{a.target_probs + (first_row + plan.row) * V};
    emulate_pass(src, V, vec_ok, mass.data(), nullptr);
    s = emulate_draw(src, mass.data(), nullptr, V, seed, pos + plan.row, kBonusRace, token);
    n_acc = plan.row;
  } else if (plan.kind == kPlanBlock) {
    float w = 1.0f;
    for (std::int64_t i = 0; i < k; ++i) {  // pass 1, as block_tiles_kernel walks the rows
      const T* p = a.target_probs + (first_row + i) * V;
      const T* q = a.draft_probs + (plan.start + i) * V;
      if (i == 0) {
        BlockResidualSource<T, 2> src{p, q, w};
        emulate_pass(src, V, vec_ok, mass.data(), p_mass.data());
      } else {
        BlockResidualSource<T, 1> src{p, q, w};
        emulate_pass(src, V, vec_ok, mass.data() + i * NT, nullptr);
      }
      const auto x = static_cast<std::int64_t>(a.draft_token_ids[plan.start + i]);
      w = specdec::detail::block_weight_step(w, to_float(p[x]), to_float(q[x]));
    }
    std::int64_t tau = 0;
    float w_tau = 1.0f;
    s = block_stop(a, b, plan, mass.data(), NT, tau, w_tau);
    if (s == Status::kSuccess) {
      const T* p = a.target_probs + (first_row + tau) * V;
      const T* q = a.draft_probs + (plan.start + tau) * V;
      if (tau == 0) {
        BlockResidualSource<T, 2> src{p, q, 1.0f};
        s = emulate_draw(src, mass.data(), p_mass.data(), V, seed, pos, kResidualRace, token);
      } else {
        BlockResidualSource<T, 1> src{p, q, w_tau};
        s = emulate_draw(src, mass.data() + tau * NT, nullptr, V, seed, pos + tau, kResidualRace, token);
      }
      n_acc = tau;
    }
  }
  const bool ok = s == Status::kSuccess;
  if (!ok) n_acc = 0;
  for (std::int64_t e = 0; e < a.output_stride; ++e)
    out[e] = ok && e < n_acc ? a.draft_token_ids[plan.start + e] : ok && e == n_acc ? static_cast<IdT>(token) : IdT(-1);
  if (k >= 0)
    for (std::int64_t e = 0; e < k; ++e) flags[plan.start + e] = ok && e < n_acc ? 1 : 0;
  nacc_out = static_cast<std::int32_t>(n_acc);
  return s;
}

/// The CPU reference for request b with the kernels' per-request status convention (cases.hpp): range, stride,
/// position and draft-kind problems -> kInvalidArgument, then ids, then the rule of sampling/block.hpp.
template <class IdT>
Status cpu_block(const Batch& c, std::int64_t b, IdT* out_row, std::int32_t& nacc, std::uint8_t* flags) {
  const std::vector<IdT> cu = testing::convert_ids<IdT>(c.cu), ids = testing::convert_ids<IdT>(c.ids);
  std::int64_t start = 0, k = -1;
  std::fill(out_row, out_row + c.stride, static_cast<IdT>(-1));
  nacc = 0;
  Status s = detail::check_request_range(cu.data(), b, c.B, c.N, c.stride, c.positions.data(), start, k);
  if (k >= 0) std::fill(flags + start, flags + start + k, 0);
  if (s == Status::kSuccess) s = testing::draft_kind_status(c, b, k);
  if (s != Status::kSuccess) return s;
  for (std::int64_t i = 0; i < k; ++i)
    if (ids[start + i] < 0 || ids[start + i] >= c.V) return Status::kInvalidTokenId;
  const bool q = c.request_has_q(b);
  std::vector<float> tm(static_cast<std::size_t>(num_tiles(c.V)));
  const VerifyResult r = specdec::detail::verify_block_request_unchecked<IdT>(
      c.V, k, ids.data() + start, q ? c.q.data() + start * c.V : nullptr, c.p.data() + (start + b) * c.V, c.seeds[b],
      c.positions[b], c.greedy[b] != 0, out_row, &nacc, flags + start, tm.data());
  if (!r.ok()) {
    std::fill(out_row, out_row + c.stride, static_cast<IdT>(-1));
    nacc = 0;
    std::fill(flags + start, flags + start + k, 0);
  }
  return r.status;
}

template <class T, class IdT>
struct Typed {
  std::vector<T> p, q;
  std::vector<IdT> cu, ids;
  explicit Typed(const Batch& c)
      : p(testing::convert<T>(c.p)), q(testing::convert<T>(c.q)), cu(testing::convert_ids<IdT>(c.cu)),
        ids(testing::convert_ids<IdT>(c.ids)) {}
};

template <class T, class IdT>
BlockVerifyParams<T, IdT> params_of(const Batch& c, Typed<T, IdT>& d) {
  BlockVerifyParams<T, IdT> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.num_draft_tokens = c.N;
  a.cu_num_draft_tokens = d.cu.data();
  a.draft_token_ids = d.ids.data();
  a.draft_probs = c.has_q ? d.q.data() : nullptr;
  a.target_probs = d.p.data();
  a.has_draft_probs = c.has_draft_probs();
  a.seeds = c.seeds.data();
  a.positions = c.positions.data();
  a.greedy = c.greedy.data();
  a.output_stride = c.stride;
  return a;
}

template <class T, class IdT>
void check_block_batch(const Batch& c, const char* what) {
  Typed<T, IdT> d(c);
  const BlockVerifyParams<T, IdT> a = params_of(c, d);
  const bool vec_ok = (c.V * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  std::vector<IdT> got(static_cast<std::size_t>(c.stride)), want(got.size());
  std::vector<std::uint8_t> got_f(static_cast<std::size_t>(c.N) + 1), want_f(got_f.size());
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t groups : {std::int64_t{1}, std::int64_t{3}, num_tiles(c.V)}) {
      std::int32_t gn = -7, wn = -7;
      const Status gs = emulate_block(a, b, std::min(groups, num_tiles(c.V)), vec_ok, got.data(), gn, got_f.data());
      const Status ws = cpu_block<IdT>(c, b, want.data(), wn, want_f.data());
      ASSERT_EQ(gs, ws) << what << " request " << b << " V=" << c.V;
      ASSERT_EQ(got, want) << what << " request " << b << " V=" << c.V;
      ASSERT_EQ(gn, wn) << what << " request " << b;
      ASSERT_EQ(got_f, want_f) << what << " request " << b;
    }
  }
}

/// A random chain batch of cases.hpp (values rounded to T), with per-request draft kinds when `mixed` (a third of the
/// requests flagged deterministic, their draft rows NaN).
template <class T>
Batch block_batch(std::mt19937_64& rng, std::int64_t V, int B, int max_k, bool has_q, double greedy_frac, bool mixed) {
  return testing::make_batch<T>(rng, V, B, max_k, has_q, false, greedy_frac, mixed ? 1.0 / 3.0 : -1.0);
}

constexpr std::int64_t kSmallVocabs[] = {7, 33, 1025, 2048, 3000, 8193};

template <class T>
class cuda_block_emulation : public ::testing::Test {};
using ProbTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(cuda_block_emulation, ProbTypes);

// The BlockResidualSource lane sums give the core's tile_mass bits for r_i at any w (and p for the fallback).
TYPED_TEST(cuda_block_emulation, TileMassMatchesCore) {
  using T = TypeParam;
  std::mt19937_64 rng(51);
  for (std::int64_t V : {7LL, 1024LL, 1025LL, 2048LL, 8193LL}) {
    for (int rep = 0; rep < 6; ++rep) {
      std::vector<float> pf(static_cast<std::size_t>(V) + 8), qf(pf.size());
      testing::fill_row<T>(rng, pf.data(), V, rep % 4);
      testing::fill_row<T>(rng, qf.data(), V, (rep + 1) % 4);
      if (rep == 5) qf[static_cast<std::size_t>(rng() % V)] = -1.0f;  // poisons a tile
      const std::vector<T> p = testing::convert<T>(pf), q = testing::convert<T>(qf);
      const float w = rep == 0 ? 1.0f : std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
      for (std::int64_t t = 0; t < num_tiles(V); ++t) {
        for (bool vec : {false, true}) {
          const bool vec_ok = vec && (V * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
          float m[2];
          detail::BlockResidualSource<T, 2> src{p.data(), q.data(), w};
          emulate_tile(src, t, V, vec_ok, m);
          const float want_r = tile_mass(specdec::detail::BlockResidualWeight{pf.data(), qf.data(), w}, t, V);
          const float want_p = tile_mass(specdec::detail::RowWeight{pf.data()}, t, V);
          EXPECT_EQ(std::memcmp(&m[0], &want_r, 4), 0) << "V=" << V << " tile=" << t << " w=" << w;
          EXPECT_EQ(std::memcmp(&m[1], &want_p, 4), 0) << "V=" << V << " tile=" << t;
          if (w == 1.0f) {  // r_0 is the chain's residual bit for bit
            const float want_c = tile_mass(specdec::detail::ResidualWeight{pf.data(), qf.data()}, t, V);
            EXPECT_EQ(std::memcmp(&m[0], &want_c, 4), 0) << "V=" << V << " tile=" << t;
          }
        }
      }
    }
  }
}

TYPED_TEST(cuda_block_emulation, MatchesCpu) {
  std::mt19937_64 rng(52);
  for (int rep = 0; rep < 300; ++rep) {
    const std::int64_t V = kSmallVocabs[rep % 6];
    const Batch c = block_batch<TypeParam>(rng, V, 1 + rep % 4, 6, rep % 5 != 0, 0.15, rep % 3 == 0);
    if (rep % 2) check_block_batch<TypeParam, std::int32_t>(c, "block");
    else check_block_batch<TypeParam, std::int64_t>(c, "block");
  }
}

TYPED_TEST(cuda_block_emulation, LargeVocabMatchesCpu) {
  std::mt19937_64 rng(53);
  for (int rep = 0; rep < 4; ++rep) {
    const std::int64_t V = rep % 2 ? 151936 : 32000;
    const Batch c = block_batch<TypeParam>(rng, V, 2, 5, true, rep == 0 ? 1.0 : 0.0, false);
    check_block_batch<TypeParam, std::int32_t>(c, "block large");
  }
}

TYPED_TEST(cuda_block_emulation, BadInputPerRequest) {
  std::mt19937_64 rng(54);
  for (int rep = 0; rep < 300; ++rep) {
    Batch c = block_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 3, 4, rep % 2 == 0, 0.3, rep % 5 == 0);
    testing::corrupt(rng, c, static_cast<std::int64_t>(rng() % 3), false);
    if (rep % 25 == 0) c.cu[2] = c.cu[1] - 1;  // a request with a decreasing offset
    if (rep % 7 == 0 && !c.has_q) c.has_q_req.assign(static_cast<std::size_t>(c.B), 1);  // kind without draft probs
    check_block_batch<TypeParam, std::int64_t>(c, "block bad input");
  }
}

// The block paths are really taken: over many random requests the stop falls on every tau in 0..K.
TEST(cuda_block_emulation_coverage, EveryStopIsReached) {
  std::mt19937_64 rng(55);
  std::vector<std::int64_t> seen(6, 0);
  for (int rep = 0; rep < 400; ++rep) {
    const Batch c = block_batch<float>(rng, 33, 4, 5, true, 0.0, false);
    Typed<float, std::int32_t> d(c);
    const auto a = params_of(c, d);
    for (std::int64_t b = 0; b < c.B; ++b) {
      const detail::ChainPlan plan = detail::block_plan(a, b);
      if (plan.kind != detail::kPlanBlock) continue;
      std::vector<std::int32_t> out(static_cast<std::size_t>(c.stride));
      std::vector<std::uint8_t> flags(static_cast<std::size_t>(c.N) + 1);
      std::int32_t n = -1;
      if (emulate_block(a, b, 1, true, out.data(), n, flags.data()) == Status::kSuccess) ++seen[n];
    }
  }
  for (int t = 0; t < 4; ++t) EXPECT_GT(seen[t], 0) << "tau " << t;
}

// ---------------------------------------------------------------------------------------------------------------
// On a device.






template <class T, class IdT>
void run_device(const Batch& c, const char* what) {
  Typed<T, IdT> d(c);
  auto dp = upload(d.p), dq = upload(d.q), dcu = upload(d.cu), dids = upload(d.ids), dseeds = upload(c.seeds),
       dpos = upload(c.positions), dgreedy = upload(c.greedy), dkinds = upload(c.has_q_req);
  const std::size_t out_n = static_cast<std::size_t>(c.B * c.stride);
  Guarded dout(out_n * sizeof(IdT)), dnacc(static_cast<std::size_t>(c.B) * 4), dflags(static_cast<std::size_t>(c.N) + 1),
      dstatus(static_cast<std::size_t>(c.B) * sizeof(Status));
  BlockVerifyParams<T, IdT> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.num_draft_tokens = c.N;
  a.cu_num_draft_tokens = dcu->template get<IdT>();
  a.draft_token_ids = dids->template get<IdT>();
  a.draft_probs = c.has_q ? dq->template get<T>() : nullptr;
  a.target_probs = dp->template get<T>();
  a.has_draft_probs = c.has_q_req.empty() ? nullptr : dkinds->template get<std::uint8_t>();
  a.seeds = dseeds->template get<std::uint64_t>();
  a.positions = dpos->template get<std::int64_t>();
  a.greedy = dgreedy->template get<std::uint8_t>();
  a.output_token_ids = dout.get<IdT>();
  a.output_stride = c.stride;
  a.num_accepted = dnacc.get<std::int32_t>();
  a.accepted = dflags.get<std::uint8_t>();
  a.status = dstatus.get<Status>();
  const std::size_t bytes = block_verify_workspace_size(c.B, c.N, c.V);
  Guarded ws(bytes);
  BlockVerify<T, IdT> op;
  ASSERT_EQ(op.initialize(a, ws.get<void>(), bytes), Status::kSuccess);
  ASSERT_EQ(op.run(nullptr), Status::kSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out = dout.download<IdT>(out_n);
  const auto nacc = dnacc.download<std::int32_t>(static_cast<std::size_t>(c.B));
  const auto flags = dflags.download<std::uint8_t>(static_cast<std::size_t>(c.N));
  const auto status = dstatus.download<Status>(static_cast<std::size_t>(c.B));
  std::vector<IdT> want(static_cast<std::size_t>(c.stride));
  std::vector<std::uint8_t> want_f(static_cast<std::size_t>(c.N) + 1, kSentinel);  // flags nobody writes keep it
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int32_t wn = -7;
    const Status s = cpu_block<IdT>(c, b, want.data(), wn, want_f.data());
    ASSERT_EQ(status[b], s) << what << " request " << b << " V=" << c.V;
    for (std::int64_t e = 0; e < c.stride; ++e) ASSERT_EQ(out[b * c.stride + e], want[e]) << what << " request " << b;
    ASSERT_EQ(nacc[b], wn) << what << " request " << b;
  }
  for (std::int64_t j = 0; j < c.N; ++j) ASSERT_EQ(flags[j], want_f[j]) << what << " flag " << j;
  EXPECT_TRUE(dout.guards_intact() && dnacc.guards_intact() && dflags.guards_intact() && dstatus.guards_intact() &&
              ws.guards_intact())
      << what;
}

template <class T>
class cuda_block_device : public ::testing::Test {};
TYPED_TEST_SUITE(cuda_block_device, ProbTypes);

TYPED_TEST(cuda_block_device, MatchesCpu) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(61);
  for (int rep = 0; rep < 120; ++rep) {
    const std::int64_t V = rep % 10 == 0 ? 151936 : kSmallVocabs[rep % 6];
    const Batch c = block_batch<TypeParam>(rng, V, 1 + rep % 6, 6, rep % 5 != 0, 0.15, rep % 3 == 0);
    if (rep % 2) run_device<TypeParam, std::int32_t>(c, "device block");
    else run_device<TypeParam, std::int64_t>(c, "device block");
  }
}

TYPED_TEST(cuda_block_device, BadInputPerRequest) {
  SPECDEC_REQUIRE_DEVICE();
  std::mt19937_64 rng(62);
  for (int rep = 0; rep < 120; ++rep) {
    Batch c = block_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 3, 4, rep % 2 == 0, 0.3, rep % 5 == 0);
    testing::corrupt(rng, c, static_cast<std::int64_t>(rng() % 3), false);
    run_device<TypeParam, std::int32_t>(c, "device block bad input");
  }
}

TEST(cuda_block_device_args, HostChecks) {
  BlockVerifyParams<float, std::int32_t> a;
  a.batch_size = 1;
  a.vocab_size = 0;
  a.output_stride = 1;
  EXPECT_EQ(block_verify_can_implement(a), Status::kInvalidArgument);
  a.vocab_size = 8;
  EXPECT_EQ(block_verify_can_implement(a), Status::kInvalidArgument);  // null pointers
  BlockVerify<float, std::int32_t> op;
  EXPECT_EQ(op.initialize(a, nullptr, 0), Status::kInvalidArgument);
  EXPECT_GT(block_verify_workspace_size(4, 20, 32000), std::size_t{0});
}

}  // namespace
}  // namespace specdec::cuda
