// Incremental parsing of generated text into reasoning, content and tool calls, for the
// Qwen3 family's formats: <think>…</think> reasoning, and tool calls inside
// <tool_call>…</tool_call> either as JSON ({"name": …, "arguments": {…}}, Qwen3) or as XML
// (<function=NAME><parameter=ARG>VALUE</parameter></function>, Qwen3-Coder, Qwen3.5,
// Nemotron). Both tool-call forms are recognised whatever the model, call by call.
//
// Streaming guarantees: tag text never reaches content or reasoning deltas, even when a tag
// is split across pieces (a possible tag prefix is held back); the argument fragments of a
// call concatenate to valid JSON equal to the final arguments; malformed output (unterminated
// or unknown tags, invalid JSON, unknown function names) never throws and comes out as
// content.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hibana {

// A tool the request offered: its name and the JSON Schema of its arguments (JSON text, ""
// when unknown). XML parameter values are typed by this schema.
struct ToolSpec {
  std::string name;
  std::string parameters_schema;
};

// The tools of an OpenAI-style "tools" array (JSON text): entries {"type": "function",
// "function": {name, parameters}} or bare {name, parameters}. Throws Error(invalid_argument)
// on malformed JSON.
std::vector<ToolSpec> tool_specs_from_json(const std::string& tools_json);

struct ToolCallDelta {
  int index = 0;
  std::string id;         // set on the first delta of a call only
  std::string name;       // set on the first delta of a call only
  std::string arguments;  // a fragment of the arguments' JSON text
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text, json.dumps style: {"a": 1, "b": "x"}
};

struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};

struct OutputParserOptions {
  // Parse <think>…</think>: the output starts inside reasoning (the prompt opened <think>, or
  // the model opens it itself: a leading <think> is skipped). As vLLM's qwen3 parser does, text
  // with no </think> is all reasoning (the output was cut short while thinking), and a
  // <tool_call> that opens a real call ends reasoning implicitly. Newlines next to the tags are
  // dropped (reasoning is stripped of leading/trailing "\n", content of leading "\n" after
  // </think>), which is how the templates write them back into the history.
  bool reasoning = false;
  // Recognise <tool_call> blocks.
  bool tool_calls = false;
  // Tool names accepted and parameter schemas; empty accepts any name, values untyped
  // (XML values stay strings).
  std::vector<ToolSpec> tools;
  // Ids for tool calls; by default "call_" and 24 random letters and digits.
  std::function<std::string()> make_id;
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // Feeds the next piece of decoded text; returns what can be released now.
  OutputDelta push(std::string_view text);
  // End of generation: releases everything held back.
  OutputDelta finish();
  // Everything released so far, accumulated.
  const ParsedOutput& result() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether a rendered prompt leaves a <think> block open (the model continues inside
// reasoning), closed (thinking was switched off: `<think>\n\n</think>\n\n`), or has none after
// the last assistant header.
enum class PromptThinking { none, open, closed };
PromptThinking prompt_thinking_state(std::string_view prompt);

}  // namespace hibana
