// The syntax tree of a compiled template. Expressions evaluate to a Value; statements append
// their output to a string and report whether a {% break %} or {% continue %} is unwinding.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace hibana::jinja {

class Context;

struct Expr {
  explicit Expr(int line) : line(line) {}
  virtual ~Expr() = default;
  virtual Value eval(Context& ctx) const = 0;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  CallArgs evaluate(Context& ctx, int line) const;
};

struct Literal : Expr {
  Literal(int line, Value v) : Expr(line), value(std::move(v)) {}
  Value eval(Context& ctx) const override;
  Value value;
};

struct NameRef : Expr {
  NameRef(int line, std::string n) : Expr(line), name(std::move(n)) {}
  Value eval(Context& ctx) const override;
  std::string name;
};

struct ListLiteral : Expr {
  ListLiteral(int line, bool tuple) : Expr(line), is_tuple(tuple) {}
  Value eval(Context& ctx) const override;
  std::vector<ExprPtr> items;
  bool is_tuple;
};

struct DictLiteral : Expr {
  using Expr::Expr;
  Value eval(Context& ctx) const override;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttr : Expr {
  GetAttr(int line, ExprPtr o, std::string n)
      : Expr(line), object(std::move(o)), name(std::move(n)) {}
  Value eval(Context& ctx) const override;
  ExprPtr object;
  std::string name;
};

struct GetItem : Expr {
  GetItem(int line, ExprPtr o, ExprPtr k) : Expr(line), object(std::move(o)), key(std::move(k)) {}
  Value eval(Context& ctx) const override;
  ExprPtr object, key;
};

struct SliceExpr : Expr {
  using Expr::Expr;
  Value eval(Context& ctx) const override;
  ExprPtr object, start, stop, step;  // any of the last three may be null
};

struct CallExpr : Expr {
  using Expr::Expr;
  Value eval(Context& ctx) const override;
  ExprPtr callee;
  Arguments args;
};

struct FilterExpr : Expr {
  using Expr::Expr;
  Value eval(Context& ctx) const override;
  Value apply(Context& ctx, const Value& input) const;
  ExprPtr input;  // null inside {% filter %} blocks and block sets
  std::string name;
  Arguments args;
};

struct TestExpr : Expr {
  using Expr::Expr;
  Value eval(Context& ctx) const override;
  ExprPtr input;
  std::string name;
  Arguments args;
};

struct UnaryExpr : Expr {
  UnaryExpr(int line, std::string o, ExprPtr e)
      : Expr(line), op(std::move(o)), operand(std::move(e)) {}
  Value eval(Context& ctx) const override;
  std::string op;  // "not", "-", "+"
  ExprPtr operand;
};

struct BinaryExpr : Expr {
  BinaryExpr(int line, std::string o, ExprPtr l, ExprPtr r)
      : Expr(line), op(std::move(o)), lhs(std::move(l)), rhs(std::move(r)) {}
  Value eval(Context& ctx) const override;
  std::string op;  // and or + - * / // % ** ~
  ExprPtr lhs, rhs;
};

// a < b <= c: Python's chained comparison; ops are == != < <= > >= in notin.
struct CompareExpr : Expr {
  using Expr::Expr;
  Value eval(Context& ctx) const override;
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;
};

struct CondExpr : Expr {
  using Expr::Expr;
  Value eval(Context& ctx) const override;
  ExprPtr test, then_expr, else_expr;  // else may be null: yields Undefined
};

enum class Flow { normal, break_loop, continue_loop };

struct Stmt {
  explicit Stmt(int line) : line(line) {}
  virtual ~Stmt() = default;
  virtual Flow render(Context& ctx, std::string& out) const = 0;
  int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

Flow render_body(const Body& body, Context& ctx, std::string& out);

struct TextStmt : Stmt {
  TextStmt(int line, std::string t) : Stmt(line), text(std::move(t)) {}
  Flow render(Context& ctx, std::string& out) const override;
  std::string text;
};

struct PrintStmt : Stmt {
  PrintStmt(int line, ExprPtr e) : Stmt(line), expr(std::move(e)) {}
  Flow render(Context& ctx, std::string& out) const override;
  ExprPtr expr;
};

struct IfStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Context& ctx, std::string& out) const override;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};

// Assignment targets: a name, a tuple of names, or namespace.attribute.
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string attribute;  // set for ns.attr targets (names holds the namespace's name)
};

struct ForStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Context& ctx, std::string& out) const override;
  Target target;
  ExprPtr iterable, filter;
  Body body, else_body;
};

struct SetStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Context& ctx, std::string& out) const override;
  Target target;
  ExprPtr value;                                     // {% set x = value %}
  Body body;                                         // {% set x %}body{% endset %}
  std::vector<std::unique_ptr<FilterExpr>> filters;  // {% set x | f %}
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;
};

struct MacroStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Context& ctx, std::string& out) const override;
  std::string name;
  std::vector<MacroParam> params;
  Body body;
};

struct CallBlockStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Context& ctx, std::string& out) const override;
  std::unique_ptr<CallExpr> call;
  std::vector<MacroParam> caller_params;
  Body body;
};

struct FilterBlockStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Context& ctx, std::string& out) const override;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};

struct LoopControlStmt : Stmt {
  LoopControlStmt(int line, Flow f) : Stmt(line), flow(f) {}
  Flow render(Context&, std::string&) const override { return flow; }
  Flow flow;
};

}  // namespace hibana::jinja
