// The prefix index: a radix tree over token-block hash chains (one node per 64-token block,
// named by BlockKey::chain), whose nodes hold the block's KV page and, where the checkpoint
// policy put one, a recurrent checkpoint: the DeltaNet state after the block. A new request
// resumes from the deepest node whose state is complete — KV for every block up to it and, for
// hybrid models, a checkpoint at it — and recomputes only the rest.
//
// Pages are shared by reference count: the cache holds one reference per node, and every
// sequence resumed from it holds its own. Leaves no sequence uses are evicted least recently
// used first (checkpointed nodes, dearer to recompute, get a head start) when pages run short.
//
// With lower tiers (a BlockStore: the host-RAM HostStore, which writes down to the SsdStore,
// or the SsdStore alone), evicted blocks (and their checkpoints) are written back under the
// same keys, and flush() writes every block on a clean shutdown; a lookup continues the chain
// through blocks found only below and restores them when the cost model says loading beats
// recomputing. The stats call everything below the device pool "ssd"; HostStore and SsdStore
// count their own hits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "state/block_key.h"
#include "state/block_store.h"
#include "state/pool_block_mover.h"
#include "state/state_pool.h"

namespace hibana {

struct PrefixMatch {
  int64_t tokens = 0;            // resume position: a multiple of the page size, 0 for no reuse
  std::vector<int32_t> pages;    // one reference each, covering positions [0, tokens)
  int32_t checkpoint_slot = -1;  // recurrent state after `tokens` tokens (hybrid models)
};

struct PrefixCacheStats {
  uint64_t query_tokens = 0, hit_tokens = 0;  // hit_tokens: resumed from any tier
  uint64_t device_hit_tokens = 0, ssd_hit_tokens = 0;
  int64_t nodes = 0, checkpoints = 0, pages = 0;
  uint64_t evicted_pages = 0, evicted_checkpoints = 0;
  uint64_t spilled_bytes = 0, restored_bytes = 0, spilled_blocks = 0, restored_blocks = 0;
  uint64_t restores_declined = 0;  // SSD blocks left on disk because recomputing was cheaper
  double restore_seconds = 0;      // total time spent restoring from SSD
};

// Measured rates for deciding between restoring from a lower tier and recomputing. Blocks in
// host RAM are priced at the host rate, blocks on disk at the SSD rate.
struct TierCosts {
  double prefill_tokens_per_second = 0;   // 0: always restore
  double ssd_read_bytes_per_second = 0;   // 0: reading the disk costs nothing
  double host_read_bytes_per_second = 0;  // 0: reading host RAM costs nothing
};

class PrefixCache {
 public:
  // `checkpoint_slots` recurrent slots of the pool are reserved for checkpoints; checkpoints are
  // copied, and blocks moved to and from the lower tiers, through `ops` (the model, so that
  // every tensor-parallel rank copies its shard and moves it to and from its own tiers, which
  // the code following rank 0 makes: this cache decides, the ranks carry out). `lower` is the
  // decisions' view of the tiers: rank 0's.
  PrefixCache(StatePool& pool, const StateOps& ops, uint64_t fingerprint, int64_t checkpoint_slots,
              BlockStore* lower = nullptr, TierCosts costs = {});
  // The same with the backend's own copies (one process: tests, tools).
  PrefixCache(StatePool& pool, Backend& backend, uint64_t fingerprint, int64_t checkpoint_slots,
              BlockStore* lower = nullptr, TierCosts costs = {});
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

  // Block kinds in the lower tiers.
  static constexpr uint32_t kKindKv = 1;
  static constexpr uint32_t kKindCheckpoint = 2;

  // The lower-tier blocks a lookup of `tokens` could restore, in chain order: each full block's
  // KV (kind 1) and, for hybrid models, its checkpoint (kind 2). Thread-safe (no cache state):
  // the engine's prefetcher warms the host tier with them while a request waits.
  struct BlockRef {
    BlockKey key;
    uint32_t kind;
    int64_t block;  // index in the chain (0: the first block)
  };
  static std::vector<BlockRef> chain_blocks(std::span<const int32_t> tokens, int64_t page_size,
                                            uint64_t fingerprint, bool hybrid);
  // Writes every block and checkpoint not yet on the SSD tier (a clean shutdown).
  void flush();
  // What the device pool already holds of the blocks a lookup of `tokens` could use (changes no
  // state, but like every other member it belongs to the thread that owns the pool): `blocks`,
  // how many leading blocks have their KV on the device (eviction takes leaves only, so they
  // are always a prefix of the chain), and `checkpoint`, the depth of the deepest of them with a
  // checkpoint on the device (0: none). A lookup never needs a lower-tier copy of those blocks'
  // KV, nor a checkpoint no deeper than that; the engine hands both to its prefetcher.
  struct DeviceCoverage {
    int64_t blocks = 0, checkpoint = 0;
  };
  DeviceCoverage device_coverage(std::span<const int32_t> tokens) const;

 private:
  struct Node {
    BlockKey parent;
    int64_t depth = 0;  // blocks, this one included
    int32_t page = -1;
    int32_t checkpoint = -1;
    bool transient = false;
    int32_t children = 0;
    uint64_t last_use = 0;
    // A lower tier was given (or restored) this block's KV / checkpoint. Only a hint: the
    // copy may be gone since, so spill() checks it with the tier before skipping a write.
    bool kv_on_ssd = false, checkpoint_on_ssd = false;
  };
  // Moves a block between the pool and the lower tiers through ops_ (on every rank of a
  // tensor-parallel model, each into its own tiers); true when it succeeded (everywhere).
  bool move(BlockMove::Op op, const BlockKey& key, uint32_t kind, int32_t index);
  void spill(const BlockKey& key, Node& node);
  // Whether a lower tier still holds the copy a node's flag claims (`claimed`) under `key`.
  bool held_below(bool claimed, const BlockKey& key) const;
  static BlockKey checkpoint_key(const BlockKey& k) { return {k.hi ^ 0x6368656b706f696eull, k.lo}; }
  size_t page_bytes() const;
  size_t slot_bytes() const;
  BlockKey key_at(std::span<const int32_t> tokens, int64_t blocks) const;
  void copy_state(int32_t from, int32_t to);
  int32_t take_checkpoint_slot();
  void remove(const BlockKey& key);
  PrefixCache(StatePool& pool, std::unique_ptr<StateOps> own, uint64_t fingerprint,
              int64_t checkpoint_slots, BlockStore* lower, TierCosts costs);

  StatePool& pool_;
  const StateOps& ops_;
  std::unique_ptr<StateOps> own_ops_;  // behind ops_ when made with a Backend
  const uint64_t fingerprint_;
  const bool hybrid_;
  int64_t free_checkpoint_slots_;
  std::vector<int32_t> spare_slots_;
  std::unordered_map<BlockKey, Node, BlockKeyHash> nodes_;
  BlockStore* lower_;     // the tiers below the device pool (host RAM and/or SSD), may be null
  PoolBlockMover mover_;  // this process's moves to and from lower_
  TierCosts costs_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace hibana
