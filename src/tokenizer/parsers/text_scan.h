// Small scanning helpers shared by the output parsers.
#pragma once

#include <initializer_list>
#include <string_view>

namespace hibana::parsers {

// The first index from which `text` could still grow into one of `tags`: text[i:] is a proper
// prefix of a tag. Returns text.size() when no suffix can. Everything before the index can be
// released; the rest is held back until more text arrives.
inline size_t partial_tag_start(std::string_view text,
                                std::initializer_list<std::string_view> tags) {
  size_t longest = 0;
  for (std::string_view tag : tags) longest = std::max(longest, tag.size());
  size_t from = text.size() > longest ? text.size() - longest + 1 : 0;
  for (size_t i = from; i < text.size(); ++i) {
    std::string_view tail = text.substr(i);
    for (std::string_view tag : tags)
      if (tail.size() < tag.size() && tag.substr(0, tail.size()) == tail) return i;
  }
  return text.size();
}

inline bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

inline size_t skip_spaces(std::string_view text, size_t i = 0) {
  while (i < text.size() && is_space(text[i])) ++i;
  return i;
}

// Whether text (after leading spaces) is a proper prefix of `tag`: more text could complete it.
inline bool could_become(std::string_view text, std::string_view tag) {
  text = text.substr(skip_spaces(text));
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

}  // namespace hibana::parsers
