// Each API's responses over HTTP to known (scripted) model outputs: text, reasoning, tool
// calls, stop strings, logprobs, several choices, failures, disconnects, many clients at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http_support.h"

namespace hibana::test {
namespace {

using testing::HasSubstr;
using testing::StartsWith;

TEST_F(HttpApi, ChatCompletionNonStreaming) {
  script("Hello there");
  Reply r = post(*server, "/v1/chat/completions",
                 user_chat("hi", {{"max_tokens", 50}, {"temperature", 0}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.j["id"].get<std::string>(), StartsWith("chatcmpl-"));
  EXPECT_EQ(r.j["object"], "chat.completion");
  EXPECT_TRUE(r.j["created"].is_number_integer());
  EXPECT_EQ(r.j["model"], "hibana-tiny");
  EXPECT_EQ(r.j["choices"][0]["message"],
            json::parse(R"({"role":"assistant","content":"Hello there"})"));
  EXPECT_EQ(r.j["choices"][0]["finish_reason"], "stop");
  const int64_t script_tokens =
      static_cast<int64_t>(tiny_tokenizer()->encode("Hello there").size());
  auto req = fake->requests().at(0);
  EXPECT_EQ(r.j["usage"]["prompt_tokens"], req.prompt.size());
  EXPECT_EQ(r.j["usage"]["completion_tokens"], script_tokens + 1);  // + the end-of-turn token
  EXPECT_EQ(r.j["usage"]["total_tokens"], req.prompt.size() + script_tokens + 1);
  EXPECT_EQ(req.max_tokens, 50);
  EXPECT_EQ(req.sampling.temperature, 0.0f);
  // The prompt is the chat template's rendering.
  EXPECT_EQ(tiny_tokenizer()->decode(req.prompt),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // <|im_end|> stops generation.
  EXPECT_THAT(req.stop_token_ids, testing::Contains(*tiny_tokenizer()->token_id("<|im_end|>")));
}

TEST_F(HttpApi, SamplingDefaultsComeFromGenerationConfig) {
  post(*server, "/v1/chat/completions", user_chat("hi"));
  post(*server, "/v1/chat/completions",
       user_chat("hi", {{"temperature", 0.2}, {"seed", 5}, {"top_k", 3}}));
  auto reqs = fake->requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_FLOAT_EQ(reqs[0].sampling.temperature, 0.7f);  // models/hibana-tiny/generation_config.json
  EXPECT_FLOAT_EQ(reqs[0].sampling.top_p, 0.9f);
  EXPECT_EQ(reqs[0].sampling.top_k, 40);
  EXPECT_FLOAT_EQ(reqs[1].sampling.temperature, 0.2f);
  EXPECT_EQ(reqs[1].sampling.top_k, 3);
  EXPECT_EQ(reqs[1].sampling.seed, 5u);
  // Without a seed the max_tokens default is the rest of the context.
  EXPECT_EQ(reqs[0].max_tokens, 4096 - static_cast<int64_t>(reqs[0].prompt.size()));
}

TEST_F(HttpApi, ChatStreamingFraming) {
  script("one two three");
  Reply r =
      post(*server, "/v1/chat/completions",
           user_chat("hi", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "text/event-stream");
  auto events = parse_sse(r.body);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.back().data, "[DONE]");
  const std::string id = events[0].json_data["id"];
  std::string content;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& c = events[i].json_data;
    EXPECT_EQ(c["id"], id);
    if (c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) {
      EXPECT_NE(d["content"], "");  // no empty content deltas
      content += d["content"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "one two three");
  EXPECT_EQ(events[events.size() - 3].json_data["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[events.size() - 2].json_data["choices"], json::array());
  EXPECT_GT(events[events.size() - 2].json_data["usage"]["completion_tokens"].get<int>(), 0);
}

TEST_F(HttpApi, ToolCallRoundTripOpenAI) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  script(call);
  Reply r = post(*server, "/v1/chat/completions", user_chat("weather?", {{"tools", tools}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json& msg = r.j["choices"][0]["message"];
  EXPECT_EQ(msg["content"], nullptr);
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(r.j["choices"][0]["finish_reason"], "tool_calls");

  // Send the call and its result back: the next prompt renders both.
  json history = user_chat("weather?", {{"tools", tools}});
  history["messages"].push_back(msg);
  history["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "sunny"}});
  script("It is sunny.");
  Reply second = post(*server, "/v1/chat/completions", history);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.j["choices"][0]["message"]["content"], "It is sunny.");
  std::string prompt = tiny_tokenizer()->decode(fake->requests().at(1).prompt);
  EXPECT_THAT(prompt,
              HasSubstr("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"));
  EXPECT_THAT(prompt, HasSubstr("<tool_response>\nsunny\n</tool_response>"));

  // Streamed: id and name on the first delta, then argument fragments.
  script(call);
  Reply s = post(*server, "/v1/chat/completions",
                 user_chat("weather?", {{"tools", tools}, {"stream", true}}));
  std::string args;
  int with_name = 0;
  for (const auto& e : parse_sse(s.body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& d = e.json_data["choices"][0]["delta"];
    if (!d.contains("tool_calls")) continue;
    for (const json& t : d["tool_calls"]) {
      if (t.contains("id")) {
        ++with_name;
        EXPECT_EQ(t["function"]["name"], "get_weather");
        EXPECT_EQ(t["type"], "function");
      }
      args += t["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(with_name, 1);
  EXPECT_EQ(json::parse(args), json::parse(R"({"city":"Paris"})"));
}

TEST_F(HttpApi, RequiredToolChoiceWithoutParallelCallsGivesExactlyOneCall) {
  json tools =
      json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},
                               {"type":"function","function":{"name":"g","parameters":{"type":"object"}}}])");
  // The prompt already opens the call; the script continues it and tries a second one.
  script(
      "{\"name\": \"g\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", "
      "\"arguments\": {}}\n</tool_call>");
  Reply r = post(
      *server, "/v1/chat/completions",
      user_chat("go",
                {{"tools", tools}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json& msg = r.j["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "g");
  EXPECT_TRUE(msg["content"].is_null() || msg["content"] == "");
  EXPECT_EQ(r.j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_THAT(tiny_tokenizer()->decode(fake->requests().at(0).prompt),
              testing::EndsWith("<tool_call>\n"));

  // Named: the name is in the prompt; the (constrained) model writes only the arguments, and
  // the engine ends the request when the JSON is complete.
  script("{\"b\": 2}");
  Reply named = post(
      *server, "/v1/chat/completions",
      user_chat("go", {{"tools", tools},
                       {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}));
  ASSERT_EQ(named.status, 200) << named.body;
  EXPECT_EQ(named.j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(named.j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"b\": 2}");

  // none: no tools in the prompt, tags are plain text.
  script("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  Reply none = post(*server, "/v1/chat/completions",
                    user_chat("go", {{"tools", tools}, {"tool_choice", "none"}}));
  EXPECT_FALSE(none.j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_THAT(tiny_tokenizer()->decode(fake->requests().at(2).prompt),
              testing::Not(HasSubstr("<tools>")));
}

TEST_F(HttpApi, StopStringsAcrossTokens) {
  // Each piece is encoded alone: "STOP" arrives over several tokens.
  Script s;
  for (const char* piece : {"Hello ", "S", "T", "O", "P", " world"}) {
    auto ids = tiny_tokenizer()->encode(piece);
    s.tokens.insert(s.tokens.end(), ids.begin(), ids.end());
  }
  fake->push_script(s);
  Reply r = post(*server, "/v1/chat/completions", user_chat("x", {{"stop", {"STOP"}}}));
  EXPECT_EQ(r.j["choices"][0]["message"]["content"], "Hello ");
  EXPECT_EQ(r.j["choices"][0]["finish_reason"], "stop");

  fake->push_script(s);
  Reply st =
      post(*server, "/v1/chat/completions", user_chat("x", {{"stop", "STOP"}, {"stream", true}}));
  std::string streamed;
  for (const auto& e : parse_sse(st.body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& d = e.json_data["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string())
      streamed += d["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, "Hello ");

  fake->push_script(s);
  Reply a = post(*server, "/v1/messages", user_message("x", {{"stop_sequences", {"STOP"}}}));
  EXPECT_EQ(a.j["content"][0]["text"], "Hello ");
  EXPECT_EQ(a.j["stop_reason"], "stop_sequence");
  EXPECT_EQ(a.j["stop_sequence"], "STOP");
}

TEST_F(HttpApi, SeveralChoices) {
  script("first");
  script("second");
  Reply r = post(*server, "/v1/chat/completions",
                 user_chat("x", {{"n", 2}, {"seed", 11}, {"user", "u"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j["choices"].size(), 2u);
  EXPECT_EQ(r.j["choices"][1]["index"], 1);
  auto reqs = fake->requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].sampling.seed, 11u);
  EXPECT_EQ(reqs[1].sampling.seed, 12u);
  EXPECT_EQ(reqs[0].conversation, "u");
  EXPECT_EQ(reqs[1].conversation, "u#1");
  EXPECT_EQ(r.j["usage"]["prompt_tokens"], reqs[0].prompt.size());
}

TEST_F(HttpApi, Logprobs) {
  script("The answer is 42");
  Reply r = post(*server, "/v1/chat/completions",
                 user_chat("x", {{"logprobs", true}, {"top_logprobs", 2}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json& lp = r.j["choices"][0]["logprobs"]["content"];
  std::string joined;
  for (const json& t : lp) {
    joined += t["token"].get<std::string>();
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_FALSE(t["bytes"].empty());
    EXPECT_FALSE(t["top_logprobs"].empty());
  }
  EXPECT_EQ(joined, "The answer is 42");
  EXPECT_EQ(fake->requests().at(0).top_logprobs, 2);

  script("The answer is 42");
  Reply s =
      post(*server, "/v1/chat/completions", user_chat("x", {{"logprobs", true}, {"stream", true}}));
  std::string streamed;
  for (const auto& e : parse_sse(s.body)) {
    if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
    const json& c = e.json_data["choices"][0];
    if (c["logprobs"].is_object()) {
      for (const json& t : c["logprobs"]["content"]) streamed += t["token"].get<std::string>();
    }
  }
  EXPECT_EQ(streamed, "The answer is 42");
}

TEST_F(HttpApi, LogitBiasReachesTheEngine) {
  post(*server, "/v1/chat/completions", user_chat("x", {{"logit_bias", {{"42", -100}, {"7", 3}}}}));
  auto req = fake->requests().at(0);
  EXPECT_TRUE(std::isinf(req.logit_bias.at(42)));
  EXPECT_FLOAT_EQ(req.logit_bias.at(7), 3.0f);
  EXPECT_EQ(post(*server, "/v1/chat/completions", user_chat("x", {{"logit_bias", {{"999999", 1}}}}))
                .status,
            400);
}

TEST_F(HttpApi, ReasoningIsSeparated) {
  const std::string out = "<think>\nplan it\n</think>\n\nThe answer.";
  script(out);
  Reply r = post(*server, "/v1/chat/completions", user_chat("x"));
  EXPECT_EQ(r.j["choices"][0]["message"]["reasoning_content"], "plan it");
  EXPECT_EQ(r.j["choices"][0]["message"]["content"], "The answer.");

  script(out);
  Reply a =
      post(*server, "/v1/messages", user_message("x", {{"thinking", {{"type", "adaptive"}}}}));
  ASSERT_EQ(a.j["content"].size(), 2u);
  EXPECT_EQ(a.j["content"][0]["type"], "thinking");
  EXPECT_EQ(a.j["content"][0]["thinking"], "plan it");
  EXPECT_FALSE(a.j["content"][0]["signature"].get<std::string>().empty());
  EXPECT_EQ(a.j["content"][1]["text"], "The answer.");

  script(out);
  Reply s = post(*server, "/v1/messages", user_message("x", {{"stream", true}}));
  auto events = parse_sse(s.body);
  std::vector<std::string> block_types;
  bool signed_before_stop = false;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].event == "content_block_start")
      block_types.push_back(events[i].json_data["content_block"]["type"]);
    if (events[i].event == "content_block_delta" &&
        events[i].json_data["delta"]["type"] == "signature_delta") {
      signed_before_stop = i + 1 < events.size() && events[i + 1].event == "content_block_stop" &&
                           events[i + 1].json_data["index"] == 0;
    }
  }
  EXPECT_EQ(block_types, (std::vector<std::string>{"thinking", "text"}));
  EXPECT_TRUE(signed_before_stop);

  // enable_thinking false reaches the template.
  post(*server, "/v1/messages", user_message("x", {{"thinking", {{"type", "disabled"}}}}));
  EXPECT_THAT(tiny_tokenizer()->decode(fake->requests().back().prompt),
              testing::EndsWith("<think>\n\n</think>\n\n"));
}

TEST_F(HttpApi, AnthropicToolUseRoundTrip) {
  script(
      "Checking.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": "
      "\"ls\"}}\n</tool_call>");
  json body = user_message("list files");
  body["tools"] =
      json::parse(R"([{"name":"Bash","description":"run","input_schema":{"type":"object",
      "properties":{"command":{"type":"string"}}}}])");
  Reply r = post(*server, "/v1/messages?beta=true", body,
                 {{"anthropic-version", "2023-06-01"},
                  {"anthropic-beta", "claude-code-20250219,made-up-beta-2099"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.j["id"].get<std::string>(), StartsWith("msg_"));
  EXPECT_EQ(r.j["stop_reason"], "tool_use");
  ASSERT_EQ(r.j["content"].size(), 2u);
  EXPECT_EQ(r.j["content"][0]["text"], "Checking.");
  const json& use = r.j["content"][1];
  EXPECT_EQ(use["type"], "tool_use");
  EXPECT_THAT(use["id"].get<std::string>(), StartsWith("toolu_"));
  EXPECT_EQ(use["input"], json::parse(R"({"command":"ls"})"));

  body["messages"].push_back({{"role", "assistant"}, {"content", r.j["content"]}});
  body["messages"].push_back(
      {{"role", "user"},
       {"content",
        {{{"type", "tool_result"}, {"tool_use_id", use["id"]}, {"content", "a.txt"}},
         {{"type", "text"}, {"text", "what now?"}}}}});
  script("Done.");
  Reply second = post(*server, "/v1/messages", body);
  ASSERT_EQ(second.status, 200) << second.body;
  std::string prompt = tiny_tokenizer()->decode(fake->requests().at(1).prompt);
  // (The template puts the call on its own line after the text.)
  EXPECT_THAT(
      prompt,
      HasSubstr(
          "Checking.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}"));
  EXPECT_THAT(
      prompt,
      HasSubstr("<tool_response>\na.txt\n</tool_response><|im_end|>\n<|im_start|>user\nwhat now?"));
}

TEST_F(HttpApi, ResponsesFunctionCall) {
  script("<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>");
  json body = {
      {"model", "hibana-tiny"},
      {"input", "list"},
      {"instructions", "You are Codex."},
      {"tools",
       json::parse(R"([{"type":"function","name":"shell","parameters":{"type":"object"}}])")}};
  Reply r = post(*server, "/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["status"], "completed");
  ASSERT_EQ(r.j["output"].size(), 1u);
  EXPECT_EQ(r.j["output"][0]["type"], "function_call");
  EXPECT_EQ(r.j["output"][0]["name"], "shell");
  EXPECT_THAT(tiny_tokenizer()->decode(fake->requests().at(0).prompt),
              StartsWith("<|im_start|>system\nYou are Codex."));

  script("Hi!");
  body["stream"] = true;
  Reply s = post(*server, "/v1/responses", body);
  auto events = parse_sse(s.body);
  ASSERT_GE(events.size(), 9u);
  EXPECT_EQ(events.front().event, "response.created");
  EXPECT_EQ(events.back().event, "response.completed");
  EXPECT_EQ(events.back().json_data["response"]["output"][0]["content"][0]["text"], "Hi!");
}

TEST_F(HttpApi, CountTokens) {
  json body = {{"model", "hibana-tiny"},
               {"messages", {{{"role", "user"}, {"content", "hello there"}}}},
               {"system", "sys"}};
  Reply r = post(*server, "/v1/messages/count_tokens?beta=true", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j.size(), 1u);  // only input_tokens
  body["max_tokens"] = 5;
  post(*server, "/v1/messages", body);
  EXPECT_EQ(r.j["input_tokens"], fake->requests().at(0).prompt.size());
}

TEST_F(HttpApi, MidStreamFailure) {
  Script s;
  s.text = "partial output";
  s.finish = FinishReason::error;
  s.error = "the KV cache is too small for this request";
  fake->push_script(s);
  Reply a = post(*server, "/v1/messages", user_message("x", {{"stream", true}}));
  EXPECT_EQ(a.status, 200);
  auto events = parse_sse(a.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "error");
  EXPECT_EQ(events.back().json_data["error"]["message"],
            "the KV cache is too small for this request");

  fake->push_script(s);
  Reply o = post(*server, "/v1/chat/completions", user_chat("x", {{"stream", true}}));
  auto oe = parse_sse(o.body);
  ASSERT_GE(oe.size(), 2u);
  EXPECT_EQ(oe[oe.size() - 2].json_data["error"]["message"],
            "the KV cache is too small for this request");
  EXPECT_EQ(oe.back().data, "[DONE]");

  // The same when the output and the failure arrive together, before the stream has begun
  // (the engine is quicker than the server's first look): still a stream, ending in the error.
  fake->token_interval = std::chrono::milliseconds(0);
  for (int i = 0; i < 20; ++i) {
    fake->push_script(s);
    Reply q = post(*server, "/v1/messages", user_message("x", {{"stream", true}}));
    ASSERT_EQ(q.status, 200) << "attempt " << i;
    auto qe = parse_sse(q.body);
    ASSERT_FALSE(qe.empty());
    EXPECT_EQ(qe.back().event, "error");
  }

  // A failure before any output is an HTTP error, also when streaming.
  Script early;
  early.finish = FinishReason::error;
  early.error = "forward pass failed";
  early.tokens = {};
  early.text = "";
  fake->push_script(early);
  Reply e = post(*server, "/v1/messages", user_message("x", {{"stream", true}}));
  EXPECT_EQ(e.status, 500);
  EXPECT_EQ(e.j["error"]["type"], "api_error");
}

TEST_F(HttpApi, ClientDisconnectCancelsStreamingAndNonStreaming) {
  Script stall;
  stall.text = "tick";
  stall.stall = true;
  fake->set_default(stall);
  const std::string stream_body = user_chat("x", {{"stream", true}}).dump();
  std::string got = send_and_hang_up(server->port, "/v1/chat/completions", stream_body, 200);
  EXPECT_THAT(got, HasSubstr("text/event-stream"));
  EXPECT_TRUE(eventually([&] { return fake->active() == 0; })) << "streaming request not cancelled";

  send_and_hang_up(server->port, "/v1/messages", user_message("x").dump(), 0);
  EXPECT_TRUE(eventually([&] { return fake->requests().size() == 2u; }));
  EXPECT_TRUE(eventually([&] { return fake->active() == 0; }))
      << "non-streaming request not cancelled";
}

TEST_F(HttpApi, ManyConcurrentStreamsWithDisconnects) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += " t" + std::to_string(i);
  Script s;
  s.text = text;
  fake->set_default(s);
  constexpr int kClients = 128;
  std::vector<std::string> bodies(kClients);
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = server->client();
      const bool anthropic = i % 2 == 1;
      httplib::Request req;
      req.method = "POST";
      req.path = anthropic ? "/v1/messages" : "/v1/chat/completions";
      req.body = (anthropic ? user_message("x", {{"stream", true}, {"max_tokens", 500}})
                            : user_chat("x", {{"stream", true}}))
                     .dump();
      req.set_header("Content-Type", "application/json");
      const size_t hang_up_after = i % 3 == 0 ? 200 + 37 * static_cast<size_t>(i) : SIZE_MAX;
      req.content_receiver = [&, i, hang_up_after](const char* d, size_t n, uint64_t, uint64_t) {
        bodies[i].append(d, n);
        return bodies[i].size() < hang_up_after;
      };
      httplib::Response res;
      httplib::Error error = httplib::Error::Success;
      if (!c.send(req, res, error))
        errors[i] = httplib::to_string(error);
      else if (res.status != 200)
        errors[i] = "status " + std::to_string(res.status) + ": " + res.body;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    if (i % 3 == 0) continue;
    EXPECT_EQ(errors[i], "") << i << " (requests seen: " << fake->requests().size() << ")";
    auto events = parse_sse(bodies[i]);
    ASSERT_FALSE(events.empty()) << i;
    std::string got;
    if (i % 2 == 1) {
      EXPECT_EQ(events.back().event, "message_stop") << i;
      for (const auto& e : events) {
        if (e.event == "content_block_delta")
          got += e.json_data["delta"]["text"].get<std::string>();
      }
    } else {
      EXPECT_EQ(events.back().data, "[DONE]") << i;
      for (const auto& e : events) {
        if (!e.json_data.is_object() || e.json_data["choices"].empty()) continue;
        const json& d = e.json_data["choices"][0]["delta"];
        if (d.contains("content") && d["content"].is_string())
          got += d["content"].get<std::string>();
      }
    }
    EXPECT_EQ(got, text) << i;
  }
  EXPECT_TRUE(fake->wait_idle()) << fake->active() << " scripted requests still run";
  EXPECT_EQ(get(*server, "/health").status, 200);
}

TEST_F(HttpApi, ClaudeCodeSessionHeaderIsTheConversationKey) {
  json body =
      user_message("x", {{"metadata", {{"user_id", "{\"session_id\":\"from-metadata\"}"}}}});
  post(*server, "/v1/messages", body, {{"X-Claude-Code-Session-Id", "abc-123"}});
  post(*server, "/v1/messages", body);
  auto reqs = fake->requests();
  EXPECT_EQ(reqs.at(0).conversation, "abc-123");
  EXPECT_EQ(reqs.at(1).conversation, "from-metadata");
}

TEST_F(HttpApi, Completions) {
  script(" world");
  Reply r = post(*server, "/v1/completions", json{{"prompt", "Hello"}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["object"], "text_completion");
  EXPECT_EQ(r.j["choices"][0]["text"], "Hello world");
  auto req = fake->requests().at(0);
  EXPECT_EQ(req.max_tokens, 16);
  EXPECT_EQ(req.prompt, tiny_tokenizer()->encode("Hello"));

  Reply many =
      post(*server, "/v1/completions", json{{"prompt", {"a", "b"}}, {"n", 2}, {"max_tokens", 3}});
  ASSERT_EQ(many.status, 200) << many.body;
  EXPECT_EQ(many.j["choices"].size(), 4u);

  Reply ids = post(*server, "/v1/completions", json{{"prompt", {1, 2, 3}}, {"stream", true}});
  auto events = parse_sse(ids.body);
  EXPECT_EQ(events.back().data, "[DONE]");
  EXPECT_EQ(events[events.size() - 2].json_data["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(post(*server, "/v1/completions", json{{"prompt", 5}}).status, 400);
}

}  // namespace
}  // namespace hibana::test

namespace hibana::test {
namespace {

TEST_F(HttpApi, ServerOutputLimitCapsEveryRequest) {
  server.reset();
  auto model = fake_model(fake);
  model->max_output_tokens = 7;
  server = std::make_unique<TestServer>(model, options);
  post(*server, "/v1/chat/completions", user_chat("hi"));                         // no limit
  post(*server, "/v1/chat/completions", user_chat("hi", {{"max_tokens", 100}}));  // larger
  post(*server, "/v1/chat/completions", user_chat("hi", {{"max_tokens", 3}}));    // smaller
  post(*server, "/v1/messages", user_message("hi", {{"max_tokens", 32000}}));
  auto reqs = fake->requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].max_tokens, 7);
  EXPECT_EQ(reqs[1].max_tokens, 7);
  EXPECT_EQ(reqs[2].max_tokens, 3);
  EXPECT_EQ(reqs[3].max_tokens, 7);
}

}  // namespace
}  // namespace hibana::test
