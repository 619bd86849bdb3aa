// Python's text behaviour that chat templates depend on byte for byte: which characters count
// as whitespace for str.strip()/split(), float repr, str repr with its quoting rules, and
// json.dumps (transformers' tojson) with ensure_ascii, indent, separators and sort_keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace hibana::jinja {

// UTF-8 <-> code points. Invalid bytes decode as U+FFFD.
std::u32string utf8_to_u32(std::string_view s);
std::string u32_to_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
size_t utf8_length(std::string_view s);

// str.isspace() of a single code point.
bool py_isspace(char32_t c);
// str.strip/lstrip/rstrip: whitespace when chars is nullopt, else any code point of chars.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / str.rsplit (sep nullopt = runs of whitespace); maxsplit < 0 means no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
// str.splitlines() (without keepends).
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);

// repr(float) / str(float): shortest round-trip digits, Python's switch to exponent form.
std::string py_float_repr(double v);
// repr(str): single quotes unless the text has ' and no ", escapes as Python does.
std::string py_string_repr(std::string_view s);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  size_t max_bytes = SIZE_MAX;  // longer output (indent and separators multiply) is an error
};
// json.dumps(value, ...). Throws std::invalid_argument for values JSON cannot hold.
std::string py_json_dumps(const Value& value, const JsonDumpOptions& options);

}  // namespace hibana::jinja
