// GPT-2's byte-level alphabet: every byte has a printable stand-in character, so a vocabulary of
// byte strings can be written as text (byte 0x20, the space, is written "Ġ"). Internal to
// src/tokenizer/.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace hibana::byte_level {

// The stand-in code point of each byte (GPT-2's bytes_to_unicode()).
const std::array<char32_t, 256>& byte_to_char();

// Vocabulary text -> the bytes it stands for; nullopt when some character is not a stand-in.
std::optional<std::string> text_to_bytes(std::string_view text);

// Bytes -> vocabulary text.
std::string bytes_to_text(std::string_view bytes);

// What the tokenizers package's ByteLevel decoder makes of one token's text: its bytes when every
// character is a stand-in, else the text's own UTF-8 bytes.
std::string decoded_bytes(std::string_view text);

}  // namespace hibana::byte_level
