// jinja2's builtin filters as transformers configures them (tojson is transformers' own).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/python_text.h"

namespace hibana::jinja {

namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// jinja2's make_attrgetter: "a.b.0" walks attributes and integer items.
Value attribute_path(const Value& item, const Value& path) {
  if (path.is_int()) return get_item(item, path);
  Value v = item;
  for (const std::string& part : py_split(path.to_str(), std::string("."), -1, false)) {
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    int64_t index = INT64_MAX;  // stays past the end of any list when the digits overflow
    if (numeric) std::from_chars(part.data(), part.data() + part.size(), index);
    v = numeric ? get_item(v, Value(index)) : get_item(v, Value(part));
  }
  return v;
}

std::optional<double> parse_py_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  std::string clean;
  for (char c : s)
    if (c != '_') clean += c;
  if (clean.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

Value f_abs(const Value& v, CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool())
    return Value(v.as_int() < 0 ? checked_sub(0, v.as_int()) : v.as_int());
  render_fail(std::string("bad operand type for abs(): '") + v.type_name() + "'");
}
Value f_attr(const Value& v, CallArgs& a) {
  return get_attribute(v, a.get(0, "name").to_str());
}
Value f_capitalize(const Value& v, CallArgs&) {
  return Value(py_capitalize(v.to_str()));
}
Value f_length(const Value& v, CallArgs&) {
  return Value(static_cast<int64_t>(value_length(v)));
}
Value f_default(const Value& v, CallArgs& a) {
  bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
  return v;
}
Value f_escape(const Value& v, CallArgs&) {
  return Value(html_escape(v.to_str()));
}
Value f_first(const Value& v, CallArgs&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(const Value& v, CallArgs&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}
Value f_float(const Value& v, CallArgs& a) {
  Value fallback = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_py_float(v.str())) return Value(*d);
  }
  return fallback;
}
Value f_int(const Value& v, CallArgs& a) {
  Value fallback = a.get(0, "default", Value(0));
  if (v.is_bool() || v.is_int()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) return fallback;
    return Value(float_to_int(v.as_double()));
  }
  if (v.is_string()) {
    int64_t base = a.get(1, "base", Value(10)).as_int();
    std::string s = py_strip(v.str(), std::nullopt, true, true), clean;
    for (char c : s)
      if (c != '_') clean += c;
    if (!clean.empty()) {
      char* end = nullptr;
      errno = 0;
      long long n = std::strtoll(clean.c_str(), &end, static_cast<int>(base));
      if (end == clean.c_str() + clean.size()) {
        if (errno == ERANGE) render_fail("integer " + clean + " does not fit in 64 bits");
        return Value(static_cast<int64_t>(n));
      }
    }
    if (auto d = parse_py_float(v.str()); d && std::isfinite(*d)) return Value(float_to_int(*d));
  }
  return fallback;
}
Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::array();
  if (!v.is_object()) render_fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.obj().items()) out.push_back(Value::array({Value(k), x}, true));
  return Value::array(std::move(out));
}
Value f_join(const Value& v, CallArgs& a) {
  std::string sep = a.get(0, "d", Value("")).to_str();
  Value attribute = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attribute.is_none() ? item : attribute_path(item, attribute)).to_str();
    check_string_size(out.size());
  }
  return Value(out);
}
Value f_list(const Value& v, CallArgs&) {
  return Value::array(iterate(v));
}
Value f_lower(const Value& v, CallArgs&) {
  return Value(py_lower(v.to_str()));
}
Value f_upper(const Value& v, CallArgs&) {
  return Value(py_upper(v.to_str()));
}
Value f_title(const Value& v, CallArgs&) {
  // jinja2 splits before runs of [-\s({\[<] and capitalizes each piece.
  std::u32string u = utf8_to_u32(v.to_str());
  std::string out;
  bool start = true;
  for (char32_t c : u) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    std::string one = u32_to_utf8(std::u32string(1, c));
    if (sep) {
      out += one;
      start = true;
    } else {
      out += start ? py_upper(one) : py_lower(one);
      start = false;
    }
  }
  return Value(out);
}
Value f_trim(const Value& v, CallArgs& a) {
  Value chars = a.get(0, "chars", Value::none());
  return Value(py_strip(v.to_str(), chars.is_none() ? std::nullopt : std::optional(chars.to_str()),
                        true, true));
}
Value f_replace(const Value& v, CallArgs& a) {
  CallArgs call;
  call.positional = {Value(a.get(0, "old").to_str()), Value(a.get(1, "new").to_str())};
  Value count = a.get(2, "count", Value::none());
  if (!count.is_none()) call.positional.push_back(count);
  return call_value(get_attribute(Value(v.to_str()), "replace"), call);
}
Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = utf8_to_u32(v.str());
    std::reverse(u.begin(), u.end());
    return Value(u32_to_utf8(u));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::array(std::move(items));
}
Value f_round(const Value& v, CallArgs& a) {
  int64_t precision = a.get(0, "precision", Value(0)).as_int();
  std::string method = a.get(1, "method", Value("common")).to_str();
  if (!v.is_number()) render_fail("round() needs a number");
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::max<int64_t>(precision, 0)),
                  v.as_double());
    return Value(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  if (method == "ceil") return Value(std::ceil(x) / scale);
  if (method == "floor") return Value(std::floor(x) / scale);
  render_fail("method must be common, ceil or floor");
}
std::vector<Value> sorted_items(const Value& v, CallArgs& a, size_t reverse_at, size_t case_at,
                                size_t attr_at) {
  bool reverse = a.get(reverse_at, "reverse", Value(false)).truthy();
  bool case_sensitive = a.get(case_at, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(attr_at, "attribute", Value::none());
  std::vector<Value> items = iterate(v);
  auto key = [&](const Value& x) {
    Value k = attribute.is_none() ? x : attribute_path(x, attribute);
    return !case_sensitive && k.is_string() ? Value(py_lower(k.str())) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? value_less(key(y), key(x)) : value_less(key(x), key(y));
  });
  return items;
}
Value f_sort(const Value& v, CallArgs& a) {
  return Value::array(sorted_items(v, a, 0, 1, 2));
}
Value f_unique(const Value& v, CallArgs& a) {
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  std::vector<Value> out, seen;
  for (const Value& x : iterate(v)) {
    Value k = attribute.is_none() ? x : attribute_path(x, attribute);
    if (!case_sensitive && k.is_string()) k = Value(py_lower(k.str()));
    bool dup =
        std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, k); });
    if (dup) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return Value::array(std::move(out));
}
Value f_string(const Value& v, CallArgs&) {
  return Value(v.to_str());
}
Value f_tojson(const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  o.max_bytes = kMaxStringBytes;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  Value indent = a.get(1, "indent", Value::none());
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (indent.is_int()) {
    check_string_size(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)));
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
  }
  Value separators = a.get(2, "separators", Value::none());
  if (separators.is_array() && separators.items().size() == 2) {
    o.item_separator = separators.items()[0].to_str();
    o.key_separator = separators.items()[1].to_str();
  } else if (o.indent) {
    o.item_separator = ",";
  }
  o.sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
  try {
    return Value(py_json_dumps(v, o));
  } catch (const std::invalid_argument& e) {
    render_fail(e.what());
  }
}
Value f_indent(const Value& v, CallArgs& a) {
  Value width = a.get(0, "width", Value(4));
  bool first = a.get(1, "first", Value(false)).truthy();
  bool blank = a.get(2, "blank", Value(false)).truthy();
  if (!width.is_string())
    check_string_size(static_cast<size_t>(std::max<int64_t>(width.as_int(), 0)));
  std::string indention =
      width.is_string()
          ? width.str()
          : std::string(static_cast<size_t>(std::max<int64_t>(width.as_int(), 0)), ' ');
  std::vector<std::string> lines = py_splitlines(v.to_str() + "\n");
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) rv += "\n";
    if (i == 0)
      rv += lines[i];
    else
      rv += (blank || !lines[i].empty()) ? indention + lines[i] : lines[i];
    check_string_size(rv.size() + indention.size());
  }
  return Value(first ? indention + rv : rv);
}
Value f_wordcount(const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_to_u32(v.to_str())) {
    std::string one = u32_to_utf8(std::u32string(1, c));
    bool word = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0
                                      : (py_lower(one) != py_upper(one) || !py_isspace(c)));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}
CallArgs shift_args(const CallArgs& a, size_t from) {
  CallArgs rest;
  for (size_t i = from; i < a.positional.size(); ++i) rest.positional.push_back(a.positional[i]);
  for (const auto& kv : a.keyword)
    if (kv.first != "attribute" && kv.first != "default") rest.keyword.push_back(kv);
  return rest;
}
Value f_map(const Value& v, CallArgs& a) {
  std::vector<Value> out;
  Value attribute = a.get(SIZE_MAX, "attribute");
  if (!attribute.is_undefined()) {
    Value fallback = a.get(SIZE_MAX, "default");
    for (const Value& x : iterate(v)) {
      Value r = attribute_path(x, attribute);
      out.push_back(r.is_undefined() && !fallback.is_undefined() ? fallback : r);
    }
    return Value::array(std::move(out));
  }
  std::string name = a.get(0, "").to_str();
  if (!is_known_filter(name)) render_fail("No filter named '" + name + "'.");
  CallArgs rest = shift_args(a, 1);
  size_t built = 0;  // ([s] * 1000) | map('upper') would make a thousand copies of s
  for (const Value& x : iterate(v)) {
    out.push_back(apply_filter(name, x, rest));
    if (out.back().is_string()) check_string_size(built += out.back().str().size());
  }
  return Value::array(std::move(out));
}
Value select_impl(const Value& v, CallArgs& a, bool by_attribute, bool keep) {
  size_t test_at = by_attribute ? 1 : 0;
  Value attribute = by_attribute ? a.get(0, "attribute") : Value();
  std::string test = a.positional.size() > test_at ? a.positional[test_at].to_str() : "";
  if (!test.empty() && !is_known_test(test)) render_fail("No test named '" + test + "'.");
  CallArgs rest = shift_args(a, test_at + 1);
  std::vector<Value> out;
  for (const Value& x : iterate(v)) {
    Value subject = by_attribute ? attribute_path(x, attribute) : x;
    bool ok = test.empty() ? subject.truthy() : apply_test(test, subject, rest);
    if (ok == keep) out.push_back(x);
  }
  return Value::array(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) {
  return select_impl(v, a, false, true);
}
Value f_reject(const Value& v, CallArgs& a) {
  return select_impl(v, a, false, false);
}
Value f_selectattr(const Value& v, CallArgs& a) {
  return select_impl(v, a, true, true);
}
Value f_rejectattr(const Value& v, CallArgs& a) {
  return select_impl(v, a, true, false);
}
Value f_sum(const Value& v, CallArgs& a) {
  Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value(0));
  for (const Value& x : iterate(v)) {
    Value item = attribute.is_none() ? x : attribute_path(x, attribute);
    if (!item.is_number() || !total.is_number()) render_fail("sum() needs numbers");
    total = total.is_float() || item.is_float() ? Value(total.as_double() + item.as_double())
                                                : Value(checked_add(total.as_int(), item.as_int()));
  }
  return total;
}
Value min_max(const Value& v, CallArgs& a, bool want_max) {
  std::vector<Value> items = sorted_items(v, a, SIZE_MAX, 0, 1);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  return want_max ? items.back() : items.front();
}
Value f_min(const Value& v, CallArgs& a) {
  return min_max(v, a, false);
}
Value f_max(const Value& v, CallArgs& a) {
  return min_max(v, a, true);
}
Value f_format(const Value& v, CallArgs& a) {
  return Value(percent_format(v.to_str(), Value::array(a.positional, true)));
}
Value f_dictsort(const Value& v, CallArgs& a) {
  if (!v.is_object()) render_fail("dictsort needs a mapping");
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  bool by_value = a.get(1, "by", Value("key")).to_str() == "value";
  bool reverse = a.get(2, "reverse", Value(false)).truthy();
  std::vector<Value> items = f_items(v, a).items();
  auto key = [&](const Value& pair) {
    Value k = pair.items()[by_value ? 1 : 0];
    return !case_sensitive && k.is_string() ? Value(py_lower(k.str())) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? value_less(key(y), key(x)) : value_less(key(x), key(y));
  });
  return Value::array(std::move(items));
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"length", f_length},
      {"default", f_default},
      {"d", f_default},
      {"escape", f_escape},
      {"e", f_escape},
      {"first", f_first},
      {"last", f_last},
      {"float", f_float},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"list", f_list},
      {"lower", f_lower},
      {"upper", f_upper},
      {"title", f_title},
      {"trim", f_trim},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"sort", f_sort},
      {"unique", f_unique},
      {"string", f_string},
      {"safe", f_string},
      {"tojson", f_tojson},
      {"indent", f_indent},
      {"wordcount", f_wordcount},
      {"map", f_map},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"sum", f_sum},
      {"min", f_min},
      {"max", f_max},
      {"format", f_format},
      {"dictsort", f_dictsort},
  };
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filter_table().count(name) != 0;
}

Value apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  auto it = filter_table().find(name);
  if (it == filter_table().end()) render_fail("No filter named '" + std::string(name) + "'.");
  return it->second(input, args);
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> values =
      args.is_array() && args.is_tuple() ? args.items() : std::vector<Value>{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) render_fail("incomplete format");
    char spec = fmt[i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) render_fail("not enough arguments for format string");
    check_string_size(out.size());
    const Value& v = values[next++];
    switch (spec) {
      case 's':
        out += v.to_str();
        break;
      case 'r':
        out += v.repr();
        break;
      case 'd':
      case 'i':
        if (!v.is_number()) render_fail("%d format: a real number is required");
        out += std::to_string(v.is_float() ? float_to_int(v.as_double()) : v.as_int());
        break;
      case 'f': {
        if (!v.is_number()) render_fail("%f format: a real number is required");
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%f", v.as_double());
        out += buf;
        break;
      }
      default:
        render_fail(std::string("unsupported format character '") + spec + "'");
    }
  }
  if (next < values.size()) render_fail("not all arguments converted during string formatting");
  check_string_size(out.size());
  return out;
}

}  // namespace hibana::jinja
