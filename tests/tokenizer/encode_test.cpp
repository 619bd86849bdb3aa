// Encoding with the real Qwen vocabulary. Every expected id list here was produced by the
// tokenizers package 0.23.2 (its npm binding, the same Rust code as the Python one) on
// ../shared/assets/qwen3-tokenizer/tokenizer.json, and the short ones checked by hand against
// vocab.json/merges.txt ("Hello" = 9707, "Ġworld" = 1879, "Ċ" = 198, "user" = 872, merges
// "H e" rank 1264 and "Ġw orld" rank 1624).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "qwen_tokenizers.h"

namespace hibana {
namespace {

using Ids = std::vector<int32_t>;
using test::qwen2;
using test::qwen3;

struct Case {
  const char* text;
  Ids ids;
};

TEST(Encode, KnownEncodings) {
  const std::vector<Case> cases = {
      {"Hello world", {9707, 1879}},
      {"  leading spaces", {220, 6388, 12621}},
      {"The year 2024 has 366 days.",
       {785, 1042, 220, 17, 15, 17, 19, 702, 220, 18, 21, 21, 2849, 13}},
      {"你好，世界", {108386, 3837, 99489}},
      {"café", {924, 58858}},
      {"😀👍🏽", {141334, 144349, 145375}},
      {"I'm here, they'll go", {40, 2776, 1588, 11, 807, 3278, 728}},
      {"def f(x):\n    return x\n", {750, 282, 2075, 982, 262, 470, 856, 198}},
      // U+180E is not White_Space (PCRE2's own \s would say it is); U+00A0 and U+0085 are.
      {"x\u180ey", {87, 123970, 236, 88}},
      {"a\u00a0b", {64, 4102, 65}},
      {"\u0085", {126, 227}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(qwen3().encode(c.text), c.ids) << c.text;
    EXPECT_EQ(qwen2().encode(c.text), c.ids) << c.text;
  }
}

TEST(Encode, EmptyText) {
  EXPECT_TRUE(qwen3().encode("").empty());
  EXPECT_TRUE(qwen3().encode("", false).empty());
}

TEST(Encode, TextIsNfcNormalised) {
  // "e" + COMBINING ACUTE ACCENT encodes as the precomposed "é".
  EXPECT_EQ(qwen3().encode("cafe\u0301"), qwen3().encode("caf\u00e9"));
  EXPECT_EQ(qwen3().encode("\u1100\u1161\u11a8"), qwen3().encode("\uac01"));  // Hangul jamo
  // With tokenizers' Unicode 9.0 data: U+1AC1 (Unicode 13) is not reordered after U+0316, and
  // U+11935 U+11930 (Unicode 13) do not compose.
  EXPECT_EQ(qwen3().encode("a\u1ac1\u0316"), (Ids{64, 157, 104, 223, 136, 244}));
  EXPECT_EQ(qwen3().encode("\U00011935\U00011930"), (Ids{128240, 97, 113, 128240, 97, 108}));
  EXPECT_EQ(qwen3().encode("e\u0301\u1ac1"), (Ids{963, 157, 104, 223}));
}

TEST(Encode, SpecialTokensAreMatchedWhole) {
  EXPECT_EQ(qwen3().encode("<|im_start|>user\nHello<|im_end|>\n"),
            (Ids{151644, 872, 198, 9707, 151645, 198}));
  // <think> and </think> are added but not special: still matched whole.
  EXPECT_EQ(qwen3().encode("<think>\nok\n</think>\n\n"), (Ids{151667, 198, 562, 198, 151668, 271}));
  EXPECT_EQ(qwen3().encode("Hello world <|im_start|>user\n你好 <think>"),
            (Ids{9707, 1879, 220, 151644, 872, 198, 108386, 220, 151667}));
  // Not quite a special token: ordinary text.
  EXPECT_EQ(qwen3().encode("<|im_start|"), (Ids{27, 91, 318, 4906, 91}));
  EXPECT_EQ(qwen3().encode("<|im_start|><|im_end|>"), (Ids{151644, 151645}));
}

TEST(Encode, ParseSpecialFalseEncodesAddedTokensAsText) {
  // Expected: the tokenizers package on a copy of tokenizer.json with no added tokens.
  EXPECT_EQ(qwen3().encode("<|im_start|>user\nHi<|im_end|>", false),
            (Ids{27, 91, 318, 4906, 91, 29, 872, 198, 13048, 27, 91, 318, 6213, 91, 29}));
  EXPECT_EQ(qwen3().encode("<think>x</think>", false), (Ids{13708, 766, 28257, 522, 26865, 29}));
  const std::string text = "<tool_call>\n{\"name\": \"f\"}\n</tool_call>";
  EXPECT_EQ(qwen3().encode(text, false),
            (Ids{27, 14172, 13429, 397, 4913, 606, 788, 330, 69, 16707, 522, 14172, 13429, 29}));
  EXPECT_EQ(qwen3().decode(qwen3().encode(text, false)), text);
}

TEST(Encode, BothFileFormsGiveTheSameIds) {
  const std::string text =
      "Hello world! <|im_start|>system\nYou are helpful.<|im_end|>\n"
      "def main():\n\tprint(\"héllo\", 3.14159)  # comment\r\n"
      "Москва — столица России. Ελληνικά. العربية עברית हिन्दी ภาษาไทย\n"
      "中文分词器，日本語のテキスト、한국어 텍스트 "
      "😀👍🏽👨‍👩‍👧‍👦 "
      "🇯🇵\n"
      "    indented\n\n\n   trailing   \u00a0\u3000 x\u180ey It's THEY'LL 1234567890";
  EXPECT_EQ(qwen2().encode(text), qwen3().encode(text));
  EXPECT_EQ(qwen2().encode(text, false), qwen3().encode(text, false));
  // <think> is an added token only in the Qwen3 files.
  EXPECT_EQ(qwen2().encode("<think>x</think>"), (Ids{13708, 766, 28257, 522, 26865, 29}));
}

TEST(Encode, InvalidUtf8IsReplacedNotFatal) {
  // Invalid bytes become U+FFFD (one per maximal ill-formed subpart) before tokenizing.
  EXPECT_EQ(qwen3().encode("abc\xff\xfe def"), qwen3().encode("abc\uFFFD\uFFFD def"));
  EXPECT_EQ(qwen3().encode("tail\xe2\x82"), qwen3().encode("tail\uFFFD"));
  EXPECT_EQ(qwen3().encode("\xed\xa0\x80"), qwen3().encode("\uFFFD\uFFFD\uFFFD"));
  const std::string with_nul("nul\0byte", 8);
  EXPECT_EQ(qwen3().decode(qwen3().encode(with_nul)), with_nul);
}

TEST(Encode, LongRunsOfOneClass) {
  // One pre-token of a megabyte, and long runs the regex must scan without running out of
  // JIT stack.
  const std::vector<std::string> texts = {std::string(1 << 20, 'a'), std::string(100000, ' '),
                                          std::string(50000, '\n'), std::string(30000, '1')};
  std::string cjk;
  for (int i = 0; i < 30000; ++i) cjk += "中文";
  for (const std::string& text : {texts[0], texts[1], texts[2], texts[3], cjk}) {
    const Ids ids = qwen3().encode(text);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(qwen3().decode(ids), text);
  }
}

TEST(Encode, ConcurrentCallsAgree) {
  const std::string text = "Concurrent encoding 並行 😀 <|im_end|> 12345 \n\n  x";
  const Ids expected = qwen3().encode(text);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i)
        mismatches[t] += qwen3().encode(text + std::to_string(i % 3)) !=
                         qwen3().encode(text + std::to_string(i % 3));
      mismatches[t] += qwen3().encode(text) != expected;
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(Vocabulary, SizesIdsAndSpecialFlags) {
  EXPECT_EQ(qwen3().vocab_size(), 151669);  // 151643 model tokens + 26 added (151643..151668)
  EXPECT_EQ(qwen2().vocab_size(), 151646);  // + 3 added tokens in tokenizer_config.json
  EXPECT_EQ(qwen3().token_id("<|im_end|>"), 151645);
  EXPECT_EQ(qwen3().token_id("<think>"), 151667);
  EXPECT_EQ(qwen3().token_id("Ġworld"), 1879);  // model tokens by their vocabulary text
  EXPECT_EQ(qwen3().token_id("Hello"), 9707);
  EXPECT_FALSE(qwen3().token_id("no such token here").has_value());
  EXPECT_FALSE(qwen2().token_id("<think>").has_value());
  EXPECT_TRUE(qwen3().is_special(151643));
  EXPECT_TRUE(qwen3().is_special(151644));
  EXPECT_TRUE(qwen3().is_special(151656));
  EXPECT_FALSE(qwen3().is_special(151657));  // <tool_call>
  EXPECT_FALSE(qwen3().is_special(151667));  // <think>
  EXPECT_FALSE(qwen3().is_special(9707));
  EXPECT_FALSE(qwen3().is_special(-1));
  EXPECT_FALSE(qwen3().is_special(10000000));
  EXPECT_EQ(qwen3().token_bytes(1879), " world");
  EXPECT_EQ(qwen3().token_bytes(151644), "<|im_start|>");
  EXPECT_EQ(qwen3().token_bytes(160), "\xe4");  // a lone byte
  EXPECT_EQ(qwen3().token_bytes(-5), "");
}

TEST(Load, AcceptsTheTokenizerJsonFileItself) {
  auto tok = Tokenizer::load(test::qwen3_tokenizer_dir() + "/tokenizer.json");
  EXPECT_EQ(tok->encode("Hello world"), (Ids{9707, 1879}));
}

}  // namespace
}  // namespace hibana
