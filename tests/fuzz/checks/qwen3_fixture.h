// The tokenizer the tokenizer fuzz checks run against: the real Qwen3 tokenizer from
// ../shared/assets (HIBANA_SHARED_ASSETS overrides), loaded once per process, with what the
// checks need to know about it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "support/paths.h"
#include "tokenizer/nfc.h"
#include "tokenizer/tokenizer.h"

namespace hibana::fuzz {

struct TokenizerFixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::string>
      added_tokens;  // the text of every added token (<|im_end|>, <think>, ...)
  std::array<int32_t, 256> byte_token{};  // the id of the one-byte token of each byte
  NfcNormalizer nfc;                      // the tokenizer's own NFC, to know which text it keeps
};

inline const TokenizerFixture& qwen3_fixture() {
  static const std::unique_ptr<TokenizerFixture> fixture = [] {
    const std::string dir = test::shared_assets() + "/qwen3-tokenizer";
    auto f = std::make_unique<TokenizerFixture>();
    f->tokenizer = Tokenizer::load(dir);
    const auto json = nlohmann::json::parse(read_text_file(dir + "/tokenizer.json"));
    for (const auto& t : json.at("added_tokens")) f->added_tokens.push_back(t.at("content"));
    f->byte_token.fill(-1);
    for (int32_t id = 0; id < f->tokenizer->vocab_size(); ++id) {
      const std::string bytes = f->tokenizer->token_bytes(id);
      if (bytes.size() == 1) f->byte_token[static_cast<unsigned char>(bytes[0])] = id;
    }
    return f;
  }();
  return *fixture;
}

}  // namespace hibana::fuzz
