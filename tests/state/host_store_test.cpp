// The host-RAM tier: a byte budget with least-recently-used eviction, eviction writes blocks
// down to the next tier, misses fall through to it, flush() writes what is only in RAM.
#include <gtest/gtest.h>

#include "state/host_store.h"
#include "state/ssd_store.h"
#include "support/temp_dir.h"

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

}  // namespace
}  // namespace hibana
