// The expression half of the Jinja parser, lowest precedence first (jinja2's parser.py order).
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_impl.h"

namespace hibana::jinja::parse_detail {

ExprPtr Parser::parse_tuple(bool with_condexpr) {
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

ExprPtr Parser::parse_expression(bool with_condexpr) {
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

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    int line = next().line;
    e = std::make_unique<BinaryExpr>(line, "or", std::move(e), parse_and());
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    int line = next().line;
    e = std::make_unique<BinaryExpr>(line, "and", std::move(e), parse_not());
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    int line = next().line;
    return std::make_unique<UnaryExpr>(line, "not", parse_not());
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
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

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
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

ExprPtr Parser::parse_subscript(ExprPtr node) {
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

void Parser::parse_arguments(Arguments& args) {
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

ExprPtr Parser::parse_call(ExprPtr node) {
  auto call = std::make_unique<CallExpr>(cur().line);
  call->callee = std::move(node);
  parse_arguments(call->args);
  return call;
}

std::unique_ptr<FilterExpr> Parser::parse_filter(ExprPtr input) {
  expect_op("|");
  return parse_filter_named(std::move(input));
}

std::unique_ptr<FilterExpr> Parser::parse_filter_named(ExprPtr input) {
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

ExprPtr Parser::parse_test(ExprPtr input) {
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

}  // namespace hibana::jinja::parse_detail
