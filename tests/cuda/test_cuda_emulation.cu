// specdec tests — host emulation of the CUDA verifiers: runs, on the host and without any device, the very
// SPECDEC_HD code the kernels execute (loads and conversions, per-thread lane sums of a tile slot, the halving
// steps of the slot reduction with the shuffles emulated, tile and token race candidates, the weight sources, the
// tree's on-the-fly residual, the request checks and accept tests) composed the way the kernels compose them
// (thread by thread, slot by slot, CTA group by CTA group), and compares with the CPU core bit for bit.
// What it cannot check: the device-only glue (shuffles, shared memory, barriers) and the device compiler's
// arithmetic (see test_cuda_verify.cu, which runs on a GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cases.hpp"
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/tree_verify.cuh"

namespace specdec::cuda {
namespace {

using detail::Candidate;
using testing::Batch;

/// Tile mass of `src` as a tile slot computes it: kTpt threads' lane sums, then the halving steps with
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

Candidate fold_tiles(const std::vector<float>& masses, std::uint64_t seed, std::int64_t pos, Purpose purpose,
                     bool& ok) {
  Candidate best = detail::no_candidate();
  ok = true;
  for (std::size_t t = 0; t < masses.size(); ++t) {
    ok = ok && valid_probability(masses[t]);
    best = detail::better(best, detail::tile_candidate(masses[t], static_cast<std::int64_t>(t), seed, pos, purpose));
  }
  return best;
}

template <class Src>
std::int64_t fold_tokens(Src& src, std::int64_t tile, std::int64_t V, std::uint64_t seed, std::int64_t pos,
                         Purpose purpose) {
  const std::int64_t begin = tile * kTileSize, end = std::min<std::int64_t>(begin + kTileSize, V);
  Candidate best = detail::no_candidate();
  // Thread order of the kernel: thread i takes x0 = begin + 4 i; the fold order does not matter (total order).
  for (std::int64_t x0 = begin; x0 < end; x0 += 4)
    best = detail::better(best, detail::token_candidate4(src, x0, end, seed, pos, purpose));
  return best.index;
}

/// Typed device-layout copy of a batch (host memory).
template <class T, class IdT>
struct Typed {
  std::vector<T> p, q;
  std::vector<IdT> cu, ids, parents;
  explicit Typed(const Batch& c)
      : p(testing::convert<T>(c.p)), q(testing::convert<T>(c.q)), cu(testing::convert_ids<IdT>(c.cu)),
        ids(testing::convert_ids<IdT>(c.ids)), parents(testing::convert_ids<IdT>(c.parents)) {}
};

/// chain_tiles_kernel + chain_finish_kernel for request b, on the host.
template <class T, class IdT>
Status emulate_chain(const ChainVerifyParams<T, IdT>& a, std::int64_t b, std::int64_t groups, bool vec_ok, IdT* out,
                     std::int32_t& nacc_out, std::uint8_t* flags) {
  using namespace detail;
  ChainPlan plan{};
  plan.kind = kPlanFailed;
  plan.row = -1;
  plan.status = check_request_range(a.cu_num_draft_tokens, b, a.batch_size, a.num_draft_tokens, a.output_stride,
                                    a.positions, plan.start, plan.num_drafts);
  const std::int64_t k = plan.num_drafts, V = a.vocab_size, NT = num_tiles(V);
  if (plan.status == Status::kSuccess) plan.status = check_request_draft_kind(a.draft_probs, a.has_draft_probs, b, k);
  if (plan.status == Status::kSuccess)
    for (std::int64_t i = 0; i < k; ++i)
      if (!id_in_range(a.draft_token_ids[plan.start + i], V)) plan.status = Status::kInvalidTokenId;
  if (plan.status == Status::kSuccess) {
    if (a.greedy && a.greedy[b]) {
      plan.kind = kPlanGreedy;
    } else {
      const bool has_q = chain_has_q(a, b);
      std::int64_t first = -1;
      int flag = kAccepted;
      for (std::int64_t i = 0; i < k && first < 0; ++i)
        if ((flag = chain_accept_flag(a, b, plan.start, i, has_q)) != kAccepted) first = i;
      plan_from_first(plan, has_q, first, flag);
    }
  }
  Status s = plan.status;
  std::int64_t n_acc = 0, token = -1;
  const std::int64_t per = (NT + groups - 1) / groups;
  const std::uint64_t seed = a.seeds[b];
  const std::int64_t pos = a.positions[b];
  auto draw = [&](auto& src, RacePurposes purposes) {
    std::vector<float> m0(NT), m1(NT);
    for (std::int64_t t = 0; t < NT; ++t) {
      float m[2] = {0.0f, 0.0f};
      emulate_tile(src, t, V, vec_ok, m);
      m0[t] = m[0];
      m1[t] = m[1];
    }
    bool ok;
    Candidate tile = fold_tiles(m0, seed, pos + plan.row, purposes.tile, ok);
    if (!ok) return Status::kInvalidProbability;
    if (tile.index >= 0) {
      token = fold_tokens(src, tile.index, V, seed, pos + plan.row, purposes.token);
      return Status::kSuccess;
    }
    using Src = std::remove_reference_t<decltype(src)>;
    if constexpr (Src::kOut > 1) {
      tile = fold_tiles(m1, seed, pos + plan.row, purposes.tile, ok);
      if (!ok) return Status::kInvalidProbability;
      if (tile.index >= 0) {
        PickSource<Src, 1> pick{src};
        token = fold_tokens(pick, tile.index, V, seed, pos + plan.row, purposes.token);
        return Status::kSuccess;
      }
    }
    return Status::kZeroMass;
  };
  const T* p_row = plan.kind >= kPlanResidual ? a.target_probs + (plan.start + b + plan.row) * V : nullptr;
  if (plan.kind == kPlanGreedy) {
    for (std::int64_t r = 0; r <= k; ++r) {
      const T* row = a.target_probs + (plan.start + b + r) * V;
      Candidate best = no_candidate();
      bool valid = true;
      for (std::int64_t g = 0; g < groups; ++g) {  // the partial of CTA g, then the finishing reduction
        const std::int64_t lo = g * per * kTileSize, hi = std::min(V, (g + 1) * per * kTileSize);
        Candidate part = no_candidate();
        bool ok = true;
        for (std::int64_t x = lo; x < hi; ++x) argmax_step(part, ok, to_float(row[x]), x);
        const GreedyPartial e = ok ? GreedyPartial{part.key, static_cast<std::int32_t>(part.index)}
                                   : GreedyPartial{0.0f, -1};
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
  } else if (plan.kind == kPlanResidual) {
    ResidualSource<T> src{p_row, a.draft_probs + (plan.start + plan.row) * V};
    s = draw(src, kResidualRace);
    n_acc = plan.row;
  } else if (plan.kind == kPlanRemoved) {
    RemovedSource<T> src{p_row, static_cast<std::int64_t>(a.draft_token_ids[plan.start + plan.row])};
    s = draw(src, kResidualRace);
    n_acc = plan.row;
  } else if (plan.kind == kPlanBonus) {
    RowSource<T> src{p_row};
    s = draw(src, kBonusRace);
    n_acc = plan.row;
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

/// tree_verify_kernel for request b, on the host (thread 0's scalar work and the CTA passes in kernel order).
template <class T, class IdT>
Status emulate_tree(const TreeVerifyParams<T, IdT>& a, std::int64_t b, bool vec_ok, IdT* out, IdT* out_nodes,
                    std::int32_t& nacc_out) {
  using namespace detail;
  TreePlan plan{};
  plan.status = check_request_range(a.cu_num_draft_tokens, b, a.batch_size, a.num_draft_tokens, a.output_stride,
                                    a.positions, plan.start, plan.num_drafts);
  const std::int64_t K = plan.num_drafts, V = a.vocab_size, NT = num_tiles(V);
  if (plan.status == Status::kSuccess) plan.status = check_request_draft_kind(a.draft_probs, a.has_draft_probs, b, K);
  for (int pass = 0; pass < 2 && plan.status == Status::kSuccess; ++pass)
    for (std::int64_t i = 0; i < K; ++i)
      if (tree_item_status(a.draft_token_ids + plan.start, a.parents + plan.start, i, V, pass == 1) !=
          Status::kSuccess) {
        plan.status = pass == 0 ? Status::kInvalidTokenId : Status::kInvalidTree;
        break;
      }
  Status s = plan.status;
  std::int64_t depth = 0, token = -1;
  std::vector<std::int32_t> rej(static_cast<std::size_t>(std::max<std::int64_t>(K, 1)));
  std::vector<float> zs(rej.size()), mass(static_cast<std::size_t>(NT));
  std::fill(out, out + a.output_stride, IdT(-1));
  std::fill(out_nodes, out_nodes + a.output_stride, IdT(-1));
  auto pass = [&](auto& src) {
    for (std::int64_t t = 0; t < NT; ++t) emulate_tile(src, t, V, vec_ok, &mass[t]);
  };
  if (s == Status::kSuccess) {
    const std::int64_t start = plan.start;
    const IdT* ids = a.draft_token_ids + start;
    const IdT* parents = a.parents + start;
    const bool has_q = a.draft_probs != nullptr && (a.has_draft_probs == nullptr || a.has_draft_probs[b] != 0);
    const T* q_req = has_q ? a.draft_probs + start * V : nullptr;
    const std::uint64_t seed = a.seeds[b];
    const std::int64_t P = a.positions[b];
    const bool greedy = a.greedy && a.greedy[b];
    std::int64_t node = 0;
    for (;;) {
      const T* p = a.target_probs + (start + b + node) * V;
      const std::int64_t pos = P + depth;
      std::int64_t greedy_token = -1;
      if (greedy) {
        Candidate c = no_candidate();
        bool ok = true;
        for (std::int64_t x = 0; x < V; ++x) argmax_step(c, ok, to_float(p[x]), x);
        if (!ok) { s = Status::kInvalidProbability; break; }
        if (!(c.key > 0.0f)) { s = Status::kZeroMass; break; }
        greedy_token = c.index;
      }
      int m = 0;
      float z = 1.0f;
      std::uint32_t rank = 0;
      std::int64_t accepted_child = -1;
      bool any_child = false;
      for (std::int64_t j = node; j < K; ++j) {
        if (static_cast<std::int64_t>(parents[j]) != node) continue;
        any_child = true;
        const auto x = static_cast<std::int64_t>(ids[j]);
        if (greedy) {
          if (x == greedy_token) { accepted_child = j; break; }
          continue;
        }
        TreeResidualSource<T, IdT> probe{p, q_req, ids, rej.data(), zs.data(), V, m, false};
        const float rx = probe.raw_one(x);
        const float u = uniform(seed, pos, Purpose::kAccept, rank++);
        int decision;
        if (q_req) {
          const float qx = to_float(q_req[j * V + x]);
          decision = !valid_probability(rx) || !valid_probability(qx) ? kTreeInvalid
                     : u * qx < rx / z                                 ? kTreeAccept
                                                                       : kTreeReject;
        } else {
          decision = !valid_probability(rx) ? kTreeInvalid : u < rx / z ? kTreeAccept : kTreeReject;
        }
        if (decision == kTreeInvalid) { s = Status::kInvalidProbability; break; }
        if (decision == kTreeAccept) { accepted_child = j; break; }
        rej[m] = static_cast<std::int32_t>(j);
        zs[m] = z;
        TreeResidualSource<T, IdT> src{p, q_req, ids, rej.data(), zs.data(), V, m, true};
        pass(src);
        float sum = 0.0f;
        for (std::int64_t t = 0; t < NT; ++t) sum += mass[t];
        z = sum;
        ++m;
        if (!src.ok || !valid_probability(z)) { s = Status::kInvalidProbability; break; }
      }
      if (s != Status::kSuccess) break;
      if (accepted_child >= 0) {
        out[depth] = ids[accepted_child];
        out_nodes[depth] = static_cast<IdT>(accepted_child + 1);
        node = accepted_child + 1;
        ++depth;
        continue;
      }
      if (greedy) { token = greedy_token; break; }
      bool ok = true;
      const RacePurposes purposes = any_child ? kResidualRace : kBonusRace;
      if (any_child) {
        const Candidate tile = fold_tiles(mass, seed, pos, purposes.tile, ok);
        if (ok && tile.index >= 0) {
          TreeResidualSource<T, IdT> src{p, q_req, ids, rej.data(), zs.data(), V, m, false};
          token = fold_tokens(src, tile.index, V, seed, pos, purposes.token);
          break;
        }
      }
      if (ok) {
        RowSource<T> src{p};
        pass(src);
        const Candidate tile = fold_tiles(mass, seed, pos, purposes.tile, ok);
        if (ok && tile.index >= 0) token = fold_tokens(src, tile.index, V, seed, pos, purposes.token);
      }
      if (!ok) s = Status::kInvalidProbability;
      else if (token < 0) s = Status::kZeroMass;
      break;
    }
  }
  const bool ok = s == Status::kSuccess;
  for (std::int64_t e = 0; e < a.output_stride; ++e) {
    if (ok && e < depth) continue;
    out[e] = ok && e == depth ? static_cast<IdT>(token) : IdT(-1);
    out_nodes[e] = IdT(-1);
  }
  nacc_out = ok ? static_cast<std::int32_t>(depth) : 0;
  return s;
}

// ---------------------------------------------------------------------------------------------------------------

template <class T>
class cuda_emulation : public ::testing::Test {};
using ProbTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(cuda_emulation, ProbTypes);

// The slot's lane sums with 16-byte loads (and the scalar path) give the core's tile_mass bits for every weight.
TYPED_TEST(cuda_emulation, TileMassMatchesCore) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (std::int64_t V : {7LL, 1024LL, 1025LL, 2048LL, 8193LL, 32000LL}) {
    for (int rep = 0; rep < 6; ++rep) {
      std::vector<float> pf(static_cast<std::size_t>(V) + 8), qf(pf.size());
      testing::fill_row<T>(rng, pf.data(), V, rep % 4);
      testing::fill_row<T>(rng, qf.data(), V, (rep + 1) % 4);
      if (rep == 5) pf[static_cast<std::size_t>(rng() % V)] = -1.0f;  // poisons a tile
      const std::vector<T> p = testing::convert<T>(pf), q = testing::convert<T>(qf);
      const std::int64_t removed = static_cast<std::int64_t>(rng() % V);
      for (std::int64_t t = 0; t < num_tiles(V); ++t) {
        for (bool vec : {false, true}) {
          const bool vec_ok = vec && (V * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
          float m[2];
          detail::ResidualSource<T> rs{p.data(), q.data()};
          emulate_tile(rs, t, V, vec_ok, m);
          const float want_r = tile_mass(specdec::detail::ResidualWeight{pf.data(), qf.data()}, t, V);
          const float want_p = tile_mass(specdec::detail::RowWeight{pf.data()}, t, V);
          EXPECT_EQ(std::memcmp(&m[0], &want_r, 4), 0) << "V=" << V << " tile=" << t << " vec=" << vec_ok;
          EXPECT_EQ(std::memcmp(&m[1], &want_p, 4), 0) << "V=" << V << " tile=" << t;
          detail::RemovedSource<T> ms{p.data(), removed};
          emulate_tile(ms, t, V, vec_ok, m);
          const float want_m = tile_mass(specdec::detail::RemovedWeight{pf.data(), removed}, t, V);
          EXPECT_EQ(std::memcmp(&m[0], &want_m, 4), 0) << "V=" << V << " tile=" << t;
          detail::RowSource<T> ps{p.data()};
          emulate_tile(ps, t, V, vec_ok, m);
          EXPECT_EQ(std::memcmp(&m[0], &want_p, 4), 0) << "V=" << V << " tile=" << t;
        }
      }
    }
  }
}

// Tile race and token race candidates, folded in any order, pick what race_tiles / race_in_tile pick.
TEST(cuda_emulation_race, RacesMatchCore) {
  std::mt19937_64 rng(12);
  for (int rep = 0; rep < 400; ++rep) {
    const std::int64_t V = 1 + static_cast<std::int64_t>(rng() % 5000);
    std::vector<float> w(static_cast<std::size_t>(V));
    testing::fill_row<float>(rng, w.data(), V, rep % 4);
    const std::uint64_t seed = rng();
    const std::int64_t pos = static_cast<std::int64_t>(rng() % 1000);
    std::vector<float> masses(static_cast<std::size_t>(num_tiles(V)));
    for (std::int64_t t = 0; t < num_tiles(V); ++t) masses[t] = tile_mass(specdec::detail::RowWeight{w.data()}, t, V);
    bool ok;
    const Candidate tile = fold_tiles(masses, seed, pos, Purpose::kResidualTile, ok);
    ASSERT_TRUE(ok);
    ASSERT_EQ(tile.index, race_tiles(masses.data(), num_tiles(V), seed, pos, Purpose::kResidualTile));
    detail::RowSource<float> src{w.data()};
    EXPECT_EQ(fold_tokens(src, tile.index, V, seed, pos, Purpose::kResidual),
              race_in_tile(specdec::detail::RowWeight{w.data()}, tile.index, V, seed, pos, Purpose::kResidual));
  }
}

template <class T, class IdT>
void check_chain_batch(const Batch& c, const char* what) {
  Typed<T, IdT> d(c);
  ChainVerifyParams<T, IdT> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.num_draft_tokens = c.N;
  a.cu_num_draft_tokens = d.cu.data();
  a.draft_token_ids = d.ids.data();
  a.draft_probs = c.has_q ? d.q.data() : nullptr;
  a.target_probs = d.p.data();
  a.seeds = c.seeds.data();
  a.positions = c.positions.data();
  a.greedy = c.greedy.data();
  a.has_draft_probs = c.has_draft_probs();
  a.lenience = c.lenience;
  a.output_stride = c.stride;
  const bool vec_ok = (c.V * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  std::vector<IdT> got(static_cast<std::size_t>(c.stride)), want(got.size());
  std::vector<std::uint8_t> got_f(static_cast<std::size_t>(c.N) + 1), want_f(got_f.size());
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t groups : {std::int64_t{1}, std::int64_t{3}, num_tiles(c.V)}) {
      std::int32_t gn = -7, wn = -7;
      const Status gs = emulate_chain(a, b, std::min(groups, num_tiles(c.V)), vec_ok, got.data(), gn, got_f.data());
      const Status ws = testing::cpu_chain<IdT>(c, b, want.data(), wn, want_f.data());
      ASSERT_EQ(gs, ws) << what << " request " << b << " V=" << c.V;
      ASSERT_EQ(got, want) << what << " request " << b << " V=" << c.V;
      ASSERT_EQ(gn, wn) << what << " request " << b;
      ASSERT_EQ(got_f, want_f) << what << " request " << b;
    }
  }
}

template <class T, class IdT>
void check_tree_batch(const Batch& c, const char* what) {
  Typed<T, IdT> d(c);
  TreeVerifyParams<T, IdT> a;
  a.batch_size = c.B;
  a.vocab_size = c.V;
  a.num_draft_tokens = c.N;
  a.cu_num_draft_tokens = d.cu.data();
  a.draft_token_ids = d.ids.data();
  a.parents = d.parents.data();
  a.draft_probs = c.has_q ? d.q.data() : nullptr;
  a.target_probs = d.p.data();
  a.seeds = c.seeds.data();
  a.positions = c.positions.data();
  a.greedy = c.greedy.data();
  a.has_draft_probs = c.has_draft_probs();
  a.output_stride = c.stride;
  const bool vec_ok = (c.V * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  std::vector<IdT> got(static_cast<std::size_t>(c.stride)), want(got.size()), gnodes(got.size()), wnodes(got.size());
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::int32_t gn = -7, wn = -7;
    const Status gs = emulate_tree(a, b, vec_ok, got.data(), gnodes.data(), gn);
    const Status ws = testing::cpu_tree<IdT>(c, b, want.data(), wnodes.data(), wn);
    ASSERT_EQ(gs, ws) << what << " request " << b << " V=" << c.V;
    ASSERT_EQ(got, want) << what << " request " << b << " V=" << c.V;
    ASSERT_EQ(gnodes, wnodes) << what << " request " << b;
    ASSERT_EQ(gn, wn) << what << " request " << b;
  }
}

constexpr std::int64_t kSmallVocabs[] = {7, 33, 1025, 2048, 3000, 8193};

TYPED_TEST(cuda_emulation, ChainMatchesCpu) {
  std::mt19937_64 rng(21);
  for (int rep = 0; rep < 300; ++rep) {
    const std::int64_t V = kSmallVocabs[rep % 6];
    const Batch c = testing::make_batch<TypeParam>(rng, V, 1 + rep % 4, 6, rep % 3 != 0, false, 0.25);
    if (rep % 2) check_chain_batch<TypeParam, std::int32_t>(c, "chain");
    else check_chain_batch<TypeParam, std::int64_t>(c, "chain");
  }
}

TYPED_TEST(cuda_emulation, ChainLargeVocabMatchesCpu) {
  std::mt19937_64 rng(22);
  for (int rep = 0; rep < 6; ++rep) {
    const std::int64_t V = rep % 2 ? 151936 : 32000;
    const Batch c = testing::make_batch<TypeParam>(rng, V, 2, 5, rep % 3 != 2, false, rep == 0 ? 1.0 : 0.0);
    check_chain_batch<TypeParam, std::int32_t>(c, "chain large");
  }
}

TYPED_TEST(cuda_emulation, ChainLenience) {
  std::mt19937_64 rng(23);
  for (int rep = 0; rep < 60; ++rep) {
    Batch c = testing::make_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 3, 5, true, false, 0.0);
    c.lenience = rep % 2 ? 0.5f : 0.9f;
    check_chain_batch<TypeParam, std::int32_t>(c, "chain lenience");
  }
}

TYPED_TEST(cuda_emulation, ChainBadInputPerRequest) {
  std::mt19937_64 rng(24);
  for (int rep = 0; rep < 300; ++rep) {
    Batch c = testing::make_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 3, 4, rep % 2 == 0, false, 0.3);
    testing::corrupt(rng, c, static_cast<std::int64_t>(rng() % 3), false);
    if (rep % 25 == 0) c.cu[2] = c.cu[1] - 1;  // a request with a decreasing offset
    check_chain_batch<TypeParam, std::int64_t>(c, "chain bad input");
  }
}

TYPED_TEST(cuda_emulation, TreeMatchesCpu) {
  std::mt19937_64 rng(31);
  for (int rep = 0; rep < 200; ++rep) {
    const std::int64_t V = kSmallVocabs[rep % 6];
    const Batch c = testing::make_batch<TypeParam>(rng, V, 1 + rep % 3, 8, rep % 3 != 0, true, 0.2);
    if (rep % 2) check_tree_batch<TypeParam, std::int32_t>(c, "tree");
    else check_tree_batch<TypeParam, std::int64_t>(c, "tree");
  }
}

TYPED_TEST(cuda_emulation, TreeBadInputPerRequest) {
  std::mt19937_64 rng(32);
  for (int rep = 0; rep < 200; ++rep) {
    Batch c = testing::make_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 3, 6, rep % 2 == 0, true, 0.2);
    testing::corrupt(rng, c, static_cast<std::int64_t>(rng() % 3), true);
    check_tree_batch<TypeParam, std::int32_t>(c, "tree bad input");
  }
}

// A chain given as a tree (parents[j] = j) verifies like the chain verifier (tree.hpp's promise), in emulation.
TEST(cuda_emulation_tree, ChainShapedTreeMatchesChain) {
  std::mt19937_64 rng(33);
  for (int rep = 0; rep < 60; ++rep) {
    const Batch c = testing::make_batch<float>(rng, kSmallVocabs[rep % 6], 2, 5, rep % 2 == 0, false, 0.2);
    check_tree_batch<float, std::int32_t>(c, "chain-shaped tree");
  }
}


// ---- greedy rows with no mass: kZeroMass on both sides (the CPU core's argmax_row), never token 0 ----

/// Zeroes one target row of request b (row r of its K + 1), chosen at random.
inline void zero_one_row(std::mt19937_64& rng, Batch& c, std::int64_t b) {
  const std::int64_t start = c.cu[b], k = c.cu[b + 1] - start;
  const std::int64_t r = static_cast<std::int64_t>(rng() % (k + 1));
  std::fill(&c.p[(start + b + r) * c.V], &c.p[(start + b + r + 1) * c.V], 0.0f);
}

TYPED_TEST(cuda_emulation, ChainGreedyZeroMassRow) {
  std::mt19937_64 rng(25);
  int zero_mass = 0;
  for (int rep = 0; rep < 120; ++rep) {
    Batch c = testing::make_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 3, 4, rep % 2 == 0, false, 1.0);
    const std::int64_t b = static_cast<std::int64_t>(rng() % 3);
    zero_one_row(rng, c, b);
    if (rep % 3 == 0) std::fill(&c.p[(c.cu[b] + b) * c.V], &c.p[(c.cu[b] + b + 1) * c.V], 0.0f);  // the first row
    check_chain_batch<TypeParam, std::int32_t>(c, "chain greedy zero mass");
    std::vector<std::int32_t> row(static_cast<std::size_t>(c.stride));
    std::vector<std::uint8_t> flags(static_cast<std::size_t>(c.N) + 1);
    std::int32_t n = 0;
    const Status s = testing::cpu_chain<std::int32_t>(c, b, row.data(), n, flags.data());
    if (rep % 3 == 0) EXPECT_EQ(s, Status::kZeroMass) << "the first row is always read";
    zero_mass += s == Status::kZeroMass;
  }
  EXPECT_GT(zero_mass, 40);  // the zeroed row is reached often (not only when it is the first)
}

TYPED_TEST(cuda_emulation, TreeGreedyZeroMassRow) {
  std::mt19937_64 rng(34);
  int zero_mass = 0;
  for (int rep = 0; rep < 120; ++rep) {
    Batch c = testing::make_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 3, 5, rep % 2 == 0, true, 1.0);
    const std::int64_t b = static_cast<std::int64_t>(rng() % 3);
    zero_one_row(rng, c, b);
    if (rep % 3 == 0) std::fill(&c.p[(c.cu[b] + b) * c.V], &c.p[(c.cu[b] + b + 1) * c.V], 0.0f);  // the root row
    check_tree_batch<TypeParam, std::int32_t>(c, "tree greedy zero mass");
    std::vector<std::int32_t> row(static_cast<std::size_t>(c.stride)), nodes(row.size());
    std::int32_t n = 0;
    const Status s = testing::cpu_tree<std::int32_t>(c, b, row.data(), nodes.data(), n);
    if (rep % 3 == 0) EXPECT_EQ(s, Status::kZeroMass) << "the root row is always read";
    zero_mass += s == Status::kZeroMass;
  }
  EXPECT_GT(zero_mass, 40);
}

// ---- per-request draft kinds: requests with and without draft probabilities in one batch ----

TYPED_TEST(cuda_emulation, ChainMixedDraftKinds) {
  // Each request gets exactly the tokens it gets verified alone (cpu_chain runs the core on the request's own slice,
  // with or without its probabilities); the draft rows of requests flagged 0 hold NaN and are never read.
  std::mt19937_64 rng(26);
  int mixed = 0;
  for (int rep = 0; rep < 200; ++rep) {
    const Batch c = testing::make_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 2 + rep % 5, 6, true, false, 0.2, 0.5);
    bool with = false, without = false;
    for (std::int64_t b = 0; b < c.B; ++b) (c.request_has_q(b) ? with : without) = true;
    mixed += with && without;
    if (rep % 2) check_chain_batch<TypeParam, std::int32_t>(c, "chain mixed kinds");
    else check_chain_batch<TypeParam, std::int64_t>(c, "chain mixed kinds");
  }
  EXPECT_GT(mixed, 100);
}

TYPED_TEST(cuda_emulation, TreeMixedDraftKinds) {
  std::mt19937_64 rng(35);
  for (int rep = 0; rep < 150; ++rep) {
    const Batch c = testing::make_batch<TypeParam>(rng, kSmallVocabs[rep % 6], 2 + rep % 4, 7, true, true, 0.2, 0.5);
    check_tree_batch<TypeParam, std::int32_t>(c, "tree mixed kinds");
  }
}

TEST(cuda_emulation_kinds, FlaggedWithoutDraftProbsIsInvalidArgument) {
  std::mt19937_64 rng(27);
  for (int rep = 0; rep < 40; ++rep) {
    Batch c = testing::make_batch<float>(rng, kSmallVocabs[rep % 6], 4, 4, true, rep % 2 == 1, 0.2, 0.5);
    c.has_q = false;  // the flags stay: requests flagged 1 with drafts must fail, the others verify
    for (std::int64_t b = 0; b < c.B; ++b) {
      std::vector<std::int32_t> row(static_cast<std::size_t>(c.stride)), nodes(row.size());
      std::vector<std::uint8_t> flags(static_cast<std::size_t>(c.N) + 1);
      std::int32_t n = 0;
      const Status s = rep % 2 ? testing::cpu_tree<std::int32_t>(c, b, row.data(), nodes.data(), n)
                               : testing::cpu_chain<std::int32_t>(c, b, row.data(), n, flags.data());
      const bool flagged = c.has_q_req[b] && c.cu[b + 1] > c.cu[b];
      EXPECT_EQ(s == Status::kInvalidArgument, flagged) << "request " << b;
    }
    if (rep % 2) check_tree_batch<float, std::int32_t>(c, "tree flagged without probs");
    else check_chain_batch<float, std::int32_t>(c, "chain flagged without probs");
  }
}

// Host-side argument checks name the argument, what was expected and what was received.
TEST(cuda_emulation_args, HostChecksNameTheArgument) {
  ChainVerifyParams<float, std::int32_t> a;
  a.vocab_size = 10;
  a.output_stride = 1;
  EXPECT_TRUE(chain_verify_check_arguments(a).ok());  // B = 0
  a.batch_size = 70000;
  EXPECT_EQ(to_string(chain_verify_check_arguments(a)),
            "invalid argument: batch_size: expected <= the CUDA grid limit = 65535, got 70000");
  a.batch_size = 2;
  a.lenience = 2.0f;
  EXPECT_EQ(to_string(chain_verify_check_arguments(a)),
            "invalid argument: lenience: expected a value in (0, 1], got 2");
  a.lenience = 1.0f;
  EXPECT_EQ(to_string(chain_verify_check_arguments(a)),
            "invalid argument: cu_num_draft_tokens: expected a non-null pointer, got null");
  EXPECT_EQ(chain_verify_can_implement(a), Status::kInvalidArgument);
  std::vector<std::int32_t> cu = {0, 1, 3}, ids = {1, 2, 3}, out(8);
  std::vector<float> p(50), q(30);
  std::vector<std::uint64_t> seeds(2);
  std::vector<std::int64_t> pos(2);
  std::vector<std::int32_t> nacc(2);
  std::vector<Status> status(2);
  a.num_draft_tokens = 3;
  a.cu_num_draft_tokens = cu.data();
  a.draft_token_ids = ids.data();
  a.draft_probs = q.data();
  a.target_probs = p.data();
  a.seeds = seeds.data();
  a.positions = pos.data();
  a.output_token_ids = out.data();
  a.output_stride = 3;
  a.num_accepted = nacc.data();
  a.status = status.data();
  EXPECT_TRUE(chain_verify_check_arguments(a).ok());
  a.target_probs_size = 50;
  a.draft_probs_size = 30;
  a.draft_token_ids_size = 3;
  EXPECT_TRUE(chain_verify_check_arguments(a).ok());
  a.target_probs_size = 40;
  EXPECT_EQ(to_string(chain_verify_check_arguments(a)),
            "invalid argument: target_probs_size: expected (num_draft_tokens + batch_size) * vocab_size = 50, got 40");
  a.target_probs_size = 50;
  a.draft_probs_size = 20;
  EXPECT_EQ(to_string(chain_verify_check_arguments(a)),
            "invalid argument: draft_probs_size: expected num_draft_tokens * vocab_size = 30, got 20");
  a.draft_probs_size = 30;
  a.draft_token_ids_size = 4;
  EXPECT_EQ(to_string(chain_verify_check_arguments(a)),
            "invalid argument: draft_token_ids_size: expected num_draft_tokens = 3, got 4");

  TreeVerifyParams<float, std::int32_t> t;
  t.batch_size = 2;
  t.vocab_size = 10;
  t.num_draft_tokens = 3;
  t.output_stride = 3;
  t.cu_num_draft_tokens = cu.data();
  t.draft_token_ids = ids.data();
  t.target_probs = p.data();
  t.seeds = seeds.data();
  t.positions = pos.data();
  t.output_token_ids = out.data();
  t.num_accepted = nacc.data();
  t.status = status.data();
  EXPECT_EQ(to_string(tree_verify_check_arguments(t)),
            "invalid argument: parents: expected a non-null pointer, got null");
  t.parents = ids.data();
  EXPECT_TRUE(tree_verify_check_arguments(t).ok());
  t.parents_size = 2;
  EXPECT_EQ(to_string(tree_verify_check_arguments(t)),
            "invalid argument: parents_size: expected num_draft_tokens = 3, got 2");
  t.parents_size = 3;
  t.num_draft_tokens = -1;
  EXPECT_EQ(tree_verify_can_implement(t), Status::kInvalidArgument);
}

}  // namespace
}  // namespace specdec::cuda
