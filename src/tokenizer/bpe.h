// Byte-pair encoding of one pre-token (internal to src/tokenizer/): start from one symbol per
// byte and keep applying the merge of lowest rank, leftmost first, exactly as the tokenizers
// package's Word::merge_all orders its queue.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace hibana {

class BpeModel {
 public:
  // Resolves the merges against the vocabulary. Throws Error(corrupt_data) naming spec.source
  // when a merge names a token that is not in the vocabulary or makes one that is not.
  explicit BpeModel(const TokenizerSpec& spec);

  // Reusable working memory of one encoding thread.
  struct Scratch {
    struct Symbol {
      int32_t id;
      int32_t prev;
      int32_t next;
      bool alive;
    };
    std::vector<Symbol> symbols;
    std::vector<uint64_t> queue;  // (rank << 32) | position, a min-heap
    std::vector<int32_t> ids;     // short words: the symbols left
    std::vector<uint64_t> pairs;  // short words: (rank << 32) | merged id of ids[i], ids[i+1]
  };

  // Appends the ids of `word` (raw bytes, not empty).
  void encode(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;

  size_t merge_count() const { return merge_count_; }

 private:
  struct Pair {
    uint64_t key;  // (left id << 32) | right id; kEmpty when the slot is free
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  const Pair* find(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
      const Pair& p = pairs_[s];
      if (p.key == key) return &p;
      if (p.key == kEmpty) return nullptr;
    }
  }
  void insert(int32_t a, int32_t b, uint32_t rank, int32_t merged);
  // (rank << 32) | merged id of the merge of a and b; kNoMerge when there is none.
  uint64_t merge_of(int32_t a, int32_t b) const {
    const Pair* p = find(a, b);
    return p ? (uint64_t{p->rank} << 32) | uint32_t(p->merged) : kNoMerge;
  }
  static constexpr uint64_t kNoMerge = ~uint64_t{0};
  // Two equivalent strategies: rescanning a small array (fast for the short words that are
  // nearly all of them) and a priority queue over a linked list (for long ones).
  void encode_short(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;
  void encode_long(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;

  std::array<int32_t, 256> byte_ids_;  // -1 where the byte has no token (it is then dropped)
  std::vector<Pair> pairs_;            // open addressing, linear probing
  size_t mask_ = 0;
  int shift_ = 64;
  size_t merge_count_ = 0;
};

}  // namespace hibana
