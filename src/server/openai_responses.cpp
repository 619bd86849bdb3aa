#include "server/openai_responses.h"

#include <map>

#include "core/log.h"
#include "server/billing_header.h"
#include "server/json_fields.h"
#include "server/openai_common.h"
#include "server/request_options.h"

namespace hibana::server {

namespace {

// ---- request ---------------------------------------------------------------------------------

std::string part_text(const Json& content, const std::string& where) {
  return content_text(content, where,
                      {"input_text", "output_text", "text", "summary_text", "reasoning_text"});
}

class InputReader {
 public:
  explicit InputReader(std::vector<ChatMessage>& messages) : messages_(messages) {}

  void item(const Json& it, const std::string& at) {
    if (!it.is_object()) throw invalid_field(at, "expected an input item object");
    const std::string type = opt_string(it, "type", at).value_or("message");
    if (type == "message") {
      message(it, at);
    } else if (type == "function_call") {
      ToolCall c;
      c.id = req_string(it, "call_id", at);
      c.name = req_string(it, "name", at);
      c.arguments = opt_string(it, "arguments", at).value_or("{}");
      call(std::move(c));
    } else if (type == "custom_tool_call") {
      ToolCall c;
      c.id = req_string(it, "call_id", at);
      c.name = req_string(it, "name", at);
      c.arguments = dump(Json{{"input", opt_string(it, "input", at).value_or("")}});
      call(std::move(c));
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      ChatMessage m;
      m.role = "tool";
      m.tool_call_id = req_string(it, "call_id", at);
      const Json* output = member(it, "output");
      m.content = output ? part_text(*output, at + ".output") : "";
      auto name = names_.find(m.tool_call_id);
      if (name != names_.end()) m.name = name->second;
      messages_.push_back(std::move(m));
    } else if (type == "reasoning") {
      std::string text;
      if (const Json* content = opt_array(it, "content", at))
        text = part_text(*content, at + ".content");
      if (text.empty()) {
        if (const Json* summary = opt_array(it, "summary", at))
          text = part_text(*summary, at + ".summary");
      }
      if (!pending_reasoning_.empty() && !text.empty()) pending_reasoning_ += "\n";
      pending_reasoning_ += text;
    } else if (type == "item_reference") {
      throw invalid_field(at + ".type",
                          "item_reference needs stored responses, which this server does not keep");
    } else {
      log_debug("responses: ignoring input item of type ", type);
    }
  }

 private:
  void message(const Json& it, const std::string& at) {
    const std::string role = req_string(it, "role", at);
    const Json* content = member(it, "content");
    if (!content) throw invalid_field(at + ".content", "is required");
    ChatMessage m;
    m.content = part_text(*content, at + ".content");
    if (role == "user") {
      m.role = "user";
    } else if (role == "system" || role == "developer") {
      m.role = "system";
      m.content = normalize_billing_header(m.content);
    } else if (role == "assistant") {
      ChatMessage& a = assistant(true);
      if (!a.content.empty()) a.content += "\n";
      a.content += m.content;
      return;
    } else {
      throw invalid_field(at + ".role", "unknown role '" + role + "'");
    }
    messages_.push_back(std::move(m));
  }

  void call(ToolCall c) {
    names_[c.id] = c.name;
    assistant(false).tool_calls.push_back(std::move(c));
  }

  // The assistant turn being built: the last message when it is an assistant one (text may be
  // followed by calls, not the other way round), else a new one that takes pending reasoning.
  ChatMessage& assistant(bool for_text) {
    bool reuse = !messages_.empty() && messages_.back().role == "assistant" &&
                 pending_reasoning_.empty() && !(for_text && !messages_.back().tool_calls.empty());
    if (!reuse) {
      ChatMessage m;
      m.role = "assistant";
      m.reasoning = std::move(pending_reasoning_);
      pending_reasoning_.clear();
      messages_.push_back(std::move(m));
    }
    return messages_.back();
  }

  std::vector<ChatMessage>& messages_;
  std::string pending_reasoning_;
  std::map<std::string, std::string> names_;
};

void read_tools(const Json& body, ResponsesRequest& out) {
  ChatRequest& r = out.chat;
  if (const Json* tools = opt_array(body, "tools", "")) {
    Json converted = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) throw invalid_field(at, "expected an object");
      const std::string type = req_string(t, "type", at);
      Json fn = Json::object();
      if (type == "function") {
        fn["name"] = req_string(t, "name", at);
        check_tool_name(fn["name"].get<std::string>(), at + ".name");
        if (auto d = opt_string(t, "description", at)) fn["description"] = *d;
        const Json* params = opt_object(t, "parameters", at);
        fn["parameters"] =
            params ? *params : Json{{"type", "object"}, {"properties", Json::object()}};
      } else if (type == "custom") {
        const std::string name = req_string(t, "name", at);
        check_tool_name(name, at + ".name");
        fn["name"] = name;
        if (auto d = opt_string(t, "description", at)) fn["description"] = *d;
        fn["parameters"] = Json{
            {"type", "object"},
            {"properties", Json{{"input", Json{{"type", "string"},
                                               {"description", "the tool's free-form input"}}}}},
            {"required", Json::array({"input"})}};
        out.custom_tools.insert(name);
      } else {
        log_debug("responses: ignoring tool of type ", type);
        continue;
      }
      converted.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
    }
    if (!converted.empty()) r.tools_json = dump(converted);
  }
  if (const Json* choice = member(body, "tool_choice")) {
    if (choice->is_object() && !choice->contains("name") && !choice->contains("function")) {
      // {"type": "web_search"}-style choices name hosted tools this server does not have.
      throw invalid_field("tool_choice", "names a tool type this server does not offer");
    }
  }
  Json subset = Json::object();
  if (const Json* c = member(body, "tool_choice")) subset["tool_choice"] = *c;
  if (const Json* p = member(body, "parallel_tool_calls")) subset["parallel_tool_calls"] = *p;
  read_openai_tools(subset, r);
}

// ---- response --------------------------------------------------------------------------------

Json responses_usage(const UsageTotals& u) {
  Json j = Json::object();
  j["input_tokens"] = u.prompt_tokens;
  j["input_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}};
  j["output_tokens"] = u.completion_tokens;
  j["output_tokens_details"] = Json{{"reasoning_tokens", u.reasoning_tokens}};
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

Json response_object(const ResponsesInfo& info, const char* status, Json output) {
  Json req = Json::parse(info.request_json.empty() ? "{}" : info.request_json, nullptr, false);
  if (!req.is_object()) req = Json::object();
  auto echo = [&](const char* key, Json fallback) {
    const Json* v = member(req, key);
    return v ? *v : fallback;
  };
  Json j = Json::object();
  j["id"] = info.id;
  j["object"] = "response";
  j["created_at"] = info.created;
  j["status"] = status;
  j["background"] = false;
  j["error"] = nullptr;
  j["incomplete_details"] = nullptr;
  j["instructions"] = echo("instructions", nullptr);
  j["max_output_tokens"] = echo("max_output_tokens", nullptr);
  j["model"] = info.model;
  j["output"] = std::move(output);
  j["parallel_tool_calls"] = echo("parallel_tool_calls", true);
  j["previous_response_id"] = nullptr;
  j["reasoning"] = echo("reasoning", Json{{"effort", nullptr}, {"summary", nullptr}});
  j["store"] = false;
  j["temperature"] = echo("temperature", nullptr);
  j["text"] = echo("text", Json{{"format", Json{{"type", "text"}}}});
  j["tool_choice"] = echo("tool_choice", "auto");
  j["tools"] = echo("tools", Json::array());
  j["top_p"] = echo("top_p", nullptr);
  j["truncation"] = "disabled";
  j["usage"] = nullptr;
  j["user"] = echo("user", nullptr);
  j["metadata"] = echo("metadata", Json::object());
  return j;
}

Json output_text_part(const std::string& text, const std::vector<LogprobEntry>* logprobs) {
  Json p = Json::object();
  p["type"] = "output_text";
  p["text"] = text;
  p["annotations"] = Json::array();
  p["logprobs"] = logprobs ? chat_logprobs(*logprobs) : Json::array();
  return p;
}

Json reasoning_part(const std::string& text) {
  return Json{{"type", "reasoning_text"}, {"text", text}};
}

Json message_item(const std::string& id, const char* status, Json content) {
  return Json{{"id", id},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", std::move(content)}};
}

Json reasoning_item(const std::string& id, Json content) {
  return Json{{"id", id},
              {"type", "reasoning"},
              {"summary", Json::array()},
              {"content", std::move(content)}};
}

Json call_item(const ResponsesInfo& info, const std::string& id, const char* status,
               const std::string& call_id, const std::string& name, const std::string& arguments) {
  if (info.custom_tools.count(name)) {
    Json args = Json::parse(arguments, nullptr, false);
    std::string input = args.is_object() && args.contains("input") && args["input"].is_string()
                            ? args["input"].get<std::string>()
                            : arguments;
    return Json{{"id", id},         {"type", "custom_tool_call"},
                {"status", status}, {"call_id", call_id},
                {"name", name},     {"input", input}};
  }
  return Json{{"id", id},     {"type", "function_call"}, {"status", status}, {"call_id", call_id},
              {"name", name}, {"arguments", arguments}};
}

void finish_status(const ChoiceResult& r, const char*& status, Json& details) {
  status = "completed";
  details = nullptr;
  if (r.finish == FinishKind::length || r.finish == FinishKind::context_window) {
    status = "incomplete";
    details = Json{{"reason", "max_output_tokens"}};
  }
}

class ResponsesStreamEncoder final : public StreamEncoder {
 public:
  explicit ResponsesStreamEncoder(ResponsesInfo info) : info_(std::move(info)) {}

  std::string begin(const UsageTotals&) override {
    Json r = response_object(info_, "in_progress", Json::array());
    std::string out = event("response.created", Json{{"response", r}});
    out += event("response.in_progress", Json{{"response", r}});
    return out;
  }

  std::string update(const GenerationUpdate& u, const ChoiceResult*) override {
    std::string out;
    const ChoiceDelta& d = u.delta;
    if (!d.reasoning.empty()) {
      out += open(Open::reasoning);
      text_ += d.reasoning;
      out += event("response.reasoning_text.delta",
                   item_fields(Json{{"content_index", 0}, {"delta", d.reasoning}}));
    }
    if (!d.content.empty()) {
      out += open(Open::message);
      text_ += d.content;
      Json lp = info_.logprobs ? chat_logprobs(d.logprobs) : Json::array();
      if (info_.logprobs) logprobs_.insert(logprobs_.end(), d.logprobs.begin(), d.logprobs.end());
      out += event("response.output_text.delta",
                   item_fields(Json{{"content_index", 0}, {"delta", d.content}, {"logprobs", lp}}));
    }
    for (const ToolCallDelta& t : d.tool_calls) {
      if (!t.name.empty() || open_ != Open::call) {
        out += close();
        call_id_ = t.id;
        call_name_ = t.name;
        out += open(Open::call);
      }
      if (!t.arguments.empty()) {
        text_ += t.arguments;
        if (!info_.custom_tools.count(call_name_)) {
          out += event("response.function_call_arguments.delta",
                       item_fields(Json{{"delta", t.arguments}}));
        }
      }
    }
    return out;
  }

  std::string end(const std::vector<ChoiceResult>& results, const UsageTotals& usage) override {
    std::string out = close();
    if (output_.empty()) {
      out += open(Open::message);
      out += close();
    }
    const char* status = "completed";
    Json details;
    finish_status(results.at(0), status, details);
    Json r = response_object(info_, status, output_);
    r["incomplete_details"] = details;
    r["usage"] = responses_usage(usage);
    out += event(std::string(status) == "completed" ? "response.completed" : "response.incomplete",
                 Json{{"response", r}});
    return out;
  }

  std::string fail(const ApiError& error) override {
    std::string out = close();
    Json r = response_object(info_, "failed", output_);
    r["error"] = Json{{"code", error.status() >= 500 ? "server_error" : "invalid_request"},
                      {"message", error.what()}};
    return out + event("response.failed", Json{{"response", r}});
  }

 private:
  enum class Open { none, reasoning, message, call };

  std::string event(const std::string& type, Json fields) {
    Json j = Json::object();
    j["type"] = type;
    j["sequence_number"] = seq_++;
    for (auto& [k, v] : fields.items()) j[k] = v;
    return "event: " + type + "\ndata: " + dump(j) + "\n\n";
  }

  Json item_fields(Json extra) {
    Json j = Json{{"item_id", item_id_}, {"output_index", output_index_}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }

  std::string open(Open kind) {
    if (open_ == kind) return {};
    std::string out = close();
    open_ = kind;
    text_.clear();
    logprobs_.clear();
    output_index_ = static_cast<int>(output_.size());
    Json item;
    if (kind == Open::reasoning) {
      item_id_ = random_id("rs_");
      item = reasoning_item(item_id_, Json::array());
    } else if (kind == Open::message) {
      item_id_ = random_id("msg_");
      item = message_item(item_id_, "in_progress", Json::array());
    } else {
      item_id_ = random_id("fc_");
      item = call_item(info_, item_id_, "in_progress", call_id_, call_name_, "");
    }
    out +=
        event("response.output_item.added", Json{{"output_index", output_index_}, {"item", item}});
    if (kind == Open::reasoning) {
      out += event("response.content_part.added",
                   item_fields(Json{{"content_index", 0}, {"part", reasoning_part("")}}));
    } else if (kind == Open::message) {
      out +=
          event("response.content_part.added",
                item_fields(Json{{"content_index", 0}, {"part", output_text_part("", nullptr)}}));
    }
    return out;
  }

  std::string close() {
    if (open_ == Open::none) return {};
    std::string out;
    Json item;
    if (open_ == Open::reasoning) {
      out += event("response.reasoning_text.done",
                   item_fields(Json{{"content_index", 0}, {"text", text_}}));
      out += event("response.content_part.done",
                   item_fields(Json{{"content_index", 0}, {"part", reasoning_part(text_)}}));
      item = reasoning_item(item_id_, Json::array({reasoning_part(text_)}));
    } else if (open_ == Open::message) {
      const std::vector<LogprobEntry>* lp = info_.logprobs ? &logprobs_ : nullptr;
      out += event("response.output_text.done",
                   item_fields(Json{{"content_index", 0},
                                    {"text", text_},
                                    {"logprobs", lp ? chat_logprobs(*lp) : Json::array()}}));
      out += event("response.content_part.done",
                   item_fields(Json{{"content_index", 0}, {"part", output_text_part(text_, lp)}}));
      item = message_item(item_id_, "completed", Json::array({output_text_part(text_, lp)}));
    } else {
      if (!info_.custom_tools.count(call_name_)) {
        out += event("response.function_call_arguments.done",
                     item_fields(Json{{"name", call_name_}, {"arguments", text_}}));
      }
      item = call_item(info_, item_id_, "completed", call_id_, call_name_, text_);
    }
    out +=
        event("response.output_item.done", Json{{"output_index", output_index_}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = Open::none;
    return out;
  }

  ResponsesInfo info_;
  int64_t seq_ = 0;
  Open open_ = Open::none;
  std::string item_id_;
  int output_index_ = 0;
  std::string text_;
  std::vector<LogprobEntry> logprobs_;
  std::string call_id_, call_name_;
  Json output_ = Json::array();
};

}  // namespace

ResponsesRequest parse_responses_request(std::string_view text, const RequestContext& context) {
  Json body = parse_body(text);
  ResponsesRequest out;
  ChatRequest& r = out.chat;
  r.model = opt_string(body, "model", "").value_or("");
  if (member(body, "previous_response_id")) {
    throw invalid_field("previous_response_id",
                        "is not supported: this server does not store responses (send the whole "
                        "conversation as input)");
  }
  out.instructions = opt_string(body, "instructions", "").value_or("");
  if (!out.instructions.empty()) {
    r.messages.push_back({"system", normalize_billing_header(out.instructions), "", {}, "", ""});
  }
  const Json* input = member(body, "input");
  if (!input) throw invalid_field("input", "is required");
  if (input->is_string()) {
    r.messages.push_back({"user", input->get<std::string>(), "", {}, "", ""});
  } else if (input->is_array()) {
    InputReader reader(r.messages);
    for (size_t i = 0; i < input->size(); ++i) {
      reader.item((*input)[i], "input[" + std::to_string(i) + "]");
    }
  } else {
    throw invalid_field("input", "expected a string or an array of input items");
  }
  if (r.messages.empty()) throw invalid_field("input", "holds no messages");

  read_tools(body, out);
  GenerationOptions& g = r.gen;
  read_sampling(body, g);
  g.max_tokens = read_max_tokens(body, "max_output_tokens");
  g.stream = opt_bool(body, "stream", "").value_or(false);
  if (auto top = opt_int(body, "top_logprobs", "")) {
    if (*top < 0 || *top > 20) throw invalid_field("top_logprobs", "must be between 0 and 20");
    g.top_logprobs = static_cast<int32_t>(*top);
  }
  if (const Json* include = opt_array(body, "include", "")) {
    for (const Json& v : *include) {
      if (v.is_string() && v.get<std::string>() == "message.output_text.logprobs" &&
          g.top_logprobs < 0) {
        g.top_logprobs = 0;
      }
    }
  }
  if (const Json* reasoning = opt_object(body, "reasoning", "")) {
    if (auto effort = opt_string(*reasoning, "effort", "reasoning")) {
      r.enable_thinking = thinking_from_effort(*effort);
    }
  }
  if (const Json* t = opt_object(body, "text", "")) {
    read_response_format(opt_object(*t, "format", "text"), "text.format", r);
  }
  if (const Json* kwargs = opt_object(body, "chat_template_kwargs", "")) {
    r.template_kwargs_json = dump(*kwargs);
    if (const Json* t = member(*kwargs, "enable_thinking"); t && t->is_boolean()) {
      r.enable_thinking = t->get<bool>();
    }
  }
  std::string key = opt_string(body, "prompt_cache_key", "").value_or("");
  if (key.empty()) key = opt_string(body, "safety_identifier", "").value_or("");
  if (key.empty()) key = opt_string(body, "user", "").value_or("");
  g.conversation = conversation_key(context.header("X-Claude-Code-Session-Id"), key);

  Json echo = Json::object();
  for (const char* k :
       {"instructions", "max_output_tokens", "parallel_tool_calls", "reasoning", "temperature",
        "text", "tool_choice", "tools", "top_p", "user", "metadata"}) {
    if (const Json* v = member(body, k)) echo[k] = *v;
  }
  out.request_json = dump(echo);
  return out;
}

std::unique_ptr<StreamEncoder> make_responses_stream_encoder(ResponsesInfo info) {
  return std::make_unique<ResponsesStreamEncoder>(std::move(info));
}

std::string encode_responses_response(const ResponsesInfo& info, const ChoiceResult& r,
                                      const UsageTotals& usage) {
  Json output = Json::array();
  if (!r.output.reasoning.empty()) {
    output.push_back(
        reasoning_item(random_id("rs_"), Json::array({reasoning_part(r.output.reasoning)})));
  }
  if (!r.output.content.empty() || r.output.tool_calls.empty()) {
    const std::vector<LogprobEntry>* lp = info.logprobs ? &r.logprobs : nullptr;
    output.push_back(message_item(random_id("msg_"), "completed",
                                  Json::array({output_text_part(r.output.content, lp)})));
  }
  for (const ParsedToolCall& c : r.output.tool_calls) {
    output.push_back(call_item(info, random_id("fc_"), "completed", c.id, c.name, c.arguments));
  }
  const char* status = "completed";
  Json details;
  finish_status(r, status, details);
  Json j = response_object(info, status, std::move(output));
  j["incomplete_details"] = details;
  j["usage"] = responses_usage(usage);
  return dump(j);
}

ApiResponse handle_responses(const ServedModel& model, const RequestContext& context,
                             std::string_view body) {
  ResponsesRequest request = parse_responses_request(body, context);
  ChatRequest& chat = request.chat;
  model.check_model(chat.model);
  PromptPlan prompt = model.chat().build(chat);
  GenerationPlan plan =
      plan_generation(model, chat.gen, std::move(prompt.tokens), pipeline_for(prompt),
                      prompt.checkpoint_at, prompt.constraint, prompt.schema);
  auto gen = std::make_unique<Generation>(*model.service, *model.tokenizer, std::move(plan));

  ResponsesInfo info;
  info.id = random_id("resp_");
  info.created = unix_now();
  info.model = chat.model.empty() ? model.names.front() : chat.model;
  info.logprobs = chat.gen.top_logprobs >= 0;
  info.custom_tools = request.custom_tools;
  info.request_json = request.request_json;
  return respond(
      std::move(gen), chat.gen.stream, make_responses_stream_encoder(info),
      [info](const std::vector<ChoiceResult>& results, const UsageTotals& usage) {
        return encode_responses_response(info, results.at(0), usage);
      },
      context);
}

}  // namespace hibana::server
