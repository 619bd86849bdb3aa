// Typing of XML tool-call parameter values (<parameter=NAME>\nVALUE\n</parameter>) by the
// tool's JSON Schema, following vLLM's qwen3coder parser: string-typed and unknown
// parameters keep the raw text; integer, number, boolean, object, array and null values are
// parsed (as JSON, or as the Python literal a template's `| string` wrote into the history:
// True, None, {'a': 1}), and fall back to the raw text when that fails.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace hibana::parsers {

// schema: the parameter's JSON Schema, or null when the tool or the parameter is unknown.
nlohmann::ordered_json convert_parameter(const std::string& raw,
                                         const nlohmann::ordered_json* schema);

// Whether convert_parameter keeps any text as a string for this schema (null, no type, or a
// type that includes "string"); otherwise the text is parsed as a typed value.
bool parameter_keeps_text(const nlohmann::ordered_json* schema);

// convert_parameter's value as JSON text (json.dumps style). A value parsed as JSON keeps its
// numbers' text: an integer past 64 bits or a long fraction is not rounded through a double.
std::string convert_parameter_text(const std::string& raw, const nlohmann::ordered_json* schema);

// A Python literal (dict, list, tuple, str, int, float, True, False, None) as JSON.
std::optional<nlohmann::ordered_json> parse_python_literal(const std::string& text);

// Deepest nesting of arrays and objects taken from tool-call arguments. Parsing literals and
// printing JSON recurse, so deeper text (a model can be made to write thousands of '[') is
// treated as malformed instead of being allowed to exhaust the stack.
inline constexpr int kMaxArgumentNesting = 256;

// Whether j nests arrays and objects more than `levels` deep (looks no deeper than that).
bool nests_deeper_than(const nlohmann::ordered_json& j, int levels);

}  // namespace hibana::parsers
