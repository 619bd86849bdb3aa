// bpe_encode_fuzz: Tokenizer::encode of arbitrary bytes, with and without added-token parsing.
//
// Always: encode neither throws nor crashes, every id is a real token, decode of the ids is
// valid UTF-8, and encoding is deterministic (the word cache changes nothing).
// For valid UTF-8 already in NFC (the tokenizer's own NFC): decode(encode(x, false)) == x; when x
// also holds no added token's text, parse_special makes no difference.
#pragma once

#include <string_view>
#include <vector>

#include "fuzz/checks/check.h"
#include "fuzz/checks/qwen3_fixture.h"

namespace hibana::fuzz {

inline void check_bpe_encode(const TokenizerFixture& fx, std::string_view text) {
  const Tokenizer& tok = *fx.tokenizer;
  std::vector<int32_t> ids[2];
  for (int parse_special = 0; parse_special < 2; ++parse_special) {
    std::vector<int32_t>& out = ids[parse_special];
    out = tok.encode(text, parse_special != 0);
    for (int32_t id : out) {
      FUZZ_REQUIRE(id >= 0 && id < tok.vocab_size(), "id out of range: " + std::to_string(id));
      FUZZ_REQUIRE(!tok.token_bytes(id).empty(), "id without a token: " + std::to_string(id));
    }
    FUZZ_REQUIRE(is_valid_utf8(tok.decode(out)), "decode produced invalid UTF-8");
    FUZZ_REQUIRE(tok.encode(text, parse_special != 0) == out, "encoding is not deterministic");
  }

  if (!is_valid_utf8(text)) return;
  std::string buffer;
  if (fx.nfc.normalize(text, buffer) != text) return;
  FUZZ_REQUIRE(tok.decode(ids[0]) == text, "decode(encode(x)) != x for NFC text");
  for (const std::string& added : fx.added_tokens)
    if (text.find(added) != std::string_view::npos) return;
  FUZZ_REQUIRE(ids[1] == ids[0], "parse_special changed text without added tokens");
}

}  // namespace hibana::fuzz
