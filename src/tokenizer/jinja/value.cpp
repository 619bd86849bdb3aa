#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <stdexcept>

#include "tokenizer/jinja/context.h"
#include "tokenizer/jinja/python_text.h"

namespace hibana::jinja {

const Value* Object::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Object::set(const std::string& key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(value));
}

void Object::clear() {
  items_.clear();
  index_.clear();
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.string_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}

Value::Value(std::string s)
    : kind_(Kind::string), string_(std::make_shared<const std::string>(std::move(s))) {}

namespace {

// The nesting of a container holding `items`. A namespace counts what it held when created:
// the render empties the ones assigned to later, so those are never freed recursively.
template <typename Items, typename Get>
uint16_t container_depth(const Items& items, Get&& get) {
  int depth = 0;
  for (const auto& item : items) depth = std::max(depth, get(item).nesting());
  if (depth >= kMaxValueNesting) {
    render_fail("the template nests lists, dicts or namespaces deeper than " +
                std::to_string(kMaxValueNesting) + " levels");
  }
  return static_cast<uint16_t>(depth + 1);
}

}  // namespace

Value Value::array(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.depth_ = container_depth(items, [](const Value& x) -> const Value& { return x; });
  v.kind_ = Kind::array;
  v.array_ = std::make_shared<Array>(Array{std::move(items), is_tuple});
  return v;
}

Value Value::object(std::shared_ptr<Object> obj) {
  Value v;
  v.kind_ = Kind::object;
  v.object_ = obj ? std::move(obj) : std::make_shared<Object>();
  v.depth_ =
      container_depth(v.object_->items(), [](const auto& kv) -> const Value& { return kv.second; });
  return v;
}

Value Value::namespace_object(std::shared_ptr<Object> obj) {
  Value v = object(std::move(obj));
  v.kind_ = Kind::ns;
  return v;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::callable;
  v.callable_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::undefined_hint() const {
  static const std::string empty;
  return is_undefined() && string_ ? *string_ : empty;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
    case Kind::integer:
      return int_ != 0;
    case Kind::floating:
      return float_ != 0.0;
    case Kind::string:
      return !string_->empty();
    case Kind::array:
      return !array_->items.empty();
    case Kind::object:
      return object_->size() != 0;
    case Kind::ns:
    case Kind::callable:
      return true;
  }
  return false;
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::undefined:
      return "";
    case Kind::string:
      return *string_;
    default:
      return repr();
  }
}

std::string Value::repr_nested(int level) const {
  // Namespaces can hold themselves: printing one that does would never end.
  if (level > kMaxValueNesting) render_fail("cannot print a value nested this deeply");
  switch (kind_) {
    case Kind::undefined:
      return "";
    case Kind::none:
      return "None";
    case Kind::boolean:
      return int_ ? "True" : "False";
    case Kind::integer:
      return std::to_string(int_);
    case Kind::floating:
      return py_float_repr(float_);
    case Kind::string:
      return py_string_repr(*string_);
    case Kind::array: {
      const auto& items = array_->items;
      std::string out = array_->is_tuple ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += items[i].repr_nested(level + 1);
        check_string_size(out.size());  // [s] * 1000 prints s a thousand times
      }
      if (array_->is_tuple && items.size() == 1) out += ",";
      out += array_->is_tuple ? ")" : "]";
      return out;
    }
    case Kind::object:
    case Kind::ns: {
      std::string out = kind_ == Kind::ns ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : object_->items()) {
        if (!first) out += ", ";
        first = false;
        out += py_string_repr(k) + ": " + v.repr_nested(level + 1);
        check_string_size(out.size());
      }
      return out + (kind_ == Kind::ns ? "}>" : "}");
    }
    case Kind::callable:
      return "<function " + callable_->name + ">";
  }
  return "";
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::array:
      return array_->is_tuple ? "tuple" : "list";
    case Kind::object:
      return "dict";
    case Kind::ns:
      return "Namespace";
    case Kind::callable:
      return "function";
  }
  return "object";
}

bool CallArgs::has(size_t index, std::string_view name) const {
  if (index < positional.size()) return true;
  for (const auto& kv : keyword)
    if (kv.first == name) return true;
  return false;
}

Value CallArgs::get(size_t index, std::string_view name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& kv : keyword)
    if (kv.first == name) return kv.second;
  return fallback;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.str() == b.str();
    case Value::Kind::array: {
      if (a.items().size() != b.items().size()) return false;
      if (a.is_tuple() != b.is_tuple()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!values_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::object: {
      if (a.obj().size() != b.obj().size()) return false;
      for (const auto& [k, v] : a.obj().items()) {
        const Value* other = b.obj().find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::ns:
      return &a.obj() == &b.obj();
    case Value::Kind::callable:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order = code points
  if (a.is_array() && b.is_array()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw std::invalid_argument(std::string("'<' not supported between instances of '") +
                              a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace hibana::jinja
