// Conversion between nlohmann JSON and template values (object key order is kept).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja/value.h"

namespace hibana::jinja {

// Throws Error(invalid_argument) for JSON nested deeper than kMaxValueNesting.
Value value_from_json(const nlohmann::ordered_json& j);

// json.dumps(j, ensure_ascii=False): Python's separators ", " and ": " and float repr.
std::string python_json_dumps(const nlohmann::ordered_json& j);

}  // namespace hibana::jinja
