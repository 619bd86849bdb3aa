// The id <-> token tables of a byte-level BPE tokenizer (internal to src/tokenizer/): the bytes
// each id stands for, which ids are special, and lookups by vocabulary text or by bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/string_index.h"
#include "tokenizer/tokenizer_spec.h"

namespace hibana {

class Vocabulary {
 public:
  // Throws Error(corrupt_data) naming spec.source on ids out of range.
  explicit Vocabulary(const TokenizerSpec& spec);

  int64_t size() const { return static_cast<int64_t>(offsets_.size()) - 1; }  // highest id + 1
  // The bytes of a token as decode() produces them; empty for ids with no token.
  std::string_view bytes(int32_t id) const {
    if (id < 0 || id >= size()) return {};
    return std::string_view(arena_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  bool is_special(int32_t id) const { return id >= 0 && id < size() && special_[id]; }
  // An id by its text as the vocabulary writes it (added tokens by content, model tokens in
  // the byte-level alphabet), as tokenizers' token_to_id.
  std::optional<int32_t> find_text(std::string_view text) const;
  // A model (not added) token by the bytes it stands for.
  std::optional<int32_t> find_model_bytes(std::string_view bytes) const;

 private:
  std::string arena_;              // every token's bytes, back to back
  std::vector<uint32_t> offsets_;  // token id's bytes are arena_[offsets_[id], offsets_[id+1])
  std::vector<bool> special_;
  StringIndex model_by_bytes_;                                  // views into arena_
  std::unordered_map<std::string, int32_t> model_by_odd_text_;  // texts not in the alphabet
  std::unordered_map<std::string, int32_t> added_by_content_;
};

}  // namespace hibana
