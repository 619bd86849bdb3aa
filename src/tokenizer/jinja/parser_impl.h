// The Jinja parser's class, shared by parser.cpp (statements) and parser_expr.cpp
// (expressions). Private to src/tokenizer/jinja/: the public entry point is parse_template().
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/parser.h"

namespace hibana::jinja::parse_detail {

// Recursion guard: a template nesting expressions or blocks this deep is refused rather than
// allowed to exhaust the stack.
constexpr int kMaxNesting = 256;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != TokenType::eof) fail("unexpected tag '" + cur().text + "'");
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::name && cur().text == n; }
  [[noreturn]] void fail(const std::string& msg, bool unsupported = false) const {
    throw TemplateSyntaxError(msg, cur().line, unsupported);
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != TokenType::name) fail("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != TokenType::block_end)
      fail("expected end of statement block, got " + describe(cur()));
    next();
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::block_end:
        return "end of statement block";
      case TokenType::var_end:
        return "end of print statement";
      case TokenType::eof:
        return "end of template";
      case TokenType::string:
        return "string literal";
      default:
        return "'" + t.text + "'";
    }
  }

  // Statements up to (not including) a block whose tag is one of `ends`.
  Body subparse(std::initializer_list<const char*> ends);

  // Consumes the tag name that ended a subparse, checking it is `name`.
  void end_tag(const char* name);

  StmtPtr parse_statement();

  StmtPtr parse_if(int line);

  Target parse_target(bool allow_namespace);

  StmtPtr parse_for(int line);

  StmtPtr parse_set(int line);

  std::vector<MacroParam> parse_params();

  StmtPtr parse_macro(int line);

  StmtPtr parse_call_block(int line);

  StmtPtr parse_filter_block(int line);

  // ---- expressions, lowest precedence first (jinja2's parser.py order) ----

  bool at_tuple_end() const {
    return cur().type == TokenType::var_end || cur().type == TokenType::block_end || is_op(")") ||
           is_name("in") || is_name("if") || is_name("recursive");
  }

  ExprPtr parse_tuple(bool with_condexpr);

  struct NestingGuard {
    explicit NestingGuard(Parser& p) : p(p) {
      if (++p.nesting_ > kMaxNesting) p.fail("nesting deeper than 256 levels", true);
    }
    ~NestingGuard() { --p.nesting_; }
    Parser& p;
  };

  ExprPtr parse_expression(bool with_condexpr);

  ExprPtr parse_or();

  ExprPtr parse_and();

  ExprPtr parse_not();

  ExprPtr parse_compare();

  template <typename Next>
  ExprPtr parse_binary(std::initializer_list<const char*> ops, Next next_level) {
    ExprPtr e = (this->*next_level)();
    while (true) {
      const char* matched = nullptr;
      for (const char* op : ops)
        if (is_op(op)) matched = op;
      if (!matched) return e;
      int line = next().line;
      e = std::make_unique<BinaryExpr>(line, matched, std::move(e), (this->*next_level)());
    }
  }
  ExprPtr parse_math1() { return parse_binary({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_binary({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_binary({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_binary({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter);

  ExprPtr parse_primary();

  ExprPtr parse_postfix(ExprPtr node);

  ExprPtr parse_filter_expr(ExprPtr node);

  ExprPtr parse_subscript(ExprPtr node);

  void parse_arguments(Arguments& args);

  ExprPtr parse_call(ExprPtr node);

  std::unique_ptr<FilterExpr> parse_filter(ExprPtr input);

  std::unique_ptr<FilterExpr> parse_filter_named(ExprPtr input);

  ExprPtr parse_test(ExprPtr input);

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace hibana::jinja::parse_detail
