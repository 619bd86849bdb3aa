#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace hibana::byte_level {

namespace {

constexpr std::array<char32_t, 256> make_byte_to_char() {
  // Printable Latin-1 bytes stand for themselves; the others, in byte order, take the code
  // points from U+0100 up.
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

constexpr std::array<char32_t, 256> kByteToChar = make_byte_to_char();
constexpr char32_t kCharLimit = 256 + 68;  // every stand-in is below this

constexpr std::array<int16_t, kCharLimit> make_char_to_byte() {
  std::array<int16_t, kCharLimit> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToChar[b]] = static_cast<int16_t>(b);
  return table;
}

constexpr std::array<int16_t, kCharLimit> kCharToByte = make_char_to_byte();

}  // namespace

const std::array<char32_t, 256>& byte_to_char() {
  return kByteToChar;
}

std::optional<std::string> text_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = utf8::sequence_length(text, i);
    if (len == 0) return std::nullopt;
    const char32_t cp = utf8::decode(text.data() + i, len);
    if (cp >= kCharLimit || kCharToByte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(kCharToByte[cp]));
    i += len;
  }
  return out;
}

std::string bytes_to_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::append_codepoint(kByteToChar[static_cast<unsigned char>(c)], out);
  return out;
}

std::string decoded_bytes(std::string_view text) {
  std::optional<std::string> bytes = text_to_bytes(text);
  return bytes ? std::move(*bytes) : std::string(text);
}

}  // namespace hibana::byte_level
