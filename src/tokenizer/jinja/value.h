// The values a chat template computes with, shaped like the Python objects jinja2 works on:
// None, bool, int, float, str, list/tuple, dict (insertion-ordered), namespace, callables, and
// jinja2's Undefined. Lists, dicts and namespaces are shared by reference, as in Python, so a
// namespace attribute set inside a loop is seen outside it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hibana::jinja {

class Value;

// Deepest nesting of lists, dicts and namespaces a template may build: printing, comparing and
// freeing values recurse, and a loop can wrap a list in another a million times.
inline constexpr int kMaxValueNesting = 512;

struct Array {
  std::vector<Value> items;
  bool is_tuple = false;  // prints as (a, b) instead of [a, b]
};

// A dict with string keys that remembers insertion order (Python 3.7+ dict semantics).
class Object {
 public:
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
  void clear();
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const;  // defined below Value: clang needs the element type complete

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs;

// A function a template can call: a builtin (range, namespace, raise_exception), a bound
// method ('abc'.startswith), or a macro.
struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    undefined,
    none,
    boolean,
    integer,
    floating,
    string,
    array,
    object,
    ns,
    callable
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b) : kind_(Kind::boolean), int_(b) {}
  Value(int v) : kind_(Kind::integer), int_(v) {}
  Value(int64_t v) : kind_(Kind::integer), int_(v) {}
  Value(double v) : kind_(Kind::floating), float_(v) {}
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value array(std::vector<Value> items = {}, bool is_tuple = false);
  static Value object(std::shared_ptr<Object> obj = nullptr);
  static Value namespace_object(std::shared_ptr<Object> obj = nullptr);
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python: bool is an int
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_namespace() const { return kind_ == Kind::ns; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // also for bool
  double as_double() const { return is_float() ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *string_; }
  const std::vector<Value>& items() const { return array_->items; }
  std::vector<Value>& mutable_items() { return array_->items; }
  bool is_tuple() const { return array_->is_tuple; }
  const Object& obj() const { return *object_; }
  Object& mutable_obj() const { return *object_; }
  const Callable& fn() const { return *callable_; }
  const std::string& undefined_hint() const;
  // Lists, dicts and namespaces nested in this value, itself included (0 for anything else).
  int nesting() const { return depth_; }

  // Python truthiness.
  bool truthy() const;
  // Python str(): what {{ value }} prints (Undefined prints as "").
  std::string to_str() const;
  // Python repr(): how values print inside lists and dicts.
  std::string repr() const { return repr_nested(0); }
  // Python type name for error messages ('dict', 'list', 'str', ...).
  const char* type_name() const;

 private:
  std::string repr_nested(int level) const;

  Kind kind_ = Kind::undefined;
  uint16_t depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;  // string value, or the hint of an undefined
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<Callable> callable_;
};

inline size_t Object::size() const {
  return items_.size();
}

// Arguments of a call: positional values, then keyword values in call order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;

  // The argument at `index` or named `name`, else `fallback`; consumes nothing.
  Value get(size_t index, std::string_view name, Value fallback = Value()) const;
  bool has(size_t index, std::string_view name) const;
};

// Python ==, with int/float/bool equal by value and Undefined equal only to Undefined.
bool values_equal(const Value& a, const Value& b);
// Python <; throws std::invalid_argument on types Python cannot order.
bool value_less(const Value& a, const Value& b);

}  // namespace hibana::jinja
