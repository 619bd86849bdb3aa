// StreamDecoder: never a partial UTF-8 sequence out, never a byte lost, whatever the token
// boundaries; push()* + flush() equals decode() of the same ids.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "qwen_tokenizers.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace hibana {
namespace {

using Ids = std::vector<int32_t>;
using test::qwen3;

// The id of the token standing for one byte.
int32_t byte_token(unsigned char b) {
  std::string text;
  utf8::append_codepoint(byte_level::byte_to_char()[b], text);
  return *qwen3().token_id(text);
}

// Ids that spell `bytes` with one token per byte, so that every byte boundary is a token
// boundary.
Ids byte_tokens(std::string_view bytes) {
  Ids ids;
  for (char c : bytes) ids.push_back(byte_token(static_cast<unsigned char>(c)));
  return ids;
}

// Streams ids, checking that every piece is well-formed; returns the concatenation.
std::string stream(const Ids& ids) {
  StreamDecoder decoder(qwen3());
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = decoder.push(id);
    EXPECT_TRUE(utf8::is_valid(piece));
    out += piece;
  }
  const std::string rest = decoder.flush();
  EXPECT_TRUE(utf8::is_valid(rest));
  return out + rest;
}

const std::vector<std::string>& multibyte_texts() {
  static const std::vector<std::string> texts = {"é",
                                                 "中",
                                                 "😀",
                                                 "👍🏽",
                                                 "👨‍👩‍👧‍👦",
                                                 "🇯🇵",
                                                 "a中b😀c",
                                                 "日本語のテキスト",
                                                 "한국어",
                                                 "ภาษาไทย",
                                                 "e\u0301",
                                                 "x\u200dy",
                                                 "\U0010FFFF",
                                                 "\u0800\u07FF\u0080"};
  return texts;
}

TEST(StreamDecoder, EveryByteSplitOfMultibyteText) {
  for (const std::string& text : multibyte_texts()) {
    const Ids ids = byte_tokens(text);
    EXPECT_EQ(stream(ids), text) << text;
    // Two tokens, cut at every byte: the first push must hold back a partial character.
    for (size_t cut = 1; cut < text.size(); ++cut) {
      StreamDecoder decoder(qwen3());
      std::string out;
      for (size_t i = 0; i < cut; ++i) out += decoder.push(ids[i]);
      const size_t held = utf8::incomplete_tail(text.substr(0, cut));
      EXPECT_EQ(out, text.substr(0, cut - held)) << text << " cut " << cut;
      for (size_t i = cut; i < ids.size(); ++i) out += decoder.push(ids[i]);
      out += decoder.flush();
      EXPECT_EQ(out, text);
    }
  }
}

TEST(StreamDecoder, RealTokenizationsOfMixedText) {
  const std::string text =
      "Streaming 中文、日本語、한국어 and emoji 👨‍👩‍👧‍👦👍🏽🇯🇵 "
      "<|im_end|> "
      "ok\n";
  const Ids ids = qwen3().encode(text);
  EXPECT_EQ(stream(ids), text);
}

TEST(StreamDecoder, TruncatedTailComesOutAsReplacementOnFlush) {
  StreamDecoder decoder(qwen3());
  EXPECT_EQ(decoder.push(byte_token('a')), "a");
  EXPECT_EQ(decoder.push(byte_token(0xF0)), "");
  EXPECT_EQ(decoder.push(byte_token(0x9F)), "");
  EXPECT_EQ(decoder.flush(), "\uFFFD");
  EXPECT_EQ(decoder.flush(), "");
}

TEST(StreamDecoder, BytesThatCanNeverCompleteAreNotHeldBack) {
  StreamDecoder decoder(qwen3());
  EXPECT_EQ(decoder.push(byte_token(0xFF)), "\uFFFD");
  EXPECT_EQ(decoder.push(byte_token(0xE0)), "");              // could still become U+0800..
  EXPECT_EQ(decoder.push(byte_token(0x80)), "\uFFFD\uFFFD");  // E0 80 never can
}

TEST(StreamDecoder, RandomBytesMatchDecode) {
  std::mt19937 rng(7);
  // Bytes biased towards UTF-8 lead and continuation bytes so that most streams are a mix of
  // valid and invalid sequences.
  const std::vector<unsigned char> alphabet = {'a',  ' ',  0x80, 0x8F, 0x90, 0x9F, 0xA0,
                                               0xBF, 0xC2, 0xC0, 0xDF, 0xE0, 0xE1, 0xED,
                                               0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
  for (int round = 0; round < 2000; ++round) {
    std::string bytes;
    const size_t n = 1 + rng() % 12;
    for (size_t i = 0; i < n; ++i)
      bytes.push_back(static_cast<char>(alphabet[rng() % alphabet.size()]));
    Ids ids = byte_tokens(bytes);
    // Mix in whole tokens of real text too.
    if (round % 3 == 0) {
      const Ids more = qwen3().encode("中😀x");
      ids.insert(ids.begin() + static_cast<long>(rng() % (ids.size() + 1)), more.begin(),
                 more.end());
    }
    EXPECT_EQ(stream(ids), qwen3().decode(ids)) << "round " << round;
  }
}

}  // namespace
}  // namespace hibana
