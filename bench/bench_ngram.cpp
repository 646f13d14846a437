// N-gram (prompt lookup) proposer: the time of one lookup + draft at contexts of 1k, 32k and 256k tokens. The index is
// updated incrementally (hash of each n-gram -> its last position), so the time per lookup stays flat as the context grows.
// Counters: ns_per_lookup (one NgramIndex::find + the draft), ns_per_push (indexing one appended token).
// BM_CorpusDraft: one CorpusProposer chain of up to 8 drafts (binary searches in a static table) over a table of 0.1M,
// 1M and 4M corpus positions of the same kind of stream, from contexts that end inside it. Counters: ns_per_chain,
// drafts (mean chain length), entries (the table's n-grams).
//
//   bench_ngram [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "specdec/proposers/corpus.hpp"
#include "specdec/proposers/ngram.hpp"

namespace sp = specdec::proposers;

namespace {

/// Text-like token stream: a 32k vocabulary with phrases that recur (so lookups find matches of every length).
std::vector<std::int64_t> make_context(std::int64_t n) {
  std::vector<std::int64_t> t;
  t.reserve(static_cast<std::size_t>(n));
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  };
  while (static_cast<std::int64_t>(t.size()) < n) {
    if (t.size() > 64 && next() % 4 == 0) {  // copy an earlier phrase
      const auto len = static_cast<std::size_t>(4 + next() % 12);
      const auto from = static_cast<std::size_t>(next() % (t.size() - len));
      for (std::size_t i = 0; i < len && static_cast<std::int64_t>(t.size()) < n; ++i) t.push_back(t[from + i]);
    } else {
      t.push_back(static_cast<std::int64_t>(next() % 32000));
    }
  }
  return t;
}

void BM_NgramLookup(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto ctx = make_context(n + 4096);
  sp::NgramOptions o;
  o.min_n = 1;
  o.max_n = 4;
  sp::NgramProposer proposer(o);
  sp::NgramIndex index(o.min_n, o.max_n);
  const auto t0 = std::chrono::steady_clock::now();
  index.extend(std::span(ctx).first(static_cast<std::size_t>(n)));
  const double push_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                         static_cast<double>(n);
  std::vector<std::int64_t> drafts, parents;
  std::size_t i = static_cast<std::size_t>(n);
  std::int64_t found = 0, lookups = 0;
  for (auto _ : state) {
    proposer.draft(index, 8, drafts, parents);
    benchmark::DoNotOptimize(drafts.data());
    found += drafts.empty() ? 0 : 1;
    ++lookups;
    state.PauseTiming();  // grow the context by one token between lookups (as decoding does), untimed
    if (i < ctx.size()) index.push(ctx[i++]);
    state.ResumeTiming();
  }
  state.counters["ns_per_lookup"] = benchmark::Counter(static_cast<double>(lookups) * 1e-9,
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["ns_per_push"] = push_ns;
  state.counters["match_rate"] = lookups ? static_cast<double>(found) / static_cast<double>(lookups) : 0.0;
  state.counters["context"] = static_cast<double>(n);
}
BENCHMARK(BM_NgramLookup)->Arg(1 << 10)->Arg(32 << 10)->Arg(256 << 10)->Iterations(4000);

void BM_CorpusDraft(benchmark::State& state) {
  const std::int64_t positions = state.range(0);
  const auto stream = make_context(positions + 1 + 4096);
  sp::CorpusTableBuilder b(32000, 8);
  const std::span<const std::int64_t> s(stream);
  b.add(s.first(static_cast<std::size_t>(positions)), s.subspan(1, static_cast<std::size_t>(positions)), 0);
  const auto table = std::make_shared<const sp::CorpusTable>(std::move(b).finish(2));
  sp::CorpusProposer proposer(table);
  std::vector<std::int64_t> drafts;
  std::vector<float> conf;
  std::size_t i = 64;
  std::int64_t chains = 0, drafted = 0;
  for (auto _ : state) {
    proposer.draft(std::span(stream).subspan(i - 64, 64), 8, drafts, conf);
    benchmark::DoNotOptimize(drafts.data());
    drafted += static_cast<std::int64_t>(drafts.size());
    ++chains;
    i = 64 + (i + 7919) % static_cast<std::size_t>(positions - 64);  // contexts spread over the corpus
  }
  state.counters["ns_per_chain"] =
      benchmark::Counter(static_cast<double>(chains) * 1e-9, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["drafts"] = chains ? static_cast<double>(drafted) / static_cast<double>(chains) : 0.0;
  state.counters["entries"] = static_cast<double>(table->num_entries());
}
BENCHMARK(BM_CorpusDraft)->Arg(100000)->Arg(1000000)->Arg(4000000)->Iterations(20000);

}  // namespace

BENCHMARK_MAIN();
