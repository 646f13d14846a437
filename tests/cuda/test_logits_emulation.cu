// specdec tests — host emulation of the logits kernel (include/specdec/cuda/logits.cuh): its phases run thread by
// thread on the host with the kernel's own SPECDEC_HD arithmetic (cut_lane_sums / masked_lane_sum per lane, the
// shuffle-down halving per tile, combine_pair level by level, the per-thread histograms and candidates), and the result
// is compared bit for bit with the CPU reference (specdec::logits_to_probs_batch), which sums only its candidates and
// combines sequentially. No device needed. Vocabularies up to 151,936, partial tiles, ties at the top-k and top-p
// cuts, temperatures near 0, float/half/bfloat16 logits, bad rows and parameters.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "logits_cases.hpp"
#include "specdec/cuda/logits.cuh"

namespace specdec::cuda {
namespace {

namespace sd = specdec::detail;
using testing::LogitsBatch;
constexpr int kThreads = kLogitsThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kC = sd::kCutDigitValues;

/// __shfl_down_sync halving over a warp's 32 values (lane l adds lane l + off while l + off < 32); lane 0's result.
float emulate_warp_reduce(float (&v)[32]) {
  for (int off = 16; off > 0; off /= 2)
    for (int l = 0; l + off < 32; ++l) v[l] = v[l] + v[l + off];
  return v[0];
}

/// block_combine: every pair of a level (in any order: they are disjoint), level after level.
void emulate_combine(float* ws, std::int64_t tiles, int columns) {
  for (std::int64_t s = 1; s < tiles; s *= 2) {
    const std::int64_t pairs = (tiles + 2 * s - 1) / (2 * s);
    for (std::int64_t w = pairs * columns - 1; w >= 0; --w)  // reverse order: the result must not depend on it
      sd::combine_pair(ws + w % columns, tiles, kC, s, w / columns);
  }
}

float emulate_masked_mass(const float* w, std::int64_t V, std::uint64_t floor, float* ws) {
  const std::int64_t tiles = num_tiles(V);
  for (int warp = 0; warp < kWarps; ++warp)
    for (std::int64_t t = warp; t < tiles; t += kWarps) {
      float v[32];
      for (int lane = 0; lane < 32; ++lane) v[lane] = sd::masked_lane_sum(w, t, lane, V, floor);
      ws[t * kC] = emulate_warp_reduce(v);
    }
  emulate_combine(ws, tiles, 1);
  return ws[0];
}

void emulate_digit_masses(const float* w, std::int64_t V, std::uint64_t floor, std::uint64_t base, int shift,
                          float* ws, float (&mass)[kC]) {
  const std::int64_t tiles = num_tiles(V);
  for (std::int64_t t = 0; t < tiles; ++t) {
    float acc[32][kC];
    for (int lane = 0; lane < 32; ++lane) sd::cut_lane_sums(w, t, lane, V, floor, base, shift, acc[lane]);
    for (int c = 0; c < kC; ++c) {
      float v[32];
      for (int lane = 0; lane < 32; ++lane) v[lane] = acc[lane][c];
      ws[t * kC + c] = emulate_warp_reduce(v);
    }
  }
  emulate_combine(ws, tiles, kC);
  for (int c = 0; c < kC; ++c) mass[c] = ws[c];
}

/// One CTA of logits_to_probs_kernel on the host (the same phases, the same calls).
template <class LogitT, class IdT>
void emulate_row(const detail::LogitsKernelArgs<LogitT, IdT>& a, std::int64_t r, float* ws_all) {
  if (a.greedy && r < a.num_requests)
    a.greedy[r] = sd::request_logits_params(a.temperature, a.top_k, a.top_p, a.min_p, r).temperature == 0.0f;
  if (r >= a.num_rows) return;
  const std::int64_t V = a.vocab_size;
  const LogitT* in = a.logits + r * a.logits_stride;
  float* out = a.probs + r * V;
  float* ws = ws_all + r * detail::logits_workspace_floats(V);
  auto fail = [&](Status s) {
    for (std::int64_t x = 0; x < V; ++x) out[x] = 0.0f;
    a.status[r] = s;
  };
  const std::int64_t b = sd::logits_row_request(a.cu, a.num_requests, a.rows_extra, r);
  LogitsParams p;
  if (b >= 0) p = sd::request_logits_params(a.temperature, a.top_k, a.top_p, a.min_p, b);
  if (b < 0 || !sd::logits_params_ok(p)) return fail(Status::kInvalidArgument);
  // Per-thread candidates, then the block reduction (warp halving, then warps in order).
  std::vector<detail::Candidate> cand(kThreads, detail::no_candidate());
  bool valid = true;
  for (int t = 0; t < kThreads; ++t)
    for (std::int64_t x = t; x < V; x += kThreads) {
      const float v = detail::to_float(in[x]);
      if (sd::logit_invalid(v)) valid = false;
      else cand[t] = detail::better(cand[t], detail::Candidate{v, x});
    }
  detail::Candidate best = detail::no_candidate();
  for (int w = 0; w < kWarps; ++w) {
    detail::Candidate* c = cand.data() + 32 * w;
    for (int off = 16; off > 0; off /= 2)
      for (int l = 0; l + off < 32; ++l) c[l] = detail::better(c[l], c[l + off]);
    best = w == 0 ? c[0] : detail::better(best, c[0]);
  }
  if (!valid) return fail(Status::kInvalidProbability);
  if (best.key < -FLT_MAX) return fail(Status::kZeroMass);
  const std::int64_t argmax = best.index;
  if (p.temperature == 0.0f) {
    for (std::int64_t x = 0; x < V; ++x) out[x] = x == argmax ? 1.0f : 0.0f;
    a.status[r] = Status::kSuccess;
    return;
  }
  const sd::CutSteps steps = sd::cut_steps(p, V);
  const float inverse_t = sd::inverse_temperature(p.temperature);
  unsigned positive = 0;
  for (std::int64_t x = 0; x < V; ++x) {
    out[x] = sd::logit_weight(detail::to_float(in[x]), best.key, inverse_t);
    positive += out[x] > 0.0f;
  }
  int shifts[sd::kMaxCutDigits];
  const int digits = sd::cut_digit_shifts(V, shifts);
  std::uint64_t floor = 0;
  if (steps.top_k && static_cast<std::int64_t>(p.top_k) < static_cast<std::int64_t>(positive)) {
    std::uint64_t base = 0;
    for (int i = 0; i < digits; ++i) {
      std::int64_t h[kC] = {};
      for (int t = 0; t < kThreads; ++t)
        for (std::int64_t x = t; x < V; x += kThreads) {
          if (!(out[x] > 0.0f)) continue;
          const int d = sd::cut_digit(sd::cut_key(out[x], x, V), base, shifts[i]);
          if (d >= 0) ++h[d];
        }
      base |= static_cast<std::uint64_t>(sd::pick_count_digit(h, p.top_k)) << shifts[i];
    }
    floor = base;
  }
  if (steps.top_p) {
    const float target = p.top_p * emulate_masked_mass(out, V, floor, ws);
    float mass[kC];
    std::uint64_t base = 0;
    for (int i = 0; i < digits; ++i) {
      emulate_digit_masses(out, V, floor, base, shifts[i], ws, mass);
      base |= static_cast<std::uint64_t>(sd::pick_mass_digit(mass, target)) << shifts[i];
    }
    const std::uint64_t front = sd::cut_key(out[argmax], argmax, V);
    floor = std::max(floor, std::min(base, front));
  }
  floor = std::max(floor, sd::min_p_floor(p.min_p, out[argmax]));
  const float inverse = sd::inverse_mass(emulate_masked_mass(out, V, floor, ws));
  for (std::int64_t x = 0; x < V; ++x) {
    const float e = out[x];
    out[x] = e > 0.0f && sd::cut_key(e, x, V) >= floor ? sd::normalised_weight(e, inverse) : 0.0f;
  }
  a.status[r] = Status::kSuccess;
}

/// Runs the emulated kernel on a batch (logits converted to T, offsets to IdT) and compares with the CPU reference.
template <class T, class IdT>
void check_batch(const LogitsBatch& c, const char* what) {
  SCOPED_TRACE(what);
  std::vector<float> want;
  std::vector<Status> want_status;
  testing::reference(c, want, want_status);
  const std::vector<T> logits = testing::convert<T>(c.logits);
  const std::vector<IdT> cu(c.cu.begin(), c.cu.end());
  std::vector<float> probs(static_cast<std::size_t>(c.R * c.V), -1.0f);
  std::vector<Status> status(static_cast<std::size_t>(c.R), Status::kCudaError);
  std::vector<std::uint8_t> greedy(static_cast<std::size_t>(c.B), 7);
  std::vector<float> ws(logits_to_probs_workspace_size(c.R, c.V) / sizeof(float) + 1);
  detail::LogitsKernelArgs<T, IdT> a{c.R, c.V, c.stride, c.B, logits.data(), probs.data(), c.temperature.data(),
                                     c.top_k.data(), c.top_p.data(), c.min_p.data(), c.use_cu ? cu.data() : nullptr,
                                     c.rows_extra, status.data(), greedy.data()};
  for (std::int64_t r = 0; r < std::max(c.R, c.B); ++r) emulate_row(a, r, ws.data());
  for (std::int64_t r = 0; r < c.R; ++r) {
    ASSERT_EQ(status[r], want_status[r]) << "row " << r;
    ASSERT_EQ(0, std::memcmp(probs.data() + r * c.V, want.data() + r * c.V, static_cast<std::size_t>(c.V) * 4))
        << "row " << r << " (V = " << c.V << ", T = " << c.temperature[0] << ")";
  }
  for (std::int64_t b = 0; b < c.B; ++b) ASSERT_EQ(greedy[b], c.temperature[b] == 0.0f ? 1 : 0) << b;
}

template <class T>
void check_types(const LogitsBatch& c, const char* what) {
  check_batch<T, std::int64_t>(c, what);
  if (c.use_cu) check_batch<T, std::int32_t>(c, what);
}

TEST(cuda_logits_emulation, EdgeRowsMatchCpuBitForBit) {
  for (std::int64_t V : {1, 2, 7, 1023, 1024, 1025, 3001, 32000})
    check_batch<float, std::int64_t>(testing::edge_batch<float>(V), "edge float");
  check_batch<__half, std::int64_t>(testing::edge_batch<__half>(5000), "edge half");
  check_batch<__nv_bfloat16, std::int64_t>(testing::edge_batch<__nv_bfloat16>(5000), "edge bfloat16");
}

TEST(cuda_logits_emulation, RandomBatchesMatchCpuBitForBit) {
  std::mt19937_64 rng(2024);
  for (std::int64_t V : {3, 64, 1000, 1031, 4096, 9999}) {
    for (int rep = 0; rep < 3; ++rep) {
      check_types<float>(testing::random_batch<float>(rng, 6, V, true), "random float");
      check_types<__half>(testing::random_batch<__half>(rng, 4, V, rep == 0), "random half");
      check_types<__nv_bfloat16>(testing::random_batch<__nv_bfloat16>(rng, 4, V, rep != 0), "random bfloat16");
    }
  }
}

TEST(cuda_logits_emulation, LargeVocabulariesMatchCpuBitForBit) {
  std::mt19937_64 rng(99);
  for (std::int64_t V : {128256, 151936}) {
    check_batch<float, std::int64_t>(testing::random_batch<float>(rng, 5, V, false), "large float");
    check_batch<__nv_bfloat16, std::int32_t>(testing::random_batch<__nv_bfloat16>(rng, 2, V, true), "large bf16");
  }
  LogitsBatch e = testing::edge_batch<float>(151936);
  check_batch<float, std::int64_t>(e, "edge 151936");
}

TEST(cuda_logits_emulation, RowsNoRequestOwnsAreInvalidArgument) {
  std::mt19937_64 rng(5);
  LogitsBatch c = testing::random_batch<float>(rng, 3, 100, true);
  // Two extra rows past cu[B] + B, and a draft-row layout (rows_extra = 0) over the same rows.
  c.R += 2;
  c.logits.resize(static_cast<std::size_t>(c.R * c.stride), 0.5f);
  check_batch<float, std::int64_t>(c, "extra rows");
  c.rows_extra = 0;
  check_batch<float, std::int32_t>(c, "draft layout");
}

TEST(cuda_logits_emulation, HostChecksNameTheArgument) {
  LogitsToProbsArgs a;
  a.num_rows = 2;
  a.vocab_size = 10;
  a.num_requests = 2;
  VerifyResult r = logits_to_probs_check_arguments(a);
  EXPECT_EQ(r.status, Status::kInvalidArgument);
  EXPECT_STREQ(r.argument, "logits");
  a.vocab_size = 0;
  EXPECT_STREQ(logits_to_probs_check_arguments(a).argument, "vocab_size");
  a.vocab_size = 10;
  a.logits_stride = 9;
  EXPECT_STREQ(logits_to_probs_check_arguments(a).argument, "logits_stride");
  a.logits_stride = 0;
  a.num_requests = 3;
  EXPECT_EQ(to_string(logits_to_probs_check_arguments(a)),
            "invalid argument: num_requests: expected num_rows when cu is null = 2, got 3");
  EXPECT_EQ(logits_to_probs_workspace_size(3, 151936) % 256, 0u);
  EXPECT_GE(logits_to_probs_workspace_size(3, 151936), 3u * 149 * 16 * 4);
  EXPECT_EQ(logits_to_probs_workspace_size(0, 151936), 0u);
}

}  // namespace
}  // namespace specdec::cuda
