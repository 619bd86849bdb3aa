#include "tokenizer/jinja/python_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace hibana::jinja {

std::u32string utf8_to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(cp));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

char32_t to_upper(char32_t c) {
  return utf8proc_toupper(static_cast<utf8proc_int32_t>(c));
}
char32_t to_lower(char32_t c) {
  return utf8proc_tolower(static_cast<utf8proc_int32_t>(c));
}
char32_t to_title(char32_t c) {
  return utf8proc_totitle(static_cast<utf8proc_int32_t>(c));
}

void append_hex(std::string& out, uint32_t v, int digits) {
  static const char* hex = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out.push_back(hex[(v >> (4 * i)) & 0xF]);
}

}  // namespace

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  if (!chars && is_ascii(s)) {
    size_t b = 0, e = s.size();
    auto ws = [](char c) { return py_isspace(static_cast<unsigned char>(c)); };
    if (left)
      while (b < e && ws(s[b])) ++b;
    if (right)
      while (e > b && ws(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
  }
  std::u32string u = utf8_to_u32(s);
  std::u32string set = chars ? utf8_to_u32(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return u32_to_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        out.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      out.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      out.emplace_back(s.substr(0, end));
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  std::u32string u = utf8_to_u32(s);
  if (!from_right) {
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = n;
        while (e > i && py_isspace(u[e - 1])) --e;
        out.push_back(u32_to_utf8(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      out.push_back(u32_to_utf8(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
  } else {
    size_t e = u.size();
    while (true) {
      while (e > 0 && py_isspace(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(u[b])) ++b;
        out.push_back(u32_to_utf8(std::u32string_view(u).substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(u[b - 1])) --b;
      out.push_back(u32_to_utf8(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::u32string u = utf8_to_u32(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                    c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      ++i;
      continue;
    }
    out.push_back(u32_to_utf8(std::u32string_view(u).substr(start, i - start)));
    i += (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    start = i;
  }
  if (start < u.size()) out.push_back(u32_to_utf8(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_upper(std::string_view s) {
  std::u32string u = utf8_to_u32(s);
  for (char32_t& c : u) c = to_upper(c);
  return u32_to_utf8(u);
}

std::string py_lower(std::string_view s) {
  std::u32string u = utf8_to_u32(s);
  for (char32_t& c : u) c = to_lower(c);
  return u32_to_utf8(u);
}

std::string py_capitalize(std::string_view s) {
  std::u32string u = utf8_to_u32(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_title(u[i]) : to_lower(u[i]);
  return u32_to_utf8(u);
}

std::string py_title(std::string_view s) {
  std::u32string u = utf8_to_u32(s);
  bool previous_cased = false;
  for (char32_t& c : u) {
    if (is_cased(c)) {
      c = previous_cased ? to_lower(c) : to_title(c);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return u32_to_utf8(u);
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits.push_back(c);
  int exponent = std::stoi(std::string(sci.substr(epos + 1)));
  int decpt = exponent + 1;  // digits[0:decpt] is the integer part
  int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
             digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (nd > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

std::string py_string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_to_u32(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      append_hex(out, c, 2);
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else if (!py_isprintable(c)) {
      if (c <= 0xFF) {
        out += "\\x";
        append_hex(out, c, 2);
      } else if (c <= 0xFFFF) {
        out += "\\u";
        append_hex(out, c, 4);
      } else {
        out += "\\U";
        append_hex(out, c, 8);
      }
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  auto escape_control = [&](char32_t c) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      default:
        out += "\\u";
        append_hex(out, c, 4);
    }
  };
  if (!ensure_ascii) {
    for (char ch : s) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c == '"' || c == '\\') {
        escape_control(c);
      } else {
        out.push_back(ch);
      }
    }
  } else {
    for (char32_t c : utf8_to_u32(s)) {
      if (c < 0x20 || c == '"' || c == '\\') {
        escape_control(c);
      } else if (c < 0x7F) {
        out.push_back(static_cast<char>(c));
      } else if (c <= 0xFFFF) {
        out += "\\u";
        append_hex(out, c, 4);
      } else {
        char32_t v = c - 0x10000;
        out += "\\u";
        append_hex(out, 0xD800 + (v >> 10), 4);
        out += "\\u";
        append_hex(out, 0xDC00 + (v & 0x3FF), 4);
      }
    }
  }
  out.push_back('"');
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int level) {
  if (out.size() > o.max_bytes) {
    throw std::invalid_argument("JSON text longer than " + std::to_string(o.max_bytes) + " bytes");
  }
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl && out.size() <= o.max_bytes; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::none:
      out += "null";
      return;
    case Value::Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::floating: {
      double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d < 0 ? "-Infinity" : "Infinity";
      else
        out += py_float_repr(d);
      return;
    }
    case Value::Kind::string:
      json_string(out, v.str(), o.ensure_ascii);
      return;
    case Value::Kind::array: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += o.item_separator;
        if (o.indent) newline(level + 1);
        first = false;
        dump(out, item, o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::object: {
      if (v.obj().size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& kv : v.obj().items()) entries.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      bool first = true;
      for (const auto* kv : entries) {
        if (!first) out += o.item_separator;
        if (o.indent) newline(level + 1);
        first = false;
        json_string(out, kv->first, o.ensure_ascii);
        out += o.key_separator;
        dump(out, kv->second, o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      throw std::invalid_argument(std::string("Object of type ") +
                                  (v.is_undefined() ? "Undefined" : v.type_name()) +
                                  " is not JSON serializable");
  }
}

}  // namespace

std::string py_json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump(out, value, options, 0);
  if (out.size() > options.max_bytes) {
    throw std::invalid_argument("JSON text longer than " + std::to_string(options.max_bytes) +
                                " bytes");
  }
  return out;
}

}  // namespace hibana::jinja
