#include "tokenizer/jinja/json_value.h"

#include "core/error.h"
#include "tokenizer/jinja/python_text.h"

namespace hibana::jinja {

namespace {

Value from_json(const nlohmann::ordered_json& j, int level) {
  if (level >= kMaxValueNesting) {  // checked on the way down: the recursion is the risk
    throw Error(ErrorKind::invalid_argument,
                "JSON nested deeper than " + std::to_string(kMaxValueNesting) + " levels");
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, level + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto obj = std::make_shared<Object>();
      for (auto it = j.begin(); it != j.end(); ++it)
        obj->set(it.key(), from_json(it.value(), level + 1));
      return Value::object(std::move(obj));
    }
    default:
      return Value::none();
  }
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& j) {
  return from_json(j, 0);
}

std::string python_json_dumps(const nlohmann::ordered_json& j) {
  return py_json_dumps(value_from_json(j), JsonDumpOptions{});
}

}  // namespace hibana::jinja
