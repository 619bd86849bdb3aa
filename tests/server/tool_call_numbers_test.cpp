// Tool-call arguments holding numbers that no double holds (an integer past 64 bits, a fraction
// with more digits than a double keeps) reach the client with the digits the model wrote, in
// every API, streamed or not. The body is checked as text: a JSON parser in the test would round
// the numbers itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http_support.h"

namespace hibana::test {
namespace {

using testing::HasSubstr;

const char* kCall =
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"id\": 123456789012345678901234567890, "
    "\"x\": 0.10000000000000000000001}}\n</tool_call>";
const char* kArgs = R"({"id": 123456789012345678901234567890, "x": 0.10000000000000000000001})";
const char* kTools = R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
    "properties":{"id":{"type":"integer"},"x":{"type":"number"}}}}}])";

TEST_F(HttpApi, OpenAIToolCallArgumentsKeepTheNumbersText) {
  script(kCall);
  Reply r =
      post(*server, "/v1/chat/completions", user_chat("go", {{"tools", json::parse(kTools)}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], kArgs);

  script(kCall);
  Reply s = post(*server, "/v1/chat/completions",
                 user_chat("go", {{"tools", json::parse(kTools)}, {"stream", true}}));
  std::string args;
  for (const auto& e : parse_sse(s.body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& d = e.json_data["choices"][0]["delta"];
    if (!d.contains("tool_calls")) continue;
    for (const json& t : d["tool_calls"]) args += t["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(args, kArgs);
}

// Anthropic's `input` is an object in the body, not a string: it is written as the arguments'
// JSON text, so the number keeps its digits in the raw JSON on the wire (a client that reads
// numbers as doubles rounds it there, as it would anyone's).
TEST_F(HttpApi, AnthropicToolUseInputKeepsTheNumbersText) {
  json body = user_message("go", {{"max_tokens", 1024}});
  body["tools"] = json::parse(R"([{"name":"f","input_schema":{"type":"object"}}])");
  script(kCall);
  Reply r = post(*server, "/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("name":"f","input":{"id":123456789012345678901234567890,)"
                                R"("x":0.10000000000000000000001}})"));
  ASSERT_EQ(r.j["content"].size(), 1u);
  EXPECT_EQ(r.j["content"][0]["type"], "tool_use");
  EXPECT_EQ(r.j["stop_reason"], "tool_use");
  EXPECT_TRUE(r.j["usage"].is_object());

  body["stream"] = true;
  script(kCall);
  Reply s = post(*server, "/v1/messages", body);
  std::string partial;
  for (const auto& e : parse_sse(s.body)) {
    if (e.json_data.value("type", "") != "content_block_delta") continue;
    partial += e.json_data["delta"].value("partial_json", "");
  }
  EXPECT_EQ(partial, kArgs);
}

TEST_F(HttpApi, ResponsesFunctionCallArgumentsKeepTheNumbersText) {
  json body = {{"model", "hibana-tiny"},
               {"input", "go"},
               {"tools", json::parse(R"([{"type":"function","name":"f"}])")}};
  script(kCall);
  Reply r = post(*server, "/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["output"][0]["arguments"], kArgs);
}

}  // namespace
}  // namespace hibana::test
