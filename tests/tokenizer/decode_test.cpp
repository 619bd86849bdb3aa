// decode(): the bytes of the tokens, with invalid UTF-8 replaced as the tokenizers package's
// ByteLevel decoder does (String::from_utf8_lossy: one U+FFFD per maximal ill-formed
// subpart). The expected strings were checked against tokenizers 0.23.2's decode() and
// Python's bytes.decode("utf-8", "replace").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qwen_tokenizers.h"

namespace hibana {
namespace {

using Ids = std::vector<int32_t>;
using test::qwen3;

TEST(Decode, RoundTripsText) {
  const std::vector<std::string> texts = {
      "Hello world",
      "  leading and trailing  ",
      "\n\n\t\r\n",
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n\n4",
      "int main() { return 0; }\n",
      "Москва, Αθήνα, القاهرة, ירושלים, नई दिल्ली, กรุงเทพ, 北京, 東京, 서울",
      "👨‍👩‍👧‍👦 👍🏽 🇯🇵 🏳️‍🌈 1️⃣",
      "\u00a0\u3000\u2028\u180e\u200b",
      std::string(1000, ' ') + "x",
      "ǅ ǈ ǋ ǲ ﬁ ﬂ ẞ ß İ ı",
  };
  for (const std::string& text : texts) {
    EXPECT_EQ(qwen3().decode(qwen3().encode(text)), text) << text;
    EXPECT_EQ(qwen3().decode(qwen3().encode(text, false)), text) << text;
  }
}

TEST(Decode, InvalidUtf8BecomesReplacementCharacters) {
  // Token ids of lone bytes: 0xE4 -> 160, 0xBD -> 121, 0xFF -> 187, 0xC0 -> 124, 0x80 -> 222,
  // 0xED -> 169, 0xA0 -> 254, 0xF0 -> 172, 0x9F -> 253, 0x98 -> 246, 'a' -> 64, 0xE2 -> 158,
  // 0x82 -> 224, 0xF4 -> 176, 0x90 -> 238, 0xE0 -> 156, 0xAF -> 107, 0xC3 -> 127.
  const std::string r = "\uFFFD";
  EXPECT_EQ(qwen3().decode(Ids{160, 121}), r);               // E4 BD: truncated, one subpart
  EXPECT_EQ(qwen3().decode(Ids{187}), r);                    // FF never appears in UTF-8
  EXPECT_EQ(qwen3().decode(Ids{124, 222}), r + r);           // C0 80: overlong
  EXPECT_EQ(qwen3().decode(Ids{169, 254, 222}), r + r + r);  // ED A0 80: a surrogate
  EXPECT_EQ(qwen3().decode(Ids{172, 253, 246, 64}), r + "a");
  EXPECT_EQ(qwen3().decode(Ids{64, 158, 224}), "a" + r);
  EXPECT_EQ(qwen3().decode(Ids{176, 238, 222, 222}), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(qwen3().decode(Ids{156, 222, 107}), r + r + r);           // E0 80 AF: overlong
  EXPECT_EQ(qwen3().decode(Ids{172, 253, 246, 222, 222}), "😀" + r);
  EXPECT_EQ(qwen3().decode(Ids{127}), r);
}

TEST(Decode, SkipSpecialDropsOnlySpecialTokens) {
  const Ids ids = {151644, 872, 151667, 151645};
  EXPECT_EQ(qwen3().decode(ids), "<|im_start|>user<think><|im_end|>");
  EXPECT_EQ(qwen3().decode(ids, true), "user<think>");  // <think> is not special
}

TEST(Decode, UnknownIdsAreSkipped) {
  // As tokenizers does: ids without a token contribute nothing.
  EXPECT_EQ(qwen3().decode(Ids{9707, 999999, -1, 1879, 151669}), "Hello world");
  EXPECT_EQ(qwen3().decode(Ids{}), "");
}

}  // namespace
}  // namespace hibana
