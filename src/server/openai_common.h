// JSON pieces the OpenAI-style APIs share: usage, logprobs, finish reasons, ids. Internal to
// server/.
#pragma once

#include <string>
#include <vector>

#include "server/api_error.h"
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

// One server-sent event of an OpenAI stream: "data: <json>\n\n".
std::string openai_sse(const Json& j);
// The end of an OpenAI stream: a chunk (`base` with no choices) carrying the usage when the
// client asked for it (stream_options.include_usage), then "data: [DONE]".
std::string openai_stream_end(Json base, const UsageTotals& usage, bool include_usage);
// A stream that fails after it started: the error event, then "data: [DONE]".
std::string openai_stream_fail(const ApiError& error);

// Reads tools ([{type: "function", function: {name, description, parameters}}]) and
// tool_choice / parallel_tool_calls into the request.
void read_openai_tools(const Json& body, ChatRequest& request);

// response_format / text.format / output_config.format into request.json_output and
// request.json_schema: "text", "json_object" (any JSON object), or "json_schema" (its schema, at
// json_schema.schema or schema, must be an object or a boolean, and is compiled and enforced
// during generation: engine/json_schema.h lists the keywords; unsupported ones accept anything).
// Without a schema, or when the schema says nothing about the top-level type (no type, anyOf,
// oneOf, allOf, enum, const or $ref), the output is an object. A malformed schema ("type": 5,
// a $ref to nothing...) is a 400 naming the keyword's path.
void read_response_format(const Json* format, const std::string& field, ChatRequest& request);

// A tool name as the APIs allow it (letters, digits, '_', '-', '.', ':'; 1-128 bytes).
void check_tool_name(const std::string& name, const std::string& field);

}  // namespace hibana::server
