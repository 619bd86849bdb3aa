#include "server/openai_responses.h"

#include "server/json_fields.h"
#include "server/openai_common.h"

namespace hibana::server {

namespace {

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
  j["previous_response_id"] =
      info.previous_response_id.empty() ? Json(nullptr) : Json(info.previous_response_id);
  j["reasoning"] = echo("reasoning", Json{{"effort", nullptr}, {"summary", nullptr}});
  j["store"] = info.store != nullptr;
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

bool cut_short(const ChoiceResult& r) {
  return r.finish == FinishKind::length || r.finish == FinishKind::context_window;
}

// The status of the item being written when the generation ended (earlier ones completed).
const char* last_item_status(const ChoiceResult& r) {
  return cut_short(r) ? "incomplete" : "completed";
}

// The response once the generation ended: completed, or incomplete when the token limit or
// the context ran out; stored when the request asked for it.
Json final_response(const ResponsesInfo& info, const ChoiceResult& r, Json output,
                    const UsageTotals& usage) {
  const bool incomplete = cut_short(r);
  Json j = response_object(info, incomplete ? "incomplete" : "completed", std::move(output));
  if (incomplete) j["incomplete_details"] = Json{{"reason", "max_output_tokens"}};
  j["usage"] = responses_usage(usage);
  if (info.store) {
    std::vector<std::string> item_ids;
    for (const Json& it : j["output"]) {
      if (it.contains("id") && it["id"].is_string()) item_ids.push_back(it["id"]);
    }
    info.store->put(info.id, {info.conversation, dump(j), std::move(item_ids)});
  }
  return j;
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
    const char* status = last_item_status(results.at(0));
    std::string out = close(status);
    if (output_.empty()) {
      out += open(Open::message);
      out += close(status);
    }
    Json r = final_response(info_, results.at(0), output_, usage);
    out += event(r["status"] == "completed" ? "response.completed" : "response.incomplete",
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

  // Ends the open item; `status` is the message's or call's (reasoning items have none).
  std::string close(const char* status = "completed") {
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
      item = message_item(item_id_, status, Json::array({output_text_part(text_, lp)}));
    } else {
      if (!info_.custom_tools.count(call_name_)) {
        out += event("response.function_call_arguments.done",
                     item_fields(Json{{"name", call_name_}, {"arguments", text_}}));
      }
      item = call_item(info_, item_id_, status, call_id_, call_name_, text_);
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
  if (output.back().contains("status")) output.back()["status"] = last_item_status(r);
  return dump(final_response(info, r, std::move(output), usage));
}

ApiResponse handle_responses(const ServedModel& model, const RequestContext& context,
                             std::string_view body) {
  ResponsesRequest request = parse_responses_request(body, context);
  ChatRequest& chat = request.chat;
  model.check_model(chat.model);
  PromptPlan prompt = model.chat().build(chat);
  GenerationPlan plan =
      plan_generation(model, chat.gen, std::move(prompt.tokens), pipeline_for(prompt),
                      prompt.checkpoint_at, prompt.constraint, prompt.schema, prompt.xml_call);
  auto gen = std::make_unique<Generation>(*model.service, *model.tokenizer, std::move(plan));

  ResponsesInfo info;
  info.id = random_id("resp_");
  info.created = unix_now();
  info.model = chat.model.empty() ? model.names.front() : chat.model;
  info.logprobs = chat.gen.top_logprobs >= 0;
  info.custom_tools = request.custom_tools;
  info.request_json = request.request_json;
  info.previous_response_id = request.previous_response_id;
  if (request.store) {
    info.store = context.responses;
    info.conversation = std::move(request.conversation);
  }
  return respond(
      std::move(gen), chat.gen.stream, make_responses_stream_encoder(info),
      [info](const std::vector<ChoiceResult>& results, const UsageTotals& usage) {
        return encode_responses_response(info, results.at(0), usage);
      },
      context);
}

ApiResponse get_stored_response(ResponseStore* store, const std::string& id) {
  std::shared_ptr<const StoredResponse> stored = store ? store->get(id) : nullptr;
  if (!stored) throw response_not_found(store, id);
  ApiResponse r;
  r.body = stored->response;
  return r;
}

ApiResponse delete_stored_response(ResponseStore* store, const std::string& id) {
  if (!store || !store->remove(id)) throw response_not_found(store, id);
  ApiResponse r;
  r.body = dump(Json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
  return r;
}

}  // namespace hibana::server
