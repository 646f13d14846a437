// Determinism: a request's tokens depend only on its own inputs, seed and position — not on repetition, nor on
// which other requests share its batch.
#include <gtest/gtest.h>

#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/tree.hpp"
#include "stats.hpp"

namespace specdec {
namespace {

struct Req {
  std::vector<std::int32_t> drafts;
  std::vector<float> q, p;
  std::uint64_t seed;
  std::int64_t position;
  std::uint8_t greedy;
};

Req random_req(std::mt19937_64& rng, std::int64_t V) {
  Req r;
  const int K = 1 + static_cast<int>(rng() % 6);
  for (int i = 0; i <= K; ++i) {
    auto row = test::random_row(rng, V, 0.1, 0.5);
    r.p.insert(r.p.end(), row.begin(), row.end());
  }
  for (int i = 0; i < K; ++i) {
    auto row = test::random_row(rng, V, 0.1, 0.5);
    r.drafts.push_back(static_cast<std::int32_t>(test::draw_from(rng, row)));
    r.q.insert(r.q.end(), row.begin(), row.end());
  }
  r.seed = rng();
  r.position = static_cast<std::int64_t>(rng() % 100000);
  r.greedy = rng() % 5 == 0;
  return r;
}

struct Result {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> n;
};

Result run_batch(const std::vector<Req>& reqs, std::int64_t V) {
  std::vector<std::int32_t> cu = {0}, ids;
  std::vector<float> q, p;
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> pos;
  std::vector<std::uint8_t> greedy;
  for (const auto& r : reqs) {
    cu.push_back(cu.back() + static_cast<std::int32_t>(r.drafts.size()));
    ids.insert(ids.end(), r.drafts.begin(), r.drafts.end());
    q.insert(q.end(), r.q.begin(), r.q.end());
    p.insert(p.end(), r.p.begin(), r.p.end());
    seeds.push_back(r.seed);
    pos.push_back(r.position);
    greedy.push_back(r.greedy);
  }
  const std::int64_t B = static_cast<std::int64_t>(reqs.size()), stride = 8;
  Result res{std::vector<std::int32_t>(B * stride), std::vector<std::int32_t>(B)};
  ChainVerifyArgs<std::int32_t> a{B, V, cu.data(), ids.data(), q.data(), p.data(), seeds.data(), pos.data(),
                                  greedy.data(), 1.0f};
  EXPECT_TRUE(verify_chain(a, ChainVerifyOutputs<std::int32_t>{res.tokens.data(), stride, res.n.data(), nullptr}).ok());
  return res;
}

TEST(Determinism, SameSeedSameTokensAcrossRepetitions) {
  std::mt19937_64 rng(1);
  std::vector<Req> reqs;
  for (int i = 0; i < 16; ++i) reqs.push_back(random_req(rng, 300));
  const Result a = run_batch(reqs, 300), b = run_batch(reqs, 300);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.n, b.n);
}

TEST(Determinism, RequestAloneEqualsRequestInsideBatchOf64) {
  const std::int64_t V = 1500;
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 8; ++trial) {
    const Req mine = random_req(rng, V);
    std::vector<Req> batch;
    for (int i = 0; i < 64; ++i) batch.push_back(random_req(rng, V));
    const std::size_t slot = rng() % 65;
    batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(slot), mine);
    const Result alone = run_batch({mine}, V), inside = run_batch(batch, V);
    EXPECT_EQ(alone.n[0], inside.n[slot]);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(alone.tokens[i], inside.tokens[slot * 8 + i]) << trial << " " << i;
  }
}

TEST(Determinism, DifferentSeedsGiveDifferentStreams) {
  std::mt19937_64 rng(3);
  Req r = random_req(rng, 50);
  r.greedy = 0;
  int differ = 0;
  Result base = run_batch({r}, 50);
  for (int s = 0; s < 50; ++s) {
    r.seed = 1000 + s;
    const Result other = run_batch({r}, 50);
    differ += other.tokens != base.tokens;
  }
  EXPECT_GT(differ, 10);
}

}  // namespace
}  // namespace specdec
