// The server on the embedded model and the real engine, driven over HTTP: one test per
// behaviour of ../shared/notes/apis.md ("behaviours worth testing") that the engine decides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/http_support.h"

namespace hibana::test {
namespace {

using testing::HasSubstr;
using testing::StartsWith;

class EngineE2E : public RealEngineTest {
 protected:
  static json greedy(json extra = json::object()) {
    json j = {{"temperature", 0}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }
};

// 1. Non-streaming chat shape and exact usage.
TEST_F(EngineE2E, ChatCompletionShapeAndUsage) {
  Reply r = post(
      *server_, "/v1/chat/completions",
      user_chat("Write a Python function that adds two numbers.", greedy({{"max_tokens", 12}})));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.j["id"].get<std::string>(), StartsWith("chatcmpl-"));
  EXPECT_EQ(r.j["object"], "chat.completion");
  EXPECT_TRUE(r.j["created"].is_number_integer());
  const std::string finish = r.j["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  const auto prompt = tiny_tokenizer()->encode(
      "<|im_start|>user\nWrite a Python function that adds two "
      "numbers.<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(r.j["usage"]["prompt_tokens"], prompt.size());
  if (finish == "length") {
    EXPECT_EQ(r.j["usage"]["completion_tokens"], 12);
  }
  EXPECT_EQ(r.j["usage"]["total_tokens"], r.j["usage"]["prompt_tokens"].get<int>() +
                                              r.j["usage"]["completion_tokens"].get<int>());
  EXPECT_TRUE(r.j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

// 2, 3. Stream framing, no empty deltas; the streamed text equals the non-streamed one.
TEST_F(EngineE2E, StreamingMatchesNonStreaming) {
  json body = user_chat("def fibonacci(n):", greedy({{"max_tokens", 24}}));
  Reply whole = post(*server_, "/v1/chat/completions", body);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Reply streamed = post(*server_, "/v1/chat/completions", body);
  auto events = parse_sse(streamed.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0].json_data["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events.back().data, "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& c = events[i].json_data;
    EXPECT_EQ(c["id"], events[0].json_data["id"]);
    if (c["choices"].empty()) {
      EXPECT_EQ(i, events.size() - 2) << "the usage chunk comes last";
      EXPECT_EQ(c["usage"]["completion_tokens"], whole.j["usage"]["completion_tokens"]);
      continue;
    }
    const json& d = c["choices"][0]["delta"];
    if (c["choices"][0]["finish_reason"].is_string()) {
      EXPECT_FALSE(d.contains("content"));
    }
    if (d.contains("content") && d["content"].is_string()) {
      EXPECT_FALSE(d["content"].get<std::string>().empty());
      text += d["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, whole.j["choices"][0]["message"]["content"].get<std::string>());
}

// 9. Context overflow: 400 with both counts, streaming or not, and no SSE bytes.
TEST_F(EngineE2E, ContextOverflow) {
  std::string big;
  for (int i = 0; i < 3000; ++i) big += "word" + std::to_string(i) + " ";
  for (bool stream : {false, true}) {
    Reply r = post(*server_, "/v1/chat/completions", user_chat(big, {{"stream", stream}}));
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.j["error"]["code"], "context_length_exceeded");
    EXPECT_EQ(r.j["error"]["n_ctx"], 4096);
    EXPECT_GT(r.j["error"]["n_prompt_tokens"].get<int>(), 4096);
    Reply a = post(*server_, "/v1/messages", user_message(big, {{"stream", stream}}));
    EXPECT_EQ(a.status, 400);
    EXPECT_THAT(a.j["error"]["message"].get<std::string>(), HasSubstr("prompt is too long"));
  }
}

// 10. n = 2 gives two choices.
TEST_F(EngineE2E, TwoChoices) {
  Reply r = post(
      *server_, "/v1/chat/completions",
      user_chat("import os", {{"n", 2}, {"max_tokens", 6}, {"seed", 3}, {"temperature", 1.0}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j["choices"].size(), 2u);
  EXPECT_EQ(r.j["choices"][0]["index"], 0);
  EXPECT_EQ(r.j["choices"][1]["index"], 1);
}

// 11. Logprobs: tokens concatenate to the content, logprob <= 0, bytes present (also streamed).
TEST_F(EngineE2E, Logprobs) {
  json body = user_chat("import sys",
                        greedy({{"max_tokens", 10}, {"logprobs", true}, {"top_logprobs", 3}}));
  Reply r = post(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string joined;
  for (const json& t : r.j["choices"][0]["logprobs"]["content"]) {
    joined += t["token"].get<std::string>();
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_FALSE(t["bytes"].empty());
    EXPECT_EQ(t["top_logprobs"].size(), 3u);
  }
  EXPECT_EQ(joined, r.j["choices"][0]["message"]["content"].get<std::string>());
  body["stream"] = true;
  Reply s = post(*server_, "/v1/chat/completions", body);
  std::string streamed;
  for (const auto& e : parse_sse(s.body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& lp = e.json_data["choices"][0]["logprobs"];
    if (lp.is_object()) {
      for (const json& t : lp["content"]) streamed += t["token"].get<std::string>();
    }
  }
  EXPECT_EQ(streamed, joined);
}

// 12. logit_bias -100 bans a token.
TEST_F(EngineE2E, LogitBiasBansAToken) {
  json body = user_chat("import", greedy({{"max_tokens", 1}, {"logprobs", true}}));
  Reply first = post(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string token = first.j["choices"][0]["logprobs"]["content"][0]["token"];
  auto id = tiny_tokenizer()->encode(token, false);
  ASSERT_EQ(id.size(), 1u);
  body["logit_bias"] = {{std::to_string(id[0]), -100}};
  Reply banned = post(*server_, "/v1/chat/completions", body);
  EXPECT_NE(banned.j["choices"][0]["logprobs"]["content"][0]["token"], token);
}

// 13. Stop strings matched across token boundaries, removed, not leaked while streaming.
TEST_F(EngineE2E, StopStringAcrossTokenBoundary) {
  json body = user_chat("def main():", greedy({{"max_tokens", 30}, {"logprobs", true}}));
  Reply free = post(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(free.status, 200) << free.body;
  const json& tokens = free.j["choices"][0]["logprobs"]["content"];
  const std::string content = free.j["choices"][0]["message"]["content"];
  // A stop string made of the end of one token and the start of the next.
  std::string stop;
  size_t offset = 0;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::string a = tokens[i]["token"], b = tokens[i + 1]["token"];
    offset += a.size();
    if (a.empty() || b.empty() || i < 2) continue;
    std::string candidate = a.substr(a.size() - 1) + b.substr(0, 1);
    if (content.find(candidate) == offset - 1) {
      stop = candidate;
      break;
    }
  }
  if (stop.empty()) GTEST_SKIP() << "no usable token boundary in: " << content;
  const std::string expected = content.substr(0, content.find(stop));
  body.erase("logprobs");
  body["stop"] = {stop};
  Reply stopped = post(*server_, "/v1/chat/completions", body);
  EXPECT_EQ(stopped.j["choices"][0]["message"]["content"], expected);
  EXPECT_EQ(stopped.j["choices"][0]["finish_reason"], "stop");
  body["stream"] = true;
  Reply s = post(*server_, "/v1/chat/completions", body);
  std::string streamed;
  for (const auto& e : parse_sse(s.body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& d = e.json_data["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string())
      streamed += d["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, expected);
  Reply a =
      post(*server_, "/v1/messages",
           user_message("def main():",
                        {{"temperature", 0}, {"max_tokens", 30}, {"stop_sequences", {stop}}}));
  EXPECT_EQ(a.j["stop_reason"], "stop_sequence");
  EXPECT_EQ(a.j["stop_sequence"], stop);
  EXPECT_EQ(a.j["content"][0]["text"], expected);
}

// 14. Clients that time out abort their generations; the server stays responsive.
TEST_F(EngineE2E, AbandonedRequestsAreCancelled) {
  std::vector<std::thread> clients;
  for (int i = 0; i < 24; ++i) {
    clients.emplace_back([this, i] {
      auto c = server_->client();
      const bool stream = i % 2 == 0;
      json body = user_chat("Write a long story about a compiler.",
                            {{"max_tokens", 3000}, {"stream", stream}});
      if (!stream) {
        c.set_read_timeout(0, 300000);  // gives up after 0.3 s without an answer
        c.Post("/v1/chat/completions", body.dump(), "application/json");
        return;
      }
      // Hangs up after the first few events of the stream.
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/chat/completions";
      req.body = body.dump();
      req.set_header("Content-Type", "application/json");
      size_t received = 0;
      req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
        received += n;
        return received < 2000;
      };
      c.send(req);
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_TRUE(eventually(
      [] {
        auto m = real_service()->metrics();
        return m.running == 0 && m.waiting == 0;
      },
      std::chrono::seconds(30)))
      << "abandoned requests still run";
  Reply r = post(*server_, "/v1/chat/completions", user_chat("hi", {{"max_tokens", 4}}));
  EXPECT_EQ(r.status, 200);
}

// 17, 20. Anthropic stream: input_tokens > 0, sequential block indices, stop == start indices.
TEST_F(EngineE2E, AnthropicStream) {
  Reply r = post(
      *server_, "/v1/messages?beta=true",
      user_message("List three colours.",
                   {{"stream", true}, {"max_tokens", 40}, {"thinking", {{"type", "adaptive"}}}}),
      {{"anthropic-version", "2023-06-01"}, {"anthropic-beta", "interleaved-thinking-2025-05-14"}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto events = parse_sse(r.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0].event, "message_start");
  EXPECT_GT(events[0].json_data["message"]["usage"]["input_tokens"].get<int>(), 0);
  EXPECT_TRUE(
      events[0].json_data["message"]["usage"]["cache_read_input_tokens"].is_number_integer());
  int next_index = 0;
  int open = -1;
  for (const auto& e : events) {
    if (e.event == "content_block_start") {
      EXPECT_EQ(open, -1);
      EXPECT_EQ(e.json_data["index"], next_index);
      open = next_index++;
    } else if (e.event == "content_block_delta") {
      EXPECT_EQ(e.json_data["index"], open);
    } else if (e.event == "content_block_stop") {
      EXPECT_EQ(e.json_data["index"], open);
      open = -1;
    }
  }
  EXPECT_EQ(open, -1);
  EXPECT_EQ(events[events.size() - 2].event, "message_delta");
  EXPECT_EQ(events.back().event, "message_stop");
}

// 24. Responses: event order and ids.
TEST_F(EngineE2E, ResponsesStream) {
  Reply r = post(*server_, "/v1/responses",
                 json{{"model", "hibana-tiny"},
                      {"input", "Say hello."},
                      {"stream", true},
                      {"max_output_tokens", 20},
                      {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto events = parse_sse(r.body);
  ASSERT_GE(events.size(), 8u);
  EXPECT_EQ(events[0].event, "response.created");
  EXPECT_THAT(events[0].json_data["response"]["id"].get<std::string>(), StartsWith("resp_"));
  EXPECT_EQ(events[1].event, "response.in_progress");
  const std::string last = events.back().event;
  EXPECT_TRUE(last == "response.completed" || last == "response.incomplete") << last;
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].json_data["sequence_number"], i);
}

// 19. count_tokens equals the prompt the messages endpoint would run.
TEST_F(EngineE2E, CountTokensMatchesUsage) {
  json body =
      user_message("How many tokens is this?", {{"max_tokens", 1}, {"system", "Be terse."}});
  Reply counted = post(*server_, "/v1/messages/count_tokens", body);
  Reply ran = post(*server_, "/v1/messages", body);
  ASSERT_EQ(ran.status, 200) << ran.body;
  EXPECT_EQ(counted.j["input_tokens"], ran.j["usage"]["input_tokens"].get<int>() +
                                           ran.j["usage"]["cache_read_input_tokens"].get<int>());
}

// 22 and Claude Code's first call: system blocks with the billing line, many tools, a system
// entry inside messages, adaptive thinking, context management, metadata as a JSON string.
TEST_F(EngineE2E, ClaudeCodeShapedRequest) {
  json tools = json::array();
  for (int i = 0; i < 24; ++i) {
    tools.push_back(
        {{"name", "Tool" + std::to_string(i)},
         {"description", "Tool number " + std::to_string(i)},
         {"input_schema", {{"type", "object"}, {"properties", {{"arg", {{"type", "string"}}}}}}}});
  }
  json body = {
      {"model", "hibana-tiny"},
      {"max_tokens", 64},
      {"stream", true},
      {"thinking", {{"type", "adaptive"}}},
      {"output_config", {{"effort", "high"}}},
      {"context_management", {{"edits", {{{"type", "clear_thinking_20251015"}, {"keep", "all"}}}}}},
      {"metadata", {{"user_id", R"({"device_id":"dev","account_uuid":"","session_id":"s-1"})"}}},
      {"system",
       {{{"type", "text"},
         {"text",
          "x-anthropic-billing-header: cc_version=2.1.197.a1b; cc_entrypoint=cli; cch=12ab3;"}},
        {{"type", "text"},
         {"text", "You are Claude Code."},
         {"cache_control", {{"type", "ephemeral"}}}},
        {{"type", "text"}, {"text", "Be helpful."}, {"cache_control", {{"type", "ephemeral"}}}}}},
      {"tools", tools},
      {"messages",
       {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "say hello"}}}}},
        {{"role", "system"}, {"content", "Reminder: be brief."}},
        {{"role", "assistant"}, {"content", "Hello."}},
        {{"role", "user"}, {"content", "again"}}}}};
  Reply r = post(*server_, "/v1/messages?beta=true", body,
                 {{"Authorization", "Bearer anything"},
                  {"X-Claude-Code-Session-Id", "s-1"},
                  {"anthropic-version", "2023-06-01"},
                  {"anthropic-beta",
                   "claude-code-20250219,oauth-2025-04-20,interleaved-thinking-2025-05-14,"
                   "context-management-2025-06-27,effort-2025-11-24,unknown-beta-2099"}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto events = parse_sse(r.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().event, "message_start");
  EXPECT_EQ(events.back().event, "message_stop");
}

// 5, 6. A named tool choice gives a call whose arguments are valid JSON, even from a model
// that was never trained on tools (the engine constrains the arguments).
TEST_F(EngineE2E, ForcedToolCallIsWellFormed) {
  json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
      {"type":"function","function":{"name":"other","parameters":{"type":"object"}}}])");
  Reply r = post(
      *server_, "/v1/chat/completions",
      user_chat("Weather in Paris?",
                {{"tools", tools},
                 {"max_tokens", 200},
                 {"temperature", 0},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                 {"parallel_tool_calls", false}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json& choice = r.j["choices"][0];
  if (choice["finish_reason"] == "length")
    GTEST_SKIP() << "the arguments did not end within 200 tokens";
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  json args =
      json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>(),
                  nullptr, false);
  EXPECT_TRUE(args.is_object()) << choice["message"]["tool_calls"][0]["function"]["arguments"];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");

  Reply a = post(
      *server_, "/v1/messages",
      user_message("Weather in Paris?",
                   {{"max_tokens", 200},
                    {"temperature", 0},
                    {"tools", {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}}},
                    {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}}));
  ASSERT_EQ(a.status, 200) << a.body;
  if (a.j["stop_reason"] == "max_tokens") GTEST_SKIP();
  EXPECT_EQ(a.j["stop_reason"], "tool_use");
  EXPECT_EQ(a.j["content"].back()["type"], "tool_use");
  EXPECT_TRUE(a.j["content"].back()["input"].is_object());
}

// 7. A JSON response format gives JSON.
TEST_F(EngineE2E, JsonResponseFormat) {
  Reply r =
      post(*server_, "/v1/chat/completions",
           user_chat("Describe a cat as JSON.", {{"max_tokens", 300},
                                                 {"temperature", 0},
                                                 {"response_format", {{"type", "json_object"}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  if (r.j["choices"][0]["finish_reason"] == "length")
    GTEST_SKIP() << "no complete object in 300 tokens";
  json parsed =
      json::parse(r.j["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(parsed.is_object()) << r.j["choices"][0]["message"]["content"];
  EXPECT_EQ(post(*server_, "/v1/chat/completions",
                 user_chat("x", {{"response_format",
                                  {{"type", "json_schema"}, {"json_schema", {{"schema", 1}}}}}}))
                .status,
            400);
}

// 23. The second identical request reuses the first one's prompt state.
TEST_F(EngineE2E, RepeatedPromptReportsCachedTokens) {
  std::string system;
  for (int i = 0; i < 40; ++i) system += "Rule " + std::to_string(i) + ": write clear code. ";
  json body = {
      {"model", "hibana-tiny"},
      {"max_tokens", 4},
      {"temperature", 0},
      {"messages",
       {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "hi"}}}}};
  Reply first = post(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  const uint64_t hits_before = real_service()->metrics().prefix_hit_tokens;
  Reply second = post(*server_, "/v1/chat/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_GT(second.j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0)
      << second.body;
  EXPECT_GT(real_service()->metrics().prefix_hit_tokens, hits_before);
  json anthropic = {{"model", "hibana-tiny"},
                    {"max_tokens", 4},
                    {"temperature", 0},
                    {"system", system},
                    {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  Reply a = post(*server_, "/v1/messages", anthropic);
  EXPECT_GT(a.j["usage"]["cache_read_input_tokens"].get<int>(), 0) << a.body;
}

// 16, 23. Health, and the metrics counters move.
TEST_F(EngineE2E, HealthAndMetrics) {
  EXPECT_EQ(get(*server_, "/health").j, json::parse(R"({"status":"ok"})"));
  post(*server_, "/v1/chat/completions", user_chat("x", {{"max_tokens", 2}}));
  Reply m = get(*server_, "/metrics");
  EXPECT_THAT(m.body, HasSubstr("hibana_generation_tokens_total{model_name=\"hibana-tiny\"}"));
  EXPECT_THAT(
      m.body,
      testing::Not(HasSubstr("hibana_generation_tokens_total{model_name=\"hibana-tiny\"} 0\n")));
  // The live heap, as the allocator counts it (what the load test compares between waves).
  EXPECT_THAT(m.body, HasSubstr("hibana_memory_bytes{model_name=\"hibana-tiny\",kind=\"heap\"}"));
}

}  // namespace
}  // namespace hibana::test
