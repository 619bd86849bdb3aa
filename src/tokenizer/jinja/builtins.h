// What a template can use without defining it: filters, tests, attribute and item access
// (with str/dict/list methods), and the global functions transformers provides.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/jinja/context.h"
#include "tokenizer/jinja/value.h"

namespace hibana::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
bool apply_test(std::string_view name, const Value& input, CallArgs& args);

// obj.name: a method of str/dict/list when there is one, else the dict key (jinja2's getattr).
// Attribute access on Undefined raises, as jinja2's default Undefined does.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: item first, then attribute (jinja2's getitem).
Value get_item(const Value& obj, const Value& key);
Value call_value(const Value& callee, CallArgs& args);

// The values a loop iterates over (dict keys, string characters, list items).
std::vector<Value> iterate(const Value& v);
size_t value_length(const Value& v);
// Python slicing of lists, tuples and strings (by code point).
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

// range, namespace, dict, raise_exception, strftime_now.
void install_globals(Scope& scope);

// Integers are 64-bit here (Python's are unbounded): a result that does not fit fails the
// render, never wraps or saturates.
int64_t checked_add(int64_t x, int64_t y);
int64_t checked_sub(int64_t x, int64_t y);
int64_t checked_mul(int64_t x, int64_t y);
// int(d): truncates; fails for NaN and values outside int64.
int64_t float_to_int(double d);

}  // namespace hibana::jinja

namespace hibana::jinja {
// Python's "fmt % args" for %s %r %d %i %f %% (what templates use; others raise).
std::string percent_format(const std::string& fmt, const Value& args);
}  // namespace hibana::jinja
