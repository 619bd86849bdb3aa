#include "engine/xml_call_recogniser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "support/constraint_masks.h"
#include "support/fixture_model.h"
#include "tokenizer/parsers/tool_call_extractor.h"

namespace hibana {
namespace {

using Json = nlohmann::ordered_json;

const char* kWeather = R"({"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"},
                   "opts": {"type": "object", "properties": {"hourly": {"type": "boolean"}},
                            "required": ["hourly"], "additionalProperties": false},
                   "note": {"type": ["string", "null"]}},
    "required": ["city", "days"], "additionalProperties": false})";
const char* kSearch = R"({"type": "object", "properties": {"query": {"type": "string"},
    "limit": {"type": "number"}}, "required": ["query"]})";

std::shared_ptr<const XmlCallSpec> spec(bool named) {
  auto s = std::make_shared<XmlCallSpec>();
  s->tools.push_back(xml_tool_spec("get_weather", Json::parse(kWeather)));
  if (!named) s->tools.push_back(xml_tool_spec("search", Json::parse(kSearch)));
  s->named = named;
  return s;
}

bool accepts(const std::string& text, bool named = false) {
  XmlCallRecogniser r(spec(named));
  return r.feed(text) && r.complete();
}

// What the server's parser makes of a call (the text after "<tool_call>\n" plus the
// "\n</tool_call>" the server appends): the tool's name and its arguments.
std::pair<std::string, Json> parse_call(const std::string& call) {
  std::vector<ToolSpec> tools = {{"get_weather", kWeather}, {"search", kSearch}};
  parsers::ToolCallExtractor x(tools, [] { return std::string("id"); });
  OutputDelta out;
  x.push("<tool_call>\n" + call + "\n</tool_call>", out);
  x.finish(out);
  if (out.tool_calls.empty() || !out.content.empty()) return {"", Json()};
  std::string args;
  for (const ToolCallDelta& d : out.tool_calls) args += d.arguments;
  return {out.tool_calls[0].name, Json::parse(args, nullptr, false)};
}

const std::string kFull =
    "<function=get_weather>\n<parameter=city>\nSan </param> Francisco\nline 2\n</parameter>\n"
    "<parameter=days>\n-3\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n"
    "<parameter=opts>\n{\"hourly\": true}\n</parameter>\n</function>";

TEST(XmlCallRecogniser, AcceptsValidCalls) {
  EXPECT_TRUE(accepts(kFull));
  EXPECT_TRUE(accepts("<function=search>\n<parameter=query>\n\n</parameter>\n</function>"));
  EXPECT_TRUE(
      accepts("<function=search>\n<parameter=limit>\n2.5e3\n</parameter>\n"
              "<parameter=query>\na\n\nb</parameterx\n</parameter>\n</function>"));
  EXPECT_TRUE(
      accepts("<parameter=days>\n7\n</parameter>\n<parameter=note>\nnull\n</parameter>\n"
              "<parameter=city>\nRome\n</parameter>\n</function>",
              true));
  auto [name, args] = parse_call(kFull);
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, Json::parse(R"({"city": "San </param> Francisco\nline 2", "days": -3,
                                  "unit": "celsius", "opts": {"hourly": true}})"));
}

TEST(XmlCallRecogniser, RejectsWhatTheSchemaDoesNotAllow) {
  const std::string days = "<parameter=days>\n1\n</parameter>\n";
  const std::string city = "<parameter=city>\nx\n</parameter>\n";
  for (const std::string& bad : std::vector<std::string>{
           std::string("<function=get_weathers>\n"),           // unknown tool
           std::string("<function=other>\n"),                  // unknown tool
           "<function=get_weather>\n<parameter=town>\n",       // undeclared parameter
           "<function=get_weather>\n" + city + city,           // a parameter twice
           "<function=get_weather>\n" + city + "</function>",  // "days" is required
           "<function=get_weather>\n<parameter=days>\n1.5\n",  // not an integer
           "<function=get_weather>\n<parameter=days>\n\"1\"",  // not an integer
           "<function=get_weather>\n<parameter=days>\n01",     // not JSON
           "<function=get_weather>\n<parameter=opts>\n{\"hourly\": 1}",
           "<function=get_weather>\n<parameter=opts>\n{}\n",           // "hourly" is required
           "<function=get_weather>\n<parameter=unit>\nkelvin",         // not in the enum
           "<function=get_weather>\n<parameter=city>\na</parameter>",  // no '\n' before it
           "<function=get_weather>\n<parameter=city>\na </tool_call>",
           "<function=get_weather>\n" + city + days + "</function>\n",  // nothing after
           "<function=get_weather>\n" + city + " <parameter=",          // stray text
       }) {
    XmlCallRecogniser r(spec(false));
    EXPECT_FALSE(r.feed(bad)) << bad;
  }
  XmlCallRecogniser r(spec(false));
  ASSERT_TRUE(r.feed("<function=get_weather>\n" + city));
  EXPECT_FALSE(r.feed("</function>"));  // rejected bytes leave the state as it was
  EXPECT_TRUE(r.feed(days + "</function>"));
  EXPECT_TRUE(r.complete());
}

// Every prefix of a call, closed, is a complete call that the parser reads as a valid one.
TEST(XmlCallRecogniser, ClosingCompletesAnyPrefix) {
  for (const std::string& call :
       {kFull, std::string("<function=search>\n<parameter=limit>\n-12.5\n</parameter>\n"
                           "<parameter=query>\nfind </parameter\n</parameter>\n</function>")}) {
    for (size_t cut = 0; cut <= call.size(); ++cut) {
      XmlCallRecogniser r(spec(false));
      ASSERT_TRUE(r.feed(call.substr(0, cut)));
      const std::string full = call.substr(0, cut) + r.closing();
      SCOPED_TRACE(full);
      XmlCallRecogniser check(spec(false));
      EXPECT_TRUE(check.feed(full) && check.complete());
      auto [name, args] = parse_call(full);
      ASSERT_TRUE(args.is_object());
      if (name == "get_weather") {
        EXPECT_TRUE(args["city"].is_string());
        EXPECT_TRUE(args["days"].is_number_integer());
        if (args.contains("unit")) {
          EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit");
        }
        if (args.contains("opts")) {
          EXPECT_TRUE(args["opts"]["hourly"].is_boolean());
        }
      } else {
        ASSERT_EQ(name, "search");
        EXPECT_TRUE(args["query"].is_string());
        if (args.contains("limit")) {
          EXPECT_TRUE(args["limit"].is_number());
        }
      }
    }
  }
  XmlCallRecogniser named(spec(true));
  EXPECT_EQ(named.closing(),
            "<parameter=city>\n\n</parameter>\n<parameter=days>\n0\n</parameter>\n</function>");
}

// The allowed tokens of a synthetic vocabulary at each step of a named call, exactly.
TEST(XmlCallConstraint, MasksExactlyTheTokensTheCallAllows) {
  const std::vector<std::string> pieces = {"",
                                           "<parameter=",
                                           "city",
                                           "days",
                                           ">",
                                           ">\n",
                                           "\n",
                                           "Paris",
                                           "1",
                                           "x<",
                                           "1.5",
                                           "\n</parameter>\n",
                                           "</parameter>",
                                           "</function>",
                                           "<function="};
  auto table = std::make_shared<std::vector<std::string>>(pieces);
  auto spec = std::make_shared<XmlCallSpec>();
  spec->tools.push_back(xml_tool_spec("get_weather", Json::parse(R"({"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
      "required": ["city", "days"]})")));
  spec->named = true;
  XmlCallConstraint c(std::make_shared<TokenTrie>(table), {0}, spec);
  auto allowed = [&] {
    std::vector<float> logits(pieces.size(), 1.0f);
    c.apply(logits.data(), static_cast<int64_t>(logits.size()));
    std::string out;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (logits[t] != -INFINITY) out += "[" + pieces[t] + "]";
    }
    return out;
  };
  auto take = [&](const std::string& piece) {
    auto it = std::find(pieces.begin(), pieces.end(), piece);
    ASSERT_NE(it, pieces.end());
    c.accept(static_cast<int32_t>(it - pieces.begin()));
  };
  EXPECT_EQ(allowed(), "[<parameter=]");  // no </function>: city and days are required
  take("<parameter=");
  EXPECT_EQ(allowed(), "[city][days]");
  take("city");
  EXPECT_EQ(allowed(), "[>][>\n]");
  take(">\n");
  // Text: anything, even "</parameter>" at once (an empty value).
  EXPECT_EQ(allowed(),
            "[<parameter=][city][days][>][>\n][\n][Paris][1][x<][1.5][\n</parameter>\n]"
            "[</parameter>][</function>][<function=]");
  take("Paris");
  // Now "</parameter>" without the '\n' before it would end the value inside it.
  EXPECT_EQ(allowed(),
            "[<parameter=][city][days][>][>\n][\n][Paris][1][x<][1.5][\n</parameter>\n]"
            "[</function>][<function=]");
  take("\n</parameter>\n");
  EXPECT_EQ(allowed(), "[<parameter=]");
  take("<parameter=");
  EXPECT_EQ(allowed(), "[days]");  // city is written
  take("days");
  take(">\n");
  EXPECT_EQ(allowed(), "[\n][1]");  // an integer (or the whitespace before one)
  take("1");
  EXPECT_EQ(allowed(), "[\n][1][\n</parameter>\n]");
  take("\n</parameter>\n");
  EXPECT_EQ(allowed(), "[</function>]");
  take("</function>");
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(allowed(), "[]");  // only the end token
}

// The constraint over a real model and a made-up vocabulary: whatever the weights, the output
// (closed when it ran out of tokens) is a call the parser reads with valid arguments.
TEST(XmlCallConstraint, ForcesAValidCallFromAnyModel) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next");
  const int64_t V = model->config().vocab_size;
  // clang-format off
  const char* pieces[] = {"<",    ">",      "\n",          "</",    "parameter", "=",   "function",
                          "city", "days",   "unit",        "query", "search",    "get", "_weather",
                          "1",    "-",      "celsius",     "x",     " ",         "{",   "}",
                          "\"",   "hourly", "true",        ":",     "opts",      ".5",  "</parameter>",
                          "note", "null",   "</function>", "limit", "\n</parameter>\n"};
  // clang-format on
  auto table = std::make_shared<std::vector<std::string>>();
  for (int64_t t = 0; t < V; ++t)
    table->push_back(pieces[t % (sizeof(pieces) / sizeof(pieces[0]))]);
  (*table)[0] = "";  // id 0: an end token with no bytes
  auto trie = std::make_shared<TokenTrie>(table);
  Engine engine(model, EngineOptions{});
  int completed = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    GenerationRequest r;
    r.prompt = {5, 6, 7};
    r.max_tokens = seed % 2 ? 12 : 80;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    auto c = std::make_shared<XmlCallConstraint>(trie, std::vector<int32_t>{0}, spec(false));
    r.processor = c;
    auto s = engine.submit(r);
    std::string text;
    StreamEvent ev;
    while (s->next(ev, SteadyClock::now() + std::chrono::seconds(60))) {
      if (ev.kind == StreamEvent::Kind::finished) {
        if (ev.finish == FinishReason::length) {
          text += c->closing();
        } else {
          ++completed;
        }
        break;
      }
      text += (*table)[ev.token];
    }
    SCOPED_TRACE(text);
    XmlCallRecogniser check(spec(false));
    EXPECT_TRUE(check.feed(text) && check.complete());
    auto [name, args] = parse_call(text);
    ASSERT_TRUE(args.is_object());
    EXPECT_TRUE(name == "get_weather" ? args["days"].is_number_integer()
                                      : args["query"].is_string());
  }
  EXPECT_GT(completed, 0) << "no call ended by itself";
}

// The constraint's trie walk (inert bytes share their parent's state; a subtree of bytes the
// state accepts in any number is allowed whole) masks exactly what brute force does, at every
// byte of a call with text, JSON and nested values.
TEST(XmlCallConstraint, MasksMatchBruteForceAtEveryByte) {
  auto vocab = test::random_vocabulary(7, 4000);
  XmlCallConstraint c(std::make_shared<TokenTrie>(vocab), {0}, spec(false));
  test::expect_masks_match_brute_force(c, XmlCallRecogniser(spec(false)), *vocab, kFull);
}

}  // namespace
}  // namespace hibana
