// The host-RAM tier: state blocks evicted from the device pool, kept in memory up to a byte
// budget, least recently used first out. A block pushed out of RAM is written to the next tier
// (the SSD store) unless it is already there; lookups that miss in RAM fall through to it.
// flush() writes every block still only in RAM to the next tier (a clean shutdown).
//
// Writes to the next tier (disk I/O) happen outside the store's lock, on the thread whose put()
// or prefetch() pushed the block out: while a block is being written down it is out of the LRU
// order (no other eviction picks it) but still in RAM, counted in `bytes` and served by get();
// it leaves RAM when the write succeeds. When the write fails, it stays in RAM if the budget
// still has room for it, and is dropped otherwise (then no tier holds it: callers must not
// assume a block they put is still below, see PrefixCache::spill).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "state/block_store.h"

namespace hibana {

struct HostStoreStats {
  uint64_t blocks = 0, bytes = 0;
  uint64_t hits = 0, misses = 0, evictions = 0, written_down = 0, refused = 0, prefetched = 0;
  uint64_t write_down_failures = 0;  // write-downs the next tier refused
};

class HostStore final : public BlockStore {
 public:
  // `next` may be null (blocks pushed out of RAM are then dropped).
  HostStore(uint64_t capacity_bytes, BlockStore* next);
  ~HostStore() override = default;
  HostStore(const HostStore&) = delete;
  HostStore& operator=(const HostStore&) = delete;

  bool put(const BlockKey& key, uint32_t kind, std::span<const uint8_t> payload) override;
  std::optional<std::vector<uint8_t>> get(const BlockKey& key, uint32_t kind) override;
  // Keeps `payload` itself / hands out the buffer it keeps (no copy; a miss in RAM reads the
  // next tier).
  bool put_shared(const BlockKey& key, uint32_t kind, BlockBytes payload) override;
  BlockBytes get_shared(const BlockKey& key, uint32_t kind) override;
  bool contains(const BlockKey& key) const override;
  bool in_memory(const BlockKey& key) const override;
  void clear_block(const BlockKey& key) override;
  void flush();
  // Copies a block the next tier holds into RAM (a request that will need it is waiting);
  // true when the block is in RAM afterwards.
  bool prefetch(const BlockKey& key, uint32_t kind);
  HostStoreStats stats() const;

 private:
  using Bytes = BlockBytes;
  struct Entry {
    uint32_t kind;
    Bytes bytes;   // shared with a write-down in flight, which reads it outside the lock
    bool below;    // the next tier holds it too
    bool writing;  // being written down: out of the LRU list, still readable
    uint64_t id;   // tells this entry from a later one under the same key
    std::list<BlockKey>::iterator lru;  // valid while !writing
  };
  // A block chosen for eviction whose copy in the next tier is to be written (lock not held).
  struct WriteDown {
    BlockKey key;
    uint32_t kind;
    Bytes bytes;
    uint64_t id;
  };
  using WriteDowns = std::vector<WriteDown>;
  // Lock held: evicts until the bytes not already leaving RAM fit in `limit`; blocks to be
  // written down first are marked and appended to `out`.
  void evict_to(uint64_t limit, WriteDowns& out);
  // Lock not held: writes the blocks down, then drops them from RAM (or keeps a failed one).
  void write_down(WriteDowns& blocks);
  void insert(const BlockKey& key, uint32_t kind, Bytes bytes, bool below);
  // The block's bytes if RAM holds it (counted as a hit or a miss).
  Bytes find(const BlockKey& key, uint32_t kind);
  // Counts a block too large for the budget, which goes straight to the next tier.
  void refused();
  void erase(std::unordered_map<BlockKey, Entry, BlockKeyHash>::iterator it);

  const uint64_t capacity_;
  BlockStore* next_;
  mutable std::mutex mutex_;
  std::unordered_map<BlockKey, Entry, BlockKeyHash> blocks_;
  std::list<BlockKey> lru_;     // front: most recent; blocks being written down are not in it
  uint64_t leaving_bytes_ = 0;  // bytes of the blocks being written down
  uint64_t next_id_ = 0;
  HostStoreStats stats_;
};

}  // namespace hibana
