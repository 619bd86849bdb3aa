#include "tokenizer/utf8.h"

namespace hibana::utf8 {

namespace {

// For a lead byte: how many bytes its sequence has, and the range its second byte must fall in
// (the first continuation byte carries the overlong, surrogate and > U+10FFFF restrictions).
struct LeadInfo {
  uint8_t length;  // 0: never a lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation bytes and the overlong leads C0, C1
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

// How many bytes from s[i] on agree with a well-formed sequence (at least 1 when s[i] is a lead
// byte), and the length that sequence needs.
size_t matching_prefix(std::string_view s, size_t i, size_t* needed) {
  const auto b = static_cast<unsigned char>(s[i]);
  const LeadInfo info = lead_info(b);
  *needed = info.length;
  if (info.length <= 1) return info.length;
  size_t k = 1;
  for (; k < info.length && i + k < s.size(); ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    const bool ok =
        k == 1 ? (c >= info.second_lo && c <= info.second_hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
  }
  return k;
}

}  // namespace

size_t sequence_length(std::string_view s, size_t i) {
  size_t needed = 0;
  const size_t k = matching_prefix(s, i, &needed);
  return k == needed ? k : 0;
}

size_t invalid_length(std::string_view s, size_t i) {
  size_t needed = 0;
  const size_t k = matching_prefix(s, i, &needed);
  return k == 0 ? 1 : k;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII runs are the common case: check eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      __builtin_memcpy(&word, s.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = sequence_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

void append_lossy(std::string_view s, std::string& out) {
  size_t i = 0;
  size_t run_start = 0;  // start of the well-formed run not yet copied
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = sequence_length(s, i);
    if (len != 0) {
      i += len;
      continue;
    }
    out.append(s.substr(run_start, i - run_start));
    out.append(kReplacement);
    i += invalid_length(s, i);
    run_start = i;
  }
  out.append(s.substr(run_start));
}

size_t incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80 && b < 0xC0) continue;  // a continuation byte: its lead is further back
    size_t needed = 0;
    const size_t k = matching_prefix(s, i, &needed);
    // Held back only when every byte from the lead to the end fits and more are needed.
    return (k == back && needed > back) ? back : 0;
  }
  return 0;
}

void append_codepoint(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace hibana::utf8
