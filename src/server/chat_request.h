// The request every API adapter produces: a conversation in the shape chat templates expect
// (OpenAI-style messages), tools, and generation options. Adapters translate their API into
// this; the prompt builder and the generation run never see an API's own JSON.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/json_schema.h"
#include "engine/sampler.h"

namespace hibana::server {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text (an object when the client sent one)
};

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::string reasoning;             // assistant: earlier thinking
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
  std::string name;                  // tool: the function's name, when known
};

enum class ToolChoice { automatic, none, required, named };

// Output constrained to JSON (response_format json_object / json_schema).
enum class JsonOutput { none, object, any };

struct GenerationOptions {
  std::optional<int64_t> max_tokens;  // absent: up to the end of the context
  int n = 1;
  SamplingParams sampling;
  // Which sampling fields the request set (the rest come from the model's
  // generation_config.json).
  bool has_temperature = false, has_top_p = false, has_top_k = false, has_min_p = false,
       has_repetition_penalty = false, has_seed = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::map<int32_t, float> logit_bias;
  int32_t top_logprobs = -1;  // -1: no logprobs
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  std::string conversation;  // agent/session key for state reuse
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::string tools_json;  // OpenAI-style [{"type": "function", "function": {...}}], "" for none
  ToolChoice tool_choice = ToolChoice::automatic;
  std::string tool_choice_name;  // for ToolChoice::named
  bool parallel_tool_calls = true;
  std::optional<bool> enable_thinking;  // absent: the template's default
  std::string template_kwargs_json;     // extra template variables (a JSON object), "" for none
  JsonOutput json_output = JsonOutput::none;
  // response_format json_schema's schema, compiled (null: JSON syntax only).
  std::shared_ptr<const JsonSchema> json_schema;
  GenerationOptions gen;
};

}  // namespace hibana::server
