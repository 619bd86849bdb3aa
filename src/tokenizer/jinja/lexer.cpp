#include "tokenizer/jinja/lexer.h"

#include <cctype>
#include <cstdlib>

#include "tokenizer/jinja/python_text.h"

namespace hibana::jinja {

namespace {

// jinja2 joins the source's lines with "\n" and drops one trailing newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's str.rstrip() with no argument.
std::string rstrip_whitespace(std::string_view s) {
  return py_strip(s, std::nullopt, false, true);
}

// Length of the whitespace run (Python's \s) starting at pos.
size_t whitespace_run(std::string_view s, size_t pos) {
  size_t end = pos;
  while (end < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[end]);
    if (c < 0x80) {
      if (!py_isspace(c)) break;
      ++end;
      continue;
    }
    std::u32string one = utf8_to_u32(s.substr(end, 4));
    if (one.empty() || !py_isspace(one[0])) break;
    end += u32_to_utf8(one.substr(0, 1)).size();
  }
  return end - pos;
}

// Python's unicode-escape decoding of a string literal's body.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    auto hex = [&](size_t digits) -> char32_t {
      char32_t v = 0;
      for (size_t k = 1; k <= digits; ++k) {
        char h = i + k < body.size() ? body[i + k] : '\0';
        if (!std::isxdigit(static_cast<unsigned char>(h))) {
          throw TemplateSyntaxError("truncated \\x/\\u escape in string literal", line);
        }
        v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                               ? h - '0'
                                               : (std::tolower(h) - 'a' + 10));
      }
      i += digits;
      return v;
    };
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        append_utf8(out, hex(2));
        break;
      case 'u':
        append_utf8(out, hex(4));
        break;
      case 'U':
        append_utf8(out, hex(8));
        break;
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          append_utf8(out, v);
        } else {
          out.push_back('\\');  // Python keeps unknown escapes as written
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t p = find_tag_start(pos_);
      if (p == std::string::npos) {
        emit_data(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      char kind = src_[p + 1];
      char sign =
          p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : '\0';
      std::string text = src_.substr(pos_, p - pos_);
      if (sign == '-') {
        text = rstrip_whitespace(text);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t i = l_pos; i < text.size(); ++i)
            if (text[i] != ' ' && text[i] != '\t') blank = false;
          if (blank) text.resize(l_pos);
        }
      }
      emit_data(text);
      advance_line(p);
      size_t body = p + 2 + (sign ? 1 : 0);
      size_t end;
      if (kind == '#') {
        end = lex_comment(body);
      } else if (kind == '%' && is_raw_begin(body, &end)) {
        end = lex_raw(end);
      } else {
        end = lex_tag(body, kind == '%');
      }
      advance_line(end);
      pos_ = end;
      line_starting = end > 0 && src_[end - 1] == '\n';
    }
    tokens_.push_back(Token{TokenType::eof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  void advance_line(size_t to) {
    for (; line_pos_ < to; ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
  }

  void emit_data(const std::string& text) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::data, text, line_});
  }

  size_t lex_comment(size_t body) {
    size_t q = src_.find("#}", body);
    if (q == std::string::npos) throw TemplateSyntaxError("Missing end of comment tag", line_);
    size_t end = q + 2;
    if (q > body && src_[q - 1] == '-') {
      end += whitespace_run(src_, end);
    } else if (!(q > body && src_[q - 1] == '+') && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  // {% raw %}: the opener may carry -%} (strip what follows); a plain %} keeps the newline.
  bool is_raw_begin(size_t body, size_t* after) const {
    size_t i = body + whitespace_run(src_, body);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    i += whitespace_run(src_, i);
    if (src_.compare(i, 3, "-%}") == 0) {
      *after = i + 3 + whitespace_run(src_, i + 3);
      return true;
    }
    if (src_.compare(i, 2, "%}") == 0) {
      *after = i + 2;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t start) {
    size_t search = start;
    while (true) {
      size_t p = src_.find("{%", search);
      if (p == std::string::npos) throw TemplateSyntaxError("Missing end of raw directive", line_);
      size_t i = p + 2;
      char sign = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i] : '\0';
      if (sign) ++i;
      i += whitespace_run(src_, i);
      if (src_.compare(i, 6, "endraw") != 0) {
        search = p + 2;
        continue;
      }
      i += 6;
      i += whitespace_run(src_, i);
      size_t end;
      if (src_.compare(i, 3, "+%}") == 0) {
        end = i + 3;
      } else if (src_.compare(i, 3, "-%}") == 0) {
        end = i + 3 + whitespace_run(src_, i + 3);
      } else if (src_.compare(i, 2, "%}") == 0) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        search = p + 2;
        continue;
      }
      std::string text = src_.substr(start, p - start);
      if (sign == '-') {
        text = rstrip_whitespace(text);
      } else if (sign != '+') {
        size_t l_pos = text.rfind('\n');
        if (l_pos != std::string::npos) {
          bool blank = true;
          for (size_t k = l_pos + 1; k < text.size(); ++k)
            if (text[k] != ' ' && text[k] != '\t') blank = false;
          if (blank) text.resize(l_pos + 1);
        }
      }
      emit_data(text);
      return end;
    }
  }

  size_t lex_tag(size_t i, bool block) {
    tokens_.push_back(Token{block ? TokenType::block_begin : TokenType::var_begin, "", line_});
    int depth = 0;
    bool after_dot = false;
    while (true) {
      if (i >= src_.size()) throw TemplateSyntaxError("unexpected end of template", line_);
      if (depth == 0) {
        const char* close = block ? "%}" : "}}";
        if (src_.compare(i, 3, std::string("-") + close) == 0) {
          tokens_.push_back(Token{block ? TokenType::block_end : TokenType::var_end, "", line_});
          return i + 3 + whitespace_run(src_, i + 3);
        }
        if (block && src_.compare(i, 3, "+%}") == 0) {
          tokens_.push_back(Token{TokenType::block_end, "", line_});
          return i + 3;
        }
        if (src_.compare(i, 2, close) == 0) {
          tokens_.push_back(Token{block ? TokenType::block_end : TokenType::var_end, "", line_});
          size_t end = i + 2;
          if (block && end < src_.size() && src_[end] == '\n') ++end;
          return end;
        }
      }
      size_t ws = whitespace_run(src_, i);
      if (ws) {
        advance_line(i + ws);
        i += ws;
        continue;
      }
      unsigned char c = static_cast<unsigned char>(src_[i]);
      Token tok{TokenType::op, "", line_};
      if (std::isdigit(c)) {
        i = lex_number(i, after_dot, tok);
      } else if (std::isalpha(c) || c == '_') {
        size_t j = i;
        while (j < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_'))
          ++j;
        tok.type = TokenType::name;
        tok.text = src_.substr(i, j - i);
        i = j;
      } else if (c == '\'' || c == '"') {
        size_t j = i + 1;
        while (j < src_.size() && src_[j] != static_cast<char>(c)) j += src_[j] == '\\' ? 2 : 1;
        if (j >= src_.size()) throw TemplateSyntaxError("unterminated string literal", line_);
        tok.type = TokenType::string;
        tok.text = unescape(std::string_view(src_).substr(i + 1, j - i - 1), line_);
        advance_line(j);
        i = j + 1;
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        bool matched = false;
        for (const char* op : two) {
          if (src_.compare(i, 2, op) == 0) {
            tok.text = op;
            i += 2;
            matched = true;
            break;
          }
        }
        if (!matched) {
          if (std::string_view("+-/*%~[](){}<>=.:|,;").find(static_cast<char>(c)) ==
              std::string_view::npos) {
            throw TemplateSyntaxError(std::string("unexpected char '") + static_cast<char>(c) + "'",
                                      line_);
          }
          tok.text = std::string(1, static_cast<char>(c));
          ++i;
          if (c == '(' || c == '[' || c == '{') ++depth;
          if (c == ')' || c == ']' || c == '}') {
            if (depth == 0) throw TemplateSyntaxError("unexpected '" + tok.text + "'", line_);
            --depth;
          }
        }
      }
      after_dot = tok.type == TokenType::op && tok.text == ".";
      tokens_.push_back(std::move(tok));
    }
  }

  size_t lex_number(size_t i, bool after_dot, Token& tok) {
    auto digits = [&](size_t j) {
      while (j < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[j])) ||
                                 (src_[j] == '_' && j + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[j + 1])))))
        ++j;
      return j;
    };
    size_t j = digits(i);
    bool is_float = false;
    if (!after_dot && j + 1 < src_.size() && src_[j] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
      j = digits(j + 1);
      is_float = true;
    }
    if (!after_dot && j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        j = digits(k);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = i; k < j; ++k)
      if (src_[k] != '_') text.push_back(src_[k]);
    tok.text = text;
    if (is_float) {
      tok.type = TokenType::floating;
      tok.float_value = std::strtod(text.c_str(), nullptr);  // 1e999 is inf, as in Python
    } else {
      tok.type = TokenType::integer;
      try {
        tok.int_value = std::stoll(text);
      } catch (const std::out_of_range&) {
        throw TemplateSyntaxError("integer literal too large: " + text, line_, true);
      }
    }
    return j;
  }

  std::string src_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace hibana::jinja
