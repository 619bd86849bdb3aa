// The host-RAM tier: a byte budget with least-recently-used eviction, eviction writes blocks
// down to the next tier, misses fall through to it, flush() writes what is only in RAM.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <thread>

#include "state/host_store.h"
#include "state/ssd_store.h"
#include "support/temp_dir.h"
#include "support/test_store.h"

namespace hibana {
namespace {

BlockKey key(uint64_t i) { return {i * 0x9e3779b97f4a7c15ull + 1, i}; }
std::vector<uint8_t> block(uint8_t fill, size_t n = 1000) { return std::vector<uint8_t>(n, fill); }

TEST(HostStore, KeepsBlocksWithinItsBudgetLeastRecentlyUsedOut) {
  HostStore h(3000, nullptr);
  for (uint8_t i = 0; i < 3; ++i) EXPECT_TRUE(h.put(key(i), 1, block(i)));
  ASSERT_TRUE(h.get(key(0), 1).has_value());  // 0 is now the most recent
  EXPECT_TRUE(h.put(key(3), 1, block(3)));    // pushes out 1, the least recent
  EXPECT_TRUE(h.contains(key(0)));
  EXPECT_FALSE(h.contains(key(1)));
  EXPECT_EQ(*h.get(key(3), 1), block(3));
  EXPECT_FALSE(h.get(key(3), 2).has_value());  // another kind under that key
  const HostStoreStats s = h.stats();
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_EQ(s.bytes, 3000u);
  EXPECT_EQ(s.evictions, 1u);
  h.clear_block(key(0));
  EXPECT_FALSE(h.contains(key(0)));
  EXPECT_EQ(h.stats().bytes, 2000u);
}

// The prefix cache's moves hand blocks over without copies: RAM keeps the buffer it is given
// and hands out that same buffer; misses and blocks over the budget go to the next tier.
TEST(HostStore, SharedPutsAndGetsKeepTheBufferItself) {
  test::TestStore below;
  HostStore h(2000, &below);
  auto b = std::make_shared<const HostBytes>(block(5));
  EXPECT_TRUE(h.put_shared(key(1), 1, b));
  EXPECT_EQ(h.get_shared(key(1), 1).get(), b.get()) << "RAM copied the block";
  EXPECT_EQ(h.get_shared(key(1), 2), nullptr);  // another kind under that key
  EXPECT_EQ(*h.get(key(1), 1), block(5));       // the copying get sees the same bytes
  EXPECT_TRUE(h.put_shared(key(2), 1, std::make_shared<const HostBytes>(block(6, 5000))));
  EXPECT_EQ(h.stats().refused, 1u);
  EXPECT_FALSE(h.in_memory(key(2)));
  const BlockBytes big = h.get_shared(key(2), 1);  // through to the next tier
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(big->data(), big->data() + big->size()), block(6, 5000));
}

TEST(HostStore, WritesEvictedBlocksDownAndReadsThroughToThem) {
  test::TempDir dir;
  SsdStoreOptions so;
  so.dir = dir.path();
  so.model_fingerprint = 7;
  SsdStore ssd(so);
  HostStore h(2000, &ssd);
  for (uint8_t i = 0; i < 5; ++i) EXPECT_TRUE(h.put(key(i), 1, block(i)));
  // 0, 1 and 2 went down to the SSD when RAM filled; 3 and 4 are only in RAM.
  EXPECT_EQ(h.stats().written_down, 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(ssd.contains(key(i))) << i;
  EXPECT_FALSE(ssd.contains(key(4)));
  EXPECT_EQ(*h.get(key(1), 1), block(1));  // through to the SSD
  EXPECT_EQ(h.stats().hits, 0u);
  EXPECT_EQ(*h.get(key(4), 1), block(4));
  EXPECT_EQ(h.stats().hits, 1u);
  h.flush();
  EXPECT_TRUE(ssd.contains(key(3)));
  EXPECT_TRUE(ssd.contains(key(4)));
  // A block larger than the whole budget goes straight down.
  EXPECT_TRUE(h.put(key(9), 1, block(9, 5000)));
  EXPECT_TRUE(ssd.contains(key(9)));
  EXPECT_EQ(h.stats().refused, 1u);
}

// Runs `checks` on another thread while `slow` holds a write-down, and returns whether they
// finished before the write was released. A store that wrote down under its lock would make
// them wait for the write: the wait is cut after 30 s (the write is released then, so the
// test fails instead of hanging), but what is asserted is the order, not a duration.
bool finish_during_write(test::TestStore& slow, const std::function<void()>& checks,
                         bool write_fails = false) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false, before_release = false;
  std::thread t([&] {
    checks();
    const bool early = !slow.released();
    std::lock_guard<std::mutex> lock(m);
    done = true;
    before_release = early;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; });
  }
  slow.release(write_fails);
  t.join();
  return before_release;
}

TEST(HostStore, LookupsAndStatsDoNotWaitForAWriteDown) {
  test::TestStore slow;
  HostStore h(2000, &slow);
  EXPECT_TRUE(h.put(key(0), 1, block(0)));
  EXPECT_TRUE(h.put(key(1), 1, block(1)));
  slow.hold_next(1);
  std::thread writer([&] { EXPECT_TRUE(h.put(key(2), 1, block(2))); });  // pushes 0 down
  slow.wait_for_held(1);
  EXPECT_TRUE(finish_during_write(slow, [&] {
    // The block being written down is still found (in RAM), and counted until it is gone.
    EXPECT_TRUE(h.contains(key(0)));
    EXPECT_EQ(*h.get(key(0), 1), block(0));
    EXPECT_EQ(*h.get(key(1), 1), block(1));
    const HostStoreStats s = h.stats();
    EXPECT_EQ(s.bytes, 3000u);
    EXPECT_EQ(s.blocks, 3u);
    EXPECT_EQ(s.written_down, 0u);
    // Another put evicts the least recent block left (2: 1 was just read), not the one
    // already leaving.
    EXPECT_TRUE(h.put(key(3), 1, block(3)));
  })) << "a lookup waited for the write-down";
  writer.join();
  EXPECT_EQ(slow.puts_of(key(0)), 1);
  EXPECT_EQ(slow.puts_of(key(2)), 1);
  EXPECT_FALSE(h.in_memory(key(0)));
  EXPECT_FALSE(h.in_memory(key(2)));
  EXPECT_TRUE(h.in_memory(key(1)));
  EXPECT_EQ(*h.get(key(0), 1), block(0));  // through to the next tier
  const HostStoreStats s = h.stats();
  EXPECT_EQ(s.bytes, 2000u);
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_EQ(s.written_down, 2u);
  EXPECT_EQ(s.evictions, 2u);
}

TEST(HostStore, AFailedWriteDownKeepsTheBlockOnlyIfItFits) {
  test::TestStore full;
  HostStore h(2000, &full);
  EXPECT_TRUE(h.put(key(0), 1, block(0)));
  EXPECT_TRUE(h.put(key(1), 1, block(1)));
  full.fail_puts(true);
  EXPECT_TRUE(h.put(key(2), 1, block(2)));  // 0 cannot go down and RAM has no room: dropped
  EXPECT_FALSE(h.contains(key(0)));
  HostStoreStats s = h.stats();
  EXPECT_EQ(s.bytes, 2000u);
  EXPECT_EQ(s.write_down_failures, 1u);
  EXPECT_EQ(s.written_down, 0u);
  // Room made while the write is in progress keeps the block in RAM when the write fails.
  full.hold_next(1);
  std::thread writer([&] { EXPECT_TRUE(h.put(key(3), 1, block(3))); });  // pushes 1 down
  full.wait_for_held(1);
  EXPECT_TRUE(finish_during_write(
      full, [&] { h.clear_block(key(2)); }, true));
  writer.join();
  EXPECT_TRUE(h.in_memory(key(1)));  // and least recent
  s = h.stats();
  EXPECT_EQ(s.bytes, 2000u);
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_EQ(s.write_down_failures, 2u);
  // Once the disk works again, it goes down like any other block when it is pushed out.
  full.fail_puts(false);
  EXPECT_TRUE(h.put(key(4), 1, block(4)));
  EXPECT_TRUE(full.contains(key(1)));
  EXPECT_EQ(h.stats().bytes, 2000u);
}

}  // namespace
}  // namespace hibana
