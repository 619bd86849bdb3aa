#include "server/anthropic_messages.h"

#include <map>

#include "core/log.h"
#include "server/billing_header.h"
#include "server/json_fields.h"
#include "server/openai_common.h"
#include "server/request_options.h"
#include "tokenizer/json_text.h"

namespace hibana::server {

namespace {

constexpr const char* kSignature = "hibana";  // thinking is not signed; clients need a value
constexpr const char* kImagePlaceholder = "[image omitted: this model reads text only]";

// ---- request ---------------------------------------------------------------------------------

std::string block_type(const Json& block, const std::string& at) {
  if (!block.is_object()) throw invalid_field(at, "expected a content block object");
  return req_string(block, "type", at);
}

// Text of a system / tool_result content: a string or text (and image) blocks.
std::string blocks_text(const Json& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw invalid_field(at, "expected a string or an array of blocks");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string where = at + "[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], where);
    std::string text;
    if (type == "text") {
      text = req_string(content[i], "text", where);
    } else if (type == "image" || type == "document") {
      text = kImagePlaceholder;
    } else {
      log_debug("messages: ignoring ", type, " block in ", at);
      continue;
    }
    if (!out.empty()) out += "\n";
    out += text;
  }
  return out;
}

class MessageReader {
 public:
  explicit MessageReader(std::vector<ChatMessage>& out) : out_(out) {}

  void message(const Json& m, size_t index) {
    const std::string at = "messages[" + std::to_string(index) + "]";
    if (!m.is_object()) throw invalid_field(at, "expected a message object");
    const Json* role_value = member(m, "role");
    if (!role_value || !role_value->is_string()) throw invalid_field(at + ".role", "is required");
    std::string role = role_value->get<std::string>();
    const Json* content = member(m, "content");
    if (!content) throw invalid_field(at + ".content", "is required");
    if (!content->is_string() && !content->is_array()) {
      throw invalid_field(at + ".content", "expected a string or an array of content blocks");
    }
    if (role == "ctx" || role == "msg") role = "user";  // Claude Code >= 2.1.154
    if (role == "system") {
      out_.push_back({"system",
                      normalize_billing_header(blocks_text(*content, at + ".content")),
                      "",
                      {},
                      "",
                      ""});
    } else if (role == "user") {
      user(*content, at + ".content");
    } else if (role == "assistant") {
      assistant(*content, at + ".content");
    } else {
      throw invalid_field(at + ".role", "unknown role '" + role + "'");
    }
  }

 private:
  void user(const Json& content, const std::string& at) {
    if (content.is_string()) {
      out_.push_back({"user", content.get<std::string>(), "", {}, "", ""});
      return;
    }
    // Tool results first (they answer the previous assistant turn), then the user's text.
    std::string text;
    bool has_text = false;
    for (size_t i = 0; i < content.size(); ++i) {
      const std::string where = at + "[" + std::to_string(i) + "]";
      const Json& b = content[i];
      const std::string type = block_type(b, where);
      if (type == "tool_result") {
        ChatMessage t;
        t.role = "tool";
        t.tool_call_id = req_string(b, "tool_use_id", where);
        if (const Json* c = member(b, "content")) t.content = blocks_text(*c, where + ".content");
        if (opt_bool(b, "is_error", where).value_or(false)) t.content = "Error: " + t.content;
        auto name = names_.find(t.tool_call_id);
        if (name != names_.end()) t.name = name->second;
        out_.push_back(std::move(t));
        continue;
      }
      std::string piece;
      if (type == "text") {
        piece = req_string(b, "text", where);
      } else if (type == "image" || type == "document") {
        piece = kImagePlaceholder;
      } else {
        log_debug("messages: ignoring ", type, " block in a user message");
        continue;
      }
      if (has_text) text += "\n";
      text += piece;
      has_text = true;
    }
    if (has_text || content.empty()) out_.push_back({"user", text, "", {}, "", ""});
  }

  void assistant(const Json& content, const std::string& at) {
    ChatMessage m;
    m.role = "assistant";
    if (content.is_string()) {
      m.content = content.get<std::string>();
      out_.push_back(std::move(m));
      return;
    }
    for (size_t i = 0; i < content.size(); ++i) {
      const std::string where = at + "[" + std::to_string(i) + "]";
      const Json& b = content[i];
      const std::string type = block_type(b, where);
      if (type == "text") {
        m.content += req_string(b, "text", where);
      } else if (type == "thinking") {
        if (!m.reasoning.empty()) m.reasoning += "\n";
        m.reasoning += opt_string(b, "thinking", where).value_or("");
      } else if (type == "tool_use") {
        ToolCall c;
        c.id = req_string(b, "id", where);
        c.name = req_string(b, "name", where);
        const Json* input = member(b, "input");
        if (input && !input->is_object())
          throw invalid_field(where + ".input", "expected an object");
        c.arguments = input ? dump(*input) : "{}";
        names_[c.id] = c.name;
        m.tool_calls.push_back(std::move(c));
      } else {
        log_debug("messages: ignoring ", type, " block in an assistant message");
      }
    }
    out_.push_back(std::move(m));
  }

  std::vector<ChatMessage>& out_;
  std::map<std::string, std::string> names_;
};

void read_tools(const Json& body, ChatRequest& r) {
  if (const Json* tools = opt_array(body, "tools", "")) {
    Json converted = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) throw invalid_field(at, "expected an object");
      const std::string type = opt_string(t, "type", at).value_or("custom");
      const Json* schema = opt_object(t, "input_schema", at);
      if (type != "custom" && !schema) {
        log_debug("messages: ignoring server tool ", type);
        continue;
      }
      Json fn = Json::object();
      const std::string name = req_string(t, "name", at);
      check_tool_name(name, at + ".name");
      fn["name"] = name;
      if (auto d = opt_string(t, "description", at)) fn["description"] = *d;
      fn["parameters"] =
          schema ? *schema : Json{{"type", "object"}, {"properties", Json::object()}};
      converted.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
    }
    if (!converted.empty()) r.tools_json = dump(converted);
  }
  if (const Json* choice = opt_object(body, "tool_choice", "")) {
    const std::string type = req_string(*choice, "type", "tool_choice");
    if (type == "auto") {
      r.tool_choice = ToolChoice::automatic;
    } else if (type == "any") {
      r.tool_choice = ToolChoice::required;
    } else if (type == "none") {
      r.tool_choice = ToolChoice::none;
    } else if (type == "tool") {
      r.tool_choice = ToolChoice::named;
      r.tool_choice_name = req_string(*choice, "name", "tool_choice");
    } else {
      throw invalid_field("tool_choice.type", "expected auto, any, tool or none");
    }
    r.parallel_tool_calls =
        !opt_bool(*choice, "disable_parallel_tool_use", "tool_choice").value_or(false);
  }
}

// metadata.user_id: Claude Code sends a JSON string holding device and session ids.
std::string user_key(const Json& body) {
  const Json* metadata = opt_object(body, "metadata", "");
  if (!metadata) return {};
  std::string id = opt_string(*metadata, "user_id", "metadata").value_or("");
  Json parsed = Json::parse(id, nullptr, false);
  if (parsed.is_object()) {
    for (const char* k : {"session_id", "sessionId"}) {
      if (parsed.contains(k) && parsed[k].is_string()) return parsed[k].get<std::string>();
    }
  }
  return id;
}

// ---- response --------------------------------------------------------------------------------

const char* stop_reason(FinishKind kind) {
  switch (kind) {
    case FinishKind::length:
      return "max_tokens";
    case FinishKind::context_window:
      return "model_context_window_exceeded";
    case FinishKind::stop_sequence:
      return "stop_sequence";
    case FinishKind::tool_calls:
      return "tool_use";
    default:
      return "end_turn";
  }
}

Json messages_usage(const UsageTotals& u, bool with_output) {
  Json j = Json::object();
  j["input_tokens"] = u.prompt_tokens - u.cached_tokens;
  j["cache_creation_input_tokens"] = 0;
  j["cache_read_input_tokens"] = u.cached_tokens;
  j["output_tokens"] = with_output ? u.completion_tokens : 0;
  return j;
}

// A tool_use block, its `input` being the call's arguments text itself (made compact), not a
// parse of it: a number that no double holds (an integer past 64 bits, 0.10000000000000000000001)
// reaches the client with the digits the model wrote, as in the streamed input_json_delta. A
// client that reads JSON numbers as doubles rounds it there; one that does not keeps it.
std::string tool_use_block(const ParsedToolCall& c) {
  std::optional<JsonText> input = rewrite_json(c.arguments, kCompactJson);
  const bool object = input && !input->text.empty() && input->text.front() == '{';
  std::string block = dump(Json{{"type", "tool_use"}, {"id", c.id}, {"name", c.name}});
  block.pop_back();  // the closing brace: `input` goes last
  return block + ",\"input\":" + (object ? input->text : std::string("{}")) + "}";
}

std::string sse(const char* type, Json data) {
  Json j = Json::object();
  j["type"] = type;
  for (auto& [k, v] : data.items()) j[k] = v;
  return std::string("event: ") + type + "\ndata: " + dump(j) + "\n\n";
}

class MessagesStreamEncoder final : public StreamEncoder {
 public:
  explicit MessagesStreamEncoder(MessagesInfo info) : info_(std::move(info)) {}

  std::string begin(const UsageTotals& usage) override {
    Json message = Json{{"id", info_.id},           {"type", "message"},
                        {"role", "assistant"},      {"model", info_.model},
                        {"content", Json::array()}, {"stop_reason", nullptr},
                        {"stop_sequence", nullptr}, {"usage", messages_usage(usage, false)}};
    return sse("message_start", Json{{"message", message}}) + sse("ping", Json::object());
  }

  std::string update(const GenerationUpdate& u, const ChoiceResult*) override {
    std::string out;
    const ChoiceDelta& d = u.delta;
    if (!d.reasoning.empty()) {
      out += open(Block::thinking, Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      out += delta(Json{{"type", "thinking_delta"}, {"thinking", d.reasoning}});
    }
    if (!d.content.empty()) {
      out += open(Block::text, Json{{"type", "text"}, {"text", ""}});
      out += delta(Json{{"type", "text_delta"}, {"text", d.content}});
    }
    for (const ToolCallDelta& t : d.tool_calls) {
      if (!t.name.empty() || open_ != Block::tool) {
        out += close();
        out += open(
            Block::tool,
            Json{{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", Json::object()}});
      }
      if (!t.arguments.empty()) {
        out += delta(Json{{"type", "input_json_delta"}, {"partial_json", t.arguments}});
      }
    }
    return out;
  }

  std::string end(const std::vector<ChoiceResult>& results, const UsageTotals& usage) override {
    std::string out = close();
    const ChoiceResult& r = results.at(0);
    Json d =
        Json{{"stop_reason", stop_reason(r.finish)},
             {"stop_sequence", r.stop_sequence.empty() ? Json(nullptr) : Json(r.stop_sequence)}};
    out += sse("message_delta", Json{{"delta", d}, {"usage", messages_usage(usage, true)}});
    out += sse("message_stop", Json::object());
    return out;
  }

  std::string fail(const ApiError& error) override {
    return error_event(ApiFamily::anthropic, error, "");
  }

 private:
  enum class Block { none, thinking, text, tool };

  std::string open(Block kind, Json block) {
    if (open_ == kind && kind != Block::tool) return {};
    std::string out = close();
    open_ = kind;
    return out + sse("content_block_start", Json{{"index", index_}, {"content_block", block}});
  }

  std::string delta(Json d) {
    return sse("content_block_delta", Json{{"index", index_}, {"delta", std::move(d)}});
  }

  std::string close() {
    if (open_ == Block::none) return {};
    std::string out;
    if (open_ == Block::thinking) delta_signature(out);
    out += sse("content_block_stop", Json{{"index", index_}});
    ++index_;
    open_ = Block::none;
    return out;
  }

  void delta_signature(std::string& out) {
    out += delta(Json{{"type", "signature_delta"}, {"signature", kSignature}});
  }

  MessagesInfo info_;
  Block open_ = Block::none;
  int index_ = 0;
};

}  // namespace

ChatRequest parse_messages_request(std::string_view text, const RequestContext& context,
                                   bool count_tokens) {
  Json body = parse_body(text);
  ChatRequest r;
  r.model = opt_string(body, "model", "").value_or("");
  if (const Json* system = member(body, "system")) {
    std::string s = normalize_billing_header(blocks_text(*system, "system"));
    if (!s.empty()) r.messages.push_back({"system", s, "", {}, "", ""});
  }
  const Json* messages = member(body, "messages");
  if (!messages) throw invalid_field("messages", "is required");
  if (!messages->is_array()) throw invalid_field("messages", "expected an array of messages");
  if (messages->empty()) throw invalid_field("messages", "at least one message is required");
  MessageReader reader(r.messages);
  for (size_t i = 0; i < messages->size(); ++i) reader.message((*messages)[i], i);

  read_tools(body, r);
  if (const Json* thinking = opt_object(body, "thinking", "")) {
    const std::string type = req_string(*thinking, "type", "thinking");
    if (type == "enabled" || type == "adaptive") {
      r.enable_thinking = true;
    } else if (type == "disabled") {
      r.enable_thinking = false;
    } else {
      throw invalid_field("thinking.type", "expected enabled, adaptive or disabled");
    }
  }
  if (const Json* oc = opt_object(body, "output_config", "")) {
    read_response_format(opt_object(*oc, "format", "output_config"), "output_config.format", r);
  }
  GenerationOptions& g = r.gen;
  if (!count_tokens) {
    g.max_tokens = read_max_tokens(body, "max_tokens");
    if (!g.max_tokens) throw invalid_field("max_tokens", "is required");
  }
  read_sampling(body, g);
  g.stop = read_stop(body, "stop_sequences");
  g.stream = opt_bool(body, "stream", "").value_or(false);
  g.conversation = conversation_key(context.header("X-Claude-Code-Session-Id"), user_key(body));
  return r;
}

std::unique_ptr<StreamEncoder> make_messages_stream_encoder(MessagesInfo info) {
  return std::make_unique<MessagesStreamEncoder>(std::move(info));
}

std::string encode_messages_response(const MessagesInfo& info, const ChoiceResult& r,
                                     const UsageTotals& usage) {
  // Written as text around the content blocks, whose tool inputs are JSON text (tool_use_block).
  std::string content = "[";
  auto add = [&content](const std::string& block) {
    if (content.size() > 1) content += ',';
    content += block;
  };
  if (!r.output.reasoning.empty()) {
    add(dump(
        Json{{"type", "thinking"}, {"thinking", r.output.reasoning}, {"signature", kSignature}}));
  }
  if (!r.output.content.empty()) add(dump(Json{{"type", "text"}, {"text", r.output.content}}));
  for (const ParsedToolCall& c : r.output.tool_calls) add(tool_use_block(c));
  content += ']';
  std::string head = dump(
      Json{{"id", info.id}, {"type", "message"}, {"role", "assistant"}, {"model", info.model}});
  std::string tail =
      dump(Json{{"stop_reason", stop_reason(r.finish)},
                {"stop_sequence", r.stop_sequence.empty() ? Json(nullptr) : Json(r.stop_sequence)},
                {"usage", messages_usage(usage, true)}});
  head.pop_back();  // '}'
  return head + ",\"content\":" + content + "," + tail.substr(1);
}

ApiResponse handle_messages(const ServedModel& model, const RequestContext& context,
                            std::string_view body) {
  ChatRequest request = parse_messages_request(body, context);
  model.check_model(request.model);
  PromptPlan prompt = model.chat().build(request);
  PipelineOptions pipeline = pipeline_for(prompt);
  pipeline.make_tool_id = [] { return random_id("toolu_"); };
  GenerationPlan plan =
      plan_generation(model, request.gen, std::move(prompt.tokens), std::move(pipeline),
                      prompt.checkpoint_at, prompt.constraint, prompt.schema, prompt.xml_call);
  auto gen = std::make_unique<Generation>(*model.service, *model.tokenizer, std::move(plan));
  MessagesInfo info;
  info.id = random_id("msg_");
  info.model = request.model.empty() ? model.names.front() : request.model;
  return respond(
      std::move(gen), request.gen.stream, make_messages_stream_encoder(info),
      [info](const std::vector<ChoiceResult>& results, const UsageTotals& usage) {
        return encode_messages_response(info, results.at(0), usage);
      },
      context);
}

ApiResponse handle_count_tokens(const ServedModel& model, const RequestContext& context,
                                std::string_view body) {
  ChatRequest request = parse_messages_request(body, context, true);
  model.check_model(request.model);
  PromptPlan prompt = model.chat().build(request);
  ApiResponse response;
  response.body = dump(Json{{"input_tokens", prompt.tokens.size()}});
  return response;
}

}  // namespace hibana::server
