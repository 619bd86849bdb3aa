// A bounded cache from pre-token bytes to token ids (internal to src/tokenizer/). Text repeats
// its words, and a hash lookup is far cheaper than running the merges again. One cache belongs
// to one encoding thread, so it needs no lock; when full it is simply emptied.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hibana {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 128;  // longer words are rare and not kept

  explicit WordCache(size_t max_entries = 1 << 15);

  static uint64_t hash(std::string_view word);

  // The cached ids of `word`, or an empty span.
  std::span<const int32_t> find(std::string_view word, uint64_t hash) const;
  void insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids);

 private:
  struct Slot {
    uint64_t hash;
    uint32_t key_offset;
    uint32_t key_length;  // 0: free
    uint32_t ids_offset;
    uint32_t ids_length;
  };
  void clear();

  size_t max_entries_;
  size_t entries_ = 0;
  size_t mask_;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace hibana
