// Stop strings are found across token boundaries, removed, and never released early.
#include <gtest/gtest.h>

#include "server/stop_strings.h"

namespace hibana::server {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  if (!m.stopped()) out += m.flush();
  return out;
}

TEST(StopMatcher, RemovesAStopSplitAcrossPieces) {
  StopMatcher m({{"STOP", false}});
  std::vector<std::string> released;
  for (std::string p : {"hello S", "T", "O", "P and more"}) released.push_back(m.push(p));
  EXPECT_EQ(released[0], "hello ");  // "S" held back
  EXPECT_EQ(released[1], "");
  EXPECT_EQ(released[2], "");
  EXPECT_EQ(released[3], "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched()->text, "STOP");
  EXPECT_EQ(m.push("later"), "");
}

TEST(StopMatcher, ReleasesAFalseStart) {
  StopMatcher m({{"STOP", false}});
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("AR"), "STAR");
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.flush(), "S");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestStopWins) {
  StopMatcher m({{"world", false}, {"lo w", false}});
  EXPECT_EQ(feed(m, {"hello world"}), "hel");
  EXPECT_EQ(m.matched()->text, "lo w");
}

TEST(StopMatcher, KeepStopStaysInTheOutput) {
  StopMatcher m({{"</tool_call>", true}});
  EXPECT_EQ(feed(m, {"<tool_call>{}</tool", "_call>\n<tool_call>"}), "<tool_call>{}</tool_call>");
}

TEST(StopMatcher, OverlappingPrefixesAreHeldBack) {
  StopMatcher m({{"aab", false}});
  EXPECT_EQ(m.push("xaa"), "x");
  EXPECT_EQ(m.push("a"), "a");  // "aaa": the first a can no longer start "aab"
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, MultibyteStop) {
  StopMatcher m(
      {{"\xE2\x80\x94"
        "end",
        false}});  // "—end"
  EXPECT_EQ(feed(m, {"a \xE2\x80", "\x94", "e", "nd tail"}), "a ");
}

TEST(StopMatcher, EmptyStopsAreIgnored) {
  StopMatcher m({{"", false}});
  EXPECT_EQ(feed(m, {"abc"}), "abc");
}

}  // namespace
}  // namespace hibana::server
