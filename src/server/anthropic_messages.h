// Anthropic Messages: POST /v1/messages and /v1/messages/count_tokens. Blocks text, image
// (a placeholder: the model reads text only), tool_use, tool_result, thinking; system as a
// string or blocks; tools (client tools; server tools are ignored) and tool_choice; thinking
// enabled / adaptive / disabled. Claude Code's extras are accepted: role "system" entries
// inside messages, roles "ctx" and "msg" (read as user), cache_control, context_management,
// output_config.effort, metadata.user_id as a JSON string, unknown fields.
//
// Stream: message_start → ping → per block: content_block_start → content_block_delta+
// (thinking_delta..., signature_delta | text_delta | input_json_delta) → content_block_stop →
// message_delta {stop_reason, stop_sequence, usage} → message_stop; a failure after the start
// is an `error` event.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/served_model.h"

namespace hibana::server {

// count_tokens requests have no max_tokens.
ChatRequest parse_messages_request(std::string_view body, const RequestContext& context,
                                   bool count_tokens = false);

struct MessagesInfo {
  std::string id;  // "msg_..."
  std::string model;
};

std::unique_ptr<StreamEncoder> make_messages_stream_encoder(MessagesInfo info);
std::string encode_messages_response(const MessagesInfo& info, const ChoiceResult& result,
                                     const UsageTotals& usage);

ApiResponse handle_messages(const ServedModel& model, const RequestContext& context,
                            std::string_view body);
ApiResponse handle_count_tokens(const ServedModel& model, const RequestContext& context,
                                std::string_view body);

}  // namespace hibana::server
