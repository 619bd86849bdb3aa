// The prefix cache's claims about lower-tier copies: a block restored from host RAM is marked as
// held below, but the host tier can lose it (a failed write-down to a full disk). Evicting the
// block from the device must then write it down again instead of trusting the stale claim.
#include <gtest/gtest.h>

#include <numeric>

#include "model/model.h"
#include "state/host_store.h"
#include "state/prefix_cache.h"
#include "support/test_store.h"

namespace hibana {
namespace {

StateSpec tiny_spec() {
  StateSpec s;
  s.attention_layers = 1;
  s.kv_heads = 1;
  s.head_dim = 8;
  return s;
}

TEST(PrefixCacheSpill, ABlockLostByAFailedWriteDownIsSpilledAgain) {
  auto backend = make_cpu_backend();
  StatePool pool(tiny_spec(), 4, 8, 1);
  test::TestStore disk;
  HostStore ram(300, &disk);  // one 256-byte block
  BackendStateOps ops(*backend);
  PrefixCache cache(pool, ops, 42, 0, &ram);
  std::vector<int32_t> tokens(5);
  std::iota(tokens.begin(), tokens.end(), 100);
  const int32_t page = pool.alloc_page();
  cache.insert(tokens, std::span<const int32_t>(&page, 1), 1, -1);
  pool.free_page(page);
  ASSERT_EQ(cache.evict_pages(1), 1);  // the block goes to host RAM
  const uint64_t block_bytes = ram.stats().bytes;
  ASSERT_GT(block_bytes, 150u);
  ASSERT_LE(block_bytes, 300u);

  PrefixMatch m = cache.lookup(tokens);  // restored from RAM, which keeps its copy
  ASSERT_EQ(m.tokens, 4);
  for (int32_t p : m.pages) pool.free_page(p);

  // The disk is full when another block pushes it out of RAM: no tier holds it any more.
  disk.fail_puts(true);
  EXPECT_TRUE(ram.put(BlockKey{1, 2}, PrefixCache::kKindKv, std::vector<uint8_t>(block_bytes)));
  EXPECT_EQ(ram.stats().write_down_failures, 1u);
  disk.fail_puts(false);

  // Evicting it from the device now must write it down again.
  ASSERT_EQ(cache.evict_pages(1), 1);
  EXPECT_EQ(cache.stats().spilled_blocks, 2u);
  m = cache.lookup(tokens);
  EXPECT_EQ(m.tokens, 4) << "the block was lost: its stale claim kept it from being spilled";
  for (int32_t p : m.pages) pool.free_page(p);
}

}  // namespace
}  // namespace hibana
