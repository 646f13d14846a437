// Machine-relative yardsticks for the benchmarks: this machine's memory read bandwidth, measured in-process.
//
// The probe reads a buffer much larger than the caches with `threads` readers that are started once and released together
// by a barrier for every repetition (so thread start-up is not timed), each XOR-folding its share with 64-byte AVX-512
// loads into 4 accumulators where the CPU has AVX-512 (8 independent 64-bit lanes otherwise). The best repetition is
// kept. This machine's bandwidth varies with its neighbours' load (30-45 GB/s seen for two threads), so compare a
// benchmark against the figure measured in the same run.
#pragma once

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace specdec::bench {

/// XOR of `n` words, in 8 independent lanes.
inline std::uint64_t read_fold(const std::uint64_t* data, std::size_t n) {
  std::uint64_t acc[8] = {};
  const std::size_t blocks = n / 8;
  for (std::size_t b = 0; b < blocks; ++b)
    for (int l = 0; l < 8; ++l) acc[l] ^= data[b * 8 + l];
  for (std::size_t i = blocks * 8; i < n; ++i) acc[0] ^= data[i];
  std::uint64_t s = 0;
  for (auto a : acc) s ^= a;
  return s;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/// The same fold with 64-byte loads (data 64-byte aligned, n a multiple of 32 words).
__attribute__((target("avx512f"))) inline std::uint64_t read_fold_avx512(const std::uint64_t* data, std::size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(data + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(data + i + 8));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(data + i + 16));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(data + i + 24));
  }
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
  std::uint64_t s = 0;
  for (auto l : lanes) s ^= l;
  return s;
}
inline bool has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#else
inline std::uint64_t read_fold_avx512(const std::uint64_t* data, std::size_t n) { return read_fold(data, n); }
inline bool has_avx512() { return false; }
#endif

/// Best-of-`reps` read bandwidth in bytes/s over a `bytes` buffer, with `threads` readers; the buffer in huge pages unless
/// `huge_pages` is false.
inline double measure_read_bandwidth(int threads = 1, std::size_t bytes = std::size_t(512) << 20, int reps = 5,
                                     bool huge_pages = true) {
  threads = std::max(threads, 1);
  const std::size_t n = bytes / sizeof(std::uint64_t) / 32 * 32;
  // In 2 MiB pages where the kernel grants them, as the models' weights and KV cache are (4 KiB pages cost a table walk
  // every 4 KiB and read slower), so the figure is the best this machine streams.
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t alloc_bytes = (n * sizeof(std::uint64_t) + kHuge - 1) / kHuge * kHuge;
  std::unique_ptr<std::uint64_t, void (*)(std::uint64_t*)> storage(
      static_cast<std::uint64_t*>(std::aligned_alloc(kHuge, alloc_bytes)), [](std::uint64_t* q) { std::free(q); });
  if (!storage) return 0.0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (huge_pages) ::madvise(storage.get(), alloc_bytes, MADV_HUGEPAGE);
#endif
  std::uint64_t* buf = storage.get();
  for (std::size_t i = 0; i < n; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  const std::size_t chunk = n / static_cast<std::size_t>(threads) / 32 * 32;
  const bool wide = has_avx512();
  std::vector<std::uint64_t> part(static_cast<std::size_t>(threads));
  // Each reader times its own pass and a rep lasts from the first start to the last end: the coordinating thread, which
  // shares the CPUs with as many readers as there are hardware threads, may run late, so its clock cannot time the rep
  // (it did: with 2 readers on 2 vCPUs, buffers up to 128 MiB read "in" a few microseconds).
  using clock = std::chrono::steady_clock;
  std::vector<clock::time_point> began(static_cast<std::size_t>(threads)), ended(static_cast<std::size_t>(threads));
  std::barrier start(threads + 1), done(threads + 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int r = 0; r < reps; ++r) {
        start.arrive_and_wait();
        const std::uint64_t* p = buf + static_cast<std::size_t>(t) * chunk;
        began[static_cast<std::size_t>(t)] = clock::now();
        part[static_cast<std::size_t>(t)] ^= wide ? read_fold_avx512(p, chunk) : read_fold(p, chunk);
        ended[static_cast<std::size_t>(t)] = clock::now();
        done.arrive_and_wait();
      }
    });
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    start.arrive_and_wait();
    done.arrive_and_wait();
    const double s =
        std::chrono::duration<double>(*std::max_element(ended.begin(), ended.end()) - *std::min_element(began.begin(), began.end()))
            .count();
    best = std::max(best, static_cast<double>(chunk * static_cast<std::size_t>(threads) * sizeof(std::uint64_t)) / s);
  }
  for (auto& th : pool) th.join();
  volatile std::uint64_t sink = 0;
  for (auto p : part) sink = sink ^ p;
  return best;
}

}  // namespace specdec::bench
