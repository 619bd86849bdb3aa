#include "server/api_error.h"

#include "core/error.h"
#include "server/json_fields.h"

namespace hibana::server {

ApiError ApiError::context_length(int64_t prompt_tokens, int64_t context_tokens) {
  ApiError e(400,
             "This model's maximum context length is " + std::to_string(context_tokens) +
                 " tokens. However, your request has " + std::to_string(prompt_tokens) +
                 " input tokens. Please reduce the length of the input.",
             "context_length_exceeded", "messages");
  e.prompt_tokens_ = prompt_tokens;
  e.context_tokens_ = context_tokens;
  return e;
}

ApiError invalid_field(const std::string& field, const std::string& problem) {
  return ApiError(400, field + ": " + problem, "invalid_value", field);
}

ApiError to_api_error(const std::exception& e) {
  if (const auto* api = dynamic_cast<const ApiError*>(&e)) return *api;
  if (const auto* err = dynamic_cast<const Error*>(&e)) {
    int status = http_status(err->kind());
    if (status == 499) status = 503;  // cancelled by the server (shutting down)
    return ApiError(status, err->what());
  }
  return ApiError(500, std::string("internal error: ") + e.what());
}

const char* openai_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 415:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

namespace {

Json openai_error(const ApiError& e) {
  Json err = Json::object();
  err["message"] = e.what();
  err["type"] = openai_error_type(e.status());
  err["param"] = e.param().empty() ? Json(nullptr) : Json(e.param());
  err["code"] = e.code().empty() ? Json(e.status()) : Json(e.code());
  if (e.prompt_tokens() >= 0) {
    err["n_prompt_tokens"] = e.prompt_tokens();
    err["n_ctx"] = e.context_tokens();
  }
  return err;
}

Json anthropic_error(const ApiError& e, const std::string& request_id) {
  Json inner = Json::object();
  inner["type"] = anthropic_error_type(e.status());
  // Claude Code recognises this wording and compacts the conversation.
  inner["message"] = e.prompt_tokens() >= 0
                         ? "prompt is too long: " + std::to_string(e.prompt_tokens()) +
                               " tokens > " + std::to_string(e.context_tokens()) + " maximum"
                         : std::string(e.what());
  Json body = Json::object();
  body["type"] = "error";
  body["error"] = std::move(inner);
  if (!request_id.empty()) body["request_id"] = request_id;
  return body;
}

}  // namespace

std::string error_body(ApiFamily family, const ApiError& error, const std::string& request_id) {
  if (family == ApiFamily::anthropic) return dump(anthropic_error(error, request_id));
  Json body = Json::object();
  body["error"] = openai_error(error);
  return dump(body);
}

std::string error_event(ApiFamily family, const ApiError& error, const std::string& request_id) {
  if (family == ApiFamily::anthropic) {
    return "event: error\ndata: " + dump(anthropic_error(error, request_id)) + "\n\n";
  }
  Json body = Json::object();
  body["error"] = openai_error(error);
  return "data: " + dump(body) + "\n\n";
}

}  // namespace hibana::server
