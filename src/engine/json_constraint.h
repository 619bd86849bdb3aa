// Constrains generation to one syntactically valid JSON value (by default an object): a
// byte-level pushdown recogniser checks every candidate token's bytes against the text so far,
// and tokens that cannot continue valid JSON are masked. Used for forced tool calls
// (tool_choice required / named) and JSON response formats.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/logits_processor.h"

namespace hibana {

// The incremental recogniser. feed() returns false (and leaves the state unchanged) when a
// byte cannot continue a valid document.
class JsonRecogniser {
 public:
  explicit JsonRecogniser(bool object_only = true, int max_depth = 64);
  bool feed(char c);
  bool feed(const std::string& bytes);  // all or nothing
  bool complete() const { return done_; }
  // Bytes that would close the open strings, numbers, literals and containers, giving a
  // complete document (empty when complete()); used when generation stops early.
  std::string closing() const;

 private:
  enum class S : uint8_t {
    value,        // expecting a value (whitespace allowed)
    obj_key,      // after '{' or ',' in an object: expecting '"' (or '}' right after '{')
    obj_colon,    // after a key
    obj_next,     // after a member value: ',' or '}'
    arr_next,     // after an element: ',' or ']'
    string,       // inside a string
    escape,       // after '\'
    unicode,      // inside \uXXXX (hex_left digits to go)
    number,       // inside a number (num_ tracks the part)
    literal,      // inside true/false/null
    done,
  };
  bool feed_one(char c);
  bool end_value();  // a value just ended: pop to the container's "next" state
  bool number_can_end() const;

  bool object_only_;
  int max_depth_;
  S state_ = S::value;
  std::vector<char> stack_;  // '{' or '['
  bool in_key_ = false;      // the string being read is an object key
  bool empty_container_ = false;  // just after '{' or '[' (allows immediate close)
  int hex_left_ = 0;
  uint8_t num_ = 0;          // number part: 0 sign, 1 int-first-digit-0, 2 int, 3 dot, 4 frac, 5 e, 6 e-sign, 7 exp
  std::string literal_;      // the literal being matched
  size_t literal_pos_ = 0;
  bool done_ = false;
  int ws_run_ = 0;  // whitespace bytes in a row outside strings
};

// A LogitsProcessor for one JSON document over a tokenizer's vocabulary. token_bytes[i] is the
// byte string of token i; end_tokens are allowed only once the document is complete.
class JsonConstraint final : public LogitsProcessor {
 public:
  JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                 std::vector<int32_t> end_tokens, bool object_only = true);
  void apply(float* logits, int64_t vocab) override;
  void accept(int32_t token) override;
  bool complete() const override { return recogniser_.complete(); }
  std::string closing() const { return recogniser_.closing(); }

 private:
  std::shared_ptr<const std::vector<std::string>> token_bytes_;
  std::vector<int32_t> end_tokens_;
  JsonRecogniser recogniser_;
};

}  // namespace hibana
