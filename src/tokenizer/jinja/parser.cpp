#include "tokenizer/jinja/parser.h"

#include <initializer_list>

#include "tokenizer/jinja/builtins.h"

namespace hibana::jinja {

namespace {

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
  Body subparse(std::initializer_list<const char*> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::eof) {
        if (ends.size())
          fail(std::string("unexpected end of template, expected '") + *(ends.end() - 1) + "'");
        return body;
      }
      if (t.type == TokenType::data) {
        body.push_back(std::make_unique<TextStmt>(t.line, t.text));
        next();
        continue;
      }
      if (t.type == TokenType::var_begin) {
        next();
        int line = cur().line;
        ExprPtr e = parse_tuple(true);
        if (cur().type != TokenType::var_end)
          fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::make_unique<PrintStmt>(line, std::move(e)));
        continue;
      }
      if (t.type != TokenType::block_begin) fail("unexpected " + describe(t));
      next();
      if (cur().type != TokenType::name) fail("expected a tag name, got " + describe(cur()));
      for (const char* end : ends)
        if (cur().text == end) return body;
      StmtPtr stmt = parse_statement();
      if (stmt) body.push_back(std::move(stmt));
    }
  }

  // Consumes the tag name that ended a subparse, checking it is `name`.
  void end_tag(const char* name) {
    if (!is_name(name)) fail(std::string("expected '") + name + "'");
    next();
    expect_block_end();
  }

  StmtPtr parse_statement() {
    NestingGuard guard(*this);
    const std::string tag = cur().text;
    int line = cur().line;
    next();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body unchanged
      expect_block_end();
      auto block = std::make_unique<FilterBlockStmt>(line);
      block->body = subparse({"endgeneration"});
      end_tag("endgeneration");
      return block;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      expect_block_end();
      return std::make_unique<LoopControlStmt>(
          line, tag == "break" ? Flow::break_loop : Flow::continue_loop);
    }
    if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif") {
      throw TemplateSyntaxError("unexpected '" + tag + "' with no block to close", line);
    }
    throw TemplateSyntaxError("unsupported tag '" + tag + "'", line, true);
  }

  StmtPtr parse_if(int line) {
    auto stmt = std::make_unique<IfStmt>(line);
    ExprPtr test = parse_tuple(false);
    expect_block_end();
    while (true) {
      Body body = subparse({"elif", "else", "endif"});
      stmt->branches.emplace_back(std::move(test), std::move(body));
      if (is_name("elif")) {
        next();
        test = parse_tuple(false);
        expect_block_end();
        continue;
      }
      if (is_name("else")) {
        next();
        expect_block_end();
        stmt->else_body = subparse({"endif"});
      }
      end_tag("endif");
      return stmt;
    }
  }

  Target parse_target(bool allow_namespace) {
    Target target;
    bool parens = is_op("(");
    if (parens) next();
    target.names.push_back(expect_name());
    if (allow_namespace && !parens && is_op(".")) {
      next();
      target.attribute = expect_name();
      return target;
    }
    while (is_op(",")) {
      next();
      target.is_tuple = true;
      if (cur().type != TokenType::name) break;
      target.names.push_back(expect_name());
    }
    if (parens) expect_op(")");
    return target;
  }

  StmtPtr parse_for(int line) {
    auto stmt = std::make_unique<ForStmt>(line);
    stmt->target = parse_target(false);
    if (!is_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
    next();
    stmt->iterable = parse_tuple(false);
    if (is_name("if")) {
      next();
      stmt->filter = parse_expression(true);
    }
    if (is_name("recursive")) fail("recursive for loops", true);
    expect_block_end();
    ++loop_depth_;
    stmt->body = subparse({"else", "endfor"});
    --loop_depth_;
    if (is_name("else")) {
      next();
      expect_block_end();
      stmt->else_body = subparse({"endfor"});
    }
    end_tag("endfor");
    return stmt;
  }

  StmtPtr parse_set(int line) {
    auto stmt = std::make_unique<SetStmt>(line);
    stmt->target = parse_target(true);
    if (is_op("=")) {
      next();
      stmt->value = parse_tuple(true);
      expect_block_end();
      return stmt;
    }
    while (is_op("|")) stmt->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    stmt->body = subparse({"endset"});
    end_tag("endset");
    return stmt;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (is_op("=")) {
        next();
        p.default_value = parse_expression(true);
      }
      params.push_back(std::move(p));
    }
    next();
    return params;
  }

  StmtPtr parse_macro(int line) {
    auto stmt = std::make_unique<MacroStmt>(line);
    stmt->name = expect_name();
    stmt->params = parse_params();
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    stmt->body = subparse({"endmacro"});
    loop_depth_ = saved;
    if (!is_name("endmacro")) fail("expected 'endmacro'");
    next();
    if (cur().type == TokenType::name) next();  // {% endmacro name %}
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_call_block(int line) {
    auto stmt = std::make_unique<CallBlockStmt>(line);
    if (is_op("(")) stmt->caller_params = parse_params();
    ExprPtr e = parse_expression(true);
    auto* call = dynamic_cast<CallExpr*>(e.get());
    if (!call) fail("expected a call in {% call %}");
    e.release();
    stmt->call.reset(call);
    expect_block_end();
    stmt->body = subparse({"endcall"});
    end_tag("endcall");
    return stmt;
  }

  StmtPtr parse_filter_block(int line) {
    auto stmt = std::make_unique<FilterBlockStmt>(line);
    stmt->filters.push_back(parse_filter_named(nullptr));
    while (is_op("|")) stmt->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    stmt->body = subparse({"endfilter"});
    end_tag("endfilter");
    return stmt;
  }

  // ---- expressions, lowest precedence first (jinja2's parser.py order) ----

  bool at_tuple_end() const {
    return cur().type == TokenType::var_end || cur().type == TokenType::block_end || is_op(")") ||
           is_name("in") || is_name("if") || is_name("recursive");
  }

  ExprPtr parse_tuple(bool with_condexpr) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (!items.empty() && at_tuple_end()) break;
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) return std::move(items[0]);
    auto t = std::make_unique<ListLiteral>(line, true);
    t->items = std::move(items);
    return t;
  }

  struct NestingGuard {
    explicit NestingGuard(Parser& p) : p(p) {
      if (++p.nesting_ > kMaxNesting) p.fail("nesting deeper than 256 levels", true);
    }
    ~NestingGuard() { --p.nesting_; }
    Parser& p;
  };

  ExprPtr parse_expression(bool with_condexpr) {
    NestingGuard guard(*this);
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      int line = cur().line;
      next();
      auto c = std::make_unique<CondExpr>(line);
      c->then_expr = std::move(e);
      c->test = parse_or();
      if (is_name("else")) {
        next();
        c->else_expr = parse_expression(true);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = next().line;
      e = std::make_unique<BinaryExpr>(line, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = next().line;
      e = std::make_unique<BinaryExpr>(line, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      int line = next().line;
      return std::make_unique<UnaryExpr>(line, "not", parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> rest;
    while (true) {
      std::string op;
      if (cur().type == TokenType::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::name && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      rest.emplace_back(op, parse_math1());
    }
    if (rest.empty()) return first;
    auto c = std::make_unique<CompareExpr>(line);
    c->first = std::move(first);
    c->rest = std::move(rest);
    return c;
  }

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

  ExprPtr parse_unary(bool with_filter) {
    NestingGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = std::make_unique<UnaryExpr>(t.line, t.text, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    int line = t.line;
    switch (t.type) {
      case TokenType::name: {
        next();
        if (t.text == "true" || t.text == "True")
          return std::make_unique<Literal>(line, Value(true));
        if (t.text == "false" || t.text == "False")
          return std::make_unique<Literal>(line, Value(false));
        if (t.text == "none" || t.text == "None")
          return std::make_unique<Literal>(line, Value::none());
        return std::make_unique<NameRef>(line, t.text);
      }
      case TokenType::string: {
        std::string s;
        while (cur().type == TokenType::string) s += next().text;
        return std::make_unique<Literal>(line, Value(s));
      }
      case TokenType::integer:
        next();
        return std::make_unique<Literal>(line, Value(t.int_value));
      case TokenType::floating:
        next();
        return std::make_unique<Literal>(line, Value(t.float_value));
      default:
        break;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return std::make_unique<ListLiteral>(line, true);
      }
      ExprPtr e = parse_tuple(true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto list = std::make_unique<ListLiteral>(line, false);
      while (!is_op("]")) {
        if (!list->items.empty()) expect_op(",");
        if (is_op("]")) break;
        list->items.push_back(parse_expression(true));
      }
      next();
      return list;
    }
    if (is_op("{")) {
      next();
      auto dict = std::make_unique<DictLiteral>(line);
      while (!is_op("}")) {
        if (!dict->items.empty()) expect_op(",");
        if (is_op("}")) break;
        ExprPtr key = parse_expression(true);
        expect_op(":");
        dict->items.emplace_back(std::move(key), parse_expression(true));
      }
      next();
      return dict;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    int line = t.line;
    if (t.text == ".") {
      if (cur().type == TokenType::name)
        return std::make_unique<GetAttr>(line, std::move(node), next().text);
      if (cur().type == TokenType::integer) {
        auto key = std::make_unique<Literal>(line, Value(next().int_value));
        return std::make_unique<GetItem>(line, std::move(node), std::move(key));
      }
      fail("expected a name after '.'");
    }
    ExprPtr start, stop, step;
    bool is_slice = false;
    if (!is_op(":")) start = parse_expression(true);
    if (is_op(":")) {
      is_slice = true;
      next();
      if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
      if (is_op(":")) {
        next();
        if (!is_op("]")) step = parse_expression(true);
      }
    }
    if (is_op(",")) fail("tuple subscripts", true);
    expect_op("]");
    if (!is_slice) return std::make_unique<GetItem>(line, std::move(node), std::move(start));
    auto s = std::make_unique<SliceExpr>(line);
    s->object = std::move(node);
    s->start = std::move(start);
    s->stop = std::move(stop);
    s->step = std::move(step);
    return s;
  }

  void parse_arguments(Arguments& args) {
    expect_op("(");
    while (!is_op(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args / **kwargs in calls", true);
      if (cur().type == TokenType::name && peek().type == TokenType::op && peek().text == "=") {
        std::string name = next().text;
        next();
        args.keyword.emplace_back(name, parse_expression(true));
      } else {
        if (!args.keyword.empty()) fail("positional argument after keyword argument");
        args.positional.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto call = std::make_unique<CallExpr>(cur().line);
    call->callee = std::move(node);
    parse_arguments(call->args);
    return call;
  }

  std::unique_ptr<FilterExpr> parse_filter(ExprPtr input) {
    expect_op("|");
    return parse_filter_named(std::move(input));
  }

  std::unique_ptr<FilterExpr> parse_filter_named(ExprPtr input) {
    auto f = std::make_unique<FilterExpr>(cur().line);
    f->input = std::move(input);
    f->name = expect_name();
    while (is_op(".")) {
      next();
      f->name += "." + expect_name();
    }
    if (!is_known_filter(f->name)) {
      throw TemplateSyntaxError("unsupported filter '" + f->name + "'", f->line, true);
    }
    if (is_op("(")) parse_arguments(f->args);
    return f;
  }

  ExprPtr parse_test(ExprPtr input) {
    int line = next().line;  // 'is'
    bool negated = false;
    if (is_name("not")) {
      next();
      negated = true;
    }
    auto t = std::make_unique<TestExpr>(line);
    t->input = std::move(input);
    t->name = expect_name();
    if (!is_known_test(t->name)) {
      throw TemplateSyntaxError("unsupported test '" + t->name + "'", line, true);
    }
    if (is_op("(")) {
      parse_arguments(t->args);
    } else if ((cur().type == TokenType::name || cur().type == TokenType::string ||
                cur().type == TokenType::integer || cur().type == TokenType::floating ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("cannot chain multiple tests with 'is'");
      t->args.positional.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return t;
    return std::make_unique<UnaryExpr>(line, "not", std::move(t));
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens) {
  return Parser(tokens).parse();
}

}  // namespace hibana::jinja
