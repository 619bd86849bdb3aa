// jinja2's builtin tests ({% if x is string %}), with Python's type rules: bool counts as a
// number but not as an integer, and Undefined is iterable (it iterates as empty).
#include <cmath>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/python_text.h"

namespace hibana::jinja {

namespace {

using TestFn = bool (*)(const Value&, CallArgs&);

Value arg0(CallArgs& a) {
  return a.get(0, "other");
}

bool t_boolean(const Value& v, CallArgs&) {
  return v.is_bool();
}
bool t_callable(const Value& v, CallArgs&) {
  return v.is_callable();
}
bool t_defined(const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_divisibleby(const Value& v, CallArgs& a) {
  Value n = a.get(0, "num");
  if (!v.is_number() || !n.is_number()) render_fail("divisibleby needs numbers");
  if (v.is_float() || n.is_float()) return std::fmod(v.as_double(), n.as_double()) == 0;
  if (n.as_int() == 0) render_fail("integer division or modulo by zero");
  return n.as_int() == -1 || v.as_int() % n.as_int() == 0;  // MIN % -1 traps
}
bool t_eq(const Value& v, CallArgs& a) {
  return values_equal(v, arg0(a));
}
bool t_ne(const Value& v, CallArgs& a) {
  return !values_equal(v, arg0(a));
}
bool t_lt(const Value& v, CallArgs& a) {
  return value_less(v, arg0(a));
}
bool t_le(const Value& v, CallArgs& a) {
  return !value_less(arg0(a), v);
}
bool t_gt(const Value& v, CallArgs& a) {
  return value_less(arg0(a), v);
}
bool t_ge(const Value& v, CallArgs& a) {
  return !value_less(v, arg0(a));
}
bool t_escaped(const Value&, CallArgs&) {
  return false;
}
bool t_even(const Value& v, CallArgs&) {
  if (!v.is_int() && !v.is_bool()) render_fail("even needs an integer");
  return v.as_int() % 2 == 0;
}
bool t_odd(const Value& v, CallArgs&) {
  if (!v.is_int() && !v.is_bool()) render_fail("odd needs an integer");
  return v.as_int() % 2 != 0;
}
bool t_false(const Value& v, CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool t_true(const Value& v, CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_float(const Value& v, CallArgs&) {
  return v.is_float();
}
bool t_integer(const Value& v, CallArgs&) {
  return v.is_int();
}
bool t_number(const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_string(const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(const Value& v, CallArgs&) {
  return v.is_object();
}
bool t_none(const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
}
bool t_sequence(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
}
bool t_in(const Value& v, CallArgs& a) {
  Value seq = a.get(0, "seq");
  if (seq.is_string()) {
    if (!v.is_string()) render_fail("'in <string>' requires string as left operand");
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_object()) return v.is_string() && seq.obj().find(v.str()) != nullptr;
  for (const Value& x : iterate(seq))
    if (values_equal(x, v)) return true;
  return false;
}
bool t_lower(const Value& v, CallArgs&) {
  std::string s = v.to_str();
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(const Value& v, CallArgs&) {
  std::string s = v.to_str();
  return py_upper(s) == s && py_lower(s) != s;
}
bool t_sameas(const Value& v, CallArgs& a) {
  Value o = arg0(a);
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool() || v.is_int()) return v.as_int() == o.as_int();
  if (v.is_array()) return &v.items() == &o.items();
  if (v.is_object() || v.is_namespace()) return &v.obj() == &o.obj();
  if (v.is_callable()) return &v.fn() == &o.fn();
  return false;
}
bool t_filter(const Value& v, CallArgs&) {
  return v.is_string() && is_known_filter(v.str());
}
bool t_test(const Value& v, CallArgs&) {
  return v.is_string() && is_known_test(v.str());
}

const std::unordered_map<std::string_view, TestFn>& test_table() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"escaped", t_escaped},
      {"even", t_even},
      {"odd", t_odd},
      {"false", t_false},
      {"true", t_true},
      {"float", t_float},
      {"integer", t_integer},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"none", t_none},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"in", t_in},
      {"lower", t_lower},
      {"upper", t_upper},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
  };
  return table;
}

}  // namespace

bool is_known_test(std::string_view name) {
  return test_table().count(name) != 0;
}

bool apply_test(std::string_view name, const Value& input, CallArgs& args) {
  auto it = test_table().find(name);
  if (it == test_table().end()) render_fail("No test named '" + std::string(name) + "'.");
  return it->second(input, args);
}

}  // namespace hibana::jinja
