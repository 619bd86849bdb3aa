// The prefix index: a radix tree over token-block hash chains (one node per 64-token block,
// named by BlockKey::chain), whose nodes hold the block's KV page and, where the checkpoint
// policy put one, a recurrent checkpoint: the DeltaNet state after the block. A new request
// resumes from the deepest node whose state is complete — KV for every block up to it and, for
// hybrid models, a checkpoint at it — and recomputes only the rest.
//
// Pages are shared by reference count: the cache holds one reference per node, and every
// sequence resumed from it holds its own. Leaves no sequence uses are evicted least recently
// used first (checkpointed nodes, dearer to recompute, get a head start) when pages run short.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "state/block_key.h"
#include "state/state_pool.h"

namespace hibana {

struct PrefixMatch {
  int64_t tokens = 0;           // resume position: a multiple of the page size, 0 for no reuse
  std::vector<int32_t> pages;   // one reference each, covering positions [0, tokens)
  int32_t checkpoint_slot = -1; // recurrent state after `tokens` tokens (hybrid models)
};

struct PrefixCacheStats {
  uint64_t query_tokens = 0, hit_tokens = 0;
  int64_t nodes = 0, checkpoints = 0, pages = 0;
  uint64_t evicted_pages = 0, evicted_checkpoints = 0;
};

class PrefixCache {
 public:
  // `checkpoint_slots` recurrent slots of the pool are reserved for checkpoints.
  PrefixCache(StatePool& pool, Backend& backend, uint64_t fingerprint, int64_t checkpoint_slots);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The deepest reusable prefix of `tokens`, always leaving at least one token to compute.
  PrefixMatch lookup(std::span<const int32_t> tokens);
  // Registers the first `blocks` blocks of a sequence's tokens, block i held by pages[i]. When
  // state_slot >= 0 it holds the recurrent state after blocks * page_size tokens, which is
  // copied into a checkpoint of the last block (transient ones may later be dropped).
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> pages, int64_t blocks,
              int32_t state_slot, bool transient = false);
  // Drops the checkpoint at the given depth if it was inserted as transient.
  void drop_transient(std::span<const int32_t> tokens, int64_t blocks);
  // Pages only the cache holds, in nodes that could be evicted now.
  int64_t evictable_pages() const;
  // Frees up to `want` pages; returns how many it freed.
  int64_t evict_pages(int64_t want);
  PrefixCacheStats stats() const;
  bool hybrid() const { return hybrid_; }

 private:
  struct Node {
    BlockKey parent;
    int64_t depth = 0;  // blocks, this one included
    int32_t page = -1;
    int32_t checkpoint = -1;
    bool transient = false;
    int32_t children = 0;
    uint64_t last_use = 0;
  };
  BlockKey key_at(std::span<const int32_t> tokens, int64_t blocks) const;
  void copy_state(int32_t from, int32_t to);
  int32_t take_checkpoint_slot();
  void remove(const BlockKey& key);

  StatePool& pool_;
  Backend& backend_;
  const uint64_t fingerprint_;
  const bool hybrid_;
  int64_t free_checkpoint_slots_;
  std::vector<int32_t> spare_slots_;
  std::unordered_map<BlockKey, Node, BlockKeyHash> nodes_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace hibana
