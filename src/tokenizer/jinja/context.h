// Variable scopes during rendering, the error a template raises while it renders, and the
// limits on what a render may do.
// Scopes follow jinja2: the template's top level, each loop iteration and each macro call
// has its own; `if` blocks share their parent's, and {% set %} writes to the innermost.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace hibana::jinja {

// line 0 = not known yet; the nearest node that knows its line fills it in.
struct RenderError : std::runtime_error {
  RenderError(const std::string& message, int line = 0, bool raised = false)
      : std::runtime_error(message), line(line), raised_by_template(raised) {}
  int line;
  bool raised_by_template;  // raise_exception(): the message is the template's own
};

[[noreturn]] inline void render_fail(const std::string& message) {
  throw RenderError(message);
}

// What one render may do, so that a hostile or broken template (nested range() loops,
// exponential macro recursion, 'x' * 10**12) fails instead of hanging or exhausting memory. Real
// chat templates stay far below: the Qwen3, Qwen3.5 and Nemotron ones take 20 to 40 steps per
// message, so 25k messages (more text than any context holds) still render.
inline constexpr size_t kMaxStringBytes = size_t{16} << 20;  // longest string a template builds
inline constexpr size_t kMaxListItems = 1 << 20;  // list * n, or a string's characters as a list
// Statements run, loop iterations and macro calls, plus one per list item or 128 bytes of text
// that expressions build: at most about a second of work.
inline constexpr int64_t kMaxRenderSteps = 1'000'000;

inline void check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes) {
    render_fail("the template builds a string of " + std::to_string(bytes) +
                " bytes, over the limit of " + std::to_string(kMaxStringBytes));
  }
}

struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent(std::move(parent)) {}
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Context {
 public:
  explicit Context(std::shared_ptr<Scope> scope) : scope(std::move(scope)) {}
  // Empties what may sit in a reference cycle, which shared_ptr alone would never free: a scope
  // a macro was defined in (the macro holds the scope that holds it) and a namespace given an
  // attribute (it may now hold itself). Nothing a render computes outlives it but its text.
  ~Context() {
    for (const auto& s : macro_scopes_) s->vars.clear();
    for (Value& ns : namespaces_) ns.mutable_obj().clear();
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void defined_macro_in(const std::shared_ptr<Scope>& s) {
    if (macro_scopes_.empty() || macro_scopes_.back() != s) macro_scopes_.push_back(s);
  }
  void assigned_attribute_of(const Value& ns) {
    if (seen_namespaces_.insert(&ns.obj()).second) namespaces_.push_back(ns);
  }

  // Counts work against kMaxRenderSteps.
  void spend(int64_t steps) {
    steps_left_ -= steps;
    if (steps_left_ < 0) {
      render_fail("the template does too much work (over " + std::to_string(kMaxRenderSteps) +
                  " steps: loops or recursion out of bounds)");
    }
  }
  // What building `v` cost: its items, or its bytes / 128.
  void spend_on(const Value& v) {
    spend_on_scan(v);
    if (v.is_object()) spend(static_cast<int64_t>(v.obj().size()));
  }
  // What walking a string or list costs (a dict is looked up, not walked): `x in s`, s[i],
  // s.find(...), or a filter run over a long value in a loop.
  void spend_on_scan(const Value& v) {
    if (v.is_string()) spend(static_cast<int64_t>(v.str().size() / 128));
    if (v.is_array()) spend(static_cast<int64_t>(v.items().size()));
  }

  Value lookup(const std::string& name) const {
    for (const Scope* s = scope.get(); s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }
  void set(const std::string& name, Value v) { scope->vars[name] = std::move(v); }

  std::shared_ptr<Scope> scope;
  int depth = 0;  // nesting of macro calls, to stop runaway recursion

 private:
  std::vector<std::shared_ptr<Scope>> macro_scopes_;
  std::vector<Value> namespaces_;
  std::unordered_set<const Object*> seen_namespaces_;
  int64_t steps_left_ = kMaxRenderSteps;
};

// Swaps in a scope for the lifetime of the guard.
class ScopeGuard {
 public:
  ScopeGuard(Context& ctx, std::shared_ptr<Scope> inner) : ctx_(ctx), saved_(ctx.scope) {
    ctx_.scope = std::move(inner);
  }
  ~ScopeGuard() { ctx_.scope = saved_; }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Context& ctx_;
  std::shared_ptr<Scope> saved_;
};

}  // namespace hibana::jinja
