#include "engine/json_constraint.h"

#include <cmath>

namespace hibana {

namespace {
bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
}  // namespace

JsonRecogniser::JsonRecogniser(bool object_only, int max_depth)
    : object_only_(object_only), max_depth_(max_depth) {}

bool JsonRecogniser::feed(const std::string& bytes) {
  JsonRecogniser saved = *this;
  for (char c : bytes) {
    if (!feed_one(c)) {
      *this = std::move(saved);
      return false;
    }
  }
  return true;
}

bool JsonRecogniser::feed(char c) {
  JsonRecogniser saved = *this;
  if (feed_one(c)) return true;
  *this = std::move(saved);
  return false;
}

bool JsonRecogniser::end_value() {
  if (stack_.empty()) {
    state_ = S::done;
    done_ = true;
  } else {
    state_ = stack_.back() == '{' ? S::obj_next : S::arr_next;
  }
  empty_container_ = false;
  return true;
}

bool JsonRecogniser::number_can_end() const {
  return num_ == 1 || num_ == 2 || num_ == 4 || num_ == 7;
}

bool JsonRecogniser::feed_one(char c) {
  // Between tokens at most one whitespace byte in a row: a weak model would otherwise fill its
  // whole budget with spaces, which stay valid JSON forever. (Numbers and literals end on
  // whitespace and re-feed it, so they are left to the state they end in.)
  if (state_ != S::string && state_ != S::escape && state_ != S::unicode &&
      state_ != S::number && state_ != S::literal) {
    if (is_ws(c)) {
      if (ws_run_ >= 1) return false;
      ++ws_run_;
    } else {
      ws_run_ = 0;
    }
  }
  switch (state_) {
    case S::done:
      return false;  // one document, nothing after it
    case S::value:
      if (is_ws(c)) return true;
      if (c == ']' && empty_container_ && !stack_.empty() && stack_.back() == '[') {
        stack_.pop_back();
        return end_value();
      }
      if (c == '{' || c == '[') {
        if (c == '[' && object_only_ && stack_.empty()) return false;
        if (static_cast<int>(stack_.size()) >= max_depth_) return false;
        stack_.push_back(c);
        state_ = c == '{' ? S::obj_key : S::value;
        empty_container_ = true;
        return true;
      }
      if (object_only_ && stack_.empty()) return false;
      empty_container_ = false;
      if (c == '"') {
        state_ = S::string;
        in_key_ = false;
        return true;
      }
      if (c == '-' || is_digit(c)) {
        state_ = S::number;
        num_ = c == '-' ? 0 : (c == '0' ? 1 : 2);
        return true;
      }
      if (c == 't' || c == 'f' || c == 'n') {
        literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
        literal_pos_ = 1;
        state_ = S::literal;
        return true;
      }
      return false;
    case S::obj_key:
      if (is_ws(c)) return true;
      if (c == '"') {
        state_ = S::string;
        in_key_ = true;
        empty_container_ = false;
        return true;
      }
      if (c == '}' && empty_container_) {
        stack_.pop_back();
        return end_value();
      }
      return false;
    case S::obj_colon:
      if (is_ws(c)) return true;
      if (c == ':') {
        state_ = S::value;
        empty_container_ = false;
        return true;
      }
      return false;
    case S::obj_next:
    case S::arr_next: {
      if (is_ws(c)) return true;
      const bool obj = state_ == S::obj_next;
      if (c == ',') {
        state_ = obj ? S::obj_key : S::value;
        empty_container_ = false;
        return true;
      }
      if (c == (obj ? '}' : ']')) {
        stack_.pop_back();
        return end_value();
      }
      return false;
    }
    case S::string:
      if (c == '"') {
        if (in_key_) {
          in_key_ = false;
          state_ = S::obj_colon;
          return true;
        }
        return end_value();
      }
      if (c == '\\') {
        state_ = S::escape;
        return true;
      }
      return static_cast<unsigned char>(c) >= 0x20;
    case S::escape:
      if (c == 'u') {
        state_ = S::unicode;
        hex_left_ = 4;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
          c == 't') {
        state_ = S::string;
        return true;
      }
      return false;
    case S::unicode:
      if (!is_hex(c)) return false;
      if (--hex_left_ == 0) state_ = S::string;
      return true;
    case S::number:
      if (is_digit(c)) {
        switch (num_) {
          case 0: num_ = c == '0' ? 1 : 2; return true;
          case 1: return false;  // no leading zeros
          case 3: num_ = 4; return true;
          case 5: case 6: num_ = 7; return true;
          default: return true;  // 2, 4, 7 keep reading digits
        }
      }
      if (c == '.') {
        if (num_ != 1 && num_ != 2) return false;
        num_ = 3;
        return true;
      }
      if (c == 'e' || c == 'E') {
        if (num_ != 1 && num_ != 2 && num_ != 4) return false;
        num_ = 5;
        return true;
      }
      if (c == '+' || c == '-') {
        if (num_ != 5) return false;
        num_ = 6;
        return true;
      }
      if (!number_can_end()) return false;
      end_value();
      return feed_one(c);  // the byte that ended the number belongs to what follows
    case S::literal:
      if (c != literal_[literal_pos_]) return false;
      if (++literal_pos_ == literal_.size()) return end_value();
      return true;
  }
  return false;
}

std::string JsonRecogniser::closing() const {
  JsonRecogniser r = *this;
  std::string out;
  auto add = [&](const std::string& s) {
    for (char c : s) {
      if (r.feed_one(c)) out.push_back(c);
    }
  };
  for (int guard = 0; !r.done_ && guard < 4 * max_depth_ + 16; ++guard) {
    switch (r.state_) {
      case S::string: add("\""); break;
      case S::escape: add("n"); break;
      case S::unicode: add(std::string(r.hex_left_, '0')); break;
      case S::number: add(r.number_can_end() ? (r.stack_.empty() ? "" : " ") : "0"); break;
      case S::literal: add(r.literal_.substr(r.literal_pos_)); break;
      case S::obj_colon: add(":"); break;
      case S::value:
        if (r.empty_container_ && !r.stack_.empty() && r.stack_.back() == '[') {
          add("]");
        } else {
          add(r.stack_.empty() ? "{}" : "null");
        }
        break;
      case S::obj_key: add(r.empty_container_ ? "}" : "\"\""); break;
      case S::obj_next: add("}"); break;
      case S::arr_next: add("]"); break;
      case S::done: break;
    }
    if (r.state_ == S::number && r.number_can_end() && r.stack_.empty()) break;
  }
  return out;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                               std::vector<int32_t> end_tokens, bool object_only)
    : token_bytes_(std::move(token_bytes)),
      end_tokens_(std::move(end_tokens)),
      recogniser_(object_only) {}

void JsonConstraint::apply(float* logits, int64_t vocab) {
  const auto& bytes = *token_bytes_;
  const bool done = recogniser_.complete();
  auto is_end = [&](int64_t t) {
    for (int32_t e : end_tokens_) {
      if (e == t) return true;
    }
    return false;
  };
  int64_t allowed = 0;
  for (int64_t t = 0; t < vocab; ++t) {
    bool ok;
    if (is_end(t)) {
      ok = done;
    } else if (done || t >= static_cast<int64_t>(bytes.size()) || bytes[t].empty()) {
      ok = false;
    } else {
      JsonRecogniser probe = recogniser_;
      ok = probe.feed(bytes[t]);
    }
    if (ok) {
      ++allowed;
    } else {
      logits[t] = -INFINITY;
    }
  }
  if (allowed == 0) {
    // Nothing can continue (a vocabulary without the needed bytes): let an end token through so
    // the request finishes instead of sampling from an all -inf row.
    for (int32_t e : end_tokens_) {
      if (e >= 0 && e < vocab) logits[e] = 0.0f;
    }
  }
}

void JsonConstraint::accept(int32_t token) {
  const auto& bytes = *token_bytes_;
  if (token >= 0 && token < static_cast<int32_t>(bytes.size())) recogniser_.feed(bytes[token]);
}

}  // namespace hibana
