// Reading POST /v1/responses bodies: input items (after the stored conversation that
// previous_response_id continues) into chat messages, tools, sampling and the echoed fields.
#include "server/openai_responses.h"

#include <map>

#include "core/log.h"
#include "server/billing_header.h"
#include "server/json_fields.h"
#include "server/openai_common.h"
#include "server/request_options.h"
#include "server/response_store.h"

namespace hibana::server {

namespace {

std::string part_text(const Json& content, const std::string& where) {
  return content_text(content, where,
                      {"input_text", "output_text", "text", "summary_text", "reasoning_text"});
}

// Input items into chat messages. With `paired_outputs`, a tool output must answer a call made
// earlier in the conversation (OpenAI checks this when a request continues a stored response).
class InputReader {
 public:
  InputReader(std::vector<ChatMessage>& messages, bool paired_outputs)
      : messages_(messages), paired_outputs_(paired_outputs) {}

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
      if (name != names_.end()) {
        m.name = name->second;
      } else if (paired_outputs_) {
        throw invalid_field(at + ".call_id", "no tool call found for " + type + " with call_id '" +
                                                 m.tool_call_id + "'");
      }
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
  bool paired_outputs_;
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

// The stored conversation `id` continues: its input items, then its output items. Instructions
// are not among them (a request's own instructions replace the earlier ones).
Json previous_conversation(const std::string& id, ResponseStore* store) {
  if (id.empty()) return Json::array();
  std::shared_ptr<const StoredResponse> stored = store ? store->get(id) : nullptr;
  if (!stored) {
    throw response_not_found(store, id, "previous_response_not_found", "previous_response_id");
  }
  Json items = Json::parse(stored->conversation);
  Json response = Json::parse(stored->response);
  for (const Json& it : response.at("output")) items.push_back(it);
  return items;
}

// The output item of a stored response that an item_reference input item names, to stand in
// its place (and be stored as itself, so a continuation does not depend on that response).
Json referenced_item(const Json& ref, const std::string& at, ResponseStore* store) {
  const std::string id = req_string(ref, "id", at);
  if (std::shared_ptr<const StoredResponse> stored = store ? store->find_item(id) : nullptr) {
    const Json response = Json::parse(stored->response);
    for (const Json& it : response.at("output")) {
      const Json* item_id = member(it, "id");
      if (item_id && item_id->is_string() && item_id->get<std::string>() == id) return it;
    }
  }
  throw invalid_field(at + ".id", "item_reference '" + id +
                                      "': no stored response has an output item with this id (" +
                                      stored_responses_note(store) + ")");
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view text, const RequestContext& context) {
  Json body = parse_body(text);
  ResponsesRequest out;
  ChatRequest& r = out.chat;
  r.model = opt_string(body, "model", "").value_or("");
  out.store = opt_bool(body, "store", "").value_or(true) && context.responses;
  out.instructions = opt_string(body, "instructions", "").value_or("");
  if (!out.instructions.empty()) {
    r.messages.push_back({"system", normalize_billing_header(out.instructions), "", {}, "", ""});
  }
  out.previous_response_id = opt_string(body, "previous_response_id", "").value_or("");
  Json items = previous_conversation(out.previous_response_id, context.responses.get());
  const size_t inherited = items.size();
  const Json* input = member(body, "input");
  if (!input) throw invalid_field("input", "is required");
  if (input->is_string()) {
    items.push_back(Json{{"type", "message"}, {"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& it = (*input)[i];
      const Json* type = member(it, "type");
      items.push_back(
          type && *type == "item_reference"
              ? referenced_item(it, "input[" + std::to_string(i) + "]", context.responses.get())
              : it);
    }
  } else {
    throw invalid_field("input", "expected a string or an array of input items");
  }
  InputReader reader(r.messages, !out.previous_response_id.empty());
  for (size_t i = 0; i < items.size(); ++i) {
    reader.item(items[i], i < inherited ? "previous_response_id '" + out.previous_response_id +
                                              "' item " + std::to_string(i)
                                        : "input[" + std::to_string(i - inherited) + "]");
  }
  if (r.messages.empty()) throw invalid_field("input", "holds no messages");
  if (out.store) out.conversation = dump(items);

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

}  // namespace hibana::server
