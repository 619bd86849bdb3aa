// Turns a ChatRequest into prompt tokens with the model's chat template, and works out how
// the output must be read: whether it starts inside <think>, which tools the parser accepts,
// and what the prompt already says on the model's behalf (a forced tool call's opening, an
// assistant prefill). Rendering follows transformers' apply_chat_template: tools,
// add_generation_prompt, enable_thinking, bos/eos tokens and any extra template kwargs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/xml_call_recogniser.h"
#include "server/chat_request.h"
#include "server/output_pipeline.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hibana::server {

enum class ToolCallFormat {
  json,  // Qwen3: <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>
  xml,   // Qwen3-Coder / Qwen3.5: <tool_call>\n<function=NAME>\n<parameter=...>
};

struct TemplateInfo {
  std::string source;
  std::string bos_token;
  std::string eos_token;
};

struct PromptPlan {
  std::string text;
  std::vector<int32_t> tokens;
  ReasoningMode reasoning = ReasoningMode::off;
  bool parse_tool_calls = false;
  std::vector<ToolSpec> tools;
  std::string forced_output;               // see PipelineOptions::forced_output
  std::string forced_suffix;               // see PipelineOptions::forced_suffix
  std::vector<StopString> internal_stops;  // e.g. "</tool_call>" when one call is allowed
  // Output constrained to one JSON value: a forced tool call's JSON, or a JSON response format.
  JsonOutput constraint = JsonOutput::none;
  // The JSON Schema that value must satisfy, compiled once for all choices (null: syntax only,
  // an object when constraint is object): the named tool's parameters, {"name": one of the
  // tools, "arguments": its parameters} for a required call, or the response format's schema.
  std::shared_ptr<const JsonSchema> schema;
  // A forced call in the XML form (Qwen3-Coder): the tools it may use, for an XmlCallConstraint
  // in place of the JSON one (constraint is then none).
  std::shared_ptr<const XmlCallSpec> xml_call;
  // Token position where the last user message starts (GenerationRequest::checkpoint_at): the
  // prompt before it is what the conversation's next turns share. -1: none.
  int64_t checkpoint_at = -1;
};

// The output pipeline options a prompt implies (stop strings and sampling come on top).
inline PipelineOptions pipeline_for(const PromptPlan& plan) {
  PipelineOptions o;
  o.stops = plan.internal_stops;
  o.reasoning = plan.reasoning;
  o.parse_tool_calls = plan.parse_tool_calls;
  o.tools = plan.tools;
  o.forced_output = plan.forced_output;
  o.forced_suffix = plan.forced_suffix;
  return o;
}

class PromptBuilder {
 public:
  // Throws Error when the template does not compile.
  PromptBuilder(std::shared_ptr<const Tokenizer> tokenizer, TemplateInfo info);

  // Throws ApiError(400) for requests the template rejects or that contradict themselves
  // (a named tool_choice that names no tool...), and for a forced call whose tool parameters
  // are not a valid JSON Schema.
  PromptPlan build(const ChatRequest& request) const;

  ToolCallFormat tool_call_format() const { return format_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::string render(const ChatRequest& request, bool add_generation_prompt,
                     bool force_no_thinking) const;
  int64_t last_user_position(const ChatRequest& request, const std::string& text,
                             const std::vector<int32_t>& tokens, bool add_generation_prompt,
                             bool force_no_thinking) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  TemplateInfo info_;
  ChatTemplate template_;
  ToolCallFormat format_;
  bool knows_thinking_;
};

// tokenizer_config.json's bos/eos tokens next to the model (strings or {"content": ...}).
TemplateInfo read_template_info(const std::string& model_dir, const Tokenizer& tokenizer);

}  // namespace hibana::server
