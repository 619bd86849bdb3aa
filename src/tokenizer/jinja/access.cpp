// Attribute and item access, method calls on str/dict/list, iteration, slicing, globals.
#include <charconv>
#include <chrono>
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/python_text.h"

namespace hibana::jinja {

namespace {

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "'None'";
  return std::string("'") + v.type_name() + " object'";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_type_repr(obj) + " has no attribute " + py_string_repr(name));
}

[[noreturn]] void unsafe(const Value& obj, const std::string& name) {
  render_fail("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

std::optional<std::string> optional_string(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) render_fail(std::string(what) + " arg must be None or str");
  return v.str();
}

int64_t int_arg(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool()) render_fail(std::string(what) + " must be an integer");
  return v.as_int();
}

// Code point index of a byte offset.
int64_t cp_index(const std::string& s, size_t byte) {
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte)));
}

bool matches_affix(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) render_fail("startswith/endswith first arg must be str or a tuple of str");
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_array()) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = utf8_to_u32(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
        check_string_size(out.size());
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += repl;
    check_string_size(out.size());
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value string_list(const std::vector<std::string>& parts) {
  if (parts.size() > kMaxListItems) {
    render_fail("the template splits a string into " + std::to_string(parts.size()) +
                " parts, over the limit of " + std::to_string(kMaxListItems));
  }
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.emplace_back(p);
  return Value::array(std::move(items));
}

// str.format with {} / {0} / {name} fields and no format specs.
std::string py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) render_fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      render_fail("unsupported str.format field");
    Value v;
    if (field.empty()) {
      v = args.get(auto_index++, "\x01");
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t index = 0;
      auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), index);
      if (error != std::errc() || end != field.data() + field.size())
        render_fail("unsupported str.format field");
      v = args.get(index, "\x01");
    } else {
      v = args.get(SIZE_MAX, field);
    }
    if (v.is_undefined() && !args.has(SIZE_MAX, field)) render_fail("missing str.format argument");
    out += v.to_str();
    check_string_size(out.size());  // '{0}{0}{0}'.format(s) repeats s
    i = close;
  }
  return out;
}

Value string_method(const Value& self, const std::string& name) {
  static const char* known[] = {
      "startswith", "endswith", "split",   "rsplit",       "strip",        "lstrip",   "rstrip",
      "replace",    "upper",    "lower",   "title",        "capitalize",   "find",     "rfind",
      "count",      "join",     "format",  "splitlines",   "isdigit",      "isalpha",  "isspace",
      "isalnum",    "islower",  "isupper", "removeprefix", "removesuffix", "casefold", "index"};
  bool found = false;
  for (const char* k : known) found = found || name == k;
  if (!found) return missing_attribute(self, name);
  return Value::callable("str." + name, [self, name](CallArgs& a) -> Value {
    const std::string& s = self.str();
    if (name == "startswith" || name == "endswith")
      return matches_affix(s, a.get(0, "prefix"), name == "startswith");
    if (name == "split" || name == "rsplit") {
      return string_list(py_split(s, optional_string(a.get(0, "sep", Value::none()), "sep"),
                                  int_arg(a.get(1, "maxsplit", Value(-1)), "maxsplit"),
                                  name == "rsplit"));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return Value(py_strip(s, optional_string(a.get(0, "chars", Value::none()), "strip"),
                            name != "rstrip", name != "lstrip"));
    }
    if (name == "replace") {
      Value old = a.get(0, "old"), repl = a.get(1, "new");
      if (!old.is_string() || !repl.is_string()) render_fail("replace() arguments must be str");
      return Value(
          py_replace(s, old.str(), repl.str(), int_arg(a.get(2, "count", Value(-1)), "count")));
    }
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower" || name == "casefold") return Value(py_lower(s));
    if (name == "title") return Value(py_title(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      Value sub = a.get(0, "sub");
      if (!sub.is_string()) render_fail("must be str, not " + std::string(sub.type_name()));
      if (name == "count") {
        if (sub.str().empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub.str()); p != std::string::npos;
             p = s.find(sub.str(), p + sub.str().size()))
          ++n;
        return Value(n);
      }
      size_t hit = name == "rfind" ? s.rfind(sub.str()) : s.find(sub.str());
      if (hit == std::string::npos) {
        if (name == "index") render_fail("substring not found");
        return Value(static_cast<int64_t>(-1));
      }
      return Value(cp_index(s, hit));
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(a.get(0, "iterable"))) {
        if (!v.is_string())
          render_fail("sequence item: expected str instance, " + std::string(v.type_name()) +
                      " found");
        if (!first) out += s;
        first = false;
        out += v.str();
      }
      return Value(out);
    }
    if (name == "format") return Value(py_format(s, a));
    if (name == "splitlines") return string_list(py_splitlines(s));
    if (name == "removeprefix" || name == "removesuffix") {
      Value affix = a.get(0, "prefix");
      if (!affix.is_string()) render_fail(name + "() argument must be str");
      if (!matches_affix(s, affix, name == "removeprefix")) return self;
      return Value(name == "removeprefix" ? s.substr(affix.str().size())
                                          : s.substr(0, s.size() - affix.str().size()));
    }
    // is* predicates: Python's definitions on code points, ASCII-exact.
    std::u32string u = utf8_to_u32(s);
    if (u.empty()) return Value(false);
    bool any_cased = false, all = true;
    for (char32_t c : u) {
      bool digit = c < 0x80 ? std::isdigit(static_cast<int>(c)) != 0 : false;
      bool alpha = c < 0x80 ? std::isalpha(static_cast<int>(c)) != 0
                            : py_lower(u32_to_utf8(std::u32string(1, c))) !=
                                  py_upper(u32_to_utf8(std::u32string(1, c)));
      if (name == "isdigit") all = all && digit;
      if (name == "isalpha") all = all && alpha;
      if (name == "isalnum") all = all && (alpha || digit);
      if (name == "isspace") all = all && py_isspace(c);
      if (name == "islower" || name == "isupper") {
        std::string one = u32_to_utf8(std::u32string(1, c));
        bool lower = py_upper(one) != one, upper = py_lower(one) != one;
        any_cased = any_cased || lower || upper;
        if (name == "islower" && upper) all = false;
        if (name == "isupper" && lower) all = false;
      }
    }
    if (name == "islower" || name == "isupper") return Value(all && any_cased);
    return Value(all);
  });
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::callable("dict." + name, [self, name](CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : self.obj().items()) {
        if (name == "items")
          out.push_back(Value::array({Value(k), v}, true));
        else if (name == "keys")
          out.emplace_back(k);
        else
          out.push_back(v);
      }
      return Value::array(std::move(out));
    });
  }
  if (name == "get") {
    return Value::callable("dict.get", [self](CallArgs& a) {
      Value key = a.get(0, "key");
      const Value* v = key.is_string() ? self.obj().find(key.str()) : nullptr;
      return v ? *v : a.get(1, "default", Value::none());
    });
  }
  if (name == "copy") {
    return Value::callable("dict.copy", [self](CallArgs&) {
      return Value::object(std::make_shared<Object>(self.obj()));
    });
  }
  return Value();
}

bool is_mutator(const Value& obj, const std::string& name) {
  static const char* list_mutators[] = {"append", "extend",  "insert", "pop",
                                        "remove", "reverse", "sort",   "clear"};
  static const char* dict_mutators[] = {"pop", "popitem", "update", "setdefault", "clear"};
  if (obj.is_array()) {
    for (const char* m : list_mutators)
      if (name == m) return true;
  }
  if (obj.is_object()) {
    for (const char* m : dict_mutators)
      if (name == m) return true;
  }
  return false;
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    render_fail(obj.undefined_hint().empty() ? "'" + name + "' is undefined"
                                             : obj.undefined_hint());
  }
  if (!name.empty() && name[0] == '_') return missing_attribute(obj, name);  // sandboxed
  if (is_mutator(obj, name)) unsafe(obj, name);
  switch (obj.kind()) {
    case Value::Kind::object: {
      Value method = dict_method(obj, name);
      if (!method.is_undefined()) return method;
      const Value* v = obj.obj().find(name);
      return v ? *v : missing_attribute(obj, name);
    }
    case Value::Kind::ns: {
      const Value* v = obj.obj().find(name);
      return v ? *v : missing_attribute(obj, name);
    }
    case Value::Kind::string:
      return string_method(obj, name);
    case Value::Kind::array:
      if (name == "index" || name == "count") {
        return Value::callable("list." + name, [obj, name](CallArgs& a) -> Value {
          Value x = a.get(0, "value");
          int64_t n = 0;
          for (size_t i = 0; i < obj.items().size(); ++i) {
            if (!values_equal(obj.items()[i], x)) continue;
            if (name == "index") return Value(static_cast<int64_t>(i));
            ++n;
          }
          if (name == "index") render_fail(x.repr() + " is not in list");
          return Value(n);
        });
      }
      return missing_attribute(obj, name);
    default:
      return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    render_fail(obj.undefined_hint().empty() ? "value is undefined" : obj.undefined_hint());
  }
  if (obj.is_object() && key.is_string()) {
    if (const Value* v = obj.obj().find(key.str())) return *v;
    return get_attribute(obj, key.str());
  }
  if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = static_cast<int64_t>(value_length(obj));
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n)
      return Value::undefined(object_type_repr(obj) + " has no element " + key.repr());
    if (obj.is_array()) return obj.items()[static_cast<size_t>(i)];
    std::u32string u = utf8_to_u32(obj.str());
    return Value(u32_to_utf8(std::u32string(1, u[static_cast<size_t>(i)])));
  }
  if (key.is_string()) return get_attribute(obj, key.str());
  return Value::undefined(object_type_repr(obj) + " has no element " + key.repr());
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.fn().fn(args);
  if (callee.is_undefined()) {
    render_fail(callee.undefined_hint().empty() ? "called an undefined value"
                                                : callee.undefined_hint());
  }
  render_fail(std::string("'") + callee.type_name() + "' object is not callable");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::array:
      return v.items();
    case Value::Kind::object: {
      std::vector<Value> keys;
      for (const auto& kv : v.obj().items()) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::string: {
      std::u32string text = utf8_to_u32(v.str());
      if (text.size() > kMaxListItems) {  // a value per character: ~100 bytes for each
        render_fail("the template iterates over " + std::to_string(text.size()) +
                    " characters, over the limit of " + std::to_string(kMaxListItems));
      }
      std::vector<Value> chars;
      for (char32_t c : text) chars.emplace_back(u32_to_utf8(std::u32string(1, c)));
      return chars;
    }
    default:
      render_fail(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

size_t value_length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return utf8_length(v.str());
    case Value::Kind::array:
      return v.items().size();
    case Value::Kind::object:
      return v.obj().size();
    default:
      render_fail(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v,
                  const Value& step_v) {
  if (!obj.is_array() && !obj.is_string()) {
    render_fail(std::string("'") + obj.type_name() + "' object is not subscriptable");
  }
  auto given = [](const Value& v) { return !v.is_none() && !v.is_undefined(); };
  int64_t step = given(step_v) ? int_arg(step_v, "slice indices") : 1;
  if (step == 0) render_fail("slice step cannot be zero");
  int64_t n = static_cast<int64_t>(value_length(obj));
  auto adjust = [&](const Value& v, int64_t fallback) {
    if (!given(v)) return fallback;
    int64_t i = int_arg(v, "slice indices");
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    picks.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // a step past int64 leaves the range
  }
  if (obj.is_array()) {
    std::vector<Value> out;
    for (int64_t i : picks) out.push_back(obj.items()[static_cast<size_t>(i)]);
    return Value::array(std::move(out), obj.is_tuple());
  }
  std::u32string u = utf8_to_u32(obj.str()), out;
  for (int64_t i : picks) out.push_back(u[static_cast<size_t>(i)]);
  return Value(u32_to_utf8(out));
}

void install_globals(Scope& scope) {
  scope.vars["range"] = Value::callable("range", [](CallArgs& a) {
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = int_arg(a.positional[0], "range()");
    } else if (a.positional.size() >= 2) {
      start = int_arg(a.positional[0], "range()");
      stop = int_arg(a.positional[1], "range()");
      if (a.positional.size() > 2) step = int_arg(a.positional[2], "range()");
    } else {
      render_fail("range expected at least 1 argument");
    }
    if (step == 0) render_fail("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (out.size() >= 100000)
        render_fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.emplace_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;  // a step past int64 leaves the range
    }
    return Value::array(std::move(out));
  });
  auto mapping_from_args = [](CallArgs& a) {
    auto obj = std::make_shared<Object>();
    for (const Value& p : a.positional) {
      if (!p.is_object()) render_fail("expected a mapping argument");
      for (const auto& [k, v] : p.obj().items()) obj->set(k, v);
    }
    for (const auto& [k, v] : a.keyword) obj->set(k, v);
    return obj;
  };
  scope.vars["namespace"] = Value::callable("namespace", [mapping_from_args](CallArgs& a) {
    return Value::namespace_object(mapping_from_args(a));
  });
  scope.vars["dict"] = Value::callable(
      "dict", [mapping_from_args](CallArgs& a) { return Value::object(mapping_from_args(a)); });
  scope.vars["raise_exception"] = Value::callable("raise_exception", [](CallArgs& a) -> Value {
    throw RenderError(a.get(0, "message").to_str(), 0, true);
  });
  scope.vars["strftime_now"] = Value::callable("strftime_now", [](CallArgs& a) {
    std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), a.get(0, "format").to_str().c_str(), &local);
    return Value(std::string(buf, n));
  });
}

}  // namespace hibana::jinja
