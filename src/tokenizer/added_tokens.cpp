#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "tokenizer/utf8.h"

namespace hibana {

namespace {

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  if (cp == 0x85) return true;
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL ||
         category == UTF8PROC_CATEGORY_ZP;
}

// A "word" character for single_word: letters, marks, decimal digits and connector punctuation
// (close to Rust regex's \w, which the tokenizers package uses).
bool is_word_char(char32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point ending just before byte `i` (text is well-formed UTF-8, i > 0).
char32_t previous_char(std::string_view text, size_t i, size_t* start) {
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) --j;
  *start = j;
  return utf8::decode(text.data() + j, i - j);
}

char32_t next_char(std::string_view text, size_t i, size_t* len) {
  *len = utf8::lead_length(static_cast<unsigned char>(text[i]));
  return utf8::decode(text.data() + i, *len);
}

}  // namespace

void AddedTokenMatcher::add(std::string content, const AddedTokenSpec& token) {
  if (content.empty()) return;  // tokenizers ignores empty added tokens
  const auto first = static_cast<unsigned char>(content[0]);
  if (by_first_byte_[first].empty()) {
    ++first_byte_count_;
    only_first_byte_ = first;
  }
  tokens_.push_back({std::move(content), token.id, token.single_word, token.lstrip, token.rstrip});
  auto& list = by_first_byte_[first];
  list.push_back(static_cast<uint32_t>(tokens_.size() - 1));
  std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
    return tokens_[a].content.size() > tokens_[b].content.size();
  });
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, Match& match) const {
  if (tokens_.empty()) return false;
  const size_t n = text.size();
  size_t pos = from;
  while (pos < n) {
    if (first_byte_count_ == 1) {
      const void* hit = std::memchr(text.data() + pos, only_first_byte_, n - pos);
      if (!hit) return false;
      pos = static_cast<const char*>(hit) - text.data();
    } else {
      while (pos < n && by_first_byte_[static_cast<unsigned char>(text[pos])].empty()) ++pos;
      if (pos >= n) return false;
    }
    const Token* found = nullptr;
    for (uint32_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const Token& t = tokens_[index];
      if (text.substr(pos).starts_with(t.content)) {
        found = &t;
        break;
      }
    }
    if (!found) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    size_t end = pos + found->content.size();
    if (found->single_word) {
      size_t unused = 0;
      const bool word_before = begin > from && is_word_char(previous_char(text, begin, &unused));
      const bool word_after = end < n && is_word_char(next_char(text, end, &unused));
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (found->lstrip) {
      while (begin > from) {
        size_t start = 0;
        if (!is_white_space(previous_char(text, begin, &start))) break;
        begin = start;
      }
    }
    if (found->rstrip) {
      while (end < n) {
        size_t len = 0;
        if (!is_white_space(next_char(text, end, &len))) break;
        end += len;
      }
    }
    match = {begin, end, found->id};
    return true;
  }
  return false;
}

}  // namespace hibana
