// The streaming output parsers: every way of cutting a sample output into pieces must give the
// same reasoning, content and tool calls, with no tag text leaking into deltas.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/output_parser.h"
#include "tokenizer/parsers/parameter_value.h"

namespace hibana {
namespace {

using json = nlohmann::ordered_json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"location": {"type": "string"}, "days": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                   "mode": {"type": "integer"}, "force": {"type": "boolean"},
                   "tags": {"type": "array"}, "meta": {"type": "object"},
                   "ratio": {"type": ["number", "null"]}}}}}
])";

struct Collected {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

OutputParserOptions options(bool reasoning, bool tools = true, bool with_specs = true) {
  OutputParserOptions o;
  o.reasoning = reasoning;
  o.tool_calls = tools;
  if (with_specs) o.tools = tool_specs_from_json(kTools);
  return o;
}

// Feeds the pieces, checks the delta protocol, and returns what the deltas add up to.
Collected run(OutputParserOptions opts, const std::vector<std::string>& pieces) {
  auto counter = std::make_shared<int>(0);
  opts.make_id = [counter] { return "call_" + std::to_string((*counter)++); };
  OutputParser parser(opts);
  Collected c;
  auto take = [&](const OutputDelta& d) {
    c.reasoning += d.reasoning;
    c.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (static_cast<size_t>(t.index) == c.calls.size()) {
        EXPECT_FALSE(t.id.empty()) << "first delta of a call carries its id";
        EXPECT_FALSE(t.name.empty()) << "first delta of a call carries its name";
        c.calls.push_back(ParsedToolCall{t.id, t.name, ""});
      } else {
        EXPECT_EQ(static_cast<size_t>(t.index) + 1, c.calls.size()) << "deltas go call by call";
        EXPECT_TRUE(t.id.empty() && t.name.empty()) << "later deltas carry arguments only";
      }
      c.calls.back().arguments += t.arguments;
    }
  };
  for (const std::string& p : pieces) take(parser.push(p));
  take(parser.finish());
  const ParsedOutput& r = parser.result();
  EXPECT_EQ(r.reasoning, c.reasoning);
  EXPECT_EQ(r.content, c.content);
  EXPECT_EQ(r.tool_calls.size(), c.calls.size());
  return c;
}

struct Expected {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON
};

void expect_result(const Collected& got, const Expected& want, const std::string& how) {
  SCOPED_TRACE(how);
  EXPECT_EQ(got.reasoning, want.reasoning);
  EXPECT_EQ(got.content, want.content);
  ASSERT_EQ(got.calls.size(), want.calls.size());
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].id, "call_" + std::to_string(i));
    EXPECT_EQ(got.calls[i].name, want.calls[i].first);
    json args = json::parse(got.calls[i].arguments, nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << "arguments are not JSON: " << got.calls[i].arguments;
    EXPECT_EQ(args, json::parse(want.calls[i].second));
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].second) << "json.dumps formatting";
  }
}

// Whole, cut at every byte into two pieces, cut at every pair of points, and byte by byte.
void check_every_split(const OutputParserOptions& opts, const std::string& text,
                       const Expected& want) {
  expect_result(run(opts, {text}), want, "whole");
  for (size_t i = 0; i <= text.size(); ++i) {
    expect_result(run(opts, {text.substr(0, i), text.substr(i)}), want,
                  "split at " + std::to_string(i));
  }
  for (size_t i = 0; i < text.size(); i += 3) {
    for (size_t j = i; j <= text.size(); j += 5) {
      expect_result(run(opts, {text.substr(0, i), text.substr(i, j - i), text.substr(j)}), want,
                    "split at " + std::to_string(i) + "," + std::to_string(j));
    }
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  expect_result(run(opts, bytes), want, "byte by byte");
}

TEST(OutputParser, Qwen3ThinkingWithJsonToolCall) {
  check_every_split(
      options(true),
      "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 2}}\n"
      "</tool_call>",
      {"The user wants weather.",
       "Let me check.",
       {{"get_weather", R"({"location": "Paris", "days": 2})"}}});
}

TEST(OutputParser, Qwen35XmlToolCallsAfterPromptOpenedThink) {
  check_every_split(
      options(true),
      "Need two files.\n</think>\n\n<tool_call>\n<function=write_file>\n"
      "<parameter=path>\n/tmp/a.txt\n</parameter>\n<parameter=content>\nline 1\n"
      "  line 2 <b>\n\n</parameter>\n<parameter=mode>\n420\n</parameter>\n"
      "<parameter=force>\nTrue\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=get_weather>\n<parameter=location>\nRome\n</parameter>\n"
      "</function>\n</tool_call>",
      {"Need two files.",
       "",
       {{"write_file",
         R"({"path": "/tmp/a.txt", "content": "line 1\n  line 2 <b>\n", "mode": 420, "force": true})"},
        {"get_weather", R"({"location": "Rome"})"}}});
}

TEST(OutputParser, PlainContentWithAngleBrackets) {
  check_every_split(options(false), "if a < b && c <tool or </think> then <tool_cal",
                    {"", "if a < b && c <tool or </think> then <tool_cal", {}});
}

TEST(OutputParser, ReasoningWithoutCloseIsAllReasoning) {
  check_every_split(options(true), "<think>\nstill thinking when cut off <tool_call> mention\n",
                    {"still thinking when cut off <tool_call> mention", "", {}});
}

TEST(OutputParser, ToolCallEndsReasoningImplicitly) {
  check_every_split(options(true),
                    "I should call it.\n<tool_call>\n<function=get_weather>\n<parameter=location>\n"
                    "Oslo\n</parameter>\n</function>\n</tool_call>",
                    {"I should call it.", "", {{"get_weather", R"({"location": "Oslo"})"}}});
}

TEST(OutputParser, ToolCallsOffLeavesTagsInContent) {
  check_every_split(options(false, false), "<tool_call>\n{\"name\": \"x\"}\n</tool_call>",
                    {"", "<tool_call>\n{\"name\": \"x\"}\n</tool_call>", {}});
}

TEST(OutputParser, MalformedCallsBecomeContent) {
  // Unknown function name when tools are known.
  check_every_split(
      options(false),
      "<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>",
      {"",
       "<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</"
       "tool_call>",
       {}});
  // Invalid JSON.
  check_every_split(
      options(false),
      "A<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {oops}\n</tool_call>",
      {"", "A<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {oops}\n</tool_call>", {}});
  // Unterminated JSON call.
  check_every_split(options(false), "Text\n<tool_call>\n{\"name\": \"get_weather\", \"argu",
                    {"", "Text\n<tool_call>\n{\"name\": \"get_weather\", \"argu", {}});
  // Neither JSON nor a function tag.
  check_every_split(options(false), "<tool_call>hello</tool_call> bye",
                    {"", "<tool_call>hello</tool_call> bye", {}});
}

TEST(OutputParser, UnterminatedXmlCallKeepsCompleteParameters) {
  check_every_split(options(false),
                    "<tool_call>\n<function=write_file>\n<parameter=path>\nx.txt\n</parameter>\n"
                    "<parameter=content>\npartial",
                    {"", "", {{"write_file", R"({"path": "x.txt"})"}}});
}

TEST(OutputParser, JsonCallWithStringArgumentsAndNoTools) {
  check_every_split(options(false, true, false),
                    "<tool_call>{\"name\": \"any_tool\", \"arguments\": \"{\\\"a\\\": [1, 2.5, "
                    "null]}\"}</tool_call>",
                    {"", "", {{"any_tool", R"({"a": [1, 2.5, null]})"}}});
}

// An agent writing a large file streams a call body of hundreds of kilobytes a few bytes at a
// time; the search for the closing tag resumes where it stopped (it used to rescan the whole
// body on every piece).
TEST(OutputParser, LongCallsStreamedInSmallPieces) {
  const std::string body(300000, 'x');
  const std::string json_call =
      "<tool_call>{\"name\": \"write_file\", \"arguments\": "
      "{\"path\": \"a\", \"content\": \"" +
      body + "\"}}</tool_call>";
  const std::string xml_call = "<tool_call>\n<function=write_file>\n<parameter=content>\n" + body +
                               "\n</parameter>\n</function>\n</tool_call>";
  for (const std::string& text : {json_call, xml_call}) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size(); i += 7) pieces.push_back(text.substr(i, 7));
    Collected c = run(options(false), pieces);
    ASSERT_EQ(c.calls.size(), 1u);
    json args = json::parse(c.calls[0].arguments);
    EXPECT_EQ(args["content"], body);
  }
}

// Numbers no double holds (an integer past 64 bits, a fraction past 17 digits) keep the text
// the model wrote; they came back as 1.2345678901234568e+29 and 0.1, other numbers as Python
// writes floats (1E5 as 100000.0).
TEST(OutputParser, JsonCallArgumentsKeepTheNumbersText) {
  const std::string args =
      R"({"mode": 123456789012345678901234567890, "ratio": 0.10000000000000000000001, )"
      R"("tags": [1E5, -0.0, 2.50, 18446744073709551616, -9223372036854775809], )"
      R"("path": "\u00e9\n"})";
  const std::string want =
      R"({"mode": 123456789012345678901234567890, "ratio": 0.10000000000000000000001, )"
      R"("tags": [1E5, -0.0, 2.50, 18446744073709551616, -9223372036854775809], )"
      R"("path": "é\n"})";
  check_every_split(
      options(false),
      "<tool_call>\n{\"name\":\"write_file\",\"arguments\":" + args + "}\n</tool_call>",
      {"", "", {{"write_file", want}}});
  // Arguments given as a JSON string; under "parameters"; a string "null" is {} as before.
  check_every_split(
      options(false),
      "<tool_call>{\"name\": \"write_file\", \"arguments\": " + json(args).dump() + "}</tool_call>",
      {"", "", {{"write_file", want}}});
  check_every_split(
      options(false),
      R"(<tool_call>{"name":"get_weather","parameters":{"days":[1,0.30000000000000000001]}})"
      "</tool_call>",
      {"", "", {{"get_weather", R"({"days": [1, 0.30000000000000000001]})"}}});
  check_every_split(options(false),
                    R"(<tool_call>{"name": "get_weather", "arguments": "null"}</tool_call>)",
                    {"", "", {{"get_weather", "{}"}}});
}

TEST(OutputParser, XmlCallArgumentsKeepTheNumbersText) {
  check_every_split(
      options(false),
      "<tool_call>\n<function=write_file>\n<parameter=mode>\n123456789012345678901234567890\n"
      "</parameter>\n<parameter=ratio>\n0.10000000000000000000001\n</parameter>\n"
      "<parameter=tags>\n[1e5,{\"n\":18446744073709551616}]\n</parameter>\n</function>\n</"
      "tool_call>",
      {"",
       "",
       {{"write_file",
         R"({"mode": 123456789012345678901234567890, "ratio": 0.10000000000000000000001, )"
         R"("tags": [1e5, {"n": 18446744073709551616}]})"}}});
}

TEST(OutputParser, XmlValuesStayStringsWithoutSchemas) {
  check_every_split(options(false, true, false),
                    "Sure.<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n</"
                    "function>\n</tool_call>\n",
                    {"", "Sure.", {{"f", R"({"n": "42"})"}}});
}

TEST(OutputParser, TextAfterToolCallIsContent) {
  check_every_split(options(false),
                    "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>\n\nDone.",
                    {"", "Done.", {{"get_weather", "{}"}}});
}

TEST(OutputParser, ThinkingDisabledContentOnly) {
  check_every_split(options(false, false), "\n\nHello <think> there",
                    {"", "\n\nHello <think> there", {}});
}

TEST(OutputParser, PromptThinkingState) {
  EXPECT_EQ(prompt_thinking_state("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
            PromptThinking::none);
  EXPECT_EQ(prompt_thinking_state("<|im_start|>assistant\n<think>\n"), PromptThinking::open);
  EXPECT_EQ(prompt_thinking_state("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            PromptThinking::closed);
  EXPECT_EQ(prompt_thinking_state("<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n"
                                  "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"),
            PromptThinking::none);
}

TEST(OutputParser, ToolSpecsFromJson) {
  auto specs = tool_specs_from_json(
      R"([{"type":"function","function":{"name":"a","parameters":{"type":"object"}}},
                                        {"name":"b"}, {"type":"function"}])");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "a");
  EXPECT_EQ(specs[0].parameters_schema, R"({"type":"object"})");
  EXPECT_EQ(specs[1].name, "b");
  EXPECT_TRUE(specs[1].parameters_schema.empty());
}

json convert(const std::string& raw, const std::string& schema) {
  json s = json::parse(schema);
  return parsers::convert_parameter(raw, &s);
}

TEST(ParameterValue, ConvertsBySchemaType) {
  EXPECT_EQ(parsers::convert_parameter("42", nullptr), json("42"));  // unknown parameter
  EXPECT_EQ(convert("42", R"({"type": "string"})"), json("42"));
  EXPECT_EQ(convert(" 42 ", R"({"type": "integer"})"), json(42));
  EXPECT_EQ(convert("4.0", R"({"type": "integer"})"), json(4));
  EXPECT_EQ(convert("4.5", R"({"type": "number"})"), json(4.5));
  EXPECT_EQ(convert("forty", R"({"type": "integer"})"), json("forty"));
  EXPECT_EQ(convert("true", R"({"type": "boolean"})"), json(true));
  EXPECT_EQ(convert("False", R"({"type": "boolean"})"), json(false));
  EXPECT_EQ(convert("yes", R"({"type": "boolean"})"), json("yes"));
  EXPECT_EQ(convert(R"({"a": [1, {"b": null}]})", R"({"type": "object"})"),
            json::parse(R"({"a": [1, {"b": null}]})"));
  EXPECT_EQ(convert("{'a': True, 'b': None, 'c': (1, 'x')}", R"({"type": "object"})"),
            json::parse(R"({"a": true, "b": null, "c": [1, "x"]})"));
  EXPECT_EQ(convert("['x', \"y\"]", R"({"type": "array"})"), json::parse(R"(["x", "y"])"));
  EXPECT_EQ(convert("{broken", R"({"type": "object"})"), json("{broken"));
  EXPECT_EQ(convert("null", R"({"type": ["string", "null"]})"), json(nullptr));
  EXPECT_EQ(convert("None", R"({"anyOf": [{"type": "integer"}, {"type": "null"}]})"),
            json(nullptr));
  EXPECT_EQ(convert("7", R"({"anyOf": [{"type": "integer"}, {"type": "null"}]})"), json(7));
  EXPECT_EQ(convert("null", R"({"type": "string"})"), json("null"));
  EXPECT_EQ(convert("b", R"({"enum": ["a", "b"]})"), json("b"));
  EXPECT_EQ(convert("3", R"({"enum": [1, 3]})"), json(3));
  EXPECT_EQ(convert("  spaced  ", R"({"description": "no type"})"), json("  spaced  "));
}

TEST(ParameterValue, TextKeepsParsedNumbersAsWritten) {
  json integer = json::parse(R"({"type": "integer"})");
  json number = json::parse(R"({"type": ["number", "null"]})");
  EXPECT_EQ(parsers::convert_parameter_text("4.0", &integer), "4");  // coerced: written anew
  EXPECT_EQ(parsers::convert_parameter_text(" 1.50 ", &number), "1.50");
  EXPECT_EQ(parsers::convert_parameter_text("99999999999999999999", &integer),
            "99999999999999999999");
  EXPECT_EQ(parsers::convert_parameter_text("None", &number), "null");
  EXPECT_EQ(parsers::convert_parameter_text("x\"y", nullptr), R"("x\"y")");
}

TEST(ParameterValue, PythonLiterals) {
  EXPECT_EQ(parsers::parse_python_literal("{'k': 'it\\'s', \"n\": -1.5e3}"),
            json::parse(R"({"k": "it's", "n": -1500.0})"));
  EXPECT_FALSE(parsers::parse_python_literal("{'k': }").has_value());
  EXPECT_FALSE(parsers::parse_python_literal("[1, 2] extra").has_value());
}

}  // namespace
}  // namespace hibana
