#include "engine/json_constraint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/json_schema.h"
#include "support/constraint_masks.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

bool accepts(const std::string& text, bool object_only = true) {
  JsonRecogniser r(object_only);
  return r.feed(text) && r.complete();
}

TEST(JsonRecogniser, AcceptsValidDocuments) {
  for (const char* ok :
       {"{}", "{ }", R"({"a":1})", R"({"a": [1, 2.5, -3e+2, 0, 0.0, true, false, null]})",
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
  const std::string doc =
      R"({"path": "a/b.txt", "lines": [1, 22, {"x": -1.5e3}], "ok": true, "s": "q\u00e9"})";
  for (size_t cut = 0; cut <= doc.size(); ++cut) {
    JsonRecogniser r;
    ASSERT_TRUE(r.feed(doc.substr(0, cut)));
    std::string full = doc.substr(0, cut) + r.closing();
    EXPECT_TRUE(nlohmann::json::accept(full)) << full;
    EXPECT_TRUE(accepts(full)) << full;
  }
}

// The request's text in `table`'s bytes, closed by the constraint if it ran out of tokens.
std::string run_constrained(Engine& engine, const GenerationRequest& r,
                            const std::vector<std::string>& table, const JsonConstraint& c) {
  auto s = engine.submit(r);
  std::string text;
  StreamEvent ev;
  while (s->next(ev, SteadyClock::now() + std::chrono::seconds(60))) {
    if (ev.kind == StreamEvent::Kind::finished) {
      if (ev.finish == FinishReason::length) text += c.closing();
      break;
    }
    text += table[ev.token];
  }
  return text;
}

// The constraint over a real model: whatever the weights, the output is one JSON object.
TEST(JsonConstraint, ForcesAValidObjectFromAnyModel) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next");
  const int64_t V = model->config().vocab_size;
  // A made-up vocabulary: each id stands for a short byte string.
  const char* pieces[] = {"{", "}", "\"", ":",    ",",   "a", "1",
                          " ", "[", "]",  "true", "x\"", "-", ".5"};
  auto table = std::make_shared<std::vector<std::string>>();
  for (int64_t t = 0; t < V; ++t)
    table->push_back(pieces[t % (sizeof(pieces) / sizeof(pieces[0]))]);
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
    const std::string text = run_constrained(engine, r, *table, *c);
    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
    EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
  }
}

// The allowed tokens of a synthetic vocabulary at each step of a document, exactly.
TEST(JsonConstraint, MasksExactlyTheTokensTheSchemaAllows) {
  const std::vector<std::string> pieces = {"",    "{",   "}",           "\"",          "unit",
                                           "\":", "\"c", "elsius\"",    "\"celsius\"", "x",
                                           ",",   " ",   "\"kelvin\"}", "un",          "\"unit\""};
  auto table = std::make_shared<std::vector<std::string>>(pieces);
  auto schema = JsonSchema::compile(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"unit": {"enum": ["celsius", "kelvin"]}},
          "required": ["unit"], "additionalProperties": false})"));
  JsonConstraint c(std::make_shared<TokenTrie>(table), {0}, schema);
  auto allowed = [&] {
    std::vector<float> logits(pieces.size() + 2, 1.0f);  // two ids past the table: masked
    c.apply(logits.data(), static_cast<int64_t>(logits.size()));
    std::string out;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (logits[t] != -INFINITY) out += t < pieces.size() ? "[" + pieces[t] + "]" : "?";
    }
    return out;
  };
  auto take = [&](const std::string& piece) {
    auto it = std::find(pieces.begin(), pieces.end(), piece);
    ASSERT_NE(it, pieces.end());
    c.accept(static_cast<int32_t>(it - pieces.begin()));
  };
  EXPECT_EQ(allowed(), "[{][ ]");
  take("{");
  EXPECT_EQ(allowed(), R"(["][ ]["unit"])");  // no '}' (unit is required), no other key
  take("\"");
  EXPECT_EQ(allowed(), "[unit][un]");
  take("unit");
  EXPECT_EQ(allowed(), R"(["][":])");
  take("\":");
  EXPECT_EQ(allowed(), R"(["]["c]["celsius"][ ]["kelvin"}])");
  take("\"c");
  EXPECT_EQ(allowed(), R"([elsius"])");
  take("elsius\"");
  EXPECT_EQ(allowed(), "[}][ ]");  // no ',': there is no other key to write
  take("}");
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(allowed(), "[]");  // only the end token (id 0, no bytes)
}

// Random sampling over a made-up vocabulary, constrained by a schema: whatever the weights, the
// output (closed when it ran out of tokens) satisfies the schema.
TEST(JsonConstraint, ForcesASchemaValidDocumentFromAnyModel) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next");
  const int64_t V = model->config().vocab_size;
  const char* pieces[] = {"{",      "}",   "\"",   ":", ",",   " ",   "unit",  "celsius",
                          "kelvin", "\"c", "days", "1", "2",   "-",   "[",     "]",
                          "true",   "x",   "tags", "a", "\":", "0.5", "\"x\"", "\"tags\""};
  auto table = std::make_shared<std::vector<std::string>>();
  for (int64_t t = 0; t < V; ++t)
    table->push_back(pieces[t % (sizeof(pieces) / sizeof(pieces[0]))]);
  (*table)[0] = "";  // id 0: an end token with no bytes
  auto trie = std::make_shared<TokenTrie>(table);
  auto schema = JsonSchema::compile(nlohmann::ordered_json::parse(R"({"type": "object",
      "properties": {"unit": {"enum": ["celsius", "kelvin"]}, "days": {"type": "integer"},
                     "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
      "required": ["unit", "days"], "additionalProperties": false})"));
  Engine engine(model, EngineOptions{});
  for (uint64_t seed = 0; seed < 6; ++seed) {
    GenerationRequest r;
    r.prompt = {5, 6, 7};
    r.max_tokens = 60;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    auto c = std::make_shared<JsonConstraint>(trie, std::vector<int32_t>{0}, schema);
    r.processor = c;
    const std::string text = run_constrained(engine, r, *table, *c);
    JsonRecogniser check(schema);
    EXPECT_TRUE(check.feed(text) && check.complete()) << text;
    auto j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_TRUE(j["unit"] == "celsius" || j["unit"] == "kelvin") << text;
    EXPECT_TRUE(j["days"].is_number_integer()) << text;
    for (auto& [k, v] : j.items()) EXPECT_TRUE(k == "unit" || k == "days" || k == "tags") << text;
  }
}

// The trie walk (with its shortcuts: inert bytes share their parent's state, and a subtree of
// bytes a string accepts in any number is allowed whole) masks exactly what brute force does,
// for a free object and for a schema with checked keys and literals.
TEST(JsonConstraint, MasksMatchBruteForceAtEveryByte) {
  auto vocab = test::random_vocabulary(3, 4000);
  auto trie = std::make_shared<TokenTrie>(vocab);
  const std::string doc = R"({"path": "src/a b\"c\u00e9)"
                          "\xc3\xa9"
                          R"(", "n": -12.5e3, "list": [true, null, {"k": "v"}], "unit": "kelvin",)"
                          R"( "note": "x<y>/z"})";
  {
    SCOPED_TRACE("free object");
    JsonConstraint c(trie, {0}, JsonSchema::any(true));
    test::expect_masks_match_brute_force(c, JsonRecogniser(true), *vocab, doc);
  }
  {
    SCOPED_TRACE("schema");
    auto schema = JsonSchema::compile(nlohmann::ordered_json::parse(
        R"({"type": "object", "properties": {"unit": {"enum": ["celsius", "kelvin"]},
            "path": {"type": "string"}, "n": {"type": "number"}}, "required": ["unit"]})"));
    JsonConstraint c(trie, {0}, schema);
    test::expect_masks_match_brute_force(c, JsonRecogniser(schema), *vocab, doc);
  }
  {
    SCOPED_TRACE("schema without additional properties (keys checked byte by byte)");
    auto schema = JsonSchema::compile(nlohmann::ordered_json::parse(
        R"({"type": "object", "properties": {"unit": {"enum": ["celsius", "kelvin"]},
            "path": {"type": "string"}}, "additionalProperties": false})"));
    JsonConstraint c(trie, {0}, schema);
    test::expect_masks_match_brute_force(c, JsonRecogniser(schema), *vocab,
                                         R"({"path": "a\"b<c", "unit": "celsius"})");
  }
}

}  // namespace
}  // namespace hibana
