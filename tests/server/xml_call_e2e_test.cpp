// Forced tool calls in Qwen3-Coder's XML form, end to end: the embedded model on the real
// engine behind a chat template that writes calls as <function=NAME><parameter=P>...; the
// engine's XmlCallConstraint keeps the call valid for the tools, and its closing() completes a
// call cut by max_tokens, so every API returns one call with valid arguments.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http_support.h"

namespace hibana::test {
namespace {

// A minimal template in the XML family (what makes it one: "<function=" in its source).
const char* kXmlTemplate =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{#- calls are written <tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>... #}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}";

const char* kWeatherSchema = R"({"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}, "hourly": {"type": "boolean"}},
    "required": ["city", "unit", "days"], "additionalProperties": false})";
const char* kSearchSchema = R"({"type": "object",
    "properties": {"engine": {"enum": ["web", "news"]}, "query": {"type": "string"},
                   "limit": {"type": "number"}},
    "required": ["engine", "query"], "additionalProperties": false})";

// Arguments (JSON text) with every required parameter, values of the declared types, enum
// values whole and no undeclared parameter.
void expect_valid_arguments(const std::string& name, const std::string& text) {
  SCOPED_TRACE(name + " " + text);
  json args = json::parse(text, nullptr, false);
  ASSERT_TRUE(args.is_object());
  if (name == "get_weather") {
    EXPECT_TRUE(args["city"].is_string());
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit");
    EXPECT_TRUE(args["days"].is_number_integer());
    if (args.contains("hourly")) {
      EXPECT_TRUE(args["hourly"].is_boolean());
    }
    for (auto& [k, v] : args.items())
      EXPECT_THAT(k, testing::AnyOf("city", "unit", "days", "hourly"));
  } else {
    ASSERT_EQ(name, "search");
    EXPECT_TRUE(args["engine"] == "web" || args["engine"] == "news");
    EXPECT_TRUE(args["query"].is_string());
    if (args.contains("limit")) {
      EXPECT_TRUE(args["limit"].is_number());
    }
    for (auto& [k, v] : args.items()) EXPECT_THAT(k, testing::AnyOf("engine", "query", "limit"));
  }
}

json chat_tools() {
  return {{{"type", "function"},
           {"function", {{"name", "get_weather"}, {"parameters", json::parse(kWeatherSchema)}}}},
          {{"type", "function"},
           {"function", {{"name", "search"}, {"parameters", json::parse(kSearchSchema)}}}}};
}

class XmlCallE2E : public RealEngineTest {
 protected:
  static void SetUpTestSuite() {
    auto m = server::ServedModel::open(tiny_model_dir(), {"hibana-tiny"}, real_service());
    m->prompts = std::make_unique<server::PromptBuilder>(
        m->tokenizer, server::TemplateInfo{kXmlTemplate, "", "<|im_end|>"});
    model_ = std::move(m);
  }

  Reply chat(json extra, int max_tokens, bool stream = false) {
    extra["max_tokens"] = max_tokens;
    extra["temperature"] = 0;
    extra["stream"] = stream;
    extra["tools"] = chat_tools();
    return post(*server_, "/v1/chat/completions", user_chat("Weather in Paris?", extra));
  }
};

const json kNamed = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};

TEST_F(XmlCallE2E, TheTemplateIsTheXmlForm) {
  EXPECT_EQ(model_->chat().tool_call_format(), server::ToolCallFormat::xml);
}

// Named and "required", with room to finish or not: one call, valid arguments.
TEST_F(XmlCallE2E, ChatForcedCallIsValid) {
  for (const json& choice : {kNamed, json("required")}) {
    for (int max_tokens : {3, 12, 200}) {
      SCOPED_TRACE(choice.dump() + " max_tokens " + std::to_string(max_tokens));
      Reply r = chat({{"tool_choice", choice}}, max_tokens);
      ASSERT_EQ(r.status, 200) << r.body;
      const json& c = r.j["choices"][0];
      EXPECT_THAT(c["finish_reason"].get<std::string>(), testing::AnyOf("length", "tool_calls"));
      if (max_tokens == 3) {
        EXPECT_EQ(c["finish_reason"], "length") << r.body;
      }
      ASSERT_TRUE(c["message"]["tool_calls"].is_array()) << r.body;
      ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
      EXPECT_TRUE(c["message"]["content"].is_null()) << r.body;
      const json& fn = c["message"]["tool_calls"][0]["function"];
      if (choice == kNamed) {
        EXPECT_EQ(fn["name"], "get_weather");
      }
      expect_valid_arguments(fn["name"], fn["arguments"]);
    }
  }
}

// Streamed, a cut call arrives as the same call, the finish after every delta.
TEST_F(XmlCallE2E, ChatStreamedCutCallIsCompleted) {
  Reply whole = chat({{"tool_choice", kNamed}}, 5);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json& fn = whole.j["choices"][0]["message"]["tool_calls"][0]["function"];
  Reply s = chat({{"tool_choice", kNamed}}, 5, true);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string name, arguments, finish;
  for (const SseEvent& e : parse_sse(s.body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& c = e.json_data["choices"][0];
    if (c["delta"].contains("tool_calls")) {
      EXPECT_TRUE(finish.empty()) << s.body;
      for (const json& t : c["delta"]["tool_calls"]) {
        if (t["function"].contains("name")) name = t["function"]["name"].get<std::string>();
        if (t["function"].contains("arguments"))
          arguments += t["function"]["arguments"].get<std::string>();
      }
    }
    if (c["finish_reason"].is_string()) finish = c["finish_reason"].get<std::string>();
  }
  EXPECT_EQ(finish, "length") << s.body;
  EXPECT_EQ(name, "get_weather") << s.body;
  EXPECT_EQ(arguments, fn["arguments"]) << s.body;
  expect_valid_arguments(name, arguments);
}

// Anthropic tool_choice "tool" / "any", and Responses: the same valid call.
TEST_F(XmlCallE2E, AnthropicAndResponsesForcedCallsAreValid) {
  json tools = json::array();
  for (const json& t : chat_tools()) {
    tools.push_back(
        {{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}});
  }
  for (const json& choice :
       {json{{"type", "tool"}, {"name", "get_weather"}}, json{{"type", "any"}}}) {
    SCOPED_TRACE(choice.dump());
    Reply r = post(
        *server_, "/v1/messages",
        user_message(
            "Weather in Paris?",
            {{"max_tokens", 4}, {"temperature", 0}, {"tools", tools}, {"tool_choice", choice}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["stop_reason"], "max_tokens") << r.body;
    ASSERT_EQ(r.j["content"].size(), 1u) << r.body;
    const json& block = r.j["content"][0];
    ASSERT_EQ(block["type"], "tool_use") << r.body;
    expect_valid_arguments(block["name"], block["input"].dump());
  }
  json flat = json::array();
  for (const json& t : chat_tools()) {
    json f = t["function"];
    f["type"] = "function";
    flat.push_back(f);
  }
  Reply r = post(*server_, "/v1/responses",
                 {{"model", "hibana-tiny"},
                  {"input", "Weather in Paris?"},
                  {"max_output_tokens", 4},
                  {"temperature", 0},
                  {"tools", flat},
                  {"tool_choice", {{"type", "function"}, {"name", "search"}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["status"], "incomplete") << r.body;
  ASSERT_EQ(r.j["output"].size(), 1u) << r.body;
  const json& item = r.j["output"][0];
  ASSERT_EQ(item["type"], "function_call") << r.body;
  EXPECT_EQ(item["name"], "search") << r.body;
  expect_valid_arguments("search", item["arguments"]);
}

}  // namespace
}  // namespace hibana::test
