// The UTF-8 helpers against Python's bytes.decode("utf-8", "replace"), which follows the same
// "maximal subpart" rule as Rust's String::from_utf8_lossy.
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace hibana {
namespace {

std::string lossy(std::string_view s) {
  std::string out;
  utf8::append_lossy(s, out);
  return out;
}

TEST(Utf8, Validity) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("plain ascii that is longer than eight bytes"));
  EXPECT_TRUE(utf8::is_valid("é中😀\U0010FFFF\uD7FF\uE000"));
  EXPECT_FALSE(utf8::is_valid("\xC0\x80"));          // overlong
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::is_valid("abcdefgh\xE2\x82"));  // truncated after an ASCII run
  EXPECT_FALSE(utf8::is_valid("\x80"));
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  const std::string r = "\uFFFD";
  EXPECT_EQ(lossy("\xE4\xBD"), r);
  EXPECT_EQ(lossy("\xFF"), r);
  EXPECT_EQ(lossy("\xC0\x80"), r + r);
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(lossy("\xF0\x9F\x98"
                  "a"),
            r + "a");
  EXPECT_EQ(lossy("a\xE2\x82"), "a" + r);
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(lossy("\xE0\x80\xAF"), r + r + r);
  EXPECT_EQ(lossy("\xF0\x9F\x98\x80\x80"), "😀" + r);
  EXPECT_EQ(lossy("ok"), "ok");
  EXPECT_EQ(lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + r + r + r + "b" + r + "c" + r + r + "d");  // Unicode 15, table 3-8
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail(""), 0u);
  EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE2\x82\xAC"), 0u);  // complete
  EXPECT_EQ(utf8::incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("\xF0\x80"), 0u);  // can never complete
  EXPECT_EQ(utf8::incomplete_tail("\xED\xA0"), 0u);  // would be a surrogate
  EXPECT_EQ(utf8::incomplete_tail("\x80\x80\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("\xC3"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("\xFF"), 0u);
}

}  // namespace
}  // namespace hibana
