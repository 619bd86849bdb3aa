// JSON text rewritten without passing numbers through doubles.
#include <gtest/gtest.h>

#include "tokenizer/json_text.h"

namespace hibana {
namespace {

TEST(JsonText, KeepsNumbersAndNormalisesTheRest) {
  auto t = rewrite_json(
      " {\"a\" :123456789012345678901234567890,\"b\":[ 1E5 ,-0.0,2.50, 7,-8 ],"
      "\"c\":{\"d\":\"\\u00e9\\t\\u0001\\/\"},\"e\":[],\"f\":{},\"g\":[true,false,null]} ");
  ASSERT_TRUE(t);
  const std::string want =
      "{\"a\": 123456789012345678901234567890, \"b\": [1E5, -0.0, 2.50, 7, -8], "
      "\"c\": {\"d\": \"\xc3\xa9\\t\\u0001/\"}, \"e\": [], \"f\": {}, \"g\": [true, false, null]}";
  EXPECT_EQ(t->text, want);
  EXPECT_EQ(t->member("a"), "123456789012345678901234567890");
  EXPECT_EQ(t->member("c"), "{\"d\": \"\xc3\xa9\\t\\u0001/\"}");
  EXPECT_EQ(t->member("g"), "[true, false, null]");
  EXPECT_FALSE(t->member("d"));

  auto compact = rewrite_json("[1.000, {\"k\": 0.1e-999999}]", kCompactJson);
  ASSERT_TRUE(compact);
  EXPECT_EQ(compact->text, "[1.000,{\"k\":0.1e-999999}]");
  EXPECT_TRUE(compact->members.empty());
  EXPECT_EQ(rewrite_json("\"s\"")->text, "\"s\"");
}

TEST(JsonText, RefusesInvalidJsonAndRepeatedKeys) {
  EXPECT_FALSE(rewrite_json("{\"a\": 1,}"));
  EXPECT_FALSE(rewrite_json("{\"a\": 1} x"));
  EXPECT_FALSE(rewrite_json("1e999"));  // a double overflows: nlohmann refuses it
  EXPECT_FALSE(rewrite_json("\"\xff\""));
  EXPECT_FALSE(rewrite_json("{\"a\": {\"b\": 1, \"b\": 2}}"));
  EXPECT_TRUE(rewrite_json("[{\"b\": 1}, {\"b\": 2}]"));
}

}  // namespace
}  // namespace hibana
