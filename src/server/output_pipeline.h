// What happens to one choice's tokens on their way to the client: detokenize (never splitting
// a UTF-8 character), match stop strings (held back across token boundaries, removed), then
// split reasoning, content and tool calls with the OutputParser. Logprobs ride along with the
// text they produced.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/stop_strings.h"
#include "tokenizer/output_parser.h"
#include "tokenizer/tokenizer.h"

namespace hibana::server {

enum class ReasoningMode {
  off,     // everything is content
  inside,  // the prompt left <think> open: output starts as reasoning
  detect,  // reasoning only if the output itself starts with <think>
};

struct PipelineOptions {
  std::vector<StopString> stops;
  ReasoningMode reasoning = ReasoningMode::off;
  bool parse_tool_calls = false;
  std::vector<ToolSpec> tools;
  // Text the prompt already holds on the model's behalf (a forced "<tool_call>..." opening):
  // the parser sees it before the first token.
  std::string forced_output;
  // Text that closes a JSON-constrained forced call ("}\n</tool_call>") once its JSON is whole:
  // given to the parser when finish() is told the output is complete.
  std::string forced_suffix;
  bool raw = false;       // plain completions: no reasoning or tool-call parsing
  bool logprobs = false;  // keep each token's logprobs (the request asked for them)
  std::function<std::string()> make_tool_id;
};

struct LogprobEntry {
  std::string token;  // the token's text (invalid UTF-8 replaced)
  std::string bytes;  // the token's raw bytes
  float logprob = 0.0f;
  std::vector<LogprobEntry> top;
};

struct ChoiceDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  std::vector<LogprobEntry> logprobs;
  bool has_output() const { return !reasoning.empty() || !content.empty() || !tool_calls.empty(); }
  bool empty() const { return !has_output() && logprobs.empty(); }
};

class OutputPipeline {
 public:
  OutputPipeline(const Tokenizer& tokenizer, PipelineOptions options);
  ~OutputPipeline();
  OutputPipeline(OutputPipeline&&) noexcept;
  OutputPipeline& operator=(OutputPipeline&&) noexcept;

  // What the forced output releases before any token (often nothing).
  ChoiceDelta start();
  // One generated token (with its logprobs when they were asked for). After a stop string
  // matched, tokens are counted but produce nothing.
  ChoiceDelta push(const StreamEvent& token);
  // End of generation: everything held back, then `closing` (the bytes that complete a JSON
  // document the engine cut short: LogitsProcessor::closing()). `complete`: the output is now
  // whole (the engine ended it itself, at the end of turn or a completed constraint, or
  // `closing` completed it), so forced_suffix applies.
  ChoiceDelta finish(bool complete = false, std::string_view closing = {});

  bool stopped() const;  // a stop string matched: the request can end
  const StopString* matched_stop() const;
  const ParsedOutput& result() const;  // accumulated (raw mode: all text is content)
  const std::vector<LogprobEntry>& logprobs() const;
  int64_t tokens() const;            // tokens pushed
  int64_t reasoning_tokens() const;  // of which produced reasoning text

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A token's text for logprobs (invalid UTF-8 replaced).
std::string utf8_lossy(const std::string& bytes);

}  // namespace hibana::server
