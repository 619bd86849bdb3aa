// Errors as each API writes them. Handlers throw ApiError (or hibana::Error, whose kind maps to
// a status); the server renders it in the shape of the API that was called: OpenAI's
// {"error": {message, type, param, code}} or Anthropic's {"type": "error", "error": {type,
// message}, "request_id"}, and as an SSE error event once a stream has started.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hibana::server {

enum class ApiFamily { openai, anthropic };

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string code = {}, std::string param = {})
      : std::runtime_error(message),
        status_(status),
        code_(std::move(code)),
        param_(std::move(param)) {}

  // The prompt does not fit the model's context: 400 with both counts.
  static ApiError context_length(int64_t prompt_tokens, int64_t context_tokens);

  int status() const { return status_; }
  const std::string& code() const { return code_; }    // e.g. "context_length_exceeded"
  const std::string& param() const { return param_; }  // the offending field, when known
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t context_tokens() const { return context_tokens_; }

 private:
  int status_;
  std::string code_;
  std::string param_;
  int64_t prompt_tokens_ = -1;
  int64_t context_tokens_ = -1;
};

// A 400 naming the field: "messages[2].content: expected a string or an array".
ApiError invalid_field(const std::string& field, const std::string& problem);

// Any exception as an ApiError: ApiError itself, hibana::Error by its kind's status, anything
// else as a 500.
ApiError to_api_error(const std::exception& e);

// Error type names: OpenAI ("invalid_request_error", "authentication_error", ...,
// "unavailable_error") and Anthropic ("invalid_request_error", "authentication_error",
// "not_found_error", "request_too_large", "rate_limit_error", "api_error", "overloaded_error").
const char* openai_error_type(int status);
const char* anthropic_error_type(int status);

// The JSON body of an error response.
std::string error_body(ApiFamily family, const ApiError& error, const std::string& request_id);
// The same error as one SSE event (OpenAI: a data line carrying {"error": ...}; Anthropic:
// "event: error").
std::string error_event(ApiFamily family, const ApiError& error, const std::string& request_id);

}  // namespace hibana::server
