// The engine-facing entry verify_logits: the same tokens, counts, flags / paths as processing the logits with
// logits_to_probs and verifying with the batched core (verify_chain / verify_tree); float16/bfloat16 logits; per-request
// statuses for bad values (the other requests untouched); named errors for bad shapes and dtypes; the op by name; the
// CUDA path against the CPU where a GPU is present.
#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/tree.hpp"
#include "specdec/torch/verify_logits.hpp"

namespace {

using specdec::Status;
using specdec::torch::VerifyLogitsArgs;
using specdec::torch::VerifyLogitsResult;

/// A random engine step: B requests with K_b drafts, target logits [N + B, V], draft logits [N, V], parameters.
struct Step {
  std::int64_t B = 0, N = 0, V = 0;
  std::vector<std::int64_t> cu, ids, parents, seeds, positions;
  std::vector<float> target, draft;  ///< logits
  std::vector<float> temperature, top_p, min_p;
  std::vector<std::int32_t> top_k;
  std::vector<std::uint8_t> has_q;
};

Step random_step(std::uint64_t seed, std::int64_t B, std::int64_t V, bool tree) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  Step s;
  s.B = B;
  s.V = V;
  s.cu.push_back(0);
  for (std::int64_t b = 0; b < B; ++b) s.cu.push_back(s.cu.back() + static_cast<std::int64_t>(rng() % 5));
  s.N = s.cu.back();
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t k = s.cu[b + 1] - s.cu[b];
    for (std::int64_t j = 0; j < k; ++j) s.parents.push_back(tree ? static_cast<std::int64_t>(rng() % (j + 1)) : j);
  }
  s.target.resize(static_cast<std::size_t>((s.N + B) * V));
  s.draft.resize(static_cast<std::size_t>(s.N * V));
  for (auto& v : s.target) v = nd(rng);
  // Drafts correlated with the target (so some are accepted), each draft token drawn near the top of its row.
  for (std::int64_t j = 0; j < s.N; ++j) {
    for (std::int64_t x = 0; x < V; ++x) s.draft[j * V + x] = 0.7f * s.target[j * V + x] + 0.5f * nd(rng);
    std::int64_t best = 0;
    for (std::int64_t x = 1; x < V; ++x)
      if (s.draft[j * V + x] > s.draft[j * V + best]) best = x;
    s.ids.push_back(rng() % 3 == 0 ? static_cast<std::int64_t>(rng() % V) : best);
  }
  const float ts[] = {0.0f, 1.0f, 0.7f, 1.3f};
  for (std::int64_t b = 0; b < B; ++b) {
    s.temperature.push_back(ts[b % 4]);
    s.top_k.push_back(b % 3 == 1 ? 20 : 0);
    s.top_p.push_back(b % 5 == 2 ? 0.9f : 1.0f);
    s.min_p.push_back(b % 7 == 3 ? 0.05f : 0.0f);
    s.seeds.push_back(static_cast<std::int64_t>(1000 + 17 * b));
    s.positions.push_back(static_cast<std::int64_t>(10 + b));
    s.has_q.push_back(b % 2 == 0 ? 1 : 0);
  }
  return s;
}

template <class T>
at::Tensor tensor_of(const std::vector<T>& v) {
  return at::tensor(v);
}

at::Tensor rows(const std::vector<float>& v, std::int64_t r, std::int64_t V) {
  return at::tensor(v).reshape({r, V});
}

VerifyLogitsArgs args_of(const Step& s, bool tree, bool draft_logits, bool kinds) {
  VerifyLogitsArgs a;
  a.target_logits = rows(s.target, s.N + s.B, s.V);
  a.draft_token_ids = tensor_of(s.ids).to(at::kLong);
  if (s.ids.empty()) a.draft_token_ids = at::zeros({0}, at::kLong);
  a.cu_num_draft_tokens = tensor_of(s.cu);
  if (draft_logits) a.draft_logits = rows(s.draft, s.N, s.V);
  if (tree) a.parents = s.parents.empty() ? at::zeros({0}, at::kLong) : tensor_of(s.parents);
  if (kinds) a.has_draft_probs = tensor_of(s.has_q).to(at::kBool);
  a.temperature = tensor_of(s.temperature);
  a.top_k = tensor_of(s.top_k);
  a.top_p = tensor_of(s.top_p);
  a.min_p = tensor_of(s.min_p);
  a.seeds = tensor_of(s.seeds);
  a.positions = tensor_of(s.positions);
  return a;
}

/// The reference: every row through logits_to_probs with its request's parameters, then the batched core.
struct Reference {
  std::vector<float> p, q;
  std::vector<std::int64_t> tokens, nodes;
  std::vector<std::int32_t> counts;
  std::vector<std::uint8_t> flags;
  std::int64_t stride = 0;
};

Reference reference(const Step& s, bool tree, bool with_q, bool kinds, bool block = false) {
  Reference r;
  const std::int64_t V = s.V;
  r.p.resize(s.target.size());
  r.q.resize(s.draft.size());
  std::int64_t max_k = 0;
  for (std::int64_t b = 0; b < s.B; ++b) {
    const specdec::SamplingParams sp{s.temperature[b], s.top_k[b], s.top_p[b], s.min_p[b], 0};
    const std::int64_t k = s.cu[b + 1] - s.cu[b];
    max_k = std::max(max_k, k);
    for (std::int64_t i = 0; i <= k; ++i) {
      const std::int64_t row = s.cu[b] + b + i;
      EXPECT_EQ(specdec::logits_to_probs(std::span<const float>(s.target.data() + row * V, V), sp,
                                         std::span<float>(r.p.data() + row * V, V)),
                Status::kSuccess);
    }
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t row = s.cu[b] + i;
      EXPECT_EQ(specdec::logits_to_probs(std::span<const float>(s.draft.data() + row * V, V), sp,
                                         std::span<float>(r.q.data() + row * V, V)),
                Status::kSuccess);
    }
  }
  r.stride = max_k + 1;
  std::vector<std::uint64_t> seeds(s.seeds.begin(), s.seeds.end());
  std::vector<std::uint8_t> greedy;
  for (float t : s.temperature) greedy.push_back(t == 0.0f);
  r.tokens.assign(static_cast<std::size_t>(s.B * r.stride), -1);
  r.nodes.assign(static_cast<std::size_t>(s.B * r.stride), -1);
  r.counts.assign(static_cast<std::size_t>(s.B), 0);
  r.flags.assign(static_cast<std::size_t>(s.N), 0);
  if (tree) {
    specdec::TreeVerifyArgs<std::int64_t, std::int64_t> a;
    a.batch_size = s.B;
    a.vocab_size = V;
    a.cu_num_draft_tokens = s.cu.data();
    a.draft_token_ids = s.ids.data();
    a.parents = s.parents.data();
    a.draft_probs = with_q ? r.q.data() : nullptr;
    a.target_probs = r.p.data();
    a.seeds = seeds.data();
    a.positions = s.positions.data();
    a.greedy = greedy.data();
    a.has_draft_probs = kinds ? s.has_q.data() : nullptr;
    const auto res = specdec::verify_tree(a, specdec::TreeVerifyOutputs<std::int64_t>{r.tokens.data(), r.stride,
                                                                                       r.counts.data(), r.nodes.data()});
    EXPECT_TRUE(res.ok()) << specdec::to_string(res);
  } else {
    specdec::ChainVerifyArgs<std::int64_t, std::int64_t> a;
    a.batch_size = s.B;
    a.vocab_size = V;
    a.cu_num_draft_tokens = s.cu.data();
    a.draft_token_ids = s.ids.data();
    a.draft_probs = with_q ? r.q.data() : nullptr;
    a.target_probs = r.p.data();
    a.seeds = seeds.data();
    a.positions = s.positions.data();
    a.greedy = greedy.data();
    a.has_draft_probs = kinds ? s.has_q.data() : nullptr;
    const specdec::ChainVerifyOutputs<std::int64_t> out{r.tokens.data(), r.stride, r.counts.data(), r.flags.data()};
    const auto res = block ? specdec::verify_block(a, out) : specdec::verify_chain(a, out);
    EXPECT_TRUE(res.ok()) << specdec::to_string(res);
  }
  return r;
}

template <class T>
std::vector<T> to_vec(const at::Tensor& t) {
  const at::Tensor c = t.cpu().contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

void expect_equal(const VerifyLogitsResult& got, const Reference& want, bool tree) {
  EXPECT_EQ(to_vec<std::int32_t>(got.status), std::vector<std::int32_t>(want.counts.size(), 0));
  EXPECT_EQ(to_vec<std::int64_t>(got.output_token_ids), want.tokens);
  EXPECT_EQ(to_vec<std::int32_t>(got.num_accepted), want.counts);
  if (tree) {
    EXPECT_EQ(to_vec<std::int64_t>(got.accepted), want.nodes);
  } else {
    const auto flags = to_vec<bool>(got.accepted);
    EXPECT_EQ(std::vector<std::uint8_t>(flags.begin(), flags.end()), want.flags);
  }
  const auto probs = to_vec<float>(got.target_probs);
  ASSERT_EQ(probs.size(), want.p.size());
  EXPECT_EQ(0, std::memcmp(probs.data(), want.p.data(), probs.size() * sizeof(float)));
}

TEST(VerifyLogits, ChainEqualsLogitsToProbsThenVerifyChain) {
  std::int64_t accepted = 0, drafts = 0;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const Step s = random_step(seed, 9, 1500, false);
    const auto got = specdec::torch::verify_logits(args_of(s, false, true, false));
    expect_equal(got, reference(s, false, true, false), false);
    accepted += got.num_accepted.sum().item<std::int64_t>();
    drafts += s.N;
    // Per-request draft kinds: even requests use their draft rows, odd ones are deterministic drafts.
    expect_equal(specdec::torch::verify_logits(args_of(s, false, true, true)), reference(s, false, true, true), false);
    // No draft distribution at all (n-gram drafts).
    expect_equal(specdec::torch::verify_logits(args_of(s, false, false, false)), reference(s, false, false, false),
                 false);
  }
  EXPECT_GT(accepted, 0);  // the steps exercise acceptances and rejections alike
  EXPECT_LT(accepted, drafts);
}

void expect_error(const VerifyLogitsArgs& a, const std::string& message);

TEST(VerifyLogits, BlockEqualsLogitsToProbsThenVerifyBlock) {
  std::int64_t differs_from_token = 0;
  for (std::uint64_t seed = 21; seed < 41; ++seed) {
    const Step s = random_step(seed, 16, 600, false);
    for (bool kinds : {false, true}) {
      VerifyLogitsArgs a = args_of(s, false, true, kinds);
      a.method = specdec::VerifyMethod::kBlock;
      const auto got = specdec::torch::verify_logits(a);
      expect_equal(got, reference(s, false, true, kinds, true), false);
      const auto token = specdec::torch::verify_logits(args_of(s, false, true, kinds));
      differs_from_token += !at::equal(got.output_token_ids, token.output_token_ids);
    }
  }
  EXPECT_GT(differs_from_token, 0);  // the method is applied
  VerifyLogitsArgs t = args_of(random_step(24, 4, 300, true), true, true, false);
  t.method = specdec::VerifyMethod::kBlock;
  expect_error(t, "method: expected token for tree verification (block verification applies to chains), got block");
}

TEST(VerifyLogits, TreeEqualsLogitsToProbsThenVerifyTree) {
  for (std::uint64_t seed : {4u, 5u}) {
    const Step s = random_step(seed, 7, 1100, true);
    expect_equal(specdec::torch::verify_logits(args_of(s, true, true, false)), reference(s, true, true, false), true);
    expect_equal(specdec::torch::verify_logits(args_of(s, true, false, false)), reference(s, true, false, false), true);
  }
}

TEST(VerifyLogits, DraftProbsAndHalfPrecisionLogits) {
  const Step s = random_step(6, 6, 700, false);
  const Reference want = reference(s, false, true, false);
  // Draft probabilities given instead of draft logits (already processed): the same tokens.
  VerifyLogitsArgs a = args_of(s, false, false, false);
  a.draft_probs = rows(want.q, s.N, s.V);
  expect_equal(specdec::torch::verify_logits(a), want, false);
  // bfloat16 target logits: the same as float32 logits holding the bfloat16 values.
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    Step r = s;
    const at::Tensor rounded = rows(s.target, s.N + s.B, s.V).to(dtype);
    const auto back = to_vec<float>(rounded.to(at::kFloat));
    r.target.assign(back.begin(), back.end());
    VerifyLogitsArgs h = args_of(r, false, true, false);
    h.target_logits = rounded;
    expect_equal(specdec::torch::verify_logits(h), reference(r, false, true, false), false);
  }
  // Strided target rows (a slice of a wider buffer) read as the contiguous ones.
  VerifyLogitsArgs w = args_of(s, false, true, false);
  const at::Tensor wide = at::zeros({s.N + s.B, s.V + 13});
  wide.narrow(1, 0, s.V).copy_(w.target_logits);
  w.target_logits = wide.narrow(1, 0, s.V);
  expect_equal(specdec::torch::verify_logits(w), reference(s, false, true, false), false);
}

TEST(VerifyLogits, BadValuesFailTheirRequestOnly) {
  const Step s = random_step(7, 5, 300, false);
  const Reference want = reference(s, false, true, false);
  VerifyLogitsArgs a = args_of(s, false, true, false);
  // Request 1: a NaN target logit; request 3: a bad temperature; request 4: K_4 > max_num_draft_tokens handled below.
  a.target_logits = a.target_logits.clone();
  a.target_logits[s.cu[1] + 1][17] = std::nanf("");
  a.temperature = a.temperature->clone();
  (*a.temperature)[3] = -1.0f;
  const auto got = specdec::torch::verify_logits(a);
  const auto status = to_vec<std::int32_t>(got.status);
  const auto tokens = to_vec<std::int64_t>(got.output_token_ids);
  const auto counts = to_vec<std::int32_t>(got.num_accepted);
  for (std::int64_t b = 0; b < s.B; ++b) {
    const Status expected = b == 1 ? Status::kInvalidProbability : b == 3 ? Status::kInvalidArgument : Status::kSuccess;
    EXPECT_EQ(status[b], static_cast<std::int32_t>(expected)) << b;
    for (std::int64_t i = 0; i < want.stride; ++i)
      EXPECT_EQ(tokens[b * want.stride + i], expected == Status::kSuccess ? want.tokens[b * want.stride + i] : -1);
    EXPECT_EQ(counts[b], expected == Status::kSuccess ? want.counts[b] : 0);
  }
  try {
    specdec::torch::check_verify_status(got);
    FAIL() << "expected c10::Error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("verify_logits: request 1 failed: probability is NaN, infinite or negative"),
              std::string::npos)
        << e.what();
  }
  // An id out of range, all -inf logits, a width too small for a request.
  VerifyLogitsArgs b = args_of(s, false, true, false);
  b.draft_token_ids = b.draft_token_ids.clone();
  b.draft_token_ids[s.cu[2]] = s.V;
  b.target_logits = b.target_logits.clone();
  b.target_logits[s.cu[0] + 0].fill_(-std::numeric_limits<float>::infinity());
  std::int64_t max_k = 0;
  for (std::int64_t i = 0; i < s.B; ++i) max_k = std::max(max_k, s.cu[i + 1] - s.cu[i]);
  b.max_num_draft_tokens = max_k;
  const auto bad = to_vec<std::int32_t>(specdec::torch::verify_logits(b).status);
  EXPECT_EQ(bad[0], static_cast<std::int32_t>(Status::kZeroMass));
  if (s.cu[3] > s.cu[2]) {
    EXPECT_EQ(bad[2], static_cast<std::int32_t>(Status::kInvalidTokenId));
  }
  if (max_k > 0) {
    b.max_num_draft_tokens = max_k - 1;
    const auto narrow = to_vec<std::int32_t>(specdec::torch::verify_logits(b).status);
    for (std::int64_t i = 0; i < s.B; ++i)
      if (s.cu[i + 1] - s.cu[i] == max_k) {
        EXPECT_EQ(narrow[i], static_cast<std::int32_t>(Status::kInvalidArgument)) << i;
      }
  }
}

void expect_error(const VerifyLogitsArgs& a, const std::string& message) {
  try {
    specdec::torch::verify_logits(a);
    FAIL() << "expected c10::Error containing: " << message;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(VerifyLogits, BadShapesAndDtypesAreNamedErrors) {
  const Step s = random_step(8, 3, 64, false);
  VerifyLogitsArgs a = args_of(s, false, true, false);
  VerifyLogitsArgs e = a;
  e.seeds = e.seeds.to(at::kInt);
  expect_error(e, "seeds: expected int64, got Int");
  e = a;
  e.target_logits = at::zeros({s.N + s.B + 1, s.V});
  expect_error(e, "target_logits: expected a 2-D tensor [" + std::to_string(s.N + s.B) + ", 64], got shape [" +
                      std::to_string(s.N + s.B + 1) + ", 64]");
  e = a;
  e.draft_probs = at::zeros({s.N, s.V});
  expect_error(e, "draft_probs/draft_logits: expected at most one of them, got both");
  e = a;
  e.cu_num_draft_tokens = e.cu_num_draft_tokens.to(at::kInt);
  expect_error(e, "cu_num_draft_tokens: expected Long (the dtype of draft_token_ids), got Int");
  e = a;
  e.target_logits = e.target_logits.to(at::kDouble);
  expect_error(e, "target_logits: expected float32, float16 or bfloat16, got Double");
  e = a;
  e.top_k = at::zeros({s.B}, at::kLong);
  expect_error(e, "top_k: expected int32, got Long");
  e = a;
  e.temperature = at::ones({s.B + 1});
  expect_error(e, "temperature: expected a 1-D tensor [3], got shape [4]");
  e = a;
  e.max_num_draft_tokens = -2;
  expect_error(e, "max_num_draft_tokens: expected >= 0 (or -1 on CPU), got -2");
}

// A workspace kept across calls on the CPU: the same results, target_probs and the draft rows live in it (no fresh
// rows per call), and one that is too small is a named error.
TEST(VerifyLogits, CpuWorkspaceHoldsTheRowsAndChangesNothing) {
  for (const bool tree : {false, true}) {
    const Step s = random_step(31 + (tree ? 1 : 0), 6, 3000, tree);
    VerifyLogitsArgs a = args_of(s, tree, true, true);
    const auto fresh = specdec::torch::verify_logits(a);
    const std::int64_t need = specdec::torch::verify_logits_workspace_bytes(s.B, s.N, s.V, tree, true);
    ASSERT_GE(need, (2 * s.N + s.B) * s.V * static_cast<std::int64_t>(sizeof(float)));
    at::Tensor ws = at::full({need}, 0xff, at::TensorOptions().dtype(at::kByte));  // NaN garbage: must be overwritten
    a.workspace = ws;
    for (int call = 0; call < 2; ++call) {
      const auto kept = specdec::torch::verify_logits(a);
      EXPECT_TRUE(at::equal(kept.output_token_ids, fresh.output_token_ids));
      EXPECT_TRUE(at::equal(kept.num_accepted, fresh.num_accepted));
      EXPECT_TRUE(at::equal(kept.accepted, fresh.accepted));
      EXPECT_TRUE(at::equal(kept.status, fresh.status));
      EXPECT_TRUE(at::equal(kept.target_probs, fresh.target_probs));
      EXPECT_EQ(kept.target_probs.data_ptr(), static_cast<void*>(ws.data_ptr<std::uint8_t>()));
    }
    a.workspace = at::empty({need - 1}, at::TensorOptions().dtype(at::kByte));
    expect_error(a, "workspace: expected at least");
  }
}

// all_target_probs = false on the CPU: rows processed as the chain rule reaches them. Same tokens, counts, flags and
// statuses as processing every row, with no draft probs, with draft probs (with and without per-request kinds) and with
// bad values (a NaN logit after a request's first rows, an all -inf row, an id out of range, a bad temperature). The
// workspace starts as NaN bytes, so a row the verifier reads but nobody processed would change the results; some rows
// must stay unprocessed (the point of it). Trees ignore the flag.
TEST(VerifyLogits, LazyRowsGiveTheSameResults) {
  std::int64_t skipped = 0, total = 0;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    const Step s = random_step(100 + seed, 8, 500, false);
    const int mode = static_cast<int>(seed % 4);
    VerifyLogitsArgs a = args_of(s, false, false, mode == 1);
    if (mode == 1 || mode == 2) a.draft_probs = at::softmax(rows(s.draft, s.N, s.V), 1).contiguous();
    if (mode == 3) {
      a.target_logits = a.target_logits.clone();
      a.target_logits[s.cu[1] + 1 + (s.cu[2] - s.cu[1]) / 2][7] = std::nanf("");
      a.target_logits[s.cu[4] + 4].fill_(-std::numeric_limits<float>::infinity());
      a.temperature = a.temperature->clone();
      (*a.temperature)[6] = -1.0f;
      if (s.cu[6] > s.cu[5]) {
        a.draft_token_ids = a.draft_token_ids.clone();
        a.draft_token_ids[s.cu[6] - 1] = s.V + 3;
      }
    }
    const auto full = specdec::torch::verify_logits(a);
    const std::int64_t need = specdec::torch::verify_logits_workspace_bytes(s.B, s.N, s.V, false, false);
    a.workspace = at::full({need}, 0xff, at::TensorOptions().dtype(at::kByte));
    a.all_target_probs = false;
    const auto lazy = specdec::torch::verify_logits(a);
    EXPECT_TRUE(at::equal(lazy.output_token_ids, full.output_token_ids)) << "seed " << seed;
    EXPECT_TRUE(at::equal(lazy.num_accepted, full.num_accepted)) << "seed " << seed;
    EXPECT_TRUE(at::equal(lazy.accepted, full.accepted)) << "seed " << seed;
    EXPECT_TRUE(at::equal(lazy.status, full.status)) << "seed " << seed;
    const at::Tensor untouched = at::isnan(lazy.target_probs).all(1);
    skipped += untouched.sum().item<std::int64_t>();
    total += s.N + s.B;
  }
  EXPECT_GT(skipped, total / 10) << "rows after a rejection are left unprocessed";
  // Trees (and blocks) process every row whatever the flag says.
  const Step t = random_step(7, 6, 400, true);
  VerifyLogitsArgs a = args_of(t, true, false, false);
  const auto full = specdec::torch::verify_logits(a);
  a.all_target_probs = false;
  EXPECT_TRUE(at::equal(specdec::torch::verify_logits(a).target_probs, full.target_probs));
}

// VerifyLogitsArgs::parallel_for: the caller's threads (here two, each taking every other index, from the last down)
// give the same results as ATen's, with every row processed and with rows as the chain rule reaches them.
TEST(VerifyLogits, CallersThreadsChangeNothing) {
  std::atomic<std::int64_t> calls{0};
  auto two_threads = [&](std::int64_t n, const std::function<void(std::int64_t)>& fn) {
    ++calls;
    std::thread other([&] {
      for (std::int64_t i = n - 1; i >= 0; i -= 2) fn(i);
    });
    for (std::int64_t i = n - 2; i >= 0; i -= 2) fn(i);
    other.join();
  };
  for (const bool tree : {false, true})
    for (const bool all_rows : {true, false}) {
      const Step s = random_step(41 + (tree ? 1 : 0), 7, 700, tree);
      VerifyLogitsArgs a = args_of(s, tree, /*draft_logits=*/all_rows, true);  // lazy rows take no draft logits
      a.all_target_probs = all_rows;
      const auto aten = specdec::torch::verify_logits(a);
      a.parallel_for = two_threads;
      const std::int64_t before = calls.load();
      const auto mine = specdec::torch::verify_logits(a);
      EXPECT_GT(calls.load(), before);
      EXPECT_TRUE(at::equal(mine.output_token_ids, aten.output_token_ids));
      EXPECT_TRUE(at::equal(mine.num_accepted, aten.num_accepted));
      EXPECT_TRUE(at::equal(mine.accepted, aten.accepted));
      EXPECT_TRUE(at::equal(mine.status, aten.status));
      if (all_rows) {
        EXPECT_TRUE(at::equal(mine.target_probs, aten.target_probs));
      }
    }
}

/// The host entry's arguments for a step (chains, every parameter given, no draft probs); `ws` its workspace.
specdec::HostVerifyArgs host_args_of(const Step& s, std::vector<float>& ws) {
  ws.resize(static_cast<std::size_t>((s.N + s.B) * s.V));
  specdec::HostVerifyArgs h;
  h.target_logits = s.target.data();
  h.target_logits_stride = s.V;
  h.vocab_size = s.V;
  h.draft_token_ids = s.ids;
  h.cu_num_draft_tokens = s.cu;
  h.temperature = s.temperature;
  h.top_k = s.top_k;
  h.top_p = s.top_p;
  h.min_p = s.min_p;
  h.seeds = s.seeds;
  h.positions = s.positions;
  h.workspace = ws.data();
  return h;
}

// verify_logits_host (plain arrays, no tensors): the tokens, counts, flags / nodes and statuses of verify_logits on
// the same step, for chains (token and block), trees, without and with draft probs (with and without per-request
// kinds), every row processed or lazily, on ATen's threads or the caller's, and with bad values (a NaN logit, an all
// -inf row, an id out of range, a bad temperature, a width too small). The workspace starts as NaN floats. Greedy
// requests (every fourth) take their argmaxes from the logits scans there, so this is also their test.
TEST(VerifyLogits, HostEntryEqualsTheTensorEntry) {
  auto two_threads = [](std::int64_t n, const std::function<void(std::int64_t)>& fn) {
    std::thread other([&] {
      for (std::int64_t i = n - 1; i >= 0; i -= 2) fn(i);
    });
    for (std::int64_t i = n - 2; i >= 0; i -= 2) fn(i);
    other.join();
  };
  std::int64_t greedy_accepted = 0;
  for (std::uint64_t seed = 0; seed < 48; ++seed) {
    const bool tree = seed % 6 == 5, block = !tree && seed % 6 == 4;
    const int mode = static_cast<int>(seed % 4);  // 0: no draft probs; 1: probs and kinds; 2: probs; 3: bad values
    Step s = random_step(300 + seed, 8, 400, tree);
    for (std::int64_t b = 0; b < s.B; b += 4)  // greedy requests: drafts that are their rows' argmaxes, mostly
      for (std::int64_t j = s.cu[b]; j < s.cu[b + 1]; ++j) {
        if ((seed + j) % 5 == 0) continue;
        const float* row = s.target.data() + (j + b) * s.V;
        s.ids[j] = std::max_element(row, row + s.V) - row;
      }
    VerifyLogitsArgs a = args_of(s, tree, false, mode == 1);
    std::vector<float> q;
    if (mode == 1 || mode == 2) {
      const at::Tensor probs = at::softmax(rows(s.draft, s.N, s.V), 1).contiguous();
      a.draft_probs = probs;
      q.assign(probs.data_ptr<float>(), probs.data_ptr<float>() + probs.numel());
    }
    if (mode == 3) {
      s.target[(s.cu[1] + 1 + (s.cu[2] - s.cu[1]) / 2) * s.V + 7] = std::nanf("");
      std::fill_n(s.target.begin() + (s.cu[4] + 4) * s.V, s.V, -std::numeric_limits<float>::infinity());
      s.temperature[6] = -1.0f;
      if (s.cu[6] > s.cu[5]) s.ids[s.cu[6] - 1] = s.V + 3;
      const VerifyLogitsArgs fresh = args_of(s, tree, false, false);
      a.target_logits = fresh.target_logits;
      a.temperature = fresh.temperature;
      a.draft_token_ids = fresh.draft_token_ids;
    }
    a.method = block ? specdec::VerifyMethod::kBlock : specdec::VerifyMethod::kToken;
    a.all_target_probs = seed % 3 != 0;
    if (seed % 7 == 3) {
      std::int64_t max_k = 0;
      for (std::int64_t b = 0; b < s.B; ++b) max_k = std::max(max_k, s.cu[b + 1] - s.cu[b]);
      a.max_num_draft_tokens = std::max<std::int64_t>(0, max_k - 1);
    }
    const auto want = specdec::torch::verify_logits(a);
    std::vector<float> ws;
    specdec::HostVerifyArgs h = host_args_of(s, ws);
    std::fill(ws.begin(), ws.end(), std::nanf(""));
    if (tree) h.parents = s.parents;
    h.draft_probs = q.empty() ? nullptr : q.data();
    if (mode == 1) h.has_draft_probs = s.has_q;
    h.max_num_draft_tokens = a.max_num_draft_tokens;
    h.method = a.method;
    h.all_target_probs = a.all_target_probs;
    if (seed % 2 == 1) h.parallel_for = two_threads;
    const auto got = specdec::verify_logits_host(h);
    EXPECT_EQ(got.stride, want.output_token_ids.size(1)) << "seed " << seed;
    EXPECT_EQ(got.output_token_ids, to_vec<std::int64_t>(want.output_token_ids)) << "seed " << seed;
    EXPECT_EQ(got.num_accepted, to_vec<std::int32_t>(want.num_accepted)) << "seed " << seed;
    EXPECT_EQ(got.status, to_vec<std::int32_t>(want.status)) << "seed " << seed;
    if (tree) {
      EXPECT_EQ(got.accepted_nodes, to_vec<std::int64_t>(want.accepted)) << "seed " << seed;
    } else {
      const auto flags = to_vec<bool>(want.accepted);
      EXPECT_EQ(got.accepted, std::vector<std::uint8_t>(flags.begin(), flags.end())) << "seed " << seed;
    }
    for (std::int64_t b = 0; b < s.B; b += 4) greedy_accepted += got.status[b] == 0 ? got.num_accepted[b] : 0;
  }
  EXPECT_GT(greedy_accepted, 20) << "greedy requests accept drafts";
}

TEST(VerifyLogits, OpByName) {
  void* handle = dlopen(SPECDEC_OPS_PATH, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow("specdec::verify_logits", "");
  const Step s = random_step(9, 4, 200, false);
  const VerifyLogitsArgs a = args_of(s, false, true, false);
  std::vector<c10::IValue> stack = {a.target_logits, a.draft_token_ids, a.cu_num_draft_tokens, a.seeds, a.positions,
                                    *a.temperature,  *a.top_k,          *a.top_p,              *a.min_p, c10::IValue(),
                                    *a.draft_logits, c10::IValue(),     c10::IValue(),         -1,       c10::IValue(),
                                    false};
  std::vector<c10::IValue> block_stack = stack;
  block_stack.back() = true;
  op.callBoxed(&stack);
  ASSERT_EQ(stack.size(), 5u);
  const auto direct = specdec::torch::verify_logits(a);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), direct.output_token_ids));
  EXPECT_TRUE(at::equal(stack[1].toTensor(), direct.num_accepted));
  EXPECT_TRUE(at::equal(stack[2].toTensor(), direct.accepted));
  EXPECT_TRUE(at::equal(stack[3].toTensor(), direct.status));
  op.callBoxed(&block_stack);  // block = True: block verification
  VerifyLogitsArgs b = a;
  b.method = specdec::VerifyMethod::kBlock;
  EXPECT_TRUE(at::equal(block_stack[0].toTensor(), specdec::torch::verify_logits(b).output_token_ids));
  auto ws = c10::Dispatcher::singleton().findSchemaOrThrow("specdec::verify_logits_workspace_bytes", "");
  std::vector<c10::IValue> wstack = {std::int64_t{4}, std::int64_t{8}, std::int64_t{200}, false, true};
  ws.callBoxed(&wstack);
  EXPECT_GE(wstack[0].toInt(), 0);
}

bool have_cuda() { return torch::cuda::is_available() && torch::cuda::device_count() > 0; }

TEST(VerifyLogits, CudaEqualsCpuWithoutSynchronising) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  for (int mode : {0, 1, 2}) {  // chain, tree, block
    const bool tree = mode == 1;
    const Step s = random_step(10 + mode, 12, 32000, tree);
    VerifyLogitsArgs a = args_of(s, tree, true, true);
    if (mode == 2) a.method = specdec::VerifyMethod::kBlock;
    std::int64_t max_k = 0;
    for (std::int64_t i = 0; i < s.B; ++i) max_k = std::max(max_k, s.cu[i + 1] - s.cu[i]);
    a.max_num_draft_tokens = max_k;
    const auto cpu = specdec::torch::verify_logits(a);
    VerifyLogitsArgs g = a;
    const at::Device dev(at::kCUDA, 0);
    for (auto* t : {&g.target_logits, &g.draft_token_ids, &g.cu_num_draft_tokens, &g.seeds, &g.positions})
      *t = t->to(dev);
    for (auto* t : {&g.draft_logits, &g.parents, &g.has_draft_probs, &g.temperature, &g.top_k, &g.top_p, &g.min_p})
      if (*t) **t = (*t)->to(dev);
    g.workspace = at::empty({specdec::torch::verify_logits_workspace_bytes(s.B, s.N, s.V, tree, true)},
                            at::TensorOptions().device(dev).dtype(at::kByte));
    const auto gpu = specdec::torch::verify_logits(g);
    EXPECT_TRUE(gpu.status.is_cuda());
    EXPECT_TRUE(at::equal(gpu.output_token_ids.cpu(), cpu.output_token_ids));
    EXPECT_TRUE(at::equal(gpu.num_accepted.cpu(), cpu.num_accepted));
    EXPECT_TRUE(at::equal(gpu.accepted.cpu(), cpu.accepted));
    EXPECT_TRUE(at::equal(gpu.status.cpu(), cpu.status));
    EXPECT_TRUE(at::equal(gpu.target_probs.cpu(), cpu.target_probs));
    // Without max_num_draft_tokens on CUDA: a named error (reading it would synchronise).
    g.max_num_draft_tokens = -1;
    expect_error(g, "max_num_draft_tokens: expected a bound on every K_b on CUDA");
  }
}

}  // namespace
