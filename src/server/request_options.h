// Fields the OpenAI and Anthropic request bodies share (sampling, stop, n, logprobs,
// logit_bias, vLLM's extensions), read into GenerationOptions with errors naming the field.
// Internal to server/.
#pragma once

#include <string>

#include "server/chat_request.h"
#include "server/json_fields.h"

namespace hibana::server {

// temperature, top_p, top_k (-1 = off), min_p, presence/frequency/repetition penalties, seed,
// and the vLLM extensions ignore_eos and stop_token_ids.
void read_sampling(const Json& body, GenerationOptions& options);

// A stop field given as a string or an array of strings.
std::vector<std::string> read_stop(const Json& body, const char* key);

// n in [1, 16].
int read_n(const Json& body);

// {"token id": bias in [-100, 100]}.
std::map<int32_t, float> read_logit_bias(const Json& body);

// A positive max_tokens-like field (400 for <= 0); absent stays absent.
std::optional<int64_t> read_max_tokens(const Json& body, const char* key);

// enable_thinking from an OpenAI reasoning effort: "none"/"minimal" -> false, else true.
std::optional<bool> thinking_from_effort(const std::string& effort);

// The conversation key: X-Claude-Code-Session-Id when present, else `fallback`.
std::string conversation_key(const std::string& session_header, const std::string& fallback);

}  // namespace hibana::server
