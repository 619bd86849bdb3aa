// JSON pieces the OpenAI-style APIs share: usage, logprobs, finish reasons, ids. Internal to
// server/.
#pragma once

#include <string>
#include <vector>

#include "server/chat_request.h"
#include "server/generation.h"
#include "server/json_fields.h"

namespace hibana::server {

// "chatcmpl-" + 24 random letters and digits, etc.
std::string random_id(const std::string& prefix, size_t length = 24);
int64_t unix_now();

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details{cached_tokens},
//  completion_tokens_details{reasoning_tokens}}
Json openai_usage(const UsageTotals& usage);

// Chat logprobs content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}].
Json chat_logprobs(const std::vector<LogprobEntry>& entries);

// stop | length | tool_calls.
const char* openai_finish_reason(FinishKind kind);

// Reads tools ([{type: "function", function: {name, description, parameters}}]) and
// tool_choice / parallel_tool_calls into the request.
void read_openai_tools(const Json& body, ChatRequest& request);

// response_format / text.format / output_config.format: "text", "json_object", or
// "json_schema" (its schema, at json_schema.schema or schema, must be an object or a boolean;
// the output is constrained to syntactically valid JSON, an object unless the schema's type says
// otherwise; the schema's contents are not enforced).
JsonOutput read_response_format(const Json* format, const std::string& field);

// A tool name as the APIs allow it (letters, digits, '_', '-', '.', ':'; 1-128 bytes).
void check_tool_name(const std::string& name, const std::string& field);

}  // namespace hibana::server
