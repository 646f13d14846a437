// Machine-relative yardsticks for the benchmarks: this machine's memory read bandwidth, measured in-process.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace specdec::bench {

/// Sums `n` floats with 8 independent accumulators (vectorisable, no dependency chain on one register).
inline float read_sum(const float* data, std::size_t n) {
  float acc[32] = {};
  const std::size_t blocks = n / 32;
  for (std::size_t b = 0; b < blocks; ++b)
    for (int l = 0; l < 32; ++l) acc[l] += data[b * 32 + l];
  for (std::size_t i = blocks * 32; i < n; ++i) acc[0] += data[i];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

/// Best-of-`reps` read bandwidth in bytes/s over a buffer larger than the caches, with `threads` readers.
inline double measure_read_bandwidth(int threads = 1, std::size_t bytes = std::size_t(512) << 20, int reps = 5) {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> buf(n);
  for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023) * 1e-3f;
  double best = 0.0;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (threads == 1) {
      sink = sink + read_sum(buf.data(), n);
    } else {
      std::vector<std::thread> pool;
      std::vector<float> part(threads);
      const std::size_t chunk = n / threads;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { part[t] = read_sum(buf.data() + t * chunk, chunk); });
      for (auto& th : pool) th.join();
      for (float x : part) sink = sink + x;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s);
  }
  return best;
}

}  // namespace specdec::bench
