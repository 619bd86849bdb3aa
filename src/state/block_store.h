// A tier below the device pool that keeps state blocks by key: host RAM (HostStore) or disk
// (SsdStore). The prefix cache spills evicted blocks into one and restores from it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/host_bytes.h"
#include "state/block_key.h"

namespace hibana {

// A block's bytes, shared by a tier and the moves that read them; never changed once made.
using BlockBytes = std::shared_ptr<const HostBytes>;

class BlockStore {
 public:
  virtual ~BlockStore() = default;
  // Stores a block (replacing one with the same key); false when it could not be kept.
  virtual bool put(const BlockKey& key, uint32_t kind, std::span<const uint8_t> payload) = 0;
  // The payload of a block of this kind, or nullopt.
  virtual std::optional<std::vector<uint8_t>> get(const BlockKey& key, uint32_t kind) = 0;
  virtual bool contains(const BlockKey& key) const = 0;
  // True when the block is held in host RAM, so restoring it reads memory, not the disk.
  virtual bool in_memory(const BlockKey& /*key*/) const { return false; }
  virtual void clear_block(const BlockKey& key) = 0;
  // put and get without copying the payload, for tiers that keep blocks in memory (HostStore
  // keeps and hands out the buffer itself); the defaults go through put and get.
  virtual bool put_shared(const BlockKey& key, uint32_t kind, BlockBytes payload) {
    return put(key, kind, payload->span());
  }
  virtual BlockBytes get_shared(const BlockKey& key, uint32_t kind) {
    std::optional<std::vector<uint8_t>> bytes = get(key, kind);
    return bytes ? std::make_shared<const HostBytes>(std::move(*bytes)) : nullptr;
  }
};

}  // namespace hibana
