// What the fuzz checks share: how a check fails, a reader that turns fuzzer bytes into choices,
// and an independent UTF-8 validator (not the tokenizer's own, which is under test).
//
// A check is a function of the input bytes. It returns normally when the code under test
// behaved, throws CheckFailure when a property it asserts is broken, and lets any unexpected
// exception escape; the fuzz target turns both into a crash, the replay test into a failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hibana::fuzz {

struct CheckFailure : std::logic_error {
  using std::logic_error::logic_error;
};

#define FUZZ_REQUIRE(cond, message)                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      throw ::hibana::fuzz::CheckFailure(std::string(message) + " [" #cond "]"); \
    }                                                                            \
  } while (0)

// Reads fuzzer bytes front to back; past the end every read yields zero.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  explicit ByteReader(std::string_view s)
      : ByteReader(reinterpret_cast<const uint8_t*>(s.data()), s.size()) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return empty() ? 0 : size_ - pos_; }
  uint8_t byte() { return empty() ? 0 : data_[pos_++]; }
  uint32_t u16() {
    uint32_t hi = byte();
    return (hi << 8) | byte();
  }
  std::string_view rest() {
    std::string_view r(reinterpret_cast<const char*>(data_) + pos_, remaining());
    pos_ = size_;
    return r;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above U+10FFFF.
inline bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if (b >= 0xC2 && b <= 0xDF) {
      n = 2;
      cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 3;
      cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 4;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n;
  }
  return true;
}

// The text with invalid bytes replaced by '?', so that generated inputs are valid UTF-8.
inline std::string force_utf8(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 0;
    for (size_t len = 1; len <= 4 && i + len <= s.size() && n == 0; ++len)
      if (is_valid_utf8(s.substr(i, len))) n = len;
    if (n == 0) {
      out.push_back('?');
      n = 1;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace hibana::fuzz
