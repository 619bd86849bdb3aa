// OpenAI Responses: POST /v1/responses (what Codex CLI speaks). Input items of types message,
// function_call, function_call_output, custom_tool_call(_output) and reasoning become the
// conversation; `instructions` the system message; function and custom tools are offered
// (other tool types are ignored). Responses with `store` (the default) are kept in the
// context's ResponseStore: `previous_response_id` continues one (its conversation and output
// come before the new input; its instructions do not), GET/DELETE /v1/responses/{id} read and
// drop one.
//
// Stream events, each with a sequence_number, in the order Codex expects:
//   response.created → response.in_progress →
//   per output item: response.output_item.added → (message: response.content_part.added →
//     response.output_text.delta* → response.output_text.done → response.content_part.done |
//     reasoning: response.content_part.added → response.reasoning_text.delta* →
//     response.reasoning_text.done → response.content_part.done |
//     function_call: response.function_call_arguments.delta* →
//     response.function_call_arguments.done) → response.output_item.done →
//   response.completed (or response.incomplete when max_output_tokens ran out, or
//   response.failed).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/response_store.h"
#include "server/served_model.h"

namespace hibana::server {

struct ResponsesRequest {
  ChatRequest chat;
  std::string instructions;
  std::set<std::string> custom_tools;  // names of "custom" (free-form input) tools
  std::string request_json;            // echo fields: tools, tool_choice, reasoning, metadata, ...
  std::string previous_response_id;
  bool store = false;        // `store` asked for and the server keeps responses
  std::string conversation;  // with store: every input item as JSON, earlier turns included
};

// Throws a 404 when previous_response_id names no stored response (context.responses).
ResponsesRequest parse_responses_request(std::string_view body, const RequestContext& context);

struct ResponsesInfo {
  std::string id;  // "resp_..."
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  std::set<std::string> custom_tools;
  std::string request_json;  // the parsed request, for the fields a response echoes
  std::string previous_response_id;
  // Set when the response is to be stored: a completed or incomplete response is put there
  // under `id` with `conversation` (ResponsesRequest::conversation) as it is returned.
  std::shared_ptr<ResponseStore> store;
  std::string conversation;
};

std::unique_ptr<StreamEncoder> make_responses_stream_encoder(ResponsesInfo info);
std::string encode_responses_response(const ResponsesInfo& info, const ChoiceResult& result,
                                      const UsageTotals& usage);

ApiResponse handle_responses(const ServedModel& model, const RequestContext& context,
                             std::string_view body);

// GET /v1/responses/{id}: the stored response object; DELETE: {id, object:
// "response.deleted", deleted: true}. 404 when `id` is not stored.
ApiResponse get_stored_response(ResponseStore* store, const std::string& id);
ApiResponse delete_stored_response(ResponseStore* store, const std::string& id);

}  // namespace hibana::server
