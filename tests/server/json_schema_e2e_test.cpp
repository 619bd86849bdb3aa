// JSON Schema enforcement end to end: the embedded model on the real engine, over HTTP. The
// model was never trained on tools, so whatever it writes into a forced call or a JSON response
// satisfies the schema only because the engine masks everything else.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http_support.h"

namespace hibana::test {
namespace {

class JsonSchemaE2E : public RealEngineTest {
 protected:
  // A greedy chat request; returns the reply.
  Reply chat(json extra, const std::string& prompt = "Weather in Paris?") {
    extra["max_tokens"] = 200;
    extra["temperature"] = 0;
    extra["parallel_tool_calls"] = false;
    return post(*server_, "/v1/chat/completions", user_chat(prompt, extra));
  }

  // A forced call of `get_weather` with the given parameters; returns the call's arguments.
  json forced_call(const json& parameters) {
    json tools = {{{"type", "function"},
                   {"function", {{"name", "get_weather"}, {"parameters", parameters}}}}};
    Reply r =
        chat({{"tools", tools},
              {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
    EXPECT_EQ(r.status, 200) << r.body;
    const json& choice = r.j["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
    if (!choice["message"]["tool_calls"].is_array()) return nullptr;
    EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    return json::parse(
        choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>(), nullptr,
        false);
  }
};

bool one_of(const json& v, std::initializer_list<const char*> values) {
  for (const char* x : values) {
    if (v == x) return true;
  }
  return false;
}

// A named call's arguments satisfy the tool's schema. Without the schema (parameters that only
// say "object") the same greedy request gives {} (that was also the output for the strict
// schema before it was enforced), so the schema is what makes the difference.
TEST_F(JsonSchemaE2E, ForcedNamedCallFollowsTheToolSchema) {
  json strict = forced_call(json::parse(R"({"type": "object",
      "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                     "metric": {"type": "boolean"}},
      "required": ["unit", "metric"], "additionalProperties": false})"));
  ASSERT_TRUE(strict.is_object()) << strict;
  EXPECT_TRUE(one_of(strict["unit"], {"celsius", "fahrenheit"})) << strict;
  EXPECT_TRUE(strict["metric"].is_boolean()) << strict;
  EXPECT_EQ(strict.size(), 2u) << strict;

  json loose = forced_call(json{{"type", "object"}});
  EXPECT_TRUE(loose.is_object()) << loose;
  EXPECT_NE(loose, strict) << "the schema changed nothing: this test would pass without it";
}

// tool_choice "required" with several tools: one of them, with that tool's arguments.
TEST_F(JsonSchemaE2E, RequiredCallPicksAToolAndFollowsItsSchema) {
  json tools = json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["unit"],
        "additionalProperties": false}}},
      {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
        "properties": {"engine": {"enum": ["web", "news"]}}, "required": ["engine"],
        "additionalProperties": false}}}])");
  Reply r = chat({{"tools", tools}, {"tool_choice", "required"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json& choice = r.j["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << r.body;
  const json& fn = choice["message"]["tool_calls"][0]["function"];
  json args = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object()) << r.body;
  EXPECT_EQ(args.size(), 1u) << args;
  if (fn["name"] == "get_weather") {
    EXPECT_TRUE(one_of(args["unit"], {"celsius", "fahrenheit"})) << args;
  } else {
    EXPECT_EQ(fn["name"], "search") << r.body;
    EXPECT_TRUE(one_of(args["engine"], {"web", "news"})) << args;
  }
}

// response_format json_schema (Chat) and output_config.format (Messages) enforce the schema.
TEST_F(JsonSchemaE2E, ResponseFormatSchemaIsEnforced) {
  json schema = json::parse(R"({"type": "object",
      "properties": {"color": {"enum": ["red", "green", "blue"]},
                     "sizes": {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 2}},
      "required": ["color", "sizes"], "additionalProperties": false})");
  Reply r =
      chat({{"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "c"}, {"schema", schema}}}}}},
           "Describe a cat as JSON.");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j["choices"][0]["finish_reason"], "stop") << r.body;
  json out =
      json::parse(r.j["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.body;
  EXPECT_TRUE(one_of(out["color"], {"red", "green", "blue"})) << out;
  ASSERT_TRUE(out["sizes"].is_array()) << out;
  EXPECT_LE(out["sizes"].size(), 2u) << out;
  for (const json& v : out["sizes"]) EXPECT_TRUE(v == 1 || v == 2 || v == 3) << out;
  EXPECT_EQ(out.size(), 2u) << out;

  Reply a =
      post(*server_, "/v1/messages",
           user_message(
               "Describe a cat as JSON.",
               {{"max_tokens", 200},
                {"temperature", 0},
                {"output_config", {{"format", {{"type", "json_schema"}, {"schema", schema}}}}}}));
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(a.j["stop_reason"], "end_turn") << a.body;
  json text = json::parse(a.j["content"].back()["text"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(text.is_object() && one_of(text["color"], {"red", "green", "blue"})) << a.body;
}

// A malformed schema is a 400 naming the keyword; unsupported keywords are accepted (and not
// enforced).
TEST_F(JsonSchemaE2E, MalformedSchemasAre400) {
  Reply r = chat(
      {{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "c"}, {"schema", {{"type", 5}}}}}}}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.j["error"]["param"], "response_format.json_schema.schema.type") << r.body;

  json bad = {
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"},
         {"parameters", {{"type", "object"}, {"properties", {{"unit", {{"type", 5}}}}}}}}}}};
  Reply t = chat({{"tools", bad}, {"tool_choice", "required"}});
  EXPECT_EQ(t.status, 400) << t.body;
  EXPECT_THAT(t.j["error"]["message"].get<std::string>(),
              testing::HasSubstr("the parameters of 'get_weather'"));
  EXPECT_THAT(t.j["error"]["message"].get<std::string>(),
              testing::HasSubstr("properties.unit.type"));

  json fancy = forced_call(json::parse(R"({"type": "object", "properties": {
      "when": {"type": "string", "format": "date-time", "pattern": "^2", "minLength": 3},
      "n": {"type": "integer", "minimum": 5}, "ext": {"$ref": "https://example.com/x.json"}},
      "required": ["n"], "additionalProperties": false})"));
  ASSERT_TRUE(fancy.is_object()) << fancy;
  EXPECT_TRUE(fancy["n"].is_number_integer()) << fancy;
}

}  // namespace
}  // namespace hibana::test
