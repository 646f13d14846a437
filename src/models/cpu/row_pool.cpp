// The CPU forward's thread pool: chunks taken from one shared counter (run) or contiguous shares with stealing from the
// back (run_ranges). See include/specdec/models/detail/row_pool.hpp.
#include "specdec/models/detail/row_pool.hpp"

#include <algorithm>
#include <chrono>

namespace specdec::models::detail {

namespace {

constexpr auto kSpin = std::chrono::microseconds(200);
constexpr std::uint64_t kGenMask = (std::uint64_t{1} << 28) - 1;
std::uint64_t generation(std::uint64_t t) { return t >> 36; }

// Polls pred for up to kSpin; returns whether it became true.
template <class Pred>
bool spin_until(Pred pred) {
  if (pred()) return true;
  const auto end = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (pred()) return true;
    }
    if (std::chrono::steady_clock::now() >= end) return false;
  }
}

constexpr std::uint64_t pack(std::uint64_t front, std::uint64_t back) { return front << 32 | back; }

// Takes up to `step` units from the front (owner) or the back (anyone else) of a share; returns false once it is empty.
bool take(std::atomic<std::uint64_t>& bounds, std::int64_t step, bool front, std::int64_t& begin, std::int64_t& end) {
  std::uint64_t v = bounds.load(std::memory_order_acquire);
  for (;;) {
    const auto f = static_cast<std::int64_t>(v >> 32), b = static_cast<std::int64_t>(v & 0xffffffffu);
    if (f >= b) return false;
    begin = front ? f : std::max(f, b - step);
    end = front ? std::min(b, f + step) : b;
    const std::uint64_t next = front ? pack(static_cast<std::uint64_t>(end), static_cast<std::uint64_t>(b))
                                     : pack(static_cast<std::uint64_t>(f), static_cast<std::uint64_t>(begin));
    if (bounds.compare_exchange_weak(v, next, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  }
}

}  // namespace

RowPool::RowPool(int threads) : size_(std::max(threads, 1)), shares_(std::make_unique<Share[]>(static_cast<std::size_t>(size_))) {
  for (int i = 1; i < size_; ++i) workers_.emplace_back([this] { loop(); });
}

RowPool::~RowPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
    ticket_.store(((generation(ticket_.load()) + 1) & kGenMask) << 36, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void RowPool::run(std::int64_t chunks, const std::function<void(std::int64_t)>& fn) {
  if (size_ == 1 || chunks <= 1 || chunks >= kMaxChunks) {
    for (std::int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  std::lock_guard<std::mutex> caller(run_mutex_);
  run_locked(chunks, fn);
}

void RowPool::run_ranges(std::int64_t units, std::int64_t step, const std::function<void(std::int64_t, std::int64_t)>& fn) {
  run_ranges(units, step, fn, 0, {});
}

void RowPool::run_ranges(std::int64_t units, std::int64_t step, const std::function<void(std::int64_t, std::int64_t)>& fn,
                         std::int64_t first_chunks, const std::function<void(std::int64_t)>& first) {
  step = std::max<std::int64_t>(step, 1);
  first_chunks = std::max<std::int64_t>(first_chunks, 0);
  if (size_ == 1 || units <= step || units >= (std::int64_t{1} << 31)) {
    for (std::int64_t c = 0; c < first_chunks; ++c) first(c);
    if (units > 0) fn(0, units);
    return;
  }
  std::lock_guard<std::mutex> caller(run_mutex_);
  first_next_.store(0, std::memory_order_relaxed);
  first_done_.store(0, std::memory_order_relaxed);
  const auto shares = static_cast<std::int64_t>(size_);
  for (std::int64_t s = 0; s < shares; ++s)
    shares_[static_cast<std::size_t>(s)].bounds.store(
        pack(static_cast<std::uint64_t>(units * s / shares), static_cast<std::uint64_t>(units * (s + 1) / shares)),
        std::memory_order_relaxed);
  // Chunk s of the job is share s's owner: whichever thread takes it walks that share, then empties the others from the
  // back. A thread that takes a later chunk finds little or nothing left. Every unit is taken once, and run_locked returns
  // only when every chunk (so every piece its thread took) has finished.
  run_locked(shares, [&](std::int64_t s) {
    if (first_chunks > 0) {  // the prologue's chunks, then a wait for those other threads still hold
      for (std::int64_t c; (c = first_next_.fetch_add(1, std::memory_order_acq_rel)) < first_chunks;) {
        first(c);
        first_done_.fetch_add(1, std::memory_order_acq_rel);
      }
      if (!spin_until([&] { return first_done_.load(std::memory_order_acquire) == first_chunks; }))
        while (first_done_.load(std::memory_order_acquire) != first_chunks) std::this_thread::yield();
    }
    std::int64_t b = 0, e = 0;
    while (take(shares_[static_cast<std::size_t>(s)].bounds, step, true, b, e)) fn(b, e);
    for (std::int64_t k = 1; k < shares; ++k) {
      auto& other = shares_[static_cast<std::size_t>((s + k) % shares)].bounds;
      while (take(other, step, false, b, e)) fn(b, e);
    }
  });
}

void RowPool::run_locked(std::int64_t chunks, const std::function<void(std::int64_t)>& fn) {
  job_ = &fn;
  completed_.store(0, std::memory_order_relaxed);
  const std::uint64_t gen = (generation(ticket_.load(std::memory_order_relaxed)) + 1) & kGenMask;
  bool sleepers = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket_.store(gen << 36 | static_cast<std::uint64_t>(chunks) << 18, std::memory_order_release);
    sleepers = sleepers_ > 0;
  }
  if (sleepers) wake_.notify_all();
  work();
  if (!spin_until([&] { return completed_.load(std::memory_order_acquire) == chunks; })) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return completed_.load(std::memory_order_acquire) == chunks; });
  }
}

// Takes chunks of the current job until none is left. Every ticket belongs to the job published last (even for a thread
// that woke up late), and a ticket below the chunk count keeps run() waiting until that chunk completes, so job_ stays
// that job's while the chunk runs.
void RowPool::work() {
  for (;;) {
    const std::uint64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
    const auto chunks = static_cast<std::int64_t>((t >> 18) & 0x3ffffu), c = static_cast<std::int64_t>(t & 0x3ffffu);
    if (c >= chunks) return;
    (*job_)(c);
    if (completed_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void RowPool::loop() {
  std::uint64_t seen = 0;
  for (;;) {
    auto fresh = [&] { return generation(ticket_.load(std::memory_order_acquire)) != seen; };
    if (!spin_until(fresh)) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, fresh);
      --sleepers_;
    }
    seen = generation(ticket_.load(std::memory_order_acquire));
    if (stop_.load(std::memory_order_acquire)) return;
    work();
  }
}

}  // namespace specdec::models::detail
