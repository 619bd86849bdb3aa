// BPE and pre-tokenizer rules on tiny tokenizers, where the expected ids follow from the
// merge list by hand.
#include <gtest/gtest.h>

#include "tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace hibana {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

std::unique_ptr<Tokenizer> load(const json& j) {
  test::TempDir dir;
  const std::string path = dir.write("tokenizer.json", j.dump());
  return Tokenizer::load(path);
}

TEST(Bpe, LowestRankMergesFirstLeftmostOnTies) {
  // 256 = "aa"
  auto tok = load(test::tiny_tokenizer_json({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(tok->encode("a"), (Ids{'a'}));
  EXPECT_EQ(tok->encode("aaa"), (Ids{256, 'a'}));
  EXPECT_EQ(tok->encode("aaaa"), (Ids{256, 256}));
  EXPECT_EQ(tok->encode("aaaaa"), (Ids{256, 256, 'a'}));
}

TEST(Bpe, RankDecidesBetweenOverlappingPairs) {
  // 256 = "bc", 257 = "ab", 258 = "abc". "b c" outranks "a b", so "abc" goes a|bc -> abc.
  auto bc_first =
      load(test::tiny_tokenizer_json({"bc", "ab", "abc"}, {{"b", "c"}, {"a", "b"}, {"a", "bc"}}));
  EXPECT_EQ(bc_first->encode("abc"), (Ids{258}));
  EXPECT_EQ(bc_first->encode("ab"), (Ids{257}));
  // With "a b" first and no "ab c" merge, "abc" stops at ab|c.
  auto ab_first =
      load(test::tiny_tokenizer_json({"bc", "ab", "abc"}, {{"a", "b"}, {"b", "c"}, {"a", "bc"}}));
  EXPECT_EQ(ab_first->encode("abc"), (Ids{257, 'c'}));
}

TEST(Bpe, MergesDoNotCrossPreTokens) {
  // 256 = "a ". The GPT-2 regex cuts "a b" into "a" and " b", so the merge never applies.
  auto tok = load(test::tiny_tokenizer_json({"a "}, {{"a", " "}}));
  EXPECT_EQ(tok->encode("a b"), (Ids{'a', ' ', 'b'}));
  EXPECT_EQ(tok->encode("a "), (Ids{'a', ' '}));
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json j = test::tiny_tokenizer_json({"abc"}, {});
  EXPECT_EQ(load(j)->encode("abc"), (Ids{'a', 'b', 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j)->encode("abc"), (Ids{256}));
}

TEST(Bpe, ByteLevelPrefixSpace) {
  json j = test::tiny_tokenizer_json({" a"}, {{" ", "a"}});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto tok = load(j);
  EXPECT_EQ(tok->encode("a"), (Ids{256}));
  EXPECT_EQ(tok->encode(" a"), (Ids{256}));
}

TEST(AddedTokens, LongestMatchAtTheLeftmostPosition) {
  json j = test::tiny_tokenizer_json({}, {});
  j["added_tokens"] = {test::added_token(300, "<a>"), test::added_token(301, "<a><b>"),
                       test::added_token(302, "b>")};
  auto tok = load(j);
  EXPECT_EQ(tok->encode("x<a><b>y"), (Ids{'x', 301, 'y'}));
  EXPECT_EQ(tok->encode("<a>b>"), (Ids{300, 302}));
  EXPECT_EQ(tok->encode("<a><b>", false), (Ids{'<', 'a', '>', '<', 'b', '>'}));
  EXPECT_EQ(tok->vocab_size(), 303);
  EXPECT_EQ(tok->decode(Ids{300, 'x', 301}), "<a>x<a><b>");
}

TEST(AddedTokens, StripAndSingleWordFlags) {
  json j = test::tiny_tokenizer_json({}, {});
  json lstrip = test::added_token(300, "<l>");
  lstrip["lstrip"] = true;
  json rstrip = test::added_token(301, "<r>");
  rstrip["rstrip"] = true;
  json word = test::added_token(302, "<w>");
  word["single_word"] = true;
  j["added_tokens"] = {lstrip, rstrip, word};
  auto tok = load(j);
  // lstrip takes the spaces before the token, rstrip those after it.
  EXPECT_EQ(tok->encode("a  <l>b"), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(tok->encode("a<r> \t b"), (Ids{'a', 301, 'b'}));
  // single_word: only where no word character touches it.
  EXPECT_EQ(tok->encode("a <w> b"), (Ids{'a', ' ', 302, ' ', 'b'}));
  EXPECT_EQ(tok->encode("a<w> b"), (Ids{'a', '<', 'w', '>', ' ', 'b'}));
}

TEST(AddedTokens, NormalizedTokensMatchTheNfcText) {
  json j = test::tiny_tokenizer_json({}, {});
  j["normalizer"] = {{"type", "NFC"}};
  json token = test::added_token(300, "caf\u00e9");
  token["normalized"] = true;
  j["added_tokens"] = {token};
  auto tok = load(j);
  EXPECT_EQ(tok->encode("cafe\u0301!"), (Ids{300, '!'}));
  EXPECT_EQ(tok->encode("caf\u00e9"), (Ids{300}));
}

TEST(PreTokenizer, SplitPatternsApplyInOrderAndKeepGaps) {
  json j = test::tiny_tokenizer_json({"ab", "aab"}, {{"a", "b"}, {"a", "ab"}});
  // "a+b?" leaves gaps ("x", "-") that must still be encoded; "aab" would be one token if
  // the second split did not cut it into "a" + "ab" first.
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "a+b?"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "Split"},
         {"pattern", {{"String", "ab"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto tok = load(j);
  EXPECT_EQ(tok->encode("xaab-"), (Ids{'x', 'a', 256, '-'}));
}

}  // namespace
}  // namespace hibana
