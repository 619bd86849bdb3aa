#include "state/host_store.h"

namespace hibana {

HostStore::HostStore(uint64_t capacity_bytes, BlockStore* next)
    : capacity_(capacity_bytes), next_(next) {}

bool HostStore::put(const BlockKey& key, uint32_t kind, std::span<const uint8_t> payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (payload.size() > capacity_) {
    ++stats_.refused;
    return next_ ? next_->put(key, kind, payload) : false;
  }
  auto it = blocks_.find(key);
  if (it != blocks_.end()) {
    stats_.bytes -= it->second.bytes.size();
    lru_.erase(it->second.lru);
    blocks_.erase(it);
    --stats_.blocks;
  }
  evict_to(capacity_ - payload.size());
  lru_.push_front(key);
  blocks_.emplace(key, Entry{kind, std::vector<uint8_t>(payload.begin(), payload.end()), false,
                             lru_.begin()});
  stats_.bytes += payload.size();
  ++stats_.blocks;
  return true;
}

std::optional<std::vector<uint8_t>> HostStore::get(const BlockKey& key, uint32_t kind) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(key);
    if (it != blocks_.end() && it->second.kind == kind) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.bytes;
    }
    ++stats_.misses;
  }
  return next_ ? next_->get(key, kind) : std::nullopt;
}

bool HostStore::contains(const BlockKey& key) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (blocks_.count(key)) return true;
  }
  return next_ && next_->contains(key);
}

bool HostStore::in_memory(const BlockKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.count(key) > 0;
}

void HostStore::clear_block(const BlockKey& key) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(key);
    if (it != blocks_.end()) {
      stats_.bytes -= it->second.bytes.size();
      --stats_.blocks;
      lru_.erase(it->second.lru);
      blocks_.erase(it);
    }
  }
  if (next_) next_->clear_block(key);
}

void HostStore::evict_to(uint64_t limit) {
  while (stats_.bytes > limit && !lru_.empty()) {
    const BlockKey key = lru_.back();
    auto it = blocks_.find(key);
    Entry& e = it->second;
    if (next_ && !e.below && next_->put(key, e.kind, e.bytes)) ++stats_.written_down;
    stats_.bytes -= e.bytes.size();
    --stats_.blocks;
    ++stats_.evictions;
    lru_.pop_back();
    blocks_.erase(it);
  }
}

void HostStore::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!next_) return;
  for (auto& [key, e] : blocks_) {
    if (!e.below && next_->put(key, e.kind, e.bytes)) {
      e.below = true;
      ++stats_.written_down;
    }
  }
}

bool HostStore::prefetch(const BlockKey& key, uint32_t kind) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (blocks_.count(key)) return true;
  }
  if (!next_) return false;
  std::optional<std::vector<uint8_t>> bytes = next_->get(key, kind);  // outside the lock: I/O
  if (!bytes) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (blocks_.count(key)) return true;
  if (bytes->size() > capacity_) return false;
  evict_to(capacity_ - bytes->size());
  lru_.push_front(key);
  stats_.bytes += bytes->size();
  ++stats_.blocks;
  ++stats_.prefetched;
  blocks_.emplace(key, Entry{kind, std::move(*bytes), true, lru_.begin()});
  return true;
}

HostStoreStats HostStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace hibana
