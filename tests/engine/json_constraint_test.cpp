#include "engine/json_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

bool accepts(const std::string& text, bool object_only = true) {
  JsonRecogniser r(object_only);
  return r.feed(text) && r.complete();
}

TEST(JsonRecogniser, AcceptsValidDocuments) {
  for (const char* ok : {"{}", "{ }", R"({"a":1})", R"({"a": [1, 2.5, -3e+2, 0, 0.0, true, false, null]})",
                         R"({"s": "x\"y\\z\u00e9\n", "o": {"n": {}}, "e": []})", "{\"k\":-0.5E-3}"}) {
    EXPECT_TRUE(accepts(ok)) << ok;
  }
  EXPECT_TRUE(accepts("[1, 2]", false));
  EXPECT_TRUE(accepts("\"str\"", false));
}

TEST(JsonRecogniser, RejectsInvalidBytesAndKeepsItsState) {
  for (const char* bad : {"{,}", "{\"a\" 1}", "{\"a\":01}", "{\"a\":1,}", "[1]", "{\"a\":tru}",
                          "{\"a\":\"\\x\"}", "{} x", "{\"a\":1}}", "{\"a\":-}"}) {
    EXPECT_FALSE(accepts(bad)) << bad;
  }
  EXPECT_FALSE(accepts("{  }")) << "whitespace runs are capped at one byte";
  EXPECT_FALSE(accepts("{\"a\":\n  1}"));
  JsonRecogniser r;
  ASSERT_TRUE(r.feed("{\"a\":"));
  EXPECT_FALSE(r.feed("}"));  // rejected bytes leave the state as it was
  EXPECT_TRUE(r.feed("[1]}"));
  EXPECT_TRUE(r.complete());
}

TEST(JsonRecogniser, ClosingCompletesAnyPrefix) {
  const std::string doc = R"({"path": "a/b.txt", "lines": [1, 22, {"x": -1.5e3}], "ok": true, "s": "q\u00e9"})";
  for (size_t cut = 0; cut <= doc.size(); ++cut) {
    JsonRecogniser r;
    ASSERT_TRUE(r.feed(doc.substr(0, cut)));
    std::string full = doc.substr(0, cut) + r.closing();
    EXPECT_TRUE(nlohmann::json::accept(full)) << full;
    EXPECT_TRUE(accepts(full)) << full;
  }
}

// The constraint over a real model: whatever the weights, the output is one JSON object.
TEST(JsonConstraint, ForcesAValidObjectFromAnyModel) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next");
  const int64_t V = model->config().vocab_size;
  // A made-up vocabulary: each id stands for a short byte string.
  const char* pieces[] = {"{", "}", "\"", ":", ",", "a", "1", " ", "[", "]", "true", "x\"", "-", ".5"};
  auto table = std::make_shared<std::vector<std::string>>();
  for (int64_t t = 0; t < V; ++t) table->push_back(pieces[t % (sizeof(pieces) / sizeof(pieces[0]))]);
  (*table)[0] = "";  // id 0: an end token with no bytes
  Engine engine(model, EngineOptions{});
  for (uint64_t seed = 0; seed < 4; ++seed) {
    GenerationRequest r;
    r.prompt = {5, 6, 7};
    r.max_tokens = 200;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    auto c = std::make_shared<JsonConstraint>(table, std::vector<int32_t>{0});
    r.processor = c;
    auto s = engine.submit(r);
    std::string text;
    StreamEvent ev;
    FinishReason fin = FinishReason::none;
    while (s->next(ev, SteadyClock::now() + std::chrono::seconds(60))) {
      if (ev.kind == StreamEvent::Kind::finished) {
        fin = ev.finish;
        break;
      }
      text += (*table)[ev.token];
    }
    if (fin == FinishReason::length) text += c->closing();
    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
    EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
  }
}

}  // namespace
}  // namespace hibana
