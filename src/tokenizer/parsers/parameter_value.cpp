#include "tokenizer/parsers/parameter_value.h"

#include <charconv>
#include <cmath>
#include <set>

#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/python_text.h"
#include "tokenizer/json_text.h"

namespace hibana::parsers {

namespace {

using json = nlohmann::ordered_json;

void collect_types(const json& schema, std::set<std::string>& types) {
  if (!schema.is_object()) return;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_string()) types.insert(it->get<std::string>());
    if (it->is_array())
      for (const auto& t : *it)
        if (t.is_string()) types.insert(t.get<std::string>());
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (auto it = schema.find(key); it != schema.end() && it->is_array())
      for (const auto& option : *it) collect_types(option, types);
  }
  if (!types.empty()) return;
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_string())
        types.insert("string");
      else if (v.is_number_integer())
        types.insert("integer");
      else if (v.is_number())
        types.insert("number");
      else if (v.is_boolean())
        types.insert("boolean");
      else if (v.is_null())
        types.insert("null");
      else if (v.is_array())
        types.insert("array");
      else if (v.is_object())
        types.insert("object");
    }
  }
  if (schema.contains("properties")) types.insert("object");
  if (schema.contains("items")) types.insert("array");
}

bool fits(const json& v, const std::set<std::string>& types) {
  if (v.is_null()) return types.count("null") != 0;
  if (v.is_boolean()) return types.count("boolean") != 0;
  if (v.is_number_integer()) return types.count("integer") || types.count("number");
  if (v.is_number()) return types.count("number") != 0;
  if (v.is_object()) return types.count("object") != 0;
  if (v.is_array()) return types.count("array") != 0;
  return false;
}

class PythonLiteralParser {
 public:
  explicit PythonLiteralParser(const std::string& s) : s_(s) {}

  std::optional<json> parse() {
    std::optional<json> v = value();
    skip();
    if (!v || i_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool word(const char* w) {
    size_t n = std::char_traits<char>::length(w);
    if (s_.compare(i_, n, w) != 0) return false;
    if (i_ + n < s_.size() &&
        (std::isalnum(static_cast<unsigned char>(s_[i_ + n])) || s_[i_ + n] == '_'))
      return false;
    i_ += n;
    return true;
  }

  std::optional<json> sequence(char close, bool object) {
    json out = object ? json::object() : json::array();
    while (true) {
      if (eat(close)) return out;
      if (object) {
        skip();
        std::optional<json> key = value();
        if (!key || !key->is_string() || !eat(':')) return std::nullopt;
        std::optional<json> v = value();
        if (!v) return std::nullopt;
        out[key->get<std::string>()] = *v;
      } else {
        std::optional<json> v = value();
        if (!v) return std::nullopt;
        out.push_back(*v);
      }
      if (eat(close)) return out;
      if (!eat(',')) return std::nullopt;
    }
  }

  std::optional<json> string_literal(char quote) {
    std::string out;
    ++i_;
    while (i_ < s_.size() && s_[i_] != quote) {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      char e = s_[i_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i_ + digits > s_.size()) return std::nullopt;
          uint32_t cp = 0;
          const char* first = s_.data() + i_;
          const auto [end, error] = std::from_chars(first, first + digits, cp, 16);
          // Python refuses short or non-hex escapes; surrogates and code points past U+10FFFF
          // are not text that JSON can carry.
          if (error != std::errc() || end != first + digits || cp > 0x10FFFF ||
              (cp >= 0xD800 && cp <= 0xDFFF)) {
            return std::nullopt;
          }
          jinja::append_utf8(out, cp);
          i_ += digits;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    if (i_ >= s_.size()) return std::nullopt;
    ++i_;
    return json(out);
  }

  std::optional<json> value() {
    skip();
    if (i_ >= s_.size()) return std::nullopt;
    char c = s_[i_];
    if (c == '{' || c == '[' || c == '(') {
      if (depth_ == kMaxArgumentNesting) return std::nullopt;
      ++i_;
      ++depth_;
      std::optional<json> v =
          c == '{' ? sequence('}', true) : sequence(c == '[' ? ']' : ')', false);
      --depth_;
      return v;
    }
    if (c == '\'' || c == '"') return string_literal(c);
    if (word("True")) return json(true);
    if (word("False")) return json(false);
    if (word("None")) return json(nullptr);
    size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              s_[i_] == '-' || s_[i_] == '+' || s_[i_] == '_'))
      ++i_;
    json number = json::parse(s_.substr(start, i_ - start), nullptr, false);
    if (number.is_discarded() || !number.is_number()) return std::nullopt;
    return number;
  }

  const std::string& s_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::optional<json> parse_python_literal(const std::string& text) {
  return PythonLiteralParser(text).parse();
}

bool nests_deeper_than(const json& j, int levels) {
  if (!j.is_structured()) return false;
  if (levels == 0) return true;
  for (const json& child : j)
    if (nests_deeper_than(child, levels - 1)) return true;
  return false;
}

bool parameter_keeps_text(const json* schema) {
  if (!schema) return true;
  std::set<std::string> types;
  collect_types(*schema, types);
  return types.empty() || types.count("string") != 0;
}

json convert_parameter(const std::string& raw, const json* schema) {
  if (!schema) return json(raw);
  std::set<std::string> types;
  collect_types(*schema, types);
  if (types.empty()) return json(raw);
  std::string trimmed = jinja::py_strip(raw, std::nullopt, true, true);
  if (types.count("null") && (trimmed == "null" || trimmed == "None")) return json(nullptr);
  if (types.count("string")) return json(raw);
  if (types.count("boolean")) {
    std::string lower = jinja::py_lower(trimmed);
    if (lower == "true" || lower == "false") return json(lower == "true");
  }
  json parsed = json::parse(trimmed, nullptr, false);
  if (!parsed.is_discarded() && !nests_deeper_than(parsed, kMaxArgumentNesting)) {
    if (parsed.is_number_float() && types.count("integer") && !types.count("number")) {
      // 4.0 is 4; a number outside int64 (which JSON parsing gives as a float) stays as it is.
      const double d = parsed.get<double>();
      if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return json(static_cast<int64_t>(d));
    }
    return parsed;
  }
  if (std::optional<json> literal = parse_python_literal(trimmed);
      literal && fits(*literal, types)) {
    return *literal;
  }
  return json(raw);
}

std::string convert_parameter_text(const std::string& raw, const json* schema) {
  json value = convert_parameter(raw, schema);
  if (value.is_number_float() || value.is_structured()) {
    // Taken from the text as parsed (not coerced, as 4.0 to 4 for an integer): rewrite the text.
    std::string trimmed = jinja::py_strip(raw, std::nullopt, true, true);
    json parsed = json::parse(trimmed, nullptr, false);
    if (!parsed.is_discarded() && parsed.type() == value.type() && parsed == value) {
      if (std::optional<JsonText> text = rewrite_json(trimmed)) return std::move(text->text);
    }
  }
  return jinja::python_json_dumps(value);
}

}  // namespace hibana::parsers
