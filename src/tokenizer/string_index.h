// An open-addressing hash index from strings (held elsewhere: the index stores views) to ids
// (internal to src/tokenizer/). For a 150k-token vocabulary it is built several times faster
// than std::unordered_map, which allocates a node per entry, and takes a third of the memory.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/word_cache.h"

namespace hibana {

class StringIndex {
 public:
  size_t size() const { return entries_.size(); }

  void reserve(size_t n) {
    entries_.reserve(n);
    if (n + n / 2 > slots_.size()) rehash(std::bit_ceil(n + n / 2));
  }

  // Adds or replaces (the later id wins, as when a JSON object with repeated keys is read into
  // a map). `key` must outlive the index.
  void insert(std::string_view key, int32_t id) {
    if ((entries_.size() + 1) * 3 > slots_.size() * 2) {
      rehash(std::max<size_t>(64, slots_.size() * 2));
    }
    const uint64_t h = WordCache::hash(key);
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
      const uint32_t e = slots_[s];
      if (e == 0) {
        entries_.push_back({key, static_cast<uint32_t>(h >> 32), id});
        slots_[s] = static_cast<uint32_t>(entries_.size());
        return;
      }
      Entry& entry = entries_[e - 1];
      if (entry.hash == static_cast<uint32_t>(h >> 32) && entry.key == key) {
        entry.id = id;
        return;
      }
    }
  }

  std::optional<int32_t> find(std::string_view key) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = WordCache::hash(key);
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
      const uint32_t e = slots_[s];
      if (e == 0) return std::nullopt;
      const Entry& entry = entries_[e - 1];
      if (entry.hash == static_cast<uint32_t>(h >> 32) && entry.key == key) return entry.id;
    }
  }

 private:
  struct Entry {
    std::string_view key;
    uint32_t hash;  // the high half of the hash; the low bits pick the slot
    int32_t id;
  };

  void rehash(size_t capacity) {
    slots_.assign(capacity, 0);
    mask_ = capacity - 1;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const uint64_t h = WordCache::hash(entries_[i].key);
      size_t s = h & mask_;
      while (slots_[s] != 0) s = (s + 1) & mask_;
      slots_[s] = static_cast<uint32_t>(i + 1);
    }
  }

  std::vector<uint32_t> slots_;  // 1 + index into entries_; 0 = free
  std::vector<Entry> entries_;
  size_t mask_ = 0;
};

}  // namespace hibana
