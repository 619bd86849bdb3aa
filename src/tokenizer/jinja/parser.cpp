#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_impl.h"

namespace hibana::jinja {

namespace parse_detail {

// ---- statements ----

Body Parser::subparse(std::initializer_list<const char*> ends) {
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

void Parser::end_tag(const char* name) {
  if (!is_name(name)) fail(std::string("expected '") + name + "'");
  next();
  expect_block_end();
}

StmtPtr Parser::parse_statement() {
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

StmtPtr Parser::parse_if(int line) {
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

Target Parser::parse_target(bool allow_namespace) {
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

StmtPtr Parser::parse_for(int line) {
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

StmtPtr Parser::parse_set(int line) {
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

std::vector<MacroParam> Parser::parse_params() {
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

StmtPtr Parser::parse_macro(int line) {
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

StmtPtr Parser::parse_call_block(int line) {
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

StmtPtr Parser::parse_filter_block(int line) {
  auto stmt = std::make_unique<FilterBlockStmt>(line);
  stmt->filters.push_back(parse_filter_named(nullptr));
  while (is_op("|")) stmt->filters.push_back(parse_filter(nullptr));
  expect_block_end();
  stmt->body = subparse({"endfilter"});
  end_tag("endfilter");
  return stmt;
}

}  // namespace parse_detail

Body parse_template(const std::vector<Token>& tokens) {
  return parse_detail::Parser(tokens).parse();
}

}  // namespace hibana::jinja
