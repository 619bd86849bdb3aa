// Rendering of statements: output, if, for (with jinja2's loop object), set, macros, call
// blocks, filter blocks and loop controls.
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/context.h"

namespace hibana::jinja {

namespace {

constexpr int kMaxMacroDepth = 200;

void assign(Context& ctx, const Target& target, const Value& value, int line) {
  if (!target.attribute.empty()) {
    Value ns = ctx.lookup(target.names[0]);
    if (!ns.is_namespace())
      throw RenderError("cannot assign attribute on non-namespace object", line);
    ctx.assigned_attribute_of(ns);
    ns.mutable_obj().set(target.attribute, value);
    return;
  }
  if (!target.is_tuple) {
    ctx.set(target.names[0], value);
    return;
  }
  std::vector<Value> parts;
  try {
    parts = iterate(value);
  } catch (RenderError& e) {
    e.line = line;
    throw;
  }
  if (parts.size() != target.names.size()) {
    throw RenderError(
        parts.size() > target.names.size()
            ? "too many values to unpack (expected " + std::to_string(target.names.size()) + ")"
            : "not enough values to unpack (expected " + std::to_string(target.names.size()) +
                  ", got " + std::to_string(parts.size()) + ")",
        line);
  }
  for (size_t i = 0; i < parts.size(); ++i) ctx.set(target.names[i], parts[i]);
}

Value loop_object(const std::vector<Value>& items, size_t i) {
  auto loop = std::make_shared<Object>();
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t index0 = static_cast<int64_t>(i);
  loop->set("index0", Value(index0));
  loop->set("index", Value(index0 + 1));
  loop->set("revindex0", Value(n - index0 - 1));
  loop->set("revindex", Value(n - index0));
  loop->set("first", Value(i == 0));
  loop->set("last", Value(index0 == n - 1));
  loop->set("length", Value(n));
  loop->set("depth", Value(1));
  loop->set("depth0", Value(0));
  if (i > 0) loop->set("previtem", items[i - 1]);
  if (index0 + 1 < n) loop->set("nextitem", items[i + 1]);
  loop->set("cycle", Value::callable("loop.cycle", [index0](CallArgs& a) {
              if (a.positional.empty()) render_fail("no items for cycling given");
              return a.positional[static_cast<size_t>(index0) % a.positional.size()];
            }));
  return Value::object(std::move(loop));
}

// A macro or a call block's caller as a callable value. Holds the scope it was defined in;
// the Context pointer is only used during the render that created it.
Value make_macro(Context& ctx, const std::string& name, const std::vector<MacroParam>& params,
                 const Body& body) {
  std::shared_ptr<Scope> defined_in = ctx.scope;
  Context* render_ctx = &ctx;
  return Value::callable(name, [defined_in, render_ctx, &params, &body, name](CallArgs& args) {
    Context& ctx = *render_ctx;
    if (ctx.depth >= kMaxMacroDepth) render_fail("macro '" + name + "' recursed too deeply");
    ctx.spend(1);
    auto scope = std::make_shared<Scope>(defined_in);
    ScopeGuard guard(ctx, scope);
    ++ctx.depth;
    struct DepthGuard {
      Context& c;
      ~DepthGuard() { --c.depth; }
    } depth_guard{ctx};
    std::vector<bool> used_kw(args.keyword.size(), false);
    for (size_t i = 0; i < params.size(); ++i) {
      const MacroParam& p = params[i];
      Value v;
      bool found = false;
      if (i < args.positional.size()) {
        v = args.positional[i];
        found = true;
      }
      for (size_t k = 0; !found && k < args.keyword.size(); ++k) {
        if (args.keyword[k].first == p.name) {
          v = args.keyword[k].second;
          used_kw[k] = found = true;
        }
      }
      if (!found) {
        v = p.default_value ? p.default_value->eval(ctx)
                            : Value::undefined("parameter '" + p.name + "' was not provided");
      }
      scope->vars[p.name] = v;
    }
    std::vector<Value> varargs;
    for (size_t i = params.size(); i < args.positional.size(); ++i)
      varargs.push_back(args.positional[i]);
    auto kwargs = std::make_shared<Object>();
    for (size_t k = 0; k < args.keyword.size(); ++k) {
      if (used_kw[k]) continue;
      if (args.keyword[k].first == "caller") {
        scope->vars["caller"] = args.keyword[k].second;
      } else {
        kwargs->set(args.keyword[k].first, args.keyword[k].second);
      }
    }
    scope->vars["varargs"] = Value::array(std::move(varargs), true);
    scope->vars["kwargs"] = Value::object(std::move(kwargs));
    std::string out;
    render_body(body, ctx, out);
    return Value(out);
  });
}

// What a statement adds to the output counts against the limits like any text built.
void append_output(Context& ctx, std::string& out, const std::string& text) {
  check_string_size(out.size() + text.size());
  ctx.spend(static_cast<int64_t>(text.size() / 128));
  out += text;
}

}  // namespace

Flow render_body(const Body& body, Context& ctx, std::string& out) {
  for (const auto& stmt : body) {
    Flow f;
    try {
      ctx.spend(1);
      f = stmt->render(ctx, out);
    } catch (RenderError& e) {
      if (e.line == 0) e.line = stmt->line;  // the limits are checked where no line is known
      throw;
    }
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

Flow TextStmt::render(Context& ctx, std::string& out) const {
  append_output(ctx, out, text);
  return Flow::normal;
}

Flow PrintStmt::render(Context& ctx, std::string& out) const {
  append_output(ctx, out, expr->eval(ctx).to_str());
  return Flow::normal;
}

Flow IfStmt::render(Context& ctx, std::string& out) const {
  for (const auto& [test, body] : branches) {
    if (test->eval(ctx).truthy()) return render_body(body, ctx, out);
  }
  return render_body(else_body, ctx, out);
}

Flow ForStmt::render(Context& ctx, std::string& out) const {
  Value seq = iterable->eval(ctx);
  std::vector<Value> items;
  try {
    items = iterate(seq);
  } catch (RenderError& e) {
    e.line = line;
    throw;
  }
  if (filter) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      ctx.spend(1);
      ScopeGuard guard(ctx, std::make_shared<Scope>(ctx.scope));
      assign(ctx, target, item, line);
      if (filter->eval(ctx).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return render_body(else_body, ctx, out);
  for (size_t i = 0; i < items.size(); ++i) {
    ctx.spend(1);
    ScopeGuard guard(ctx, std::make_shared<Scope>(ctx.scope));
    assign(ctx, target, items[i], line);
    ctx.set("loop", loop_object(items, i));
    Flow f = render_body(body, ctx, out);
    if (f == Flow::break_loop) break;
  }
  return Flow::normal;
}

Flow SetStmt::render(Context& ctx, std::string& out) const {
  if (value) {
    assign(ctx, target, value->eval(ctx), line);
    return Flow::normal;
  }
  std::string captured;
  render_body(body, ctx, captured);
  Value v(captured);
  for (const auto& f : filters) v = f->apply(ctx, v);
  assign(ctx, target, v, line);
  return Flow::normal;
}

Flow MacroStmt::render(Context& ctx, std::string&) const {
  ctx.defined_macro_in(ctx.scope);
  ctx.set(name, make_macro(ctx, name, params, body));
  return Flow::normal;
}

Flow CallBlockStmt::render(Context& ctx, std::string& out) const {
  Value caller = make_macro(ctx, "caller", caller_params, body);
  Value f = call->callee->eval(ctx);
  CallArgs args = call->args.evaluate(ctx, line);
  args.keyword.emplace_back("caller", caller);
  try {
    append_output(ctx, out, call_value(f, args).to_str());
  } catch (RenderError& e) {
    if (e.line == 0) e.line = line;
    throw;
  }
  return Flow::normal;
}

Flow FilterBlockStmt::render(Context& ctx, std::string& out) const {
  if (filters.empty()) return render_body(body, ctx, out);
  std::string captured;
  render_body(body, ctx, captured);
  Value v(captured);
  for (const auto& f : filters) v = f->apply(ctx, v);
  append_output(ctx, out, v.to_str());
  return Flow::normal;
}

}  // namespace hibana::jinja
