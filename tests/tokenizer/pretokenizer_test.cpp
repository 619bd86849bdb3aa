// The pre-tokenizer regexes on PCRE2.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer_spec.h"

namespace hibana {
namespace {

std::vector<std::string> pieces(const RegexSplitter& splitter, std::string_view text) {
  auto scratch = splitter.make_scratch();
  std::vector<Piece> out;
  splitter.split(text, *scratch, out);
  std::vector<std::string> strings;
  for (const Piece& p : out) strings.emplace_back(text.substr(p.begin, p.end - p.begin));
  return strings;
}

using Strings = std::vector<std::string>;

TEST(PreTokenizer, WhiteSpaceIsRewrittenToUnicodeWhiteSpace) {
  EXPECT_EQ(to_pcre2_pattern(R"(\s+(?!\S))"),
            R"([\t\n\x{0B}\f\r\x{85}\p{Z}]+(?![^\t\n\x{0B}\f\r\x{85}\p{Z}]))");
  EXPECT_EQ(to_pcre2_pattern(R"([^\s\p{L}])"), R"([^\t\n\x{0B}\f\r\x{85}\p{Z}\p{L}])");
  EXPECT_EQ(to_pcre2_pattern(R"([]\s]\\s)"), R"([]\t\n\x{0B}\f\r\x{85}\p{Z}]\\s)");
}

TEST(PreTokenizer, Qwen2Pattern) {
  RegexSplitter splitter({kQwen2SplitPattern}, "test");
  EXPECT_EQ(pieces(splitter, "Hello world"), (Strings{"Hello", " world"}));
  EXPECT_EQ(pieces(splitter, "I'M here's"), (Strings{"I", "'M", " here", "'s"}));
  EXPECT_EQ(pieces(splitter, "x = 12;\n\n  y"),
            (Strings{"x", " =", " ", "1", "2", ";\n\n", " ", " y"}));
  EXPECT_EQ(pieces(splitter, "a  \n b"), (Strings{"a", "  \n", " b"}));
  EXPECT_EQ(pieces(splitter, "中文，测试"), (Strings{"中文", "，测试"}));
  EXPECT_EQ(pieces(splitter, "x\u180ey"), (Strings{"x", "\u180ey"}));  // not White_Space
  EXPECT_EQ(pieces(splitter, "end   "), (Strings{"end", "   "}));
  EXPECT_TRUE(pieces(splitter, "").empty());
}

TEST(PreTokenizer, GapsBetweenMatchesArePieces) {
  RegexSplitter splitter({"a+"}, "test");
  EXPECT_EQ(pieces(splitter, "xaay"), (Strings{"x", "aa", "y"}));
  EXPECT_EQ(pieces(splitter, "bb"), (Strings{"bb"}));
  RegexSplitter empty_matches({"a*"}, "test");
  EXPECT_EQ(pieces(empty_matches, "baab"), (Strings{"b", "aa", "b"}));
}

TEST(PreTokenizer, BadPatternNamesTheSource) {
  try {
    RegexSplitter splitter({"(a"}, "some/tokenizer.json");
    FAIL() << "compiled";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("some/tokenizer.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace hibana
