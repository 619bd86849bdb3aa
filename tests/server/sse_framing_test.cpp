// Each API's stream, produced from scripted generation updates, follows its protocol exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "server/anthropic_messages.h"
#include "server/openai_chat.h"
#include "server/openai_responses.h"
#include "server/server_fixture.h"

namespace hibana::server {
namespace {

using test::json;
using test::parse_sse;
using testing::ElementsAre;

GenerationUpdate text(const std::string& t, int choice = 0) {
  GenerationUpdate u;
  u.choice = choice;
  u.delta.content = t;
  return u;
}
GenerationUpdate thinking(const std::string& t) {
  GenerationUpdate u;
  u.delta.reasoning = t;
  return u;
}
GenerationUpdate call(int index, const std::string& id, const std::string& name,
                      const std::string& args) {
  GenerationUpdate u;
  u.delta.tool_calls.push_back({index, id, name, args});
  return u;
}

ChoiceResult result(FinishKind finish, std::string content = {}, std::string reasoning = {},
                    std::vector<ParsedToolCall> calls = {}) {
  ChoiceResult r;
  r.finish = finish;
  r.output.content = std::move(content);
  r.output.reasoning = std::move(reasoning);
  r.output.tool_calls = std::move(calls);
  return r;
}

UsageTotals usage() {
  UsageTotals u;
  u.prompt_tokens = 20;
  u.completion_tokens = 7;
  u.cached_tokens = 8;
  return u;
}

// Runs an encoder over updates; the last update finishes choice 0 with `final`.
std::string stream(StreamEncoder& e, std::vector<GenerationUpdate> updates,
                   const ChoiceResult& final) {
  std::string out = e.begin(usage());
  for (size_t i = 0; i < updates.size(); ++i) {
    const bool last = i + 1 == updates.size();
    updates[i].finished = last;
    out += e.update(updates[i], last ? &final : nullptr);
  }
  return out + e.end({final}, usage());
}

// ---- OpenAI chat ----------------------------------------------------------------------------

TEST(ChatStream, ChunkProtocol) {
  ChatResponseInfo info{"chatcmpl-1", 123, "m", true, false};
  auto enc = make_chat_stream_encoder(info, 1);
  ChoiceResult final = result(FinishKind::stop, "Hello");
  auto events = parse_sse(stream(*enc, {thinking("hmm"), text("Hel"), text("lo")}, final));
  ASSERT_EQ(events.size(), 7u);
  // Role first, with null content.
  EXPECT_EQ(events[0].json_data["choices"][0]["delta"],
            json::parse(R"({"role":"assistant","content":null})"));
  EXPECT_EQ(events[1].json_data["choices"][0]["delta"],
            json::parse(R"({"reasoning_content":"hmm"})"));
  EXPECT_EQ(events[2].json_data["choices"][0]["delta"], json::parse(R"({"content":"Hel"})"));
  // The finish chunk has no content.
  EXPECT_EQ(events[4].json_data["choices"][0]["delta"], json::object());
  EXPECT_EQ(events[4].json_data["choices"][0]["finish_reason"], "stop");
  // Usage chunk: no choices; before [DONE]; every other chunk has usage null.
  EXPECT_EQ(events[5].json_data["choices"], json::array());
  EXPECT_EQ(events[5].json_data["usage"]["prompt_tokens"], 20);
  EXPECT_EQ(events[5].json_data["usage"]["total_tokens"], 27);
  EXPECT_EQ(events[5].json_data["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(events[6].data, "[DONE]");
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(events[i].json_data["id"], "chatcmpl-1");
    EXPECT_EQ(events[i].json_data["object"], "chat.completion.chunk");
    EXPECT_EQ(events[i].event, "");
    if (i < 5) {
      EXPECT_TRUE(events[i].json_data["usage"].is_null());
    }
  }
}

TEST(ChatStream, NoUsageFieldWithoutIncludeUsage) {
  ChatResponseInfo info{"chatcmpl-1", 1, "m", false, false};
  auto enc = make_chat_stream_encoder(info, 1);
  auto events = parse_sse(stream(*enc, {text("x")}, result(FinishKind::length, "x")));
  ASSERT_EQ(events.size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(events[i].json_data.contains("usage"));
  EXPECT_EQ(events[2].json_data["choices"][0]["finish_reason"], "length");
}

TEST(ChatStream, ToolCallDeltas) {
  ChatResponseInfo info{"chatcmpl-1", 1, "m", false, false};
  auto enc = make_chat_stream_encoder(info, 1);
  auto final = result(FinishKind::tool_calls, "", "", {{"call_a", "f", "{\"x\": 1}"}});
  auto events = parse_sse(stream(
      *enc,
      {call(0, "call_a", "f", "{\"x\""), call(0, "", "", ": 1}"), call(1, "call_b", "g", "{}")},
      final));
  ASSERT_EQ(events.size(), 6u);
  json first = events[1].json_data["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first, json::parse(R"({"index":0,"id":"call_a","type":"function",
                                   "function":{"name":"f","arguments":"{\"x\""}})"));
  json second = events[2].json_data["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(second, json::parse(R"({"index":0,"function":{"arguments":": 1}"}})"));
  EXPECT_EQ(events[3].json_data["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
  EXPECT_EQ(events[4].json_data["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ChatStream, SeveralChoicesAndFailure) {
  ChatResponseInfo info{"chatcmpl-1", 1, "m", false, false};
  auto enc = make_chat_stream_encoder(info, 2);
  auto begin = parse_sse(enc->begin(usage()));
  ASSERT_EQ(begin.size(), 2u);
  EXPECT_EQ(begin[1].json_data["choices"][0]["index"], 1);
  auto failed = parse_sse(enc->fail(ApiError(500, "engine exploded")));
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0].json_data["error"]["message"], "engine exploded");
  EXPECT_EQ(failed[0].json_data["error"]["type"], "server_error");
  EXPECT_EQ(failed[1].data, "[DONE]");
}

TEST(ChatResponse, NonStreamingShape) {
  ChatResponseInfo info{"chatcmpl-9", 5, "m", false, true};
  ChoiceResult r = result(FinishKind::tool_calls, "", "why", {{"call_1", "f", "{}"}});
  r.logprobs.push_back({"a", "a", -0.5f, {{"a", "a", -0.5f, {}}}});
  json j = json::parse(encode_chat_response(info, {r}, usage()));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], nullptr);
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "why");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"], json::array({97}));
  EXPECT_EQ(j["usage"]["completion_tokens"], 7);
}

// ---- Anthropic ------------------------------------------------------------------------------

TEST(MessagesStream, EventSequenceWithThinkingTextAndToolUse) {
  auto enc = make_messages_stream_encoder({"msg_1", "m"});
  ChoiceResult final =
      result(FinishKind::tool_calls, "ok", "plan", {{"toolu_1", "Bash", "{\"c\": 1}"}});
  auto events = parse_sse(stream(*enc,
                                 {thinking("pl"), thinking("an"), text("ok"),
                                  call(0, "toolu_1", "Bash", "{\"c\""), call(0, "", "", ": 1}")},
                                 final));
  std::vector<std::string> names;
  for (const auto& e : events) {
    names.push_back(e.event);
    EXPECT_EQ(e.json_data["type"], e.event);  // event name repeated as the data's type
  }
  EXPECT_THAT(names,
              ElementsAre("message_start", "ping", "content_block_start", "content_block_delta",
                          "content_block_delta", "content_block_delta", "content_block_stop",
                          "content_block_start", "content_block_delta", "content_block_stop",
                          "content_block_start", "content_block_delta", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"));
  const json& start = events[0].json_data["message"];
  EXPECT_EQ(start["usage"]["input_tokens"], 12);  // 20 prompt - 8 cached
  EXPECT_EQ(start["usage"]["cache_read_input_tokens"], 8);
  EXPECT_EQ(start["content"], json::array());
  // Thinking block 0 ends with a signature; text is block 1; tool_use block 2.
  EXPECT_EQ(events[2].json_data["content_block"]["type"], "thinking");
  EXPECT_EQ(events[5].json_data["delta"]["type"], "signature_delta");
  EXPECT_EQ(events[6].json_data["index"], 0);
  EXPECT_EQ(events[7].json_data["content_block"]["type"], "text");
  EXPECT_EQ(events[7].json_data["index"], 1);
  EXPECT_EQ(events[9].json_data["index"], 1);
  EXPECT_EQ(events[10].json_data["content_block"],
            json::parse(R"({"type":"tool_use","id":"toolu_1","name":"Bash","input":{}})"));
  std::string partial = events[11].json_data["delta"]["partial_json"].get<std::string>() +
                        events[12].json_data["delta"]["partial_json"].get<std::string>();
  EXPECT_EQ(json::parse(partial), json::parse(R"({"c": 1})"));
  EXPECT_EQ(events[13].json_data["index"], 2);
  EXPECT_EQ(events[14].json_data["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(events[14].json_data["usage"]["output_tokens"], 7);
}

TEST(MessagesStream, StopSequenceAndError) {
  auto enc = make_messages_stream_encoder({"msg_1", "m"});
  ChoiceResult final = result(FinishKind::stop_sequence, "a");
  final.stop_sequence = "###";
  auto events = parse_sse(stream(*enc, {text("a")}, final));
  EXPECT_EQ(events[events.size() - 2].json_data["delta"],
            json::parse(R"({"stop_reason":"stop_sequence","stop_sequence":"###"})"));
  auto err = parse_sse(enc->fail(ApiError(500, "the KV cache is too small")));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0].event, "error");
  EXPECT_EQ(err[0].json_data["error"]["type"], "api_error");
  EXPECT_EQ(err[0].json_data["error"]["message"], "the KV cache is too small");
}

TEST(MessagesResponse, NonStreamingShape) {
  ChoiceResult r =
      result(FinishKind::context_window, "text", "thought", {{"toolu_x", "f", "{\"a\":1}"}});
  json j = json::parse(encode_messages_response({"msg_2", "m"}, r, usage()));
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_EQ(j["content"][0],
            json::parse(R"({"type":"thinking","thinking":"thought","signature":"hibana"})"));
  EXPECT_EQ(j["content"][1], json::parse(R"({"type":"text","text":"text"})"));
  EXPECT_EQ(j["content"][2]["input"], json::parse(R"({"a":1})"));
  EXPECT_EQ(j["stop_reason"], "model_context_window_exceeded");
  EXPECT_EQ(j["usage"], json::parse(R"({"input_tokens":12,"cache_creation_input_tokens":0,
                                        "cache_read_input_tokens":8,"output_tokens":7})"));
}

// ---- Responses ------------------------------------------------------------------------------

TEST(ResponsesStream, EventOrderCodexExpects) {
  ResponsesInfo info;
  info.id = "resp_1";
  info.model = "m";
  auto enc = make_responses_stream_encoder(info);
  auto events =
      parse_sse(stream(*enc, {text("Hel"), text("lo")}, result(FinishKind::stop, "Hello")));
  std::vector<std::string> names;
  for (size_t i = 0; i < events.size(); ++i) {
    names.push_back(events[i].event);
    EXPECT_EQ(events[i].json_data["type"], events[i].event);
    EXPECT_EQ(events[i].json_data["sequence_number"], i);
  }
  EXPECT_THAT(names, ElementsAre("response.created", "response.in_progress",
                                 "response.output_item.added", "response.content_part.added",
                                 "response.output_text.delta", "response.output_text.delta",
                                 "response.output_text.done", "response.content_part.done",
                                 "response.output_item.done", "response.completed"));
  EXPECT_EQ(events[0].json_data["response"]["status"], "in_progress");
  const std::string item = events[2].json_data["item"]["id"];
  EXPECT_EQ(item.rfind("msg_", 0), 0u);
  EXPECT_EQ(events[4].json_data["item_id"], item);
  EXPECT_EQ(events[6].json_data["text"], "Hello");
  const json& done = events[9].json_data["response"];
  EXPECT_EQ(done["id"], "resp_1");
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["usage"]["input_tokens"], 20);
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 8);
}

TEST(ResponsesStream, ReasoningThenFunctionCall) {
  ResponsesInfo info;
  info.id = "resp_1";
  info.model = "m";
  info.custom_tools = {"apply_patch"};
  auto enc = make_responses_stream_encoder(info);
  ChoiceResult final = result(
      FinishKind::tool_calls, "", "plan",
      {{"call_1", "shell", "{\"cmd\": \"ls\"}"}, {"call_2", "apply_patch", "{\"input\": \"P\"}"}});
  auto events = parse_sse(
      stream(*enc,
             {thinking("plan"), call(0, "call_1", "shell", "{\"cmd\": "),
              call(0, "", "", "\"ls\"}"), call(1, "call_2", "apply_patch", "{\"input\": \"P\"}")},
             final));
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.event);
  EXPECT_THAT(
      names, ElementsAre(
                 "response.created", "response.in_progress", "response.output_item.added",
                 "response.content_part.added", "response.reasoning_text.delta",
                 "response.reasoning_text.done", "response.content_part.done",
                 "response.output_item.done", "response.output_item.added",
                 "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                 "response.function_call_arguments.done", "response.output_item.done",
                 "response.output_item.added", "response.output_item.done", "response.completed"));
  EXPECT_EQ(events[7].json_data["item"]["type"], "reasoning");
  EXPECT_EQ(events[7].json_data["item"]["content"][0]["text"], "plan");
  const json& fc = events[12].json_data["item"];
  EXPECT_EQ(fc["type"], "function_call");
  EXPECT_EQ(fc["call_id"], "call_1");
  EXPECT_EQ(fc["arguments"], "{\"cmd\": \"ls\"}");
  EXPECT_EQ(events[12].json_data["output_index"], 1);
  const json& custom = events[14].json_data["item"];
  EXPECT_EQ(custom["type"], "custom_tool_call");
  EXPECT_EQ(custom["input"], "P");
  EXPECT_EQ(events[15].json_data["response"]["output"].size(), 3u);
}

TEST(ResponsesStream, IncompleteAndFailed) {
  ResponsesInfo info;
  info.id = "resp_1";
  auto enc = make_responses_stream_encoder(info);
  auto events = parse_sse(stream(*enc, {text("x")}, result(FinishKind::length, "x")));
  EXPECT_EQ(events.back().event, "response.incomplete");
  EXPECT_EQ(events.back().json_data["response"]["incomplete_details"]["reason"],
            "max_output_tokens");
  // The item being written when the tokens ran out is incomplete too, in its done event and in
  // the response (as at OpenAI); so is a cut non-streaming response's last item.
  const auto done = std::find_if(events.begin(), events.end(), [](const auto& e) {
    return e.event == "response.output_item.done";
  });
  ASSERT_NE(done, events.end());
  EXPECT_EQ(done->json_data["item"]["status"], "incomplete");
  EXPECT_EQ(events.back().json_data["response"]["output"].back()["status"], "incomplete");
  json cut = json::parse(encode_responses_response(info, result(FinishKind::length, "x"), usage()));
  EXPECT_EQ(cut["output"].back()["status"], "incomplete");
  json whole = json::parse(encode_responses_response(info, result(FinishKind::stop, "x"), usage()));
  EXPECT_EQ(whole["output"].back()["status"], "completed");
  auto enc2 = make_responses_stream_encoder(info);
  enc2->begin(usage());
  auto failed = parse_sse(enc2->fail(ApiError(500, "boom")));
  EXPECT_EQ(failed.back().event, "response.failed");
  EXPECT_EQ(failed.back().json_data["response"]["error"]["message"], "boom");
}

TEST(ResponsesResponse, NonStreamingShape) {
  ResponsesInfo info;
  info.id = "resp_2";
  info.model = "m";
  info.request_json = R"({"instructions":"be nice","tools":[],"metadata":{"k":"v"}})";
  json j = json::parse(encode_responses_response(
      info, result(FinishKind::tool_calls, "", "r", {{"call_9", "f", "{}"}}), usage()));
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["instructions"], "be nice");
  EXPECT_EQ(j["metadata"]["k"], "v");
  ASSERT_EQ(j["output"].size(), 2u);
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][1]["type"], "function_call");
  EXPECT_EQ(j["output"][1]["call_id"], "call_9");
  EXPECT_EQ(j["usage"]["output_tokens"], 7);
}

}  // namespace
}  // namespace hibana::server
