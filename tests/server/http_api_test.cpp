// The HTTP server over a scripted engine: status codes, error shapes, headers, auth, CORS,
// limits, health, models and metrics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http_support.h"

namespace hibana::test {
namespace {

using testing::HasSubstr;
using testing::StartsWith;

TEST(HttpHealth, LoadingThenReady) {
  auto fake = std::make_shared<FakeService>(tiny_tokenizer());
  TestServer s(nullptr);
  Reply loading = get(s, "/health");
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.j,
            json::parse(
                R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"}})"));
  Reply chat = post(s, "/v1/chat/completions", user_chat("hi"));
  EXPECT_EQ(chat.status, 503);
  EXPECT_EQ(chat.j["error"]["type"], "unavailable_error");
  Reply msg = post(s, "/v1/messages", user_message("hi"));
  EXPECT_EQ(msg.status, 503);
  EXPECT_EQ(msg.j["type"], "error");
  EXPECT_EQ(msg.j["error"]["type"], "overloaded_error");
  s.http.set_model(fake_model(fake));
  Reply ready = get(s, "/health");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.j, json::parse(R"({"status":"ok"})"));
}

TEST(HttpHealth, FailedLoadIsReported) {
  TestServer s(nullptr);
  s.http.set_failed("Model failed to load: no config.json");
  Reply r = get(s, "/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.j["error"]["message"], "Model failed to load: no config.json");
}

TEST_F(HttpApi, EveryResponseHasARequestId) {
  for (const Reply& r : {get(*server, "/health"), get(*server, "/nope"),
                         post(*server, "/v1/chat/completions", user_chat("hi")),
                         post(*server, "/v1/messages", std::string("{bad"))}) {
    EXPECT_THAT(r.header("request-id"), StartsWith("req_")) << r.body;
    EXPECT_EQ(r.header("request-id"), r.header("x-request-id"));
  }
  Reply anthropic = post(*server, "/v1/messages", std::string("{bad"));
  EXPECT_EQ(anthropic.j["request_id"], anthropic.header("request-id"));
}

TEST_F(HttpApi, ErrorsInEachApisShape) {
  Reply route = get(*server, "/v1/nothing");
  EXPECT_EQ(route.status, 404);
  EXPECT_EQ(route.j["error"]["type"], "not_found_error");
  Reply anthropic_route = post(*server, "/v1/messages/batches", json::object());
  EXPECT_EQ(anthropic_route.status, 404);
  EXPECT_EQ(anthropic_route.j["type"], "error");

  Reply bad_json = post(*server, "/v1/chat/completions", std::string("{\"messages\": ["));
  EXPECT_EQ(bad_json.status, 400);
  EXPECT_EQ(bad_json.j["error"]["type"], "invalid_request_error");
  EXPECT_THAT(bad_json.j["error"]["message"].get<std::string>(), HasSubstr("not valid JSON"));

  Reply bad_field =
      post(*server, "/v1/messages", json{{"max_tokens", 0}, {"messages", json::array()}});
  EXPECT_EQ(bad_field.status, 400);
  EXPECT_EQ(bad_field.j["error"]["type"], "invalid_request_error");

  Reply model = post(*server, "/v1/chat/completions", user_chat("x", {{"model", "gpt-9"}}));
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.j["error"]["code"], "model_not_found");
  Reply model_a = post(*server, "/v1/messages", user_message("x", {{"model", "claude-opus"}}));
  EXPECT_EQ(model_a.status, 404);
  EXPECT_EQ(model_a.j["error"]["type"], "not_found_error");
  EXPECT_EQ(post(*server, "/v1/chat/completions", user_chat("x", {{"model", "alias"}})).status,
            200);

  Reply type = post(*server, "/v1/chat/completions", user_chat("x").dump(), {}, "text/plain");
  EXPECT_EQ(type.status, 415);
  EXPECT_THAT(type.j["error"]["message"].get<std::string>(), HasSubstr("JSON"));
}

TEST_F(HttpApi, BodyTooLarge) {
  server::ServerOptions o;
  o.max_body_bytes = 2000;
  restart(o);
  Reply r = post(*server, "/v1/messages", user_message(std::string(5000, 'x')));
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.j["error"]["type"], "request_too_large");
  EXPECT_THAT(r.j["error"]["message"].get<std::string>(), HasSubstr("2000 bytes"));
  EXPECT_EQ(post(*server, "/v1/chat/completions", user_chat(std::string(5000, 'x'))).status, 413);
  EXPECT_EQ(post(*server, "/v1/chat/completions", user_chat("small")).status, 200);
}

TEST_F(HttpApi, ApiKeys) {
  server::ServerOptions o;
  o.api_keys = {"sekrit"};
  restart(o);
  Reply none = post(*server, "/v1/chat/completions", user_chat("x"));
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.j["error"]["type"], "authentication_error");
  Reply none_a = post(*server, "/v1/messages?beta=true", user_message("x"));
  EXPECT_EQ(none_a.status, 401);
  EXPECT_EQ(none_a.j["error"]["type"], "authentication_error");
  EXPECT_EQ(
      post(*server, "/v1/chat/completions", user_chat("x"), {{"Authorization", "Bearer wrong"}})
          .status,
      401);
  EXPECT_EQ(
      post(*server, "/v1/chat/completions", user_chat("x"), {{"Authorization", "Bearer sekrit"}})
          .status,
      200);
  EXPECT_EQ(post(*server, "/v1/messages", user_message("x"), {{"x-api-key", "sekrit"}}).status,
            200);
  EXPECT_EQ(get(*server, "/v1/models", {{"Authorization", "bearer sekrit"}}).status, 200);
  EXPECT_EQ(get(*server, "/v1/models").status, 401);
  EXPECT_EQ(get(*server, "/health").status, 200);
  EXPECT_EQ(get(*server, "/metrics").status, 200);
  // The same client keeps working after a refusal whose body was never read.
  auto c = server->client();
  auto r1 =
      c.Post("/v1/chat/completions", user_chat(std::string(3000, 'y')).dump(), "application/json");
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->status, 401);
  auto r2 = c.Post("/v1/chat/completions", {{"Authorization", "Bearer sekrit"}},
                   user_chat("z").dump(), "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 200);
}

TEST_F(HttpApi, CorsIsOffByDefault) {
  Reply r = get(*server, "/v1/models", {{"Origin", "http://evil.example"}});
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "");
  auto c = server->client();
  auto pre = c.Options("/v1/chat/completions", {{"Origin", "http://evil.example"}});
  ASSERT_TRUE(pre);
  EXPECT_NE(pre->status, 204);
}

TEST_F(HttpApi, CorsWhenEnabled) {
  server::ServerOptions o;
  o.cors_origins = {"http://app.example"};
  o.api_keys = {"k"};
  restart(o);
  auto c = server->client();
  auto pre = c.Options("/v1/chat/completions", {{"Origin", "http://app.example"},
                                                {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  EXPECT_THAT(pre->get_header_value("Access-Control-Allow-Headers"), HasSubstr("x-api-key"));
  Reply other = get(*server, "/health", {{"Origin", "http://other.example"}});
  EXPECT_EQ(other.header("Access-Control-Allow-Origin"), "");
}

TEST_F(HttpApi, ContextLengthExceeded) {
  fake = std::make_shared<FakeService>(tiny_tokenizer(), 64);
  server = std::make_unique<TestServer>(fake_model(fake));
  const std::string long_text(2000, 'a');
  for (bool stream : {false, true}) {
    Reply r = post(*server, "/v1/chat/completions", user_chat(long_text, {{"stream", stream}}));
    EXPECT_EQ(r.status, 400);
    EXPECT_THAT(r.header("Content-Type"), StartsWith("application/json"));
    EXPECT_EQ(r.j["error"]["code"], "context_length_exceeded");
    EXPECT_EQ(r.j["error"]["n_ctx"], 64);
    EXPECT_GT(r.j["error"]["n_prompt_tokens"].get<int>(), 64);
    Reply a = post(*server, "/v1/messages", user_message(long_text, {{"stream", stream}}));
    EXPECT_EQ(a.status, 400);
    EXPECT_THAT(a.j["error"]["message"].get<std::string>(),
                testing::MatchesRegex("prompt is too long: [0-9]+ tokens > 64 maximum"));
  }
  EXPECT_TRUE(fake->requests().empty());
}

TEST_F(HttpApi, MaxTokensBeyondTheContextIsClamped) {
  fake = std::make_shared<FakeService>(tiny_tokenizer(), 64);
  server = std::make_unique<TestServer>(fake_model(fake));
  std::string words;
  for (int i = 0; i < 100; ++i) words += " w" + std::to_string(i);
  script(words);
  Reply a = post(*server, "/v1/messages", user_message("hi", {{"max_tokens", 32000}}));
  ASSERT_EQ(a.status, 200) << a.body;
  auto req = fake->requests().at(0);
  EXPECT_EQ(req.max_tokens, 64 - static_cast<int64_t>(req.prompt.size()));
  EXPECT_EQ(a.j["stop_reason"], "model_context_window_exceeded");
  script(words);
  Reply o = post(*server, "/v1/chat/completions", user_chat("hi"));
  EXPECT_EQ(o.j["choices"][0]["finish_reason"], "length");
  script(words);
  Reply m = post(*server, "/v1/messages", user_message("hi", {{"max_tokens", 5}}));
  EXPECT_EQ(m.j["stop_reason"], "max_tokens");
  EXPECT_EQ(m.j["usage"]["output_tokens"], 5);
}

TEST_F(HttpApi, QueueFullIs429) {
  fake->set_overloaded(true);
  Reply r = post(*server, "/v1/chat/completions", user_chat("x"));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.j["error"]["type"], "rate_limit_error");
  Reply a = post(*server, "/v1/messages", user_message("x", {{"stream", true}}));
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.j["error"]["type"], "rate_limit_error");
}

TEST_F(HttpApi, ModelsListFitsBothClients) {
  Reply r = get(*server, "/v1/models?limit=1000", {{"anthropic-version", "2023-06-01"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.j["object"], "list");
  EXPECT_EQ(r.j["has_more"], false);
  EXPECT_EQ(r.j["first_id"], "hibana-tiny");
  ASSERT_EQ(r.j["data"].size(), 2u);
  const json& m = r.j["data"][0];
  for (const char* k :
       {"id", "object", "created", "owned_by", "type", "display_name", "created_at"}) {
    EXPECT_TRUE(m.contains(k)) << k;
  }
  EXPECT_EQ(get(*server, "/v1/models/alias").j["id"], "alias");
  EXPECT_EQ(get(*server, "/v1/models/other").status, 404);
}

TEST_F(HttpApi, Metrics) {
  post(*server, "/v1/chat/completions", user_chat("x"));
  // Responses are counted once written, which may be after the client has them.
  Reply m;
  EXPECT_TRUE(eventually([&] {
    m = get(*server, "/metrics");
    return m.body.find("hibana_http_responses_total{status=\"200\"}") != std::string::npos;
  }));
  ASSERT_EQ(m.status, 200);
  EXPECT_THAT(m.header("Content-Type"), StartsWith("text/plain"));
  EXPECT_THAT(m.body, HasSubstr("# TYPE hibana_requests_running gauge"));
  EXPECT_THAT(
      m.body,
      HasSubstr(
          "hibana_time_to_first_token_seconds_bucket{model_name=\"hibana-tiny\",le=\"+Inf\"}"));
  EXPECT_THAT(m.body, HasSubstr("hibana_http_responses_total{status=\"200\"}"));
}

TEST_F(HttpApi, ProbeRouteAndUnprefixedAliases) {
  EXPECT_EQ(get(*server, "/").status, 200);
  EXPECT_EQ(post(*server, "/chat/completions", user_chat("x")).status, 200);
}

}  // namespace
}  // namespace hibana::test
