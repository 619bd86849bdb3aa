// The restore decision of the prefix cache: blocks below the device pool are restored only when
// loading them beats recomputing them, and blocks in host RAM are priced at the RAM rate, not at
// the disk's.
#include <gtest/gtest.h>

#include <numeric>

#include "state/host_store.h"
#include "state/prefix_cache.h"
#include "state/ssd_store.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

StateSpec tiny_spec() {
  StateSpec s;
  s.attention_layers = 1;
  s.kv_heads = 1;
  s.head_dim = 8;
  return s;
}

// Registers 3 blocks of a sequence, pushes them out of the device pool into `lower`, and looks
// the sequence up again with one more token: how many tokens the lookup resumes from.
int64_t resumed_after_spill(BlockStore& lower, const TierCosts& costs, uint64_t* declined) {
  auto backend = make_cpu_backend();
  StatePool pool(tiny_spec(), 4, 8, 1);
  PrefixCache cache(pool, *backend, 42, 0, &lower, costs);
  std::vector<int32_t> tokens(13);
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<int32_t> pages;
  for (int i = 0; i < 3; ++i) pages.push_back(pool.alloc_page());
  cache.insert(tokens, pages, 3, -1);
  for (int32_t p : pages) pool.free_page(p);  // the cache holds its own references
  EXPECT_EQ(cache.evict_pages(3), 3);
  PrefixMatch m = cache.lookup(tokens);
  for (int32_t p : m.pages) pool.free_page(p);
  *declined = cache.stats().restores_declined;
  return m.tokens;
}

TEST(PrefixCacheCosts, SlowDiskIsNotWorthReadingButHostRamIs) {
  // Recomputing 12 tokens takes 12 us; reading 1.5 KB from this "disk" takes ~1.5 s; host RAM
  // costs nothing.
  TierCosts costs;
  costs.prefill_tokens_per_second = 1e6;
  costs.ssd_read_bytes_per_second = 1e3;
  test::TempDir dir;
  SsdStoreOptions so;
  so.dir = dir.path();
  so.model_fingerprint = 42;
  uint64_t declined = 0;
  {
    SsdStore ssd(so);
    EXPECT_EQ(resumed_after_spill(ssd, costs, &declined), 0) << "restored from a slow disk";
    EXPECT_EQ(declined, 1u);
  }
  HostStore ram(1 << 20, nullptr);
  EXPECT_EQ(resumed_after_spill(ram, costs, &declined), 12) << "host RAM priced as the disk";
  EXPECT_EQ(declined, 0u);
  // And RAM slower than recomputing is declined too.
  costs.host_read_bytes_per_second = 1e3;
  HostStore slow_ram(1 << 20, nullptr);
  EXPECT_EQ(resumed_after_spill(slow_ram, costs, &declined), 0);
}

}  // namespace
}  // namespace hibana
