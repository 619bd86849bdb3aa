// Splits a template into data and tag tokens the way jinja2's lexer does under transformers'
// settings (trim_blocks, lstrip_blocks, keep_trailing_newline off): whitespace control by
// {%- -%} {{- -}} {#- -#} and +, comments dropped, {% raw %} kept verbatim.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hibana::jinja {

enum class TokenType {
  data,
  var_begin,
  var_end,
  block_begin,
  block_end,
  name,
  string,
  integer,
  floating,
  op,
  eof
};

struct Token {
  TokenType type;
  std::string text;  // data text, name, decoded string literal, or operator
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

// A template the engine cannot compile. `unsupported` tells a valid construct we do not
// implement from a malformed template.
struct TemplateSyntaxError : std::runtime_error {
  TemplateSyntaxError(const std::string& message, int line, bool unsupported = false)
      : std::runtime_error(message), line(line), unsupported(unsupported) {}
  int line;
  bool unsupported;
};

std::vector<Token> lex_template(std::string_view source);

}  // namespace hibana::jinja
