#include "server/openai_common.h"

#include <cctype>
#include <chrono>
#include <random>

#include "server/chat_request.h"

namespace hibana::server {

std::string random_id(const std::string& prefix, size_t length) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (size_t i = 0; i < length; ++i) id += alphabet[rng() % (sizeof(alphabet) - 1)];
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json openai_usage(const UsageTotals& u) {
  Json j = Json::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}};
  j["completion_tokens_details"] = Json{{"reasoning_tokens", u.reasoning_tokens}};
  return j;
}

namespace {

Json byte_array(const std::string& bytes) {
  Json a = Json::array();
  for (unsigned char c : bytes) a.push_back(static_cast<int>(c));
  return a;
}

}  // namespace

Json chat_logprobs(const std::vector<LogprobEntry>& entries) {
  Json content = Json::array();
  for (const LogprobEntry& e : entries) {
    Json j = Json::object();
    j["token"] = e.token;
    j["logprob"] = e.logprob;
    j["bytes"] = byte_array(e.bytes);
    Json top = Json::array();
    for (const LogprobEntry& t : e.top) {
      top.push_back(
          Json{{"token", t.token}, {"logprob", t.logprob}, {"bytes", byte_array(t.bytes)}});
    }
    j["top_logprobs"] = std::move(top);
    content.push_back(std::move(j));
  }
  return content;
}

const char* openai_finish_reason(FinishKind kind) {
  switch (kind) {
    case FinishKind::length:
    case FinishKind::context_window:
      return "length";
    case FinishKind::tool_calls:
      return "tool_calls";
    default:
      return "stop";
  }
}

void check_tool_name(const std::string& name, const std::string& field) {
  if (name.empty() || name.size() > 128) throw invalid_field(field, "must be 1 to 128 characters");
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ':')) {
      throw invalid_field(field,
                          "'" + name + "' may only hold letters, digits, '_', '-', '.', ':'");
    }
  }
}

void read_openai_tools(const Json& body, ChatRequest& request) {
  if (const Json* tools = opt_array(body, "tools", "")) {
    Json out = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) throw invalid_field(where, "expected an object");
      std::string type = opt_string(t, "type", where).value_or("function");
      if (type != "function")
        throw invalid_field(where + ".type", "unsupported tool type '" + type + "'");
      const Json* fn = opt_object(t, "function", where);
      if (!fn) throw invalid_field(where + ".function", "is required");
      check_tool_name(req_string(*fn, "name", where + ".function"), where + ".function.name");
      opt_string(*fn, "description", where + ".function");
      opt_object(*fn, "parameters", where + ".function");
      out.push_back(t);
    }
    if (!out.empty()) request.tools_json = dump(out);
  }
  if (const Json* choice = member(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "auto") {
        request.tool_choice = ToolChoice::automatic;
      } else if (c == "none") {
        request.tool_choice = ToolChoice::none;
      } else if (c == "required") {
        request.tool_choice = ToolChoice::required;
      } else {
        throw invalid_field("tool_choice", "expected auto, none, required or a function");
      }
    } else if (choice->is_object()) {
      // {"type": "function", "function": {"name": ...}} (Chat) or {"type": "function", "name"}
      // (Responses).
      const Json* fn = opt_object(*choice, "function", "tool_choice");
      std::string name = fn ? req_string(*fn, "name", "tool_choice.function")
                            : req_string(*choice, "name", "tool_choice");
      request.tool_choice = ToolChoice::named;
      request.tool_choice_name = name;
    } else {
      throw invalid_field("tool_choice", "expected a string or an object");
    }
  }
  request.parallel_tool_calls = opt_bool(body, "parallel_tool_calls", "").value_or(true);
}

void read_response_format(const Json* format, const std::string& field, ChatRequest& request) {
  request.json_output = JsonOutput::none;
  request.json_schema = nullptr;
  if (!format) return;
  if (!format->is_object()) throw invalid_field(field, "expected an object");
  std::string type = opt_string(*format, "type", field).value_or("text");
  if (type == "text") return;
  request.json_output = JsonOutput::object;
  if (type == "json_object") return;
  if (type != "json_schema") throw invalid_field(field + ".type", "unknown type '" + type + "'");
  const Json* holder = format;
  std::string where = field;
  if (const Json* js = member(*format, "json_schema")) {
    if (!js->is_object()) throw invalid_field(field + ".json_schema", "expected an object");
    holder = js;
    where = field + ".json_schema";
  }
  const Json* schema = member(*holder, "schema");
  if (!schema) return;
  if (!schema->is_object() && !schema->is_boolean()) {
    throw invalid_field(where + ".schema", "expected a JSON Schema object");
  }
  bool typed = schema->is_boolean();
  for (const char* k : {"type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref"}) {
    typed = typed || schema->contains(k);
  }
  const Json* t = schema->is_object() ? member(*schema, "type") : nullptr;
  const bool object = !typed || (t && t->is_string() && t->get<std::string>() == "object");
  request.json_output = object ? JsonOutput::object : JsonOutput::any;
  try {
    request.json_schema = JsonSchema::compile(*schema, !typed);
  } catch (const JsonSchemaError& e) {
    throw invalid_field(e.path().empty() ? where + ".schema" : where + ".schema." + e.path(),
                        e.problem());
  }
}

std::string openai_sse(const Json& j) {
  return "data: " + dump(j) + "\n\n";
}

std::string openai_stream_end(Json base, const UsageTotals& usage, bool include_usage) {
  std::string out;
  if (include_usage) {
    base["choices"] = Json::array();
    base["usage"] = openai_usage(usage);
    out += openai_sse(base);
  }
  return out + "data: [DONE]\n\n";
}

std::string openai_stream_fail(const ApiError& error) {
  return error_event(ApiFamily::openai, error, "") + "data: [DONE]\n\n";
}

}  // namespace hibana::server
