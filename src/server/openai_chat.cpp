#include "server/openai_chat.h"

#include "server/billing_header.h"
#include "server/json_fields.h"
#include "server/openai_common.h"
#include "server/request_options.h"

namespace hibana::server {

namespace {

std::vector<ToolCall> read_tool_calls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) throw invalid_field(where, "expected an array");
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!c.is_object()) throw invalid_field(at, "expected an object");
    const Json* fn = opt_object(c, "function", at);
    if (!fn) throw invalid_field(at + ".function", "is required");
    ToolCall call;
    call.id = opt_string(c, "id", at).value_or("");
    call.name = req_string(*fn, "name", at + ".function");
    const Json* args = member(*fn, "arguments");
    if (!args) {
      call.arguments = "{}";
    } else if (args->is_string()) {
      call.arguments = args->get<std::string>();
    } else if (args->is_object()) {
      call.arguments = dump(*args);
    } else {
      throw invalid_field(at + ".function.arguments", "expected a JSON string or an object");
    }
    out.push_back(std::move(call));
  }
  return out;
}

ChatMessage read_message(const Json& m, size_t index) {
  const std::string at = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) throw invalid_field(at, "expected a message object");
  const Json* role_value = member(m, "role");
  if (!role_value) throw invalid_field(at + ".role", "is required");
  if (!role_value->is_string()) throw invalid_field(at + ".role", "expected a string");
  const std::string role = role_value->get<std::string>();
  ChatMessage out;
  const Json* content = member(m, "content");
  if (content && !content->is_string() && !content->is_array()) {
    throw invalid_field(at + ".content", "expected a string or an array of content parts");
  }
  if (role == "system" || role == "developer") {
    out.role = "system";
    if (!content) throw invalid_field(at + ".content", "is required");
    out.content =
        normalize_billing_header(content_text(*content, at + ".content", {"text", "input_text"}));
  } else if (role == "user") {
    out.role = "user";
    if (!content) throw invalid_field(at + ".content", "is required");
    out.content = content_text(*content, at + ".content", {"text", "input_text"});
  } else if (role == "assistant") {
    out.role = "assistant";
    if (content) out.content = content_text(*content, at + ".content", {"text", "output_text"});
    out.reasoning = opt_string(m, "reasoning_content", at).value_or("");
    if (out.reasoning.empty()) out.reasoning = opt_string(m, "reasoning", at).value_or("");
    if (const Json* calls = member(m, "tool_calls")) {
      out.tool_calls = read_tool_calls(*calls, at + ".tool_calls");
    }
    if (!content && out.tool_calls.empty()) {
      throw invalid_field(at + ".content", "is required unless tool_calls are given");
    }
  } else if (role == "tool" || role == "function") {
    out.role = "tool";
    if (!content) throw invalid_field(at + ".content", "is required");
    out.content = content_text(*content, at + ".content", {"text", "input_text"});
    out.tool_call_id = opt_string(m, "tool_call_id", at).value_or("");
    out.name = opt_string(m, "name", at).value_or("");
  } else {
    throw invalid_field(at + ".role", "unknown role '" + role + "'");
  }
  return out;
}

Json chunk_base(const ChatResponseInfo& info) {
  Json j = Json::object();
  j["id"] = info.id;
  j["object"] = "chat.completion.chunk";
  j["created"] = info.created;
  j["model"] = info.model;
  j["system_fingerprint"] = nullptr;
  return j;
}

Json tool_call_delta_json(const ToolCallDelta& t) {
  Json j = Json::object();
  j["index"] = t.index;
  Json fn = Json::object();
  if (!t.name.empty()) {
    j["id"] = t.id;
    j["type"] = "function";
    fn["name"] = t.name;
  }
  fn["arguments"] = t.arguments;
  j["function"] = std::move(fn);
  return j;
}

class ChatStreamEncoder final : public StreamEncoder {
 public:
  ChatStreamEncoder(ChatResponseInfo info, int n) : info_(std::move(info)), n_(n) {}

  std::string begin(const UsageTotals&) override {
    std::string out;
    for (int i = 0; i < n_; ++i) {
      Json delta = Json::object();
      delta["role"] = "assistant";
      delta["content"] = nullptr;
      out += choice_chunk(i, std::move(delta), nullptr);
    }
    return out;
  }

  std::string update(const GenerationUpdate& u, const ChoiceResult* result) override {
    std::string out;
    const ChoiceDelta& d = u.delta;
    if (d.has_output() || (info_.logprobs && !d.logprobs.empty())) {
      Json delta = Json::object();
      if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
      if (!d.content.empty()) delta["content"] = d.content;
      if (!d.tool_calls.empty()) {
        Json calls = Json::array();
        for (const ToolCallDelta& t : d.tool_calls) calls.push_back(tool_call_delta_json(t));
        delta["tool_calls"] = std::move(calls);
      }
      Json logprobs = nullptr;
      if (info_.logprobs && !d.logprobs.empty()) {
        logprobs = Json{{"content", chat_logprobs(d.logprobs)}};
      }
      if (!delta.empty() || !logprobs.is_null()) {
        out += choice_chunk(u.choice, std::move(delta), nullptr, std::move(logprobs));
      }
    }
    if (result) out += choice_chunk(u.choice, Json::object(), openai_finish_reason(result->finish));
    return out;
  }

  std::string end(const std::vector<ChoiceResult>&, const UsageTotals& usage) override {
    return openai_stream_end(chunk_base(info_), usage, info_.include_usage);
  }

  std::string fail(const ApiError& error) override { return openai_stream_fail(error); }

 private:
  std::string choice_chunk(int index, Json delta, const char* finish, Json logprobs = nullptr) {
    Json choice = Json::object();
    choice["index"] = index;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = finish ? Json(finish) : Json(nullptr);
    Json j = chunk_base(info_);
    j["choices"] = Json::array({std::move(choice)});
    if (info_.include_usage) j["usage"] = nullptr;
    return openai_sse(j);
  }

  ChatResponseInfo info_;
  int n_;
};

}  // namespace

ChatRequest parse_chat_request(std::string_view text, const RequestContext& context) {
  Json body = parse_body(text);
  ChatRequest r;
  r.model = opt_string(body, "model", "").value_or("");
  const Json* messages = member(body, "messages");
  if (!messages) throw invalid_field("messages", "is required");
  if (!messages->is_array()) throw invalid_field("messages", "expected an array of messages");
  if (messages->empty()) throw invalid_field("messages", "at least one message is required");
  for (size_t i = 0; i < messages->size(); ++i)
    r.messages.push_back(read_message((*messages)[i], i));

  read_openai_tools(body, r);
  read_response_format(opt_object(body, "response_format", ""), "response_format", r);

  GenerationOptions& g = r.gen;
  read_sampling(body, g);
  g.max_tokens = read_max_tokens(body, "max_tokens");
  if (auto m = read_max_tokens(body, "max_completion_tokens")) g.max_tokens = m;
  g.n = read_n(body);
  g.stop = read_stop(body, "stop");
  g.logit_bias = read_logit_bias(body);
  const bool logprobs = opt_bool(body, "logprobs", "").value_or(false);
  auto top = opt_int(body, "top_logprobs", "");
  if (top && (*top < 0 || *top > 20))
    throw invalid_field("top_logprobs", "must be between 0 and 20");
  if (top && *top > 0 && !logprobs) throw invalid_field("top_logprobs", "requires logprobs: true");
  g.top_logprobs = logprobs ? static_cast<int32_t>(top.value_or(0)) : -1;
  g.stream = opt_bool(body, "stream", "").value_or(false);
  if (const Json* so = opt_object(body, "stream_options", "")) {
    g.include_usage = opt_bool(*so, "include_usage", "stream_options").value_or(false);
  }
  std::string key = opt_string(body, "prompt_cache_key", "").value_or("");
  if (key.empty()) key = opt_string(body, "user", "").value_or("");
  g.conversation = conversation_key(context.header("X-Claude-Code-Session-Id"), key);

  if (auto effort = opt_string(body, "reasoning_effort", "")) {
    r.enable_thinking = thinking_from_effort(*effort);
  }
  if (const Json* kwargs = opt_object(body, "chat_template_kwargs", "")) {
    r.template_kwargs_json = dump(*kwargs);
    if (const Json* t = member(*kwargs, "enable_thinking"); t && t->is_boolean()) {
      r.enable_thinking = t->get<bool>();
    }
  }
  return r;
}

std::unique_ptr<StreamEncoder> make_chat_stream_encoder(ChatResponseInfo info, int n) {
  return std::make_unique<ChatStreamEncoder>(std::move(info), n);
}

std::string encode_chat_response(const ChatResponseInfo& info,
                                 const std::vector<ChoiceResult>& results,
                                 const UsageTotals& usage) {
  Json choices = Json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const ChoiceResult& r = results[i];
    Json message = Json::object();
    message["role"] = "assistant";
    const bool calls = !r.output.tool_calls.empty();
    message["content"] = calls && r.output.content.empty() ? Json(nullptr) : Json(r.output.content);
    if (!r.output.reasoning.empty()) message["reasoning_content"] = r.output.reasoning;
    if (calls) {
      Json tc = Json::array();
      for (const ParsedToolCall& c : r.output.tool_calls) {
        tc.push_back(Json{{"id", c.id},
                          {"type", "function"},
                          {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}});
      }
      message["tool_calls"] = std::move(tc);
    }
    Json choice = Json::object();
    choice["index"] = i;
    choice["message"] = std::move(message);
    choice["logprobs"] =
        info.logprobs ? Json{{"content", chat_logprobs(r.logprobs)}} : Json(nullptr);
    choice["finish_reason"] = openai_finish_reason(r.finish);
    choices.push_back(std::move(choice));
  }
  Json j = Json::object();
  j["id"] = info.id;
  j["object"] = "chat.completion";
  j["created"] = info.created;
  j["model"] = info.model;
  j["choices"] = std::move(choices);
  j["usage"] = openai_usage(usage);
  j["system_fingerprint"] = nullptr;
  return dump(j);
}

ApiResponse handle_chat_completions(const ServedModel& model, const RequestContext& context,
                                    std::string_view body) {
  ChatRequest request = parse_chat_request(body, context);
  model.check_model(request.model);
  PromptPlan prompt = model.chat().build(request);
  GenerationPlan plan =
      plan_generation(model, request.gen, std::move(prompt.tokens), pipeline_for(prompt),
                      prompt.checkpoint_at, prompt.constraint, prompt.schema, prompt.xml_call);
  auto gen = std::make_unique<Generation>(*model.service, *model.tokenizer, std::move(plan));

  ChatResponseInfo info;
  info.id = random_id("chatcmpl-");
  info.created = unix_now();
  info.model = request.model.empty() ? model.names.front() : request.model;
  info.include_usage = request.gen.include_usage;
  info.logprobs = request.gen.top_logprobs >= 0;
  const int n = request.gen.n;
  return respond(
      std::move(gen), request.gen.stream, make_chat_stream_encoder(info, n),
      [info](const std::vector<ChoiceResult>& results, const UsageTotals& usage) {
        return encode_chat_response(info, results, usage);
      },
      context);
}

}  // namespace hibana::server
