// First stage of output parsing: splits generated text at </think> into reasoning and the
// rest, holding back anything that may be the start of a tag.
#pragma once

#include <string>
#include <string_view>

namespace hibana::parsers {

struct Split {
  std::string reasoning;
  std::string content;  // passed on to the tool-call stage
};

class ReasoningSplitter {
 public:
  // in_reasoning: the output starts inside <think> (else everything is content).
  // tool_calls: a <tool_call> opening a real call (a <function= or { follows) ends reasoning.
  ReasoningSplitter(bool in_reasoning, bool tool_calls);

  Split push(std::string_view text);
  Split finish();

 private:
  enum class Mode { start, reasoning, content };
  void scan(Split& out, bool final);
  void emit_reasoning(Split& out, std::string text, bool closes);
  void emit_content(Split& out, std::string_view text);

  Mode mode_;
  bool tool_calls_;
  std::string buffer_;
  bool reasoning_started_ = false;  // a non-newline reasoning character went out
  std::string held_newlines_;       // trailing "\n" of reasoning, released if more follows
  bool strip_content_newlines_ = false;
};

}  // namespace hibana::parsers
