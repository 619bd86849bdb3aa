// Tokens of the embedded model's vocabulary become reasoning, content and tool calls; stop
// strings split across tokens never leak; UTF-8 is never cut.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/output_pipeline.h"
#include "server/server_fixture.h"

namespace hibana::server {
namespace {

using testing::HasSubstr;

// Token ids of each piece encoded on its own, so every piece boundary is a token boundary.
std::vector<int32_t> tokens_of(const std::vector<std::string>& pieces) {
  std::vector<int32_t> ids;
  for (const auto& p : pieces) {
    auto t = test::tiny_tokenizer()->encode(p, true);
    ids.insert(ids.end(), t.begin(), t.end());
  }
  return ids;
}

struct Outcome {
  std::vector<ChoiceDelta> deltas;
  ChoiceDelta all;
  bool stopped = false;
};

Outcome play(PipelineOptions o, const std::vector<int32_t>& ids, bool complete = false,
             std::string_view closing = {}) {
  OutputPipeline p(*test::tiny_tokenizer(), std::move(o));
  Outcome r;
  auto take = [&](ChoiceDelta d) {
    r.all.reasoning += d.reasoning;
    r.all.content += d.content;
    for (auto& t : d.tool_calls) r.all.tool_calls.push_back(t);
    for (auto& l : d.logprobs) r.all.logprobs.push_back(l);
    if (!d.empty()) r.deltas.push_back(std::move(d));
  };
  take(p.start());
  for (int32_t id : ids) {
    StreamEvent ev;
    ev.token = id;
    ev.logprob = -1.0f;
    take(p.push(ev));
    if (p.stopped()) break;
  }
  r.stopped = p.stopped();
  take(p.finish(complete, closing));
  return r;
}

TEST(OutputPipeline, DetectsReasoningTheModelOpens) {
  PipelineOptions o;
  o.reasoning = ReasoningMode::detect;
  Outcome r =
      play(o, tokens_of({"<think>", "\nI should greet", ".\n", "</think>", "\n\nHello", "!"}));
  EXPECT_EQ(r.all.reasoning, "I should greet.");
  EXPECT_EQ(r.all.content, "Hello!");
  for (const auto& d : r.deltas) {
    EXPECT_THAT(d.content, testing::Not(HasSubstr("think>")));
    EXPECT_THAT(d.reasoning, testing::Not(HasSubstr("think>")));
  }
}

TEST(OutputPipeline, NoReasoningWhenTheModelAnswersDirectly) {
  PipelineOptions o;
  o.reasoning = ReasoningMode::detect;
  Outcome r = play(o, tokens_of({"Hello", " there"}));
  EXPECT_EQ(r.all.reasoning, "");
  EXPECT_EQ(r.all.content, "Hello there");
}

TEST(OutputPipeline, StartsInsideReasoningWhenThePromptOpenedIt) {
  PipelineOptions o;
  o.reasoning = ReasoningMode::inside;
  Outcome r = play(o, tokens_of({"plan", "</think>", "\n\nanswer"}));
  EXPECT_EQ(r.all.reasoning, "plan");
  EXPECT_EQ(r.all.content, "answer");
}

TEST(OutputPipeline, ToolCallsBecomeStructuredDeltas) {
  PipelineOptions o;
  o.reasoning = ReasoningMode::detect;
  o.parse_tool_calls = true;
  o.tools = {{"get_weather", R"({"type":"object","properties":{"city":{"type":"string"}}})"}};
  Outcome r =
      play(o, tokens_of({"Let me check.", "\n<tool_call>", "\n{\"name\": \"get_", "weather\", ",
                         "\"arguments\": {\"city\": ", "\"Paris\"}}\n", "</tool_call>"}));
  EXPECT_EQ(r.all.content, "Let me check.");
  ASSERT_FALSE(r.all.tool_calls.empty());
  EXPECT_EQ(r.all.tool_calls[0].name, "get_weather");
  EXPECT_THAT(r.all.tool_calls[0].id, testing::StartsWith("call_"));
  std::string args;
  for (const auto& t : r.all.tool_calls) {
    EXPECT_EQ(t.index, 0);
    args += t.arguments;
  }
  EXPECT_EQ(nlohmann::json::parse(args), nlohmann::json::parse(R"({"city": "Paris"})"));
  for (size_t i = 1; i < r.all.tool_calls.size(); ++i) EXPECT_EQ(r.all.tool_calls[i].name, "");
}

TEST(OutputPipeline, StopStringAcrossTokensNeverLeaks) {
  PipelineOptions o;
  o.stops = {{"STOP", false}};
  Outcome r = play(o, tokens_of({"one two ", "S", "T", "O", "P", " three"}));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.all.content, "one two ");
  for (const auto& d : r.deltas) EXPECT_THAT(d.content, testing::Not(HasSubstr("S")));
}

TEST(OutputPipeline, StopStringInsideOneToken) {
  PipelineOptions o;
  o.stops = {{"wor", false}};
  Outcome r = play(o, tokens_of({"hello", " world", " again"}));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.all.content, "hello ");
}

TEST(OutputPipeline, ForcedCallOpeningAndOneCallOnly) {
  PipelineOptions o;
  o.parse_tool_calls = true;
  o.tools = {{"f", ""}, {"g", ""}};
  o.forced_output = "<tool_call>\n{\"name\": \"f\", \"arguments\": ";
  o.stops = {{"</tool_call>", true}};
  Outcome r = play(o, tokens_of({"{\"x\": 1}}", "\n</tool_call>",
                                 "\n<tool_call>\n{\"name\": \"g\", "
                                 "\"arguments\": {}}\n</tool_call>"}));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.all.content, "");
  ASSERT_FALSE(r.all.tool_calls.empty());
  EXPECT_EQ(r.all.tool_calls[0].name, "f");
  for (const auto& t : r.all.tool_calls) EXPECT_EQ(t.index, 0);  // g never started
}

// A forced call cut short: the closing the constraint computed, then the forced suffix, make
// it a call in the last delta; without them the cut text is not a call.
TEST(OutputPipeline, ClosingCompletesACutForcedCall) {
  PipelineOptions o;
  o.parse_tool_calls = true;
  o.tools = {{"f", ""}};
  o.forced_output = "<tool_call>\n{\"name\": \"f\", \"arguments\": ";
  o.forced_suffix = "}\n</tool_call>";
  const std::vector<int32_t> ids = tokens_of({"{\"x\": [1, \"a", "b"});
  Outcome r = play(o, ids, true, "\"]}");
  ASSERT_EQ(r.all.tool_calls.size(), 1u);
  EXPECT_EQ(r.all.tool_calls[0].name, "f");
  EXPECT_EQ(r.all.tool_calls[0].arguments, "{\"x\": [1, \"ab\"]}");
  EXPECT_EQ(r.deltas.back().tool_calls.size(), 1u);
  EXPECT_EQ(r.all.content, "");

  Outcome cut = play(o, ids);
  EXPECT_TRUE(cut.all.tool_calls.empty());

  PipelineOptions json_output;  // JSON output: the closing is the last content
  Outcome text = play(json_output, tokens_of({"{\"x\": tr"}), true, "ue}");
  EXPECT_EQ(text.all.content, "{\"x\": true}");
  EXPECT_EQ(text.deltas.back().content.substr(text.deltas.back().content.size() - 3), "ue}");
}

TEST(OutputPipeline, LogprobsFollowTheText) {
  PipelineOptions o;
  o.logprobs = true;
  Outcome r = play(o, tokens_of({"The", " answer", " is", " 42"}));
  std::string joined;
  for (const auto& l : r.all.logprobs) {
    joined += l.token;
    EXPECT_LE(l.logprob, 0.0f);
    EXPECT_EQ(l.bytes, l.token);
  }
  EXPECT_EQ(joined, r.all.content);
  EXPECT_EQ(r.all.content, "The answer is 42");
}

TEST(OutputPipeline, MultibyteCharacterSplitAcrossTokens) {
  auto tok = test::tiny_tokenizer();
  // Byte-level tokens for the two bytes of "é" (C3 A9).
  auto c3 = tok->token_id("\xC3\x83");  // "Ã" is byte 0xC3 in the byte-level alphabet
  auto a9 = tok->token_id("\xC2\xA9");  // "©" is byte 0xA9
  ASSERT_TRUE(c3 && a9);
  PipelineOptions o;
  OutputPipeline p(*tok, o);
  StreamEvent ev;
  ev.token = *c3;
  EXPECT_EQ(p.push(ev).content, "");  // held back: half a character
  ev.token = *a9;
  EXPECT_EQ(p.push(ev).content, "\xC3\xA9");
}

TEST(OutputPipeline, RawModeKeepsTags) {
  PipelineOptions o;
  o.raw = true;
  o.reasoning = ReasoningMode::inside;
  Outcome r = play(o, tokens_of({"<think>", "x", "</think>"}));
  EXPECT_EQ(r.all.content, "<think>x</think>");
}

}  // namespace
}  // namespace hibana::server
