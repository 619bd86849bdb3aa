// Finding added tokens (<|im_start|>, <think>, ...) in text, as the tokenizers package's
// AddedVocabulary does: at the leftmost position where any token matches, the longest token
// there wins; single_word, lstrip and rstrip then apply (internal to src/tokenizer/).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace hibana {

class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin;  // including whitespace taken by lstrip
    size_t end;    // including whitespace taken by rstrip
    int32_t id;
  };

  // `content` is what is searched for (the normalised form for normalized tokens).
  void add(std::string content, const AddedTokenSpec& token);
  bool empty() const { return tokens_.empty(); }

  // The next match in text at or after `from`; whitespace before it is only taken back to
  // `from` (the end of the previous match). Returns false when there is none.
  bool find(std::string_view text, size_t from, Match& match) const;

  // Calls on_text(string_view) for the text between matches (never empty) and on_token(id) for
  // each match, in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t pos = 0;
    Match m;
    while (pos < text.size() && find(text, pos, m)) {
      if (m.begin > pos) on_text(text.substr(pos, m.begin - pos));
      on_token(m.id);
      pos = m.end;
    }
    if (pos < text.size()) on_text(text.substr(pos));
  }

 private:
  struct Token {
    std::string content;
    int32_t id;
    bool single_word, lstrip, rstrip;
  };
  std::vector<Token> tokens_;
  // Tokens by first byte, longest first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
  int first_byte_count_ = 0;
  unsigned char only_first_byte_ = 0;  // when first_byte_count_ == 1: memchr for it
};

}  // namespace hibana
