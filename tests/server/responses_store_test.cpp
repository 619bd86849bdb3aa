// Stored Responses API responses: the LRU store itself, and previous_response_id, GET and
// DELETE /v1/responses/{id} over HTTP (scripted outputs, and the real engine's prefix cache).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "server/http_support.h"
#include "server/response_store.h"

namespace hibana::test {
namespace {

using server::ResponseStore;
using server::ResponseStoreLimits;
using server::StoredResponse;
using testing::HasSubstr;
using testing::Not;

StoredResponse entry(const std::string& text) {
  return {"[]", text, {}};
}

TEST(ResponseStore, EvictsLeastRecentlyUsedPastTheCount) {
  ResponseStore store(ResponseStoreLimits{2, 1 << 20});
  store.put("a", entry("{}"));
  store.put("b", entry("{}"));
  ASSERT_NE(store.get("a"), nullptr);  // a is now more recent than b
  store.put("c", entry("{}"));
  EXPECT_NE(store.get("a"), nullptr);
  EXPECT_EQ(store.get("b"), nullptr);
  EXPECT_NE(store.get("c"), nullptr);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.remove("a"));
  EXPECT_FALSE(store.remove("a"));
  EXPECT_EQ(store.size(), 1u);
}

TEST(ResponseStore, EvictsPastTheBytesAndSkipsWhatCannotFit) {
  ResponseStore store(ResponseStoreLimits{100, 100});
  store.put("a", entry(std::string(50, 'x')));
  store.put("b", entry(std::string(50, 'x')));
  EXPECT_EQ(store.get("a"), nullptr);  // 2 * (1 + 2 + 50) > 100
  EXPECT_NE(store.get("b"), nullptr);
  EXPECT_LE(store.bytes(), 100u);
  store.put("big", entry(std::string(200, 'x')));
  EXPECT_EQ(store.get("big"), nullptr);
  EXPECT_NE(store.get("b"), nullptr);  // kept: the oversized entry evicted nothing
  ResponseStore none(ResponseStoreLimits{0, 100});
  none.put("a", entry("{}"));
  EXPECT_EQ(none.get("a"), nullptr);
}

TEST(ResponseStore, FindsEntriesByTheirOutputItems) {
  ResponseStore store(ResponseStoreLimits{2, 1 << 20});
  store.put("a", {"[]", "{}", {"fc_1", "msg_1"}});
  store.put("b", {"[]", "{}", {"fc_2"}});
  EXPECT_EQ(store.find_item("fc_1"), store.get("a"));
  EXPECT_EQ(store.find_item("fc_2"), store.get("b"));
  EXPECT_EQ(store.find_item("a"), nullptr);  // response ids are not item ids
  store.get("a");
  store.put("c", {"[]", "{}", {}});  // evicts b, the least recently used
  EXPECT_EQ(store.find_item("fc_2"), nullptr);
  EXPECT_NE(store.find_item("msg_1"), nullptr);
  store.put("a", {"[]", "{}", {"fc_3"}});  // replaced: its old items go with it
  EXPECT_EQ(store.find_item("fc_1"), nullptr);
  EXPECT_EQ(store.find_item("fc_3"), store.get("a"));
  EXPECT_TRUE(store.remove("a"));
  EXPECT_EQ(store.find_item("fc_3"), nullptr);
}

TEST(ResponseStore, ConcurrentUse) {
  ResponseStore store(ResponseStoreLimits{16, 1 << 20});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string id = std::to_string((t * 7 + i) % 40);
        store.put(id, entry("{}"));
        store.get(std::to_string(i % 40));
        if (i % 5 == 0) store.remove(id);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(store.size(), 16u);
  EXPECT_EQ(store.bytes(), [&] {
    size_t n = 0;
    for (int i = 0; i < 40; ++i)
      n += store.get(std::to_string(i)) ? std::to_string(i).size() + 4 : 0;
    return n;
  }());
}

json tools() {
  return json::parse(R"([{"type":"function","name":"shell","parameters":{"type":"object"}}])");
}

json request(json input, json extra = json::object()) {
  json j = {{"model", "hibana-tiny"}, {"input", std::move(input)}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

std::string prompt_of(const FakeService& fake, size_t i) {
  return tiny_tokenizer()->decode(fake.requests().at(i).prompt);
}

TEST_F(HttpApi, ResponsesContinueAStoredConversation) {
  script("Paris is the capital.");
  Reply first = post(*server, "/v1/responses",
                     request("What is the capital of France?", {{"instructions", "Be brief."}}));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.j["store"], true);
  const std::string id = first.j["id"];

  script("Rome.");
  Reply second = post(*server, "/v1/responses",
                      request("And of Italy?", {{"previous_response_id", id},
                                                {"instructions", "Answer in one word."}}));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.j["previous_response_id"], id);
  EXPECT_EQ(second.j["output"][0]["content"][0]["text"], "Rome.");
  const std::string prompt = prompt_of(*fake, 1);
  EXPECT_THAT(prompt, HasSubstr("What is the capital of France?"));
  EXPECT_THAT(prompt, HasSubstr("Paris is the capital."));
  EXPECT_THAT(prompt, HasSubstr("And of Italy?"));
  // Instructions are not inherited: the new ones replace them.
  EXPECT_THAT(prompt, HasSubstr("Answer in one word."));
  EXPECT_THAT(prompt, Not(HasSubstr("Be brief.")));
  // The continued prompt starts as the first one did, without its instructions.
  EXPECT_THAT(prompt, HasSubstr("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                                "<|im_start|>assistant\nParis is the capital.<|im_end|>\n"
                                "<|im_start|>user\nAnd of Italy?"));

  // A third turn sees both earlier ones.
  script("Madrid.");
  Reply third = post(*server, "/v1/responses",
                     request("And of Spain?", {{"previous_response_id", second.j["id"]}}));
  ASSERT_EQ(third.status, 200) << third.body;
  EXPECT_THAT(prompt_of(*fake, 2), HasSubstr("France?<|im_end|>\n<|im_start|>assistant\nParis"));
  EXPECT_THAT(prompt_of(*fake, 2), HasSubstr("Italy?<|im_end|>\n<|im_start|>assistant\nRome."));
}

TEST_F(HttpApi, ResponsesFunctionCallRoundTripThroughPreviousResponse) {
  script("<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>");
  Reply first = post(*server, "/v1/responses", request("list the files", {{"tools", tools()}}));
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_EQ(first.j["output"][0]["type"], "function_call");
  const std::string call_id = first.j["output"][0]["call_id"];

  json output = {{{"type", "function_call_output"}, {"call_id", "call_other"}, {"output", "x"}}};
  Reply unpaired =
      post(*server, "/v1/responses", request(output, {{"previous_response_id", first.j["id"]}}));
  EXPECT_EQ(unpaired.status, 400) << unpaired.body;
  EXPECT_THAT(unpaired.j["error"]["message"].get<std::string>(), HasSubstr("call_other"));

  script("There is a.txt.");
  output[0]["call_id"] = call_id;
  output[0]["output"] = "a.txt";
  Reply second =
      post(*server, "/v1/responses",
           request(output, {{"previous_response_id", first.j["id"]}, {"tools", tools()}}));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.j["output"][0]["content"][0]["text"], "There is a.txt.");
  const std::string prompt = prompt_of(*fake, 1);
  EXPECT_THAT(prompt, HasSubstr("list the files"));
  EXPECT_THAT(prompt,
              HasSubstr("<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}"));
  EXPECT_THAT(prompt, HasSubstr("<tool_response>\na.txt\n</tool_response>"));
}

// An item_reference input item stands for a stored response's output item: here the call,
// answered by its output, without previous_response_id.
TEST_F(HttpApi, ResponsesItemReferenceToAStoredFunctionCall) {
  script("<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>");
  Reply first = post(*server, "/v1/responses", request("list the files", {{"tools", tools()}}));
  ASSERT_EQ(first.status, 200) << first.body;
  const json& call = first.j["output"][0];
  ASSERT_EQ(call["type"], "function_call");

  script("There is a.txt.");
  json input = {
      {{"type", "message"}, {"role", "user"}, {"content", "list the files"}},
      {{"type", "item_reference"}, {"id", call["id"]}},
      {{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "a.txt"}}};
  Reply second = post(*server, "/v1/responses", request(input, {{"tools", tools()}}));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.j["output"][0]["content"][0]["text"], "There is a.txt.");
  EXPECT_THAT(
      prompt_of(*fake, 1),
      HasSubstr("list the files<|im_end|>\n<|im_start|>assistant\n\n<tool_call>\n{\"name\": "
                "\"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\n<tool_response>\na.txt\n</tool_response>"));

  // The second response stored the item itself: continuing it needs no lookup of the first.
  server->client().Delete(("/v1/responses/" + first.j["id"].get<std::string>()).c_str());
  script("Done.");
  Reply third =
      post(*server, "/v1/responses", request("thanks", {{"previous_response_id", second.j["id"]}}));
  ASSERT_EQ(third.status, 200) << third.body;
  EXPECT_THAT(prompt_of(*fake, 2), HasSubstr("\"arguments\": {\"cmd\": \"ls\"}}"));
  // With the first response gone, so is its item.
  Reply gone = post(*server, "/v1/responses", request(input, {{"tools", tools()}}));
  EXPECT_EQ(gone.status, 400) << gone.body;
}

TEST_F(HttpApi, ResponsesUnknownItemReferenceIs400) {
  json input = {{{"type", "message"}, {"role", "user"}, {"content", "x"}},
                {{"type", "item_reference"}, {"id", "fc_nope"}}};
  Reply r = post(*server, "/v1/responses", request(input));
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.j["error"]["message"],
            "input[1].id: item_reference 'fc_nope': no stored response has an output item with "
            "this id (the server keeps the last 256 stored responses in memory, up to 64 MiB)");
  EXPECT_EQ(r.j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(r.j["error"]["param"], "input[1].id");
  EXPECT_TRUE(fake->requests().empty());
}

TEST_F(HttpApi, ResponsesGetAndDeleteStoredResponses) {
  script("Stored.");
  Reply r = post(*server, "/v1/responses", request("keep this"));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string id = r.j["id"];
  Reply got = get(*server, "/v1/responses/" + id);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.j, r.j);

  auto c = server->client();
  auto del = c.Delete(("/v1/responses/" + id).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(json::parse(del->body),
            json({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}));
  EXPECT_EQ(get(*server, "/v1/responses/" + id).status, 404);
  EXPECT_EQ(c.Delete(("/v1/responses/" + id).c_str())->status, 404);
  Reply continued = post(*server, "/v1/responses", request("x", {{"previous_response_id", id}}));
  EXPECT_EQ(continued.status, 404) << continued.body;
}

TEST_F(HttpApi, ResponsesWithStoreFalseAreNotKept) {
  Reply r = post(*server, "/v1/responses", request("forget this", {{"store", false}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["store"], false);
  const std::string id = r.j["id"];
  EXPECT_EQ(get(*server, "/v1/responses/" + id).status, 404);
  Reply continued = post(*server, "/v1/responses", request("x", {{"previous_response_id", id}}));
  EXPECT_EQ(continued.status, 404) << continued.body;
  EXPECT_EQ(fake->requests().size(), 1u);  // the refused request never ran
}

TEST_F(HttpApi, ResponsesUnknownPreviousResponseIs404) {
  Reply r = post(*server, "/v1/responses", request("x", {{"previous_response_id", "resp_nope"}}));
  ASSERT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(r.j["error"]["message"],
            "response 'resp_nope' not found (the server keeps the last 256 stored responses in "
            "memory, up to 64 MiB)");
  EXPECT_EQ(r.j["error"]["type"], "not_found_error");
  EXPECT_EQ(r.j["error"]["param"], "previous_response_id");
  EXPECT_EQ(r.j["error"]["code"], "previous_response_not_found");
  EXPECT_TRUE(fake->requests().empty());
}

TEST_F(HttpApi, ResponsesStoreEvictsTheOldestPastItsLimit) {
  server::ServerOptions o;
  o.stored_responses.max_responses = 2;
  restart(o);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    Reply r = post(*server, "/v1/responses", request("turn " + std::to_string(i)));
    ASSERT_EQ(r.status, 200) << r.body;
    ids.push_back(r.j["id"]);
  }
  Reply evicted = post(*server, "/v1/responses", request("x", {{"previous_response_id", ids[0]}}));
  EXPECT_EQ(evicted.status, 404) << evicted.body;
  EXPECT_THAT(evicted.j["error"]["message"].get<std::string>(),
              HasSubstr("keeps the last 2 stored responses"));
  EXPECT_EQ(get(*server, "/v1/responses/" + ids[1]).status, 200);
  EXPECT_EQ(get(*server, "/v1/responses/" + ids[2]).status, 200);

  o.stored_responses.max_responses = 0;  // none kept
  restart(o);
  Reply r = post(*server, "/v1/responses", request("x"));
  EXPECT_EQ(r.j["store"], false);
  EXPECT_EQ(get(*server, "/v1/responses/" + r.j["id"].get<std::string>()).status, 404);
}

TEST_F(HttpApi, ResponsesStreamContinuesAndIsStored) {
  script("First answer.");
  Reply first = post(*server, "/v1/responses", request("first question", {{"stream", true}}));
  auto events = parse_sse(first.body);
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().event, "response.completed");
  const json completed = events.back().json_data["response"];
  const std::string id = completed["id"];
  EXPECT_EQ(get(*server, "/v1/responses/" + id).j, completed);

  script("Second answer.");
  Reply second = post(*server, "/v1/responses",
                      request("second question", {{"stream", true}, {"previous_response_id", id}}));
  events = parse_sse(second.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().json_data["response"]["previous_response_id"], id);
  EXPECT_EQ(events.back().event, "response.completed");
  EXPECT_THAT(prompt_of(*fake, 1),
              HasSubstr("first question<|im_end|>\n<|im_start|>assistant\nFirst answer.<|im_end|>"
                        "\n<|im_start|>user\nsecond question"));
}

// The continued conversation's prompt starts with the first one's, so the prefix cache serves it.
class ResponsesEngine : public RealEngineTest {};

TEST_F(ResponsesEngine, ContinuedConversationHitsThePrefixCache) {
  std::string question;
  for (int i = 0; i < 40; ++i) question += "Rule " + std::to_string(i) + ": write clear code. ";
  json body = request(question, {{"max_output_tokens", 4}, {"temperature", 0}});
  Reply first = post(*server_, "/v1/responses", body);
  ASSERT_EQ(first.status, 200) << first.body;
  Reply second = post(*server_, "/v1/responses",
                      request("Now summarise.", {{"max_output_tokens", 4},
                                                 {"temperature", 0},
                                                 {"previous_response_id", first.j["id"]}}));
  ASSERT_EQ(second.status, 200) << second.body;
  const int64_t first_tokens = first.j["usage"]["input_tokens"];
  EXPECT_GT(second.j["usage"]["input_tokens"].get<int64_t>(), first_tokens);
  EXPECT_GE(second.j["usage"]["input_tokens_details"]["cached_tokens"].get<int64_t>(),
            first_tokens / 64 * 64)
      << second.body;
}

}  // namespace
}  // namespace hibana::test
