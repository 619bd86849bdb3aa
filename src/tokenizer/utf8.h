// UTF-8 scanning and repair shared by the tokenizer's stages (internal to src/tokenizer/).
//
// Invalid input is repaired the way Rust's String::from_utf8_lossy and Python's
// bytes.decode(errors="replace") do it: every maximal ill-formed subpart (Unicode 15, section 3.9,
// "U+FFFD substitution of maximal subparts") becomes one U+FFFD. The tokenizers package's ByteLevel
// decoder uses from_utf8_lossy, so decode() must agree with it byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hibana::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length (1..4) of the well-formed sequence starting at s[i]; 0 when the bytes there are not one.
size_t sequence_length(std::string_view s, size_t i);

// Length of the maximal ill-formed subpart starting at s[i] (call only where sequence_length is
// 0): how many bytes one U+FFFD replaces.
size_t invalid_length(std::string_view s, size_t i);

// Whether s is well-formed UTF-8 (no surrogates, no overlongs, nothing above U+10FFFF).
bool is_valid(std::string_view s);

// Appends s to out, replacing each maximal ill-formed subpart with U+FFFD.
void append_lossy(std::string_view s, std::string& out);

// The number of bytes (0..3) at the end of s that start a well-formed sequence still waiting for
// its continuation bytes. Bytes that can never complete a character are not counted.
size_t incomplete_tail(std::string_view s);

// Decodes the sequence of `len` bytes at p; the caller knows it is well-formed.
inline char32_t decode(const char* p, size_t len) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  switch (len) {
    case 1:
      return u[0];
    case 2:
      return (char32_t(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    case 3:
      return (char32_t(u[0] & 0x0F) << 12) | (char32_t(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    default:
      return (char32_t(u[0] & 0x07) << 18) | (char32_t(u[1] & 0x3F) << 12) |
             (char32_t(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
  }
}

// Length of the sequence whose lead byte is b, for well-formed text (1 for stray bytes).
inline size_t lead_length(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void append_codepoint(char32_t cp, std::string& out);

}  // namespace hibana::utf8
