// jinja_fuzz: ChatTemplate::compile of arbitrary text, then render with a small fixed
// conversation. Either may throw hibana::Error (a malformed or unsupported template, a template
// that fails while rendering); nothing else may escape, and nothing may crash, hang or blow up.
// Inputs are capped at kMaxTemplateBytes: a template is short, and the cap keeps the fuzzer
// from spending its time on sheer size.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz/checks/check.h"
#include "tokenizer/chat_template.h"

namespace hibana::fuzz {

inline constexpr size_t kMaxTemplateBytes = 4096;

// What a chat request brings: every role, a tool call (arguments as an object), a tool result,
// reasoning, tools with a schema, and the usual flags.
inline const nlohmann::ordered_json& jinja_context() {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris?  <b>é</b>\n"},
      {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
         "arguments": {"location": "Paris", "days": 2, "units": null}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"},
      {"role": "assistant", "content": "<think>\nwarm\n</think>\n\nIt is 21.5 °C."},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Current weather",
      "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "days": {"type": "integer", "enum": [1, 2, 3]}},
        "required": ["location"]}}}],
    "add_generation_prompt": true,
    "enable_thinking": false,
    "bos_token": "<|bos|>",
    "eos_token": "<|im_end|>"
  })");
  return context;
}

inline void check_jinja(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) return;
  const nlohmann::ordered_json& context = jinja_context();
  try {
    const ChatTemplate t = ChatTemplate::compile(std::string(source), "fuzz");
    t.render(context);
  } catch (const Error&) {
  }
}

}  // namespace hibana::fuzz
