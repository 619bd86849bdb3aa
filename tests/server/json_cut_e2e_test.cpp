// Constrained output cut short, end to end: a forced tool call or a JSON response format that
// runs out of tokens mid-document is completed by the engine's closing(), so every API returns
// a well-formed call (or JSON text) whose arguments have the schema's required keys, with the
// API's "ran out of tokens" reason, streaming or not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http_support.h"

namespace hibana::test {
namespace {

constexpr int kCut = 3;  // tokens: far fewer than any document of the schemas below needs

const char* kWeatherSchema = R"({"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}},
    "required": ["city", "unit", "days"], "additionalProperties": false})";
const char* kSearchSchema = R"({"type": "object",
    "properties": {"engine": {"enum": ["web", "news"]}, "query": {"type": "string"}},
    "required": ["engine", "query"], "additionalProperties": false})";

// Arguments (JSON text) that parse and satisfy the named tool's schema as closing() promises:
// every required key, enum values whole, no undeclared key.
void expect_valid_arguments(const std::string& name, const std::string& text) {
  SCOPED_TRACE(name + " " + text);
  json args = json::parse(text, nullptr, false);
  ASSERT_TRUE(args.is_object());
  if (name == "get_weather") {
    EXPECT_TRUE(args["city"].is_string());
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit");
    EXPECT_TRUE(args["days"].is_number_integer());
    EXPECT_EQ(args.size(), 3u);
  } else {
    ASSERT_EQ(name, "search");
    EXPECT_TRUE(args["engine"] == "web" || args["engine"] == "news");
    EXPECT_TRUE(args["query"].is_string());
    EXPECT_EQ(args.size(), 2u);
  }
}

// The tools in the OpenAI Chat shape (Responses: flat), or Anthropic's.
json chat_tools() {
  return {{{"type", "function"},
           {"function", {{"name", "get_weather"}, {"parameters", json::parse(kWeatherSchema)}}}},
          {{"type", "function"},
           {"function", {{"name", "search"}, {"parameters", json::parse(kSearchSchema)}}}}};
}
json responses_tools() {
  return {
      {{"type", "function"}, {"name", "get_weather"}, {"parameters", json::parse(kWeatherSchema)}},
      {{"type", "function"}, {"name", "search"}, {"parameters", json::parse(kSearchSchema)}}};
}
json anthropic_tools() {
  return {{{"name", "get_weather"}, {"input_schema", json::parse(kWeatherSchema)}},
          {{"name", "search"}, {"input_schema", json::parse(kSearchSchema)}}};
}

// Chunks of a chat stream: the call's name and arguments, the content, and the finish reason,
// which must come after every delta.
struct ChatStream {
  std::string name, arguments, content, finish;
  int calls = 0;
};
ChatStream read_chat_stream(const std::string& body) {
  ChatStream s;
  for (const SseEvent& e : parse_sse(body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& c = e.json_data["choices"][0];
    const json& d = c["delta"];
    if (d.contains("tool_calls") || (d.contains("content") && d["content"].is_string())) {
      EXPECT_TRUE(s.finish.empty()) << "a delta after the finish: " << body;
    }
    if (d.contains("content") && d["content"].is_string())
      s.content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const json& t : d["tool_calls"]) {
        EXPECT_EQ(t["index"], 0) << body;
        if (t.contains("id")) ++s.calls;
        if (t["function"].contains("name")) s.name = t["function"]["name"].get<std::string>();
        if (t["function"].contains("arguments"))
          s.arguments += t["function"]["arguments"].get<std::string>();
      }
    }
    if (c["finish_reason"].is_string()) s.finish = c["finish_reason"].get<std::string>();
  }
  return s;
}

class JsonCutE2E : public RealEngineTest {
 protected:
  Reply chat(json extra, bool stream) {
    extra["max_tokens"] = kCut;
    extra["temperature"] = 0;
    extra["stream"] = stream;
    return post(*server_, "/v1/chat/completions", user_chat("Weather in Paris?", extra));
  }
  Reply messages(json extra, bool stream) {
    extra["max_tokens"] = kCut;
    extra["temperature"] = 0;
    extra["stream"] = stream;
    return post(*server_, "/v1/messages", user_message("Weather in Paris?", extra));
  }
  Reply responses(json extra, bool stream) {
    extra["model"] = "hibana-tiny";
    extra["input"] = "Weather in Paris?";
    extra["max_output_tokens"] = kCut;
    extra["temperature"] = 0;
    extra["stream"] = stream;
    return post(*server_, "/v1/responses", extra);
  }
};

// Chat, tool_choice naming a tool and "required" (one of two tools): tool_calls with complete
// arguments and finish_reason "length", streamed or not.
TEST_F(JsonCutE2E, ChatForcedCallCutByMaxTokensIsCompleted) {
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const json& choice : {named, json("required")}) {
    SCOPED_TRACE(choice.dump());
    Reply r = chat({{"tools", chat_tools()}, {"tool_choice", choice}}, false);
    ASSERT_EQ(r.status, 200) << r.body;
    const json& c = r.j["choices"][0];
    EXPECT_EQ(c["finish_reason"], "length") << r.body;
    EXPECT_EQ(r.j["usage"]["completion_tokens"], kCut) << r.body;
    ASSERT_TRUE(c["message"]["tool_calls"].is_array()) << r.body;
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
    EXPECT_TRUE(c["message"]["content"].is_null()) << r.body;
    const json& fn = c["message"]["tool_calls"][0]["function"];
    if (choice == named) {
      EXPECT_EQ(fn["name"], "get_weather");
    }
    expect_valid_arguments(fn["name"], fn["arguments"]);

    Reply s = chat({{"tools", chat_tools()}, {"tool_choice", choice}}, true);
    ASSERT_EQ(s.status, 200) << s.body;
    ChatStream got = read_chat_stream(s.body);
    EXPECT_EQ(got.finish, "length") << s.body;
    EXPECT_EQ(got.calls, 1) << s.body;
    EXPECT_EQ(got.name, fn["name"]) << s.body;
    EXPECT_EQ(got.arguments, fn["arguments"]) << s.body;
  }
}

// response_format json_schema: the content is completed JSON, finish_reason "length".
TEST_F(JsonCutE2E, ChatJsonSchemaCutByMaxTokensIsCompleted) {
  const json format = {{"type", "json_schema"},
                       {"json_schema", {{"name", "w"}, {"schema", json::parse(kWeatherSchema)}}}};
  Reply r = chat({{"response_format", format}}, false);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& c = r.j["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length") << r.body;
  EXPECT_EQ(r.j["usage"]["completion_tokens"], kCut) << r.body;
  expect_valid_arguments("get_weather", c["message"]["content"]);

  Reply s = chat({{"response_format", format}}, true);
  ASSERT_EQ(s.status, 200) << s.body;
  ChatStream got = read_chat_stream(s.body);
  EXPECT_EQ(got.finish, "length") << s.body;
  EXPECT_EQ(got.content, c["message"]["content"]) << s.body;
}

// Anthropic tool_choice "tool" and "any": a tool_use block with a complete input and
// stop_reason "max_tokens"; streamed, the input_json_delta fragments parse and precede the
// message_delta.
TEST_F(JsonCutE2E, AnthropicForcedToolUseCutByMaxTokensIsCompleted) {
  const json named = {{"type", "tool"}, {"name", "get_weather"}};
  for (const json& choice : {named, json{{"type", "any"}}}) {
    SCOPED_TRACE(choice.dump());
    Reply r = messages({{"tools", anthropic_tools()}, {"tool_choice", choice}}, false);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["stop_reason"], "max_tokens") << r.body;
    EXPECT_EQ(r.j["usage"]["output_tokens"], kCut) << r.body;
    ASSERT_EQ(r.j["content"].size(), 1u) << r.body;
    const json& block = r.j["content"][0];
    ASSERT_EQ(block["type"], "tool_use") << r.body;
    if (choice == named) {
      EXPECT_EQ(block["name"], "get_weather");
    }
    expect_valid_arguments(block["name"], block["input"].dump());

    Reply s = messages({{"tools", anthropic_tools()}, {"tool_choice", choice}}, true);
    ASSERT_EQ(s.status, 200) << s.body;
    std::string name, input, stop_reason;
    for (const SseEvent& e : parse_sse(s.body)) {
      const json& d = e.json_data;
      if (e.event == "content_block_start") {
        EXPECT_EQ(d["content_block"]["type"], "tool_use") << s.body;
        name = d["content_block"]["name"].get<std::string>();
      } else if (e.event == "content_block_delta") {
        EXPECT_TRUE(stop_reason.empty()) << s.body;
        input += d["delta"]["partial_json"].get<std::string>();
      } else if (e.event == "message_delta") {
        stop_reason = d["delta"]["stop_reason"].get<std::string>();
      }
    }
    EXPECT_EQ(stop_reason, "max_tokens") << s.body;
    EXPECT_EQ(name, block["name"]) << s.body;
    EXPECT_EQ(json::parse(input, nullptr, false), block["input"]) << s.body;
  }
}

// The context running out mid-call is the same cut, reported as such.
TEST_F(JsonCutE2E, AnthropicForcedToolUseCutByTheContextIsCompleted) {
  auto body = [](int words) {
    std::string text;
    for (int i = 0; i < words; ++i) text += " a";
    return user_message(text, {{"max_tokens", 64},
                               {"temperature", 0},
                               {"tools", anthropic_tools()},
                               {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}});
  };
  auto count = [&](int words) {
    return post(*server_, "/v1/messages/count_tokens", body(words)).j["input_tokens"].get<int>();
  };
  // A prompt that leaves kCut tokens of the 4096-token context.
  const int base = count(1000), per_word = count(1001) - base;
  ASSERT_GT(per_word, 0);
  const int words = 1000 + (4096 - kCut - base) / per_word;
  ASSERT_GT(count(words), 4096 - 2 * kCut);

  Reply r = post(*server_, "/v1/messages", body(words));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["stop_reason"], "model_context_window_exceeded") << r.body;
  ASSERT_EQ(r.j["content"].size(), 1u) << r.body;
  const json& block = r.j["content"][0];
  ASSERT_EQ(block["type"], "tool_use") << r.body;
  expect_valid_arguments("get_weather", block["input"].dump());
}

// Anthropic output_config.format json_schema: the text block is completed JSON.
TEST_F(JsonCutE2E, AnthropicJsonSchemaCutByMaxTokensIsCompleted) {
  Reply r =
      messages({{"output_config",
                 {{"format", {{"type", "json_schema"}, {"schema", json::parse(kWeatherSchema)}}}}}},
               false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["stop_reason"], "max_tokens") << r.body;
  ASSERT_EQ(r.j["content"].back()["type"], "text") << r.body;
  expect_valid_arguments("get_weather", r.j["content"].back()["text"]);
}

// Responses, a named function: a function_call item with complete arguments, the response
// incomplete (max_output_tokens); streamed, the argument deltas concatenate to them.
TEST_F(JsonCutE2E, ResponsesForcedCallCutByMaxTokensIsCompleted) {
  const json named = {{"type", "function"}, {"name", "get_weather"}};
  Reply r = responses({{"tools", responses_tools()}, {"tool_choice", named}}, false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["status"], "incomplete") << r.body;
  EXPECT_EQ(r.j["incomplete_details"]["reason"], "max_output_tokens") << r.body;
  ASSERT_EQ(r.j["output"].size(), 1u) << r.body;
  const json& item = r.j["output"][0];
  ASSERT_EQ(item["type"], "function_call") << r.body;
  EXPECT_EQ(item["name"], "get_weather") << r.body;
  expect_valid_arguments("get_weather", item["arguments"]);

  Reply s = responses({{"tools", responses_tools()}, {"tool_choice", named}}, true);
  ASSERT_EQ(s.status, 200) << s.body;
  auto events = parse_sse(s.body);
  ASSERT_FALSE(events.empty());
  std::string deltas, done;
  for (const SseEvent& e : events) {
    if (e.event == "response.function_call_arguments.delta")
      deltas += e.json_data["delta"].get<std::string>();
    if (e.event == "response.function_call_arguments.done")
      done = e.json_data["arguments"].get<std::string>();
  }
  EXPECT_EQ(deltas, item["arguments"]) << s.body;
  EXPECT_EQ(done, item["arguments"]) << s.body;
  EXPECT_EQ(events.back().event, "response.incomplete") << s.body;
  const json& final_output = events.back().json_data["response"]["output"];
  ASSERT_EQ(final_output.size(), 1u) << s.body;
  EXPECT_EQ(final_output[0]["arguments"], item["arguments"]) << s.body;
}

// Responses text.format json_schema: the output text is completed JSON.
TEST_F(JsonCutE2E, ResponsesJsonSchemaCutByMaxTokensIsCompleted) {
  Reply r = responses(
      {{"text",
        {{"format",
          {{"type", "json_schema"}, {"name", "w"}, {"schema", json::parse(kWeatherSchema)}}}}}},
      false);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["status"], "incomplete") << r.body;
  const json& item = r.j["output"].back();
  ASSERT_EQ(item["type"], "message") << r.body;
  expect_valid_arguments("get_weather", item["content"][0]["text"]);
}

}  // namespace
}  // namespace hibana::test
