// ThreadPool::parallel_for runs every item of a loop exactly once, however the workers are
// scheduled. A worker that woke for a loop which had already finished used to join it anyway:
// it claimed an index from the spent counter and, if the caller had meanwhile posted the next
// loop, ran that index of the next loop a second time (a recurrent-state update applied twice
// on a busy machine).
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

namespace hibana {
namespace {

TEST(ThreadPool, EveryItemRunsOnceWhenLoopsFollowEachOther) {
  ThreadPool pool(8);  // more threads than this machine's cores: workers get preempted
  std::vector<std::atomic<int>> runs(64);
  int64_t twice = 0, missed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int round = 0; std::chrono::steady_clock::now() < until; ++round) {
    // Short loops then a longer one: a late worker's stale index lands inside the long loop.
    const int64_t n = round % 3 == 2 ? 64 : 2 + round % 5;
    for (int64_t i = 0; i < n; ++i) runs[i].store(0, std::memory_order_relaxed);
    pool.parallel_for(n, [&](int64_t i) { runs[i].fetch_add(1, std::memory_order_relaxed); });
    for (int64_t i = 0; i < n; ++i) {
      const int r = runs[i].load(std::memory_order_relaxed);
      twice += r > 1;
      missed += r == 0;
    }
  }
  EXPECT_EQ(twice, 0) << "items ran more than once";
  EXPECT_EQ(missed, 0) << "items never ran";
}

}  // namespace
}  // namespace hibana
