#include "state/host_store.h"

#include <algorithm>
#include <iterator>

namespace hibana {

HostStore::HostStore(uint64_t capacity_bytes, BlockStore* next)
    : capacity_(capacity_bytes), next_(next) {}

void HostStore::insert(const BlockKey& key, uint32_t kind, Bytes bytes, bool below) {
  const uint64_t n = bytes->size();
  lru_.push_front(key);
  blocks_.emplace(key, Entry{kind, std::move(bytes), below, false, ++next_id_, lru_.begin()});
  stats_.bytes += n;
  ++stats_.blocks;
}

void HostStore::erase(std::unordered_map<BlockKey, Entry, BlockKeyHash>::iterator it) {
  const uint64_t n = it->second.bytes->size();
  if (it->second.writing) {
    leaving_bytes_ -= n;  // its write-down finds it gone and leaves RAM alone
  } else {
    lru_.erase(it->second.lru);
  }
  stats_.bytes -= n;
  --stats_.blocks;
  blocks_.erase(it);
}

void HostStore::refused() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.refused;
}

bool HostStore::put(const BlockKey& key, uint32_t kind, std::span<const uint8_t> payload) {
  if (payload.size() > capacity_) {
    refused();
    return next_ ? next_->put(key, kind, payload) : false;
  }
  auto bytes = std::make_shared<HostBytes>(payload.size());
  std::copy(payload.begin(), payload.end(), bytes->data());
  return put_shared(key, kind, std::move(bytes));
}

bool HostStore::put_shared(const BlockKey& key, uint32_t kind, BlockBytes payload) {
  const uint64_t n = payload->size();
  if (n > capacity_) {
    refused();
    return next_ ? next_->put_shared(key, kind, std::move(payload)) : false;
  }
  WriteDowns leaving;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(key);
    if (it != blocks_.end()) erase(it);
    evict_to(capacity_ - n, leaving);
    insert(key, kind, std::move(payload), false);
  }
  write_down(leaving);
  return true;
}

HostStore::Bytes HostStore::find(const BlockKey& key, uint32_t kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second.kind != kind) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  if (!it->second.writing) lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.bytes;
}

std::optional<std::vector<uint8_t>> HostStore::get(const BlockKey& key, uint32_t kind) {
  if (Bytes found = find(key, kind)) {  // copied outside the lock: never changed
    return std::vector<uint8_t>(found->data(), found->data() + found->size());
  }
  return next_ ? next_->get(key, kind) : std::nullopt;
}

BlockBytes HostStore::get_shared(const BlockKey& key, uint32_t kind) {
  if (Bytes found = find(key, kind)) return found;
  return next_ ? next_->get_shared(key, kind) : nullptr;
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
    if (it != blocks_.end()) erase(it);
  }
  if (next_) next_->clear_block(key);
}

void HostStore::evict_to(uint64_t limit, WriteDowns& out) {
  while (stats_.bytes - leaving_bytes_ > limit && !lru_.empty()) {
    const BlockKey key = lru_.back();
    lru_.pop_back();
    auto it = blocks_.find(key);
    Entry& e = it->second;
    if (next_ && !e.below) {
      e.writing = true;  // out of the LRU list, still in RAM until the write is done
      leaving_bytes_ += e.bytes->size();
      out.push_back({key, e.kind, e.bytes, e.id});
    } else {
      stats_.bytes -= e.bytes->size();
      --stats_.blocks;
      ++stats_.evictions;
      blocks_.erase(it);
    }
  }
}

void HostStore::write_down(WriteDowns& blocks) {
  for (const WriteDown& w : blocks) {
    const bool ok = next_->put(w.key, w.kind, w.bytes->span());  // disk I/O: the lock is not held
    bool cleared = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (ok) ++stats_.written_down;
      auto it = blocks_.find(w.key);
      if (it == blocks_.end() || it->second.id != w.id) {
        // Cleared or replaced while it was written: RAM is no longer this write's business,
        // but a cleared block must not survive below.
        cleared = ok && it == blocks_.end();
      } else if (ok) {
        erase(it);
        ++stats_.evictions;
      } else {
        // The next tier refused it (disk full, I/O error): keep it in RAM, least recent, if
        // the budget has room for it now; drop it otherwise.
        ++stats_.write_down_failures;
        Entry& e = it->second;
        const uint64_t n = e.bytes->size();
        if (stats_.bytes - (leaving_bytes_ - n) <= capacity_) {
          e.writing = false;
          leaving_bytes_ -= n;
          lru_.push_back(w.key);
          e.lru = std::prev(lru_.end());
        } else {
          erase(it);
          ++stats_.evictions;
        }
      }
    }
    if (cleared) next_->clear_block(w.key);
  }
}

void HostStore::flush() {
  if (!next_) return;
  WriteDowns todo;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, e] : blocks_) {
      if (!e.below && !e.writing) todo.push_back({key, e.kind, e.bytes, e.id});
    }
  }
  for (const WriteDown& w : todo) {
    if (!next_->put(w.key, w.kind, w.bytes->span())) continue;  // outside the lock: disk I/O
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.written_down;
    auto it = blocks_.find(w.key);
    if (it != blocks_.end() && it->second.id == w.id) it->second.below = true;
  }
}

bool HostStore::prefetch(const BlockKey& key, uint32_t kind) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (blocks_.count(key)) return true;
  }
  if (!next_) return false;
  std::optional<std::vector<uint8_t>> bytes = next_->get(key, kind);  // outside the lock: I/O
  if (!bytes || bytes->size() > capacity_) return false;
  const uint64_t n = bytes->size();
  auto shared = std::make_shared<const HostBytes>(std::move(*bytes));
  WriteDowns leaving;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (blocks_.count(key)) return true;
    evict_to(capacity_ - n, leaving);
    insert(key, kind, std::move(shared), true);
    ++stats_.prefetched;
  }
  write_down(leaving);
  return true;
}

HostStoreStats HostStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace hibana
