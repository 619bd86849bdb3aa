#include "tokenizer/word_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace hibana {

WordCache::WordCache(size_t max_entries) : max_entries_(max_entries) {
  const size_t capacity = std::bit_ceil(max_entries * 2);
  mask_ = capacity - 1;
  slots_.assign(capacity, Slot{0, 0, 0, 0, 0});
}

uint64_t WordCache::hash(std::string_view word) {
  // Eight bytes at a time with a multiply-xorshift mix; words are short, so this stays cheap.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = word.size() * kMul;
  const char* p = word.data();
  size_t n = word.size();
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * kMul;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

std::span<const int32_t> WordCache::find(std::string_view word, uint64_t hash) const {
  for (size_t s = hash & mask_;; s = (s + 1) & mask_) {
    const Slot& slot = slots_[s];
    if (slot.key_length == 0) return {};
    if (slot.hash == hash && slot.key_length == word.size() &&
        std::memcmp(keys_.data() + slot.key_offset, word.data(), word.size()) == 0) {
      return {ids_.data() + slot.ids_offset, slot.ids_length};
    }
  }
}

void WordCache::insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids) {
  if (word.empty() || word.size() > kMaxWordBytes) return;
  if (entries_ >= max_entries_) clear();
  for (size_t s = hash & mask_;; s = (s + 1) & mask_) {
    Slot& slot = slots_[s];
    if (slot.key_length != 0) continue;
    slot = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(ids.size())};
    keys_.append(word);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    ++entries_;
    return;
  }
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{0, 0, 0, 0, 0});
  keys_.clear();
  ids_.clear();
  entries_ = 0;
}

}  // namespace hibana
