// Variable scopes during rendering, and the error a template raises while it renders.
// Scopes follow jinja2: the template's top level, each loop iteration and each macro call
// has its own; `if` blocks share their parent's, and {% set %} writes to the innermost.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "tokenizer/jinja/value.h"

namespace hibana::jinja {

struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent(std::move(parent)) {}
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Context {
 public:
  explicit Context(std::shared_ptr<Scope> scope) : scope(std::move(scope)) {}

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

}  // namespace hibana::jinja
