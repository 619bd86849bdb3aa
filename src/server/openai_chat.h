// OpenAI Chat Completions: POST /v1/chat/completions. Parsing into a ChatRequest, the
// chat.completion response and the chat.completion.chunk stream:
//
//   data: {choices: [{index, delta: {role: "assistant", content: null}}]}   (one per choice)
//   data: {choices: [{index, delta: {reasoning_content | content | tool_calls}}]} ...
//   data: {choices: [{index, delta: {}, finish_reason}]}                    (one per choice)
//   data: {choices: [], usage: {...}}                       (stream_options.include_usage)
//   data: [DONE]
//
// Every chunk has the same id; no delta carries empty text; a tool call's first delta has
// its id, type and name, later ones only argument fragments.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/served_model.h"

namespace hibana::server {

// Throws ApiError(400) naming the offending field.
ChatRequest parse_chat_request(std::string_view body, const RequestContext& context);

struct ChatResponseInfo {
  std::string id;  // "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool include_usage = false;
  bool logprobs = false;
};

std::unique_ptr<StreamEncoder> make_chat_stream_encoder(ChatResponseInfo info, int n);
std::string encode_chat_response(const ChatResponseInfo& info,
                                 const std::vector<ChoiceResult>& results,
                                 const UsageTotals& usage);

ApiResponse handle_chat_completions(const ServedModel& model, const RequestContext& context,
                                    std::string_view body);

}  // namespace hibana::server
