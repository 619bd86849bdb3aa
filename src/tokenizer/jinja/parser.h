// Recursive-descent parser from jinja2 tokens to the syntax tree, with jinja2's operator
// precedence. Filters, tests and tags the engine does not implement are rejected here, at
// compile time, with the construct's name and line.
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace hibana::jinja {

// Throws TemplateSyntaxError.
Body parse_template(const std::vector<Token>& tokens);

}  // namespace hibana::jinja
