// Bugs in the output parsers that tool_call_*_fuzz (and writing them) found: a function or
// parameter name over 256 bytes parsed differently depending on how the text was split, a
// float-to-int conversion out of range for integer parameters (undefined behaviour),
// std::invalid_argument escaping from a Python literal's \x escape although the parser promises
// never to throw, and unbounded recursion on deeply nested arguments (a model can be made to
// write that much).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/output_parser.h"
#include "tokenizer/parsers/parameter_value.h"

namespace hibana {
namespace {

using json = nlohmann::ordered_json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
    "properties": {"path": {"type": "string"}, "mode": {"type": "integer"},
                   "tags": {"type": "array"}}}}}
])";

// The text in one piece, or byte by byte; with the tools above, or accepting any name.
ParsedOutput parse(const std::string& text, bool bytewise = false, bool any_tool = false) {
  OutputParserOptions options;
  options.tool_calls = true;
  if (!any_tool) options.tools = tool_specs_from_json(kTools);
  options.make_id = [] { return std::string("call_0"); };
  OutputParser parser(options);
  if (bytewise) {
    for (char c : text) parser.push(std::string_view(&c, 1));
  } else {
    parser.push(text);
  }
  parser.finish();
  return parser.result();
}

std::string xml_call(const std::string& parameter, const std::string& value) {
  return "<tool_call>\n<function=write_file>\n<parameter=" + parameter + ">\n" + value +
         "\n</parameter>\n</function>\n</tool_call>";
}

json only_call_arguments(const ParsedOutput& out) {
  EXPECT_EQ(out.tool_calls.size(), 1u) << out.content;
  if (out.tool_calls.size() != 1) return json();
  return json::parse(out.tool_calls[0].arguments);
}

TEST(OutputParserFuzzRegressions, LongNamesParseTheSameWhateverTheSplit) {
  const std::string long_name(300, 'f');
  for (const std::string& text :
       {"<tool_call>\n<function=" + long_name + ">\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=" + long_name + ">\nv\n</parameter>\n" +
            "<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>"}) {
    const ParsedOutput whole = parse(text, false, true);
    const ParsedOutput bytes = parse(text, true, true);
    EXPECT_EQ(whole.content, bytes.content);
    ASSERT_EQ(whole.tool_calls.size(), bytes.tool_calls.size());
    for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
      EXPECT_EQ(whole.tool_calls[i].name, bytes.tool_calls[i].name);
      EXPECT_EQ(whole.tool_calls[i].arguments, bytes.tool_calls[i].arguments);
    }
  }
  // A 256-byte name is still a name.
  const std::string name(256 - std::string("<function=").size(), 'g');
  const ParsedOutput out =
      parse("<tool_call>\n<function=" + name + ">\n</function>\n</tool_call>", true, true);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, name);
}

TEST(OutputParserFuzzRegressions, IntegerParameterOutsideInt64StaysANumber) {
  json args = only_call_arguments(parse(xml_call("mode", "1e300")));
  ASSERT_TRUE(args["mode"].is_number_float());
  EXPECT_EQ(args["mode"].get<double>(), 1e300);
  args = only_call_arguments(parse(xml_call("mode", "42222222222222222222222")));
  ASSERT_TRUE(args["mode"].is_number_float());
  EXPECT_DOUBLE_EQ(args["mode"].get<double>(), 4.2222222222222222e22);
  EXPECT_EQ(only_call_arguments(parse(xml_call("mode", "420.0"))), json::parse(R"({"mode": 420})"));
}

TEST(OutputParserFuzzRegressions, BadEscapesInPythonLiteralsFallBackToText) {
  for (const char* value :
       {"['\\xZZ']", "['\\x4']", "['\\u+041']", "['\\ud800']", "['\\U00110000']"}) {
    EXPECT_FALSE(parsers::parse_python_literal(value).has_value()) << value;
    EXPECT_EQ(only_call_arguments(parse(xml_call("tags", value))), json({{"tags", value}}));
  }
  EXPECT_EQ(only_call_arguments(parse(xml_call("tags", "['\\x41\\u00e9\\U0001F600']"))),
            json::parse(R"({"tags": ["Aé😀"]})"));
}

TEST(OutputParserFuzzRegressions, DeeplyNestedArgumentsAreRefusedNotRecursedInto) {
  const size_t deep = 100000;
  const std::string brackets = std::string(deep, '[') + std::string(deep, ']');
  const std::string parens = std::string(deep, '(') + std::string(deep, ')');
  // XML: an array parameter that JSON or Python literal parsing would nest too deep stays text.
  EXPECT_EQ(only_call_arguments(parse(xml_call("tags", brackets))), json({{"tags", brackets}}));
  EXPECT_EQ(only_call_arguments(parse(xml_call("tags", parens))), json({{"tags", parens}}));
  // JSON: the call is malformed, so it comes out as content.
  const std::string call =
      "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"tags\": " + brackets +
      "}}\n</tool_call>";
  ParsedOutput out = parse(call);
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, call);
  // Nesting real arguments use is unaffected.
  const std::string nested = std::string(200, '[') + std::string(200, ']');
  EXPECT_EQ(only_call_arguments(parse(xml_call("tags", nested))),
            json({{"tags", json::parse(nested)}}));
}

}  // namespace
}  // namespace hibana
