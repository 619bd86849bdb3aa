// Request bodies of each API become the same ChatRequest; malformed ones are refused with a
// 400 that names the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/json_recogniser.h"
#include "server/anthropic_messages.h"
#include "server/openai_chat.h"
#include "server/openai_responses.h"

namespace hibana::server {
namespace {

using testing::HasSubstr;

template <typename F>
void expect_error(F&& f, int status, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

RequestContext no_headers() {
  return RequestContext{};
}

RequestContext with_session(const std::string& id) {
  RequestContext c;
  c.header = [id](const std::string& name) {
    return name == "X-Claude-Code-Session-Id" ? id : std::string();
  };
  return c;
}

// ---- OpenAI chat ----------------------------------------------------------------------------

TEST(ChatRequest, ReadsMessagesOfEveryRole) {
  ChatRequest r = parse_chat_request(R"({
    "model": "m",
    "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "reasoning_content": "hmm",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                      {"id": "c2", "type": "function",
                       "function": {"name": "g", "arguments": {"y": 2}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:..."}}]}
    ]})",
                                     no_headers());
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[2].reasoning, "hmm");
  ASSERT_EQ(r.messages[2].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(r.messages[2].tool_calls[1].arguments, "{\"y\":2}");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].tool_call_id, "c1");
  EXPECT_THAT(r.messages[4].content, HasSubstr("image omitted"));
}

TEST(ChatRequest, RefusesMalformedMessages) {
  auto parse = [](const std::string& body) { return [body] { parse_chat_request(body, {}); }; };
  expect_error(parse(R"({"messages": null})"), 400, "messages: is required");
  expect_error(parse(R"({"messages": "hi"})"), 400, "messages: expected an array");
  expect_error(parse(R"({"messages": []})"), 400, "at least one message");
  expect_error(parse(R"({"messages": [123]})"), 400, "messages[0]: expected a message object");
  expect_error(parse(R"({"messages": [{}]})"), 400, "messages[0].role: is required");
  expect_error(parse(R"({"messages": [{"role": 1, "content": "x"}]})"), 400,
               "messages[0].role: expected a string");
  expect_error(parse(R"({"messages": [{"role": "user", "content": 5}]})"), 400,
               "messages[0].content: expected a string or an array");
  expect_error(parse(R"({"messages": [{"role": "wizard", "content": "x"}]})"), 400,
               "unknown role 'wizard'");
  expect_error(parse(R"({"messages": [{"role": "user"}]})"), 400, "messages[0].content");
  expect_error(parse(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})"), 400,
               "unsupported content part type 'audio'");
  expect_error(parse("{\"messages\": [}"), 400, "not valid JSON");
  expect_error(parse("[1, 2]"), 400, "must be a JSON object");
  // Deep nesting is refused before anything walks it recursively.
  std::string deep = R"({"messages": [{"role": "user", "content": "x"}], "metadata": )";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_error(parse(deep), 400, "nests deeper than 256 levels");
}

TEST(ChatRequest, ReadsGenerationOptions) {
  ChatRequest r = parse_chat_request(R"({
    "messages": [{"role": "user", "content": "x"}],
    "max_tokens": 10, "max_completion_tokens": 20, "n": 2, "seed": 7,
    "temperature": 0.5, "top_p": 0.9, "top_k": -1, "min_p": 0.1,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "stop": "END", "logit_bias": {"17": -100, "18": 2.5},
    "logprobs": true, "top_logprobs": 3,
    "stream": true, "stream_options": {"include_usage": true},
    "user": "u1", "some_future_field": {"ignored": true}
  })",
                                     no_headers());
  const GenerationOptions& g = r.gen;
  EXPECT_EQ(*g.max_tokens, 20);
  EXPECT_EQ(g.n, 2);
  EXPECT_TRUE(g.has_seed);
  EXPECT_EQ(g.sampling.seed, 7u);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_EQ(g.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(g.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(std::isinf(g.logit_bias.at(17)) && g.logit_bias.at(17) < 0);
  EXPECT_FLOAT_EQ(g.logit_bias.at(18), 2.5f);
  EXPECT_EQ(g.top_logprobs, 3);
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.include_usage);
  EXPECT_EQ(g.conversation, "u1");
}

TEST(ChatRequest, RefusesBadOptions) {
  auto parse = [](const std::string& extra) {
    return [extra] {
      parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}", {});
    };
  };
  expect_error(parse(R"("max_tokens": 0)"), 400, "max_tokens: must be positive");
  expect_error(parse(R"("max_tokens": -5)"), 400, "max_tokens: must be positive");
  expect_error(parse(R"("max_tokens": "ten")"), 400, "max_tokens: expected an integer");
  expect_error(parse(R"("n": 0)"), 400, "n: must be between 1 and 16");
  expect_error(parse(R"("temperature": -1)"), 400, "temperature");
  expect_error(parse(R"("top_p": 0)"), 400, "top_p");
  expect_error(parse(R"("stop": [1])"), 400, "stop");
  expect_error(parse(R"("logit_bias": {"x": 1})"), 400, "logit_bias");
  expect_error(parse(R"("logit_bias": {"5": 500})"), 400, "[-100, 100]");
  expect_error(parse(R"("top_logprobs": 2)"), 400, "requires logprobs");
  expect_error(parse(R"("logprobs": true, "top_logprobs": 21)"), 400, "between 0 and 20");
  expect_error(parse(R"("tools": [{"type": "retrieval"}])"), 400, "unsupported tool type");
  expect_error(parse(R"("tools": [{"type": "function", "function": {"name": "bad name"}}])"), 400,
               "tools[0].function.name");
  expect_error(parse(R"("tool_choice": "sometimes")"), 400, "tool_choice");
  expect_error(parse(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})"),
               400, "response_format.json_schema.schema");
  expect_error(parse(R"("response_format": {"type": "yaml"})"), 400, "unknown type");
  expect_error(parse(R"("response_format": {"type": "json_schema", "json_schema": {"schema":
                          {"type": "object", "properties": {"a": {"type": 5}}}}})"),
               400, "response_format.json_schema.schema.properties.a.type: expected a type name");
  expect_error(parse(R"("response_format": {"type": "json_schema", "json_schema": {"schema":
                          {"$ref": "#/$defs/nothing"}}})"),
               400, "response_format.json_schema.schema.$ref: '#/$defs/nothing' points to nothing");
}

TEST(ChatRequest, ReadsToolsAndToolChoice) {
  ChatRequest r = parse_chat_request(R"({
    "messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": false
  })",
                                     no_headers());
  EXPECT_THAT(r.tools_json, HasSubstr("get_weather"));
  EXPECT_EQ(r.tool_choice, ToolChoice::named);
  EXPECT_EQ(r.tool_choice_name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);
  for (auto [choice, expected] :
       {std::pair{"\"none\"", ToolChoice::none}, std::pair{"\"required\"", ToolChoice::required},
        std::pair{"\"auto\"", ToolChoice::automatic}}) {
    ChatRequest c = parse_chat_request(
        std::string(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": )") +
            choice + "}",
        no_headers());
    EXPECT_EQ(c.tool_choice, expected) << choice;
  }
}

TEST(ChatRequest, ResponseFormats) {
  const std::string base =
      R"({"messages": [{"role": "user", "content": "x"}], "response_format": )";
  EXPECT_EQ(parse_chat_request(base + R"({"type": "text"}})", {}).json_output, JsonOutput::none);
  EXPECT_EQ(parse_chat_request(base + R"({"type": "json_object"}})", {}).json_output,
            JsonOutput::object);
  EXPECT_EQ(parse_chat_request(base + R"({"type": "json_schema", "json_schema": {"name": "a",
              "schema": {"type": "object", "properties": {}}}}})",
                               {})
                .json_output,
            JsonOutput::object);
  EXPECT_EQ(parse_chat_request(base + R"({"type": "json_schema", "json_schema": {"name": "a",
              "schema": {"type": "array"}}}})",
                               {})
                .json_output,
            JsonOutput::any);
  // The schema is compiled once here; without a type it must still be an object.
  ChatRequest r = parse_chat_request(base + R"({"type": "json_schema", "json_schema": {"name": "a",
              "schema": {"properties": {"n": {"type": "integer"}}, "required": ["n"]}}}})",
                                     {});
  ASSERT_NE(r.json_schema, nullptr);
  EXPECT_EQ(r.json_output, JsonOutput::object);
  JsonRecogniser ok(r.json_schema), missing(r.json_schema), list(r.json_schema);
  EXPECT_TRUE(ok.feed(R"({"n": 3})") && ok.complete());
  EXPECT_FALSE(missing.feed(R"({"m": 3})"));
  EXPECT_FALSE(list.feed("[1]"));
  EXPECT_EQ(parse_chat_request(base + R"({"type": "json_object"}})", {}).json_schema, nullptr);
}

TEST(ChatRequest, ThinkingSwitchesAndConversationKey) {
  const std::string base = R"({"messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(parse_chat_request(base + R"("reasoning_effort": "none"})", {}).enable_thinking, false);
  EXPECT_EQ(parse_chat_request(base + R"("reasoning_effort": "high"})", {}).enable_thinking, true);
  ChatRequest k = parse_chat_request(
      base + R"("chat_template_kwargs": {"enable_thinking": false, "custom": 1}})", {});
  EXPECT_EQ(k.enable_thinking, false);
  EXPECT_THAT(k.template_kwargs_json, HasSubstr("custom"));
  EXPECT_FALSE(parse_chat_request(base + "\"n\": 1}", {}).enable_thinking.has_value());
  EXPECT_EQ(
      parse_chat_request(base + R"("user": "u", "prompt_cache_key": "p"})", {}).gen.conversation,
      "p");
  EXPECT_EQ(parse_chat_request(base + R"("user": "u"})", with_session("S")).gen.conversation, "S");
}

TEST(ChatRequest, NormalisesTheBillingHeaderInSystemMessages) {
  ChatRequest r = parse_chat_request(R"({"messages": [
      {"role": "system", "content": "x-anthropic-billing-header: cc_version=2.1.1.abc; cch=12345;\nhi"},
      {"role": "user", "content": "x"}]})",
                                     no_headers());
  EXPECT_EQ(r.messages[0].content, "x-anthropic-billing-header: cc_version=2.1.1;\nhi");
}

// ---- Anthropic ------------------------------------------------------------------------------

TEST(MessagesRequest, ReadsBlocksToolsAndClaudeCodeQuirks) {
  ChatRequest r = parse_messages_request(R"({
    "model": "m", "max_tokens": 32000, "stream": true,
    "thinking": {"type": "adaptive"},
    "output_config": {"effort": "high"},
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    "metadata": {"user_id": "{\"device_id\":\"d\",\"session_id\":\"sess-1\"}"},
    "system": [
      {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.3d9; cc_entrypoint=cli; cch=eb6c6;"},
      {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
    ],
    "tools": [
      {"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
      {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    ],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "list files", "cache_control": {"type": "ephemeral"}}]},
      {"role": "system", "content": "mid-conversation reminder"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "use ls", "signature": "sig"},
        {"type": "text", "text": "Running ls."},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.txt"}]},
        {"type": "text", "text": "and now?"},
        {"type": "tool_reference", "tool_name": "x"}]},
      {"role": "ctx", "content": "context block"},
      {"role": "msg", "content": "message block"}
    ]})",
                                         with_session(""));
  ASSERT_EQ(r.messages.size(), 8u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(
      r.messages[0].content,
      "x-anthropic-billing-header: cc_version=2.1.197; cc_entrypoint=cli;\nYou are Claude Code.");
  EXPECT_EQ(r.messages[1].content, "list files");
  EXPECT_EQ(r.messages[2].role, "system");
  EXPECT_EQ(r.messages[3].role, "assistant");
  EXPECT_EQ(r.messages[3].reasoning, "use ls");
  EXPECT_EQ(r.messages[3].content, "Running ls.");
  ASSERT_EQ(r.messages[3].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[3].tool_calls[0].arguments, R"({"command":"ls"})");
  EXPECT_EQ(r.messages[4].role, "tool");  // the tool result comes before the text of its turn
  EXPECT_EQ(r.messages[4].content, "a.txt");
  EXPECT_EQ(r.messages[4].name, "Bash");
  EXPECT_EQ(r.messages[5].role, "user");
  EXPECT_EQ(r.messages[5].content, "and now?");
  EXPECT_EQ(r.messages[6].role, "user");
  EXPECT_EQ(r.messages[7].role, "user");
  EXPECT_EQ(r.enable_thinking, true);
  EXPECT_EQ(r.tool_choice, ToolChoice::required);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_THAT(r.tools_json, HasSubstr("Bash"));
  EXPECT_THAT(r.tools_json, testing::Not(HasSubstr("web_search")));
  EXPECT_EQ(*r.gen.max_tokens, 32000);
  EXPECT_EQ(r.gen.conversation, "sess-1");
  EXPECT_TRUE(r.gen.stream);
}

TEST(MessagesRequest, ToolResultForms) {
  ChatRequest r = parse_messages_request(R"({"max_tokens": 5, "messages": [
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                                        {"type": "tool_use", "id": "t2", "name": "g", "input": {}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "plain string"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "boom", "is_error": true}]}]})",
                                         no_headers());
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "plain string");
  EXPECT_EQ(r.messages[2].content, "Error: boom");
  EXPECT_EQ(r.messages[2].name, "g");
}

TEST(MessagesRequest, ValidatesRequiredFields) {
  auto parse = [](const std::string& body, bool count = false) {
    return [body, count] { parse_messages_request(body, {}, count); };
  };
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  expect_error(parse("{" + msgs + "}"), 400, "max_tokens: is required");
  expect_error(parse(R"({"max_tokens": 0, )" + msgs + "}"), 400, "max_tokens: must be positive");
  EXPECT_NO_THROW(parse_messages_request("{" + msgs + "}", {}, true));  // count_tokens
  expect_error(parse(R"({"max_tokens": 5, "messages": [{"role": "user"}]})"), 400, "content");
  expect_error(
      parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]})"),
      400, "messages[0].content[0].type: is required");
  expect_error(parse(R"({"max_tokens": 5, "thinking": {"type": "sometimes"}, )" + msgs + "}"), 400,
               "thinking.type");
  expect_error(parse(R"({"max_tokens": 5, "tool_choice": {"type": "tool"}, )" + msgs + "}"), 400,
               "tool_choice.name");
}

TEST(MessagesRequest, ThinkingDisabledAndNamedTool) {
  ChatRequest r = parse_messages_request(R"({"max_tokens": 5, "thinking": {"type": "disabled"},
      "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "f"}, "stop_sequences": ["###"],
      "messages": [{"role": "user", "content": "x"}],
      "metadata": {"user_id": "plain-user"}})",
                                         no_headers());
  EXPECT_EQ(r.enable_thinking, false);
  EXPECT_EQ(r.tool_choice, ToolChoice::named);
  EXPECT_EQ(r.tool_choice_name, "f");
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"###"});
  EXPECT_EQ(r.gen.conversation, "plain-user");
}

// ---- Responses ------------------------------------------------------------------------------

TEST(ResponsesRequest, ReadsCodexStyleInput) {
  ResponsesRequest r = parse_responses_request(R"({
    "model": "m", "instructions": "You are Codex.", "stream": true, "store": false,
    "prompt_cache_key": "conv-9", "parallel_tool_calls": false,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "client_metadata": {"x": 1},
    "tools": [
      {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
      {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}},
      {"type": "web_search"}
    ],
    "tool_choice": "auto",
    "input": [
      {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "env"}]},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list"}]},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": null},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
      {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
      {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin"},
      {"type": "custom_tool_call_output", "call_id": "call_2", "output": "done"},
      {"role": "user", "content": "thanks"}
    ]})",
                                               no_headers());
  const auto& m = r.chat.messages;
  ASSERT_EQ(m.size(), 8u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content, "You are Codex.");
  EXPECT_EQ(m[1].role, "system");
  EXPECT_EQ(m[2].role, "user");
  EXPECT_EQ(m[3].role, "assistant");
  EXPECT_EQ(m[3].reasoning, "think");
  EXPECT_EQ(m[3].content, "ok");
  ASSERT_EQ(m[3].tool_calls.size(), 1u);
  EXPECT_EQ(m[3].tool_calls[0].id, "call_1");
  EXPECT_EQ(m[4].role, "tool");
  EXPECT_EQ(m[4].name, "shell");
  EXPECT_EQ(m[5].role, "assistant");
  EXPECT_EQ(m[5].tool_calls[0].arguments, R"({"input":"*** Begin"})");
  EXPECT_EQ(m[6].content, "done");
  EXPECT_EQ(m[7].content, "thanks");
  EXPECT_TRUE(r.custom_tools.count("apply_patch"));
  EXPECT_THAT(r.chat.tools_json, HasSubstr("apply_patch"));
  EXPECT_THAT(r.chat.tools_json, testing::Not(HasSubstr("web_search")));
  EXPECT_EQ(r.chat.enable_thinking, true);
  EXPECT_FALSE(r.chat.parallel_tool_calls);
  EXPECT_EQ(r.chat.gen.conversation, "conv-9");
  EXPECT_TRUE(r.chat.gen.stream);
}

TEST(ResponsesRequest, RefusesWhatItCannotDo) {
  auto parse = [](const std::string& body) {
    return [body] { parse_responses_request(body, {}); };
  };
  expect_error(parse(R"({"input": "x", "previous_response_id": "resp_1"})"), 404,
               "response 'resp_1' not found (this server does not store responses)");
  expect_error(parse(R"({"model": "m"})"), 400, "input: is required");
  expect_error(parse(R"({"input": 3})"), 400, "input: expected a string or an array");
  expect_error(parse(R"({"input": [{"type": "item_reference", "id": "x"}]})"), 400,
               "item_reference");
  expect_error(parse(R"({"input": "x", "max_output_tokens": 0})"), 400, "max_output_tokens");
  expect_error(
      parse(R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": []}}})"), 400,
      "text.format.schema");
  ResponsesRequest s = parse_responses_request(R"({"input": "hello"})", {});
  ASSERT_EQ(s.chat.messages.size(), 1u);
  EXPECT_EQ(s.chat.messages[0].role, "user");
}

}  // namespace
}  // namespace hibana::server
