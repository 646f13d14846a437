// Internal: the CPU forward's thread pool (src/models/cpu/row_pool.cpp), shared by the Llama forward's products and its
// attention. Not a stable API. Which thread computes a piece of work changes no result: every caller computes each
// output row alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace specdec::models::detail {

/// A fixed set of worker threads kept warm between the ~150 parallel steps of a forward, the calling thread working beside
/// them. Waiting threads spin for a while before they block: on a 2-vCPU machine a futex wake-up of an idle vCPU took tens of
/// microseconds, which over a forward's parallel steps cost a 6-token forward 10-25 ms. run() and run_ranges() serialise
/// callers from different threads.
class RowPool {
 public:
  explicit RowPool(int threads);
  ~RowPool();
  RowPool(const RowPool&) = delete;
  RowPool& operator=(const RowPool&) = delete;
  int size() const noexcept { return size_; }

  /// Calls fn(c) for every chunk c in [0, chunks), on the calling thread and the workers (each takes the next chunk from a
  /// shared counter, so a worker the OS has descheduled delays the step by at most the chunk it holds), and returns when
  /// all are done.
  void run(std::int64_t chunks, const std::function<void(std::int64_t)>& fn);

  /// Calls fn(begin, end) over pieces that cover [0, units) exactly once, and returns when all are done. Each thread owns
  /// one contiguous share of the units and walks it front to back in pieces of at most `step` units, so each thread
  /// streams one run of memory (a product's weight tiles, which a hardware prefetcher follows across pieces); a thread
  /// whose share is done takes pieces from the back of the others' shares, so a descheduled worker still delays the call
  /// by at most one piece.
  void run_ranges(std::int64_t units, std::int64_t step, const std::function<void(std::int64_t, std::int64_t)>& fn);

  /// run_ranges after a prologue in the same call: first(c) for every c in [0, first_chunks), taken from a shared counter
  /// by the threads as they enter, and no piece of fn starts before every prologue chunk has finished (fn may read what
  /// the prologue writes). One hand-off to the workers instead of a run() and a run_ranges(): a product whose activations
  /// are quantised by the prologue. A thread waits only for chunks that running threads hold.
  void run_ranges(std::int64_t units, std::int64_t step, const std::function<void(std::int64_t, std::int64_t)>& fn,
                  std::int64_t first_chunks, const std::function<void(std::int64_t)>& first);

 private:
  void run_locked(std::int64_t chunks, const std::function<void(std::int64_t)>& fn);
  void work();
  void loop();

  // ticket_ = job generation (28 bits) << 36 | the job's chunk count (18 bits) << 18 | next chunk (18 bits): one atomic
  // value, so a thread that takes a ticket sees the count of the same job. next stays below chunks + threads.
  static constexpr std::int64_t kMaxChunks = std::int64_t{1} << 17;
  // run_ranges' shares: front << 32 | back, one cache line each (the owner takes from the front, the others from the back).
  struct alignas(64) Share {
    std::atomic<std::uint64_t> bounds{0};
  };

  int size_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Share[]> shares_;
  std::mutex run_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* job_ = nullptr;
  alignas(64) std::atomic<std::uint64_t> ticket_{0};
  alignas(64) std::atomic<std::int64_t> completed_{0};
  // run_ranges' prologue: the next chunk to take and the chunks finished.
  alignas(64) std::atomic<std::int64_t> first_next_{0};
  alignas(64) std::atomic<std::int64_t> first_done_{0};
  int sleepers_ = 0;  // guarded by mutex_
  std::atomic<bool> stop_{false};
};

}  // namespace specdec::models::detail
