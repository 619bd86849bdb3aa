// detokenize_fuzz: StreamDecoder over an arbitrary id sequence.
//
// The input is a list of ids, each chosen by a tag byte: a one-byte token (to build partial and
// invalid UTF-8 sequences), any id modulo the vocabulary, or an id without a token (negative,
// past the end). Checked: every push() and flush() returns valid UTF-8; what push() has returned
// after each id is decode() of the ids so far, less at most one U+FFFD standing for a held-back
// incomplete character (bytes that can never complete one come out at once); push()* + flush()
// equals decode() of all the ids.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fuzz/checks/check.h"
#include "fuzz/checks/qwen3_fixture.h"

namespace hibana::fuzz {

inline std::vector<int32_t> ids_from_bytes(const TokenizerFixture& fx, ByteReader& in) {
  const auto vocab = static_cast<int32_t>(fx.tokenizer->vocab_size());
  std::vector<int32_t> ids;
  while (!in.empty()) {
    const uint8_t tag = in.byte();
    switch (tag >> 6) {
      case 0:
      case 1:
        ids.push_back(fx.byte_token[in.byte()]);
        break;
      case 2:
        ids.push_back(static_cast<int32_t>((((tag & 0x3Fu) << 16) | in.u16()) % vocab));
        break;
      default: {
        const int32_t odd[] = {-1, vocab, vocab + 1, std::numeric_limits<int32_t>::min(),
                               std::numeric_limits<int32_t>::max()};
        const uint32_t k = tag & 0x3F;
        ids.push_back(k < 5 ? odd[k] : vocab - 1 - static_cast<int32_t>(k - 5));  // added tokens
        break;
      }
    }
  }
  return ids;
}

inline void check_detokenize(const TokenizerFixture& fx, std::string_view data) {
  const Tokenizer& tok = *fx.tokenizer;
  ByteReader in(data);
  const std::vector<int32_t> ids = ids_from_bytes(fx, in);
  const std::string replacement = "\xEF\xBF\xBD";

  StreamDecoder decoder(tok);
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = decoder.push(ids[i]);
    FUZZ_REQUIRE(is_valid_utf8(piece), "push() returned invalid UTF-8 at id " + std::to_string(i));
    streamed += piece;
    const std::string so_far = tok.decode(std::span(ids.data(), i + 1));
    FUZZ_REQUIRE(so_far == streamed || so_far == streamed + replacement,
                 "push() held back more than an incomplete character at id " + std::to_string(i));
  }
  const std::string tail = decoder.flush();
  FUZZ_REQUIRE(is_valid_utf8(tail), "flush() returned invalid UTF-8");
  streamed += tail;
  const std::string all = tok.decode(ids);
  FUZZ_REQUIRE(is_valid_utf8(all), "decode() returned invalid UTF-8");
  FUZZ_REQUIRE(streamed == all, "push()* + flush() differs from decode()");
  FUZZ_REQUIRE(decoder.flush().empty(), "a second flush() returned text");
}

}  // namespace hibana::fuzz
