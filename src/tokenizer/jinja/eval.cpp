// Evaluation of expressions with Python's operator semantics.
#include <cmath>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/context.h"
#include "tokenizer/jinja/python_text.h"

namespace hibana::jinja {

namespace {

// Runs f, stamping this node's line on errors that do not carry one yet.
template <typename F>
auto at_line(int line, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (RenderError& e) {
    if (e.line == 0) e.line = line;
    throw;
  } catch (const std::invalid_argument& e) {
    throw RenderError(e.what(), line);
  }
}

[[noreturn]] void undefined_operand(const Value& v) {
  render_fail(v.undefined_hint().empty() ? "operand is undefined" : v.undefined_hint());
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_operand(a);
  if (b.is_undefined()) undefined_operand(b);
  if (op == "+" && a.is_string()) {
    render_fail(std::string("can only concatenate str (not \"") + b.type_name() + "\") to str");
  }
  render_fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
              b.type_name() + "'");
}

Value repeat(const Value& seq, int64_t times) {
  const size_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
  if (times <= 0 || unit == 0)
    return seq.is_string() ? Value("") : Value::array({}, seq.is_tuple());
  // 'x' * 10**12 fails before it allocates.
  const size_t limit = seq.is_string() ? kMaxStringBytes : kMaxListItems;
  if (static_cast<uint64_t>(times) > limit / unit) {
    render_fail("the template repeats a " + std::string(seq.type_name()) + " " +
                std::to_string(times) + " times, over the limit of " + std::to_string(limit) +
                (seq.is_string() ? " bytes" : " items"));
  }
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(out);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::array(std::move(out), seq.is_tuple());
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_string_size(a.str().size() + b.str().size());
      return Value(a.str() + b.str());
    }
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::array(std::move(out), a.is_tuple());
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_array()) && (b.is_int() || b.is_bool()))
      return repeat(a, b.as_int());
    if ((b.is_string() || b.is_array()) && (a.is_int() || a.is_bool()))
      return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.str(), b));
  if (!a.is_number() || !b.is_number()) bad_operands(op, a, b);
  bool floating = a.is_float() || b.is_float();
  if (op == "/") {
    if (b.as_double() == 0) render_fail("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (floating) {
    double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) render_fail("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  int64_t x = a.as_int(), y = b.as_int();
  if (op == "+") return Value(checked_add(x, y));
  if (op == "-") return Value(checked_sub(x, y));
  if (op == "*") return Value(checked_mul(x, y));
  if (op == "**") {
    if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t r = 1;  // by squaring: x*x only overflows when the result would
    for (; y > 0; y >>= 1) {
      if (y & 1) r = checked_mul(r, x);
      if (y > 1) x = checked_mul(x, x);
    }
    return Value(r);
  }
  if (y == 0) render_fail("integer division or modulo by zero");
  if (y == -1) return op == "//" ? Value(checked_sub(0, x)) : Value(int64_t{0});  // MIN / -1
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  return op == "//" ? Value(q) : Value(m);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::string:
      if (!item.is_string()) {
        render_fail(std::string("'in <string>' requires string as left operand, not ") +
                    item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::object:
      return item.is_string() && container.obj().find(item.str()) != nullptr;
    case Value::Kind::array:
      for (const Value& x : container.items())
        if (values_equal(x, item)) return true;
      return false;
    default:
      render_fail(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) undefined_operand(a);
  if (b.is_undefined()) undefined_operand(b);
  if (op == "<") return value_less(a, b);
  if (op == ">") return value_less(b, a);
  if (op == "<=") return !value_less(b, a);
  return !value_less(a, b);  // >=
}

}  // namespace

int64_t checked_add(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_add_overflow(x, y, &r)) render_fail("integer overflow");
  return r;
}

int64_t checked_sub(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_sub_overflow(x, y, &r)) render_fail("integer overflow");
  return r;
}

int64_t checked_mul(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_mul_overflow(x, y, &r)) render_fail("integer overflow");
  return r;
}

int64_t float_to_int(double d) {
  if (!(d >= -0x1p63 && d < 0x1p63)) {
    render_fail("cannot convert float " + py_float_repr(d) + " to a 64-bit integer");
  }
  return static_cast<int64_t>(d);
}

CallArgs Arguments::evaluate(Context& ctx, int line) const {
  CallArgs args;
  args.line = line;
  for (const auto& e : positional) args.positional.push_back(e->eval(ctx));
  for (const auto& [name, e] : keyword) args.keyword.emplace_back(name, e->eval(ctx));
  return args;
}

Value Literal::eval(Context&) const {
  return value;
}

Value NameRef::eval(Context& ctx) const {
  return ctx.lookup(name);
}

Value ListLiteral::eval(Context& ctx) const {
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& e : items) out.push_back(e->eval(ctx));
  return Value::array(std::move(out), is_tuple);
}

Value DictLiteral::eval(Context& ctx) const {
  auto obj = std::make_shared<Object>();
  for (const auto& [k, v] : items) {
    Value key = k->eval(ctx);
    if (!key.is_string())
      throw RenderError("only string keys are supported in dict literals", line);
    obj->set(key.str(), v->eval(ctx));
  }
  return Value::object(std::move(obj));
}

Value GetAttr::eval(Context& ctx) const {
  Value o = object->eval(ctx);
  ctx.spend_on_scan(o);  // the methods of strings and lists walk them
  return at_line(line, [&] { return get_attribute(o, name); });
}

Value GetItem::eval(Context& ctx) const {
  Value o = object->eval(ctx);
  Value k = key->eval(ctx);
  if (o.is_string()) ctx.spend_on_scan(o);  // s[i] counts code points
  return at_line(line, [&] { return get_item(o, k); });
}

Value SliceExpr::eval(Context& ctx) const {
  Value o = object->eval(ctx);
  Value a = start ? start->eval(ctx) : Value::none();
  Value b = stop ? stop->eval(ctx) : Value::none();
  Value c = step ? step->eval(ctx) : Value::none();
  ctx.spend_on_scan(o);
  Value result = at_line(line, [&] { return slice_value(o, a, b, c); });
  ctx.spend_on(result);
  return result;
}

Value CallExpr::eval(Context& ctx) const {
  Value f = callee->eval(ctx);
  CallArgs a = args.evaluate(ctx, line);
  Value result = at_line(line, [&] { return call_value(f, a); });
  ctx.spend_on(result);
  return result;
}

Value FilterExpr::apply(Context& ctx, const Value& in) const {
  CallArgs a = args.evaluate(ctx, line);
  // Filters walk their input, except these on lists (messages|length is common in loops).
  if (in.is_string() || (name != "length" && name != "count" && name != "default" && name != "d"))
    ctx.spend_on_scan(in);
  Value result = at_line(line, [&] { return apply_filter(name, in, a); });
  ctx.spend_on(result);
  return result;
}

Value FilterExpr::eval(Context& ctx) const {
  return apply(ctx, input->eval(ctx));
}

Value TestExpr::eval(Context& ctx) const {
  Value in = input->eval(ctx);
  CallArgs a = args.evaluate(ctx, line);
  for (const Value& arg : a.positional) ctx.spend_on_scan(arg);  // x is in(seq), is eq(...)
  return at_line(line, [&] { return Value(apply_test(name, in, a)); });
}

Value UnaryExpr::eval(Context& ctx) const {
  Value v = operand->eval(ctx);
  if (op == "not") return Value(!v.truthy());
  return at_line(line, [&] {
    if (v.is_undefined()) undefined_operand(v);
    if (!v.is_number())
      render_fail(std::string("bad operand type for unary ") + op + ": '" + v.type_name() + "'");
    if (op == "+") return v.is_float() ? Value(v.as_double()) : Value(v.as_int());
    return v.is_float() ? Value(-v.as_double()) : Value(checked_sub(0, v.as_int()));
  });
}

Value BinaryExpr::eval(Context& ctx) const {
  if (op == "and") {
    Value l = lhs->eval(ctx);
    return l.truthy() ? rhs->eval(ctx) : l;
  }
  if (op == "or") {
    Value l = lhs->eval(ctx);
    return l.truthy() ? l : rhs->eval(ctx);
  }
  Value l = lhs->eval(ctx);
  Value r = rhs->eval(ctx);
  Value result = at_line(line, [&] {
    if (op != "~") return arithmetic(op, l, r);
    std::string text = l.to_str();
    std::string right = r.to_str();
    check_string_size(text.size() + right.size());
    return Value(text + right);
  });
  ctx.spend_on(result);
  return result;
}

Value CompareExpr::eval(Context& ctx) const {
  Value left = first->eval(ctx);
  for (const auto& step : rest) {  // not a structured binding: clang 14 cannot capture those
    const std::string& op = step.first;
    Value right = step.second->eval(ctx);
    ctx.spend_on_scan(left);  // 'x' in s, list == list
    ctx.spend_on_scan(right);
    if (!at_line(line, [&] { return compare(op, left, right); })) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value CondExpr::eval(Context& ctx) const {
  if (test->eval(ctx).truthy()) return then_expr->eval(ctx);
  if (else_expr) return else_expr->eval(ctx);
  return Value::undefined(
      "the inline if-expression evaluated to false and no else section was defined.");
}

}  // namespace hibana::jinja
