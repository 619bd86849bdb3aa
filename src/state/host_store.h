// The host-RAM tier: state blocks evicted from the device pool, kept in memory up to a byte
// budget, least recently used first out. A block pushed out of RAM is written to the next tier
// (the SSD store) unless it is already there; lookups that miss in RAM fall through to it.
// flush() writes every block still only in RAM to the next tier (a clean shutdown).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>

#include "state/block_store.h"

namespace hibana {

struct HostStoreStats {
  uint64_t blocks = 0, bytes = 0;
  uint64_t hits = 0, misses = 0, evictions = 0, written_down = 0, refused = 0, prefetched = 0;
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
  bool contains(const BlockKey& key) const override;
  bool in_memory(const BlockKey& key) const override;
  void clear_block(const BlockKey& key) override;
  void flush();
  // Copies a block the next tier holds into RAM (a request that will need it is waiting);
  // true when the block is in RAM afterwards.
  bool prefetch(const BlockKey& key, uint32_t kind);
  HostStoreStats stats() const;

 private:
  struct Entry {
    uint32_t kind;
    std::vector<uint8_t> bytes;
    bool below;  // the next tier holds it too
    std::list<BlockKey>::iterator lru;
  };
  void evict_to(uint64_t limit);

  const uint64_t capacity_;
  BlockStore* next_;
  mutable std::mutex mutex_;
  std::unordered_map<BlockKey, Entry, BlockKeyHash> blocks_;
  std::list<BlockKey> lru_;  // front: most recent
  HostStoreStats stats_;
};

}  // namespace hibana
