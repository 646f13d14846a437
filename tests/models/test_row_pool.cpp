// The CPU forward's thread pool: every chunk and every unit is handed out exactly once, on any thread count, back to back
// (the sanitizer build runs these too), a prologue ends before the pieces it feeds, and a thread that stalls inside a piece delays the call by that piece only: the
// others take the rest of its share.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "specdec/models/detail/row_pool.hpp"

namespace specdec::models::detail {
namespace {

TEST(RowPool, RunCallsEveryChunkOnce) {
  for (int threads : {1, 2, 3, 4}) {
    RowPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (std::int64_t chunks : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<std::size_t>(chunks));
      pool.run(chunks, [&](std::int64_t c) { seen[static_cast<std::size_t>(c)].fetch_add(1); });
      for (std::int64_t c = 0; c < chunks; ++c)
        EXPECT_EQ(seen[static_cast<std::size_t>(c)].load(), 1) << threads << " threads, chunk " << c << " of " << chunks;
    }
  }
}

TEST(RowPool, RunRangesCoversEveryUnitOnceInPiecesOfAtMostAStep) {
  for (int threads : {1, 2, 3, 4}) {
    RowPool pool(threads);
    for (std::int64_t units : {0, 1, 2, 5, 63, 64, 1000, 3072}) {
      for (std::int64_t step : {1, 3, 4, 100, 5000}) {
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(units));
        std::atomic<bool> bad_piece{false};
        pool.run_ranges(units, step, [&](std::int64_t b, std::int64_t e) {
          if (b < 0 || e > units || b >= e || (e - b > step && !(b == 0 && e == units))) bad_piece = true;
          for (std::int64_t u = b; u < e; ++u) seen[static_cast<std::size_t>(u)].fetch_add(1);
        });
        EXPECT_FALSE(bad_piece.load()) << threads << " threads, " << units << " units, step " << step;
        for (std::int64_t u = 0; u < units; ++u)
          ASSERT_EQ(seen[static_cast<std::size_t>(u)].load(), 1)
              << threads << " threads, " << units << " units, step " << step << ": unit " << u;
      }
    }
  }
}

// The prologue form (a product whose activations the prologue quantises): every prologue chunk runs once, every one of
// them has finished before any piece starts (a piece that saw fewer fails), and the pieces still cover every unit once,
// also where the call runs on the calling thread alone (one thread, or units <= step) and with no units at all.
TEST(RowPool, RunRangesFinishesThePrologueBeforeAnyPiece) {
  for (int threads : {1, 2, 3}) {
    RowPool pool(threads);
    for (std::int64_t units : {0, 3, 64, 1000}) {
      for (std::int64_t first_chunks : {0, 1, 2, 7}) {
        std::vector<std::atomic<int>> firsts(static_cast<std::size_t>(first_chunks)), seen(static_cast<std::size_t>(units));
        std::atomic<std::int64_t> done{0};
        std::atomic<bool> early{false};
        pool.run_ranges(
            units, 4,
            [&](std::int64_t b, std::int64_t e) {
              if (done.load() != first_chunks) early = true;
              for (std::int64_t u = b; u < e; ++u) seen[static_cast<std::size_t>(u)].fetch_add(1);
            },
            first_chunks, [&](std::int64_t c) {
              // a slow chunk: without the wait, the other threads' pieces would start before it ends
              const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(c == first_chunks - 1 ? 300 : 20);
              while (std::chrono::steady_clock::now() < until) {
              }
              firsts[static_cast<std::size_t>(c)].fetch_add(1);
              done.fetch_add(1);
            });
        const auto where = ::testing::Message() << threads << " threads, " << units << " units, " << first_chunks
                                                << " prologue chunks";
        EXPECT_FALSE(early.load()) << where << ": a piece started before the prologue ended";
        for (std::int64_t c = 0; c < first_chunks; ++c) EXPECT_EQ(firsts[static_cast<std::size_t>(c)].load(), 1) << where;
        for (std::int64_t u = 0; u < units; ++u) ASSERT_EQ(seen[static_cast<std::size_t>(u)].load(), 1) << where << ": unit " << u;
      }
    }
  }
}

TEST(RowPool, BackToBackJobsOfBothKindsStaySeparate) {
  RowPool pool(3);
  std::vector<std::int64_t> sums;
  for (int i = 0; i < 2000; ++i) {
    std::atomic<std::int64_t> sum{0};
    const std::int64_t n = 1 + i % 97;
    if (i % 2 == 0)
      pool.run(n, [&](std::int64_t c) { sum.fetch_add(c + 1); });
    else
      pool.run_ranges(n, 1 + i % 5, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t u = b; u < e; ++u) sum.fetch_add(u + 1);
      });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << i;
  }
}

// A worker that stalls in its first piece (as a descheduled vCPU would) keeps only that piece: the calling thread takes
// the rest of the worker's share from the back.
TEST(RowPool, RunRangesTakesAStalledThreadsShare) {
  RowPool pool(2);
  pool.run(2, [](std::int64_t) {});  // the worker is up and spinning
  const std::int64_t units = 400, step = 4;
  const auto caller = std::this_thread::get_id();
  std::atomic<std::int64_t> by_caller{0};
  std::atomic<bool> stalled{false};
  pool.run_ranges(units, step, [&](std::int64_t b, std::int64_t e) {
    if (std::this_thread::get_id() == caller) {
      by_caller.fetch_add(e - b);
      // 200 us a piece: the caller's 100 pieces leave the worker 20 ms to show up and stall.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
    } else if (!stalled.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  ASSERT_TRUE(stalled.load()) << "the worker never took a piece";
  EXPECT_GE(by_caller.load(), units - step);
}

}  // namespace
}  // namespace specdec::models::detail
