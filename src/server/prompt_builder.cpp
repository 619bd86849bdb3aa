#include "server/prompt_builder.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/json_fields.h"

namespace hibana::server {

namespace {

// Templates index tool-call arguments as a mapping (`arguments | items`, `arguments is
// mapping`), so JSON-object text becomes an object; anything else stays the string it was.
Json arguments_value(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_object()) return j;
  return text;
}

// A tool's parameters as a JSON document (true when it has none).
Json parameters_json(const ToolSpec& t) {
  if (t.parameters_schema.empty()) return Json(true);
  Json j = Json::parse(t.parameters_schema, nullptr, false);
  return j.is_discarded() ? Json(true) : j;
}

ApiError bad_parameters(const std::string& tool, const std::string& problem) {
  return invalid_field("tools",
                       "the parameters of '" + tool + "' are not a usable JSON Schema: " + problem);
}

// What a forced JSON tool call must satisfy: the named tool's parameters (an object), or for
// `required` {"name": NAME, "arguments": that tool's parameters} for one of the tools.
std::shared_ptr<const JsonSchema> forced_call_schema(const std::vector<ToolSpec>& tools,
                                                     const std::string& named) {
  if (!named.empty()) {
    for (const ToolSpec& t : tools) {
      if (t.name != named) continue;
      try {
        return JsonSchema::compile(parameters_json(t), true);
      } catch (const JsonSchemaError& e) {
        throw bad_parameters(t.name, e.what());
      }
    }
    return nullptr;
  }
  std::vector<std::pair<std::string, Json>> variants;
  for (const ToolSpec& t : tools) variants.emplace_back(t.name, parameters_json(t));
  try {
    return JsonSchema::tagged_union("name", "arguments", variants, true);
  } catch (const JsonSchemaError& e) {
    throw bad_parameters(e.path(), e.problem());
  }
}

// A name that the XML parser reads back as written.
bool xml_name(const std::string& name) {
  return !name.empty() && name.find_first_of("<>\n") == std::string::npos && name.front() != ' ' &&
         name.back() != ' ';
}

// What a forced XML tool call may use: the named tool, or for `required` each tool whose name
// the XML form can carry. Null when no tool can be written.
std::shared_ptr<const XmlCallSpec> forced_xml_call(const std::vector<ToolSpec>& tools,
                                                   const std::string& named) {
  auto spec = std::make_shared<XmlCallSpec>();
  spec->named = !named.empty();
  for (const ToolSpec& t : tools) {
    if ((spec->named && t.name != named) || !xml_name(t.name)) continue;
    try {
      spec->tools.push_back(xml_tool_spec(t.name, parameters_json(t)));
    } catch (const JsonSchemaError& e) {
      throw bad_parameters(t.name, e.what());
    }
  }
  if (spec->tools.empty() || spec->tools.size() > 65535) return nullptr;
  return spec;
}

Json message_json(const ChatMessage& m) {
  Json j = Json::object();
  j["role"] = m.role;
  j["content"] = m.content;
  if (!m.reasoning.empty()) j["reasoning_content"] = m.reasoning;
  if (!m.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& c : m.tool_calls) {
      Json fn = Json::object();
      fn["name"] = c.name;
      fn["arguments"] = arguments_value(c.arguments);
      Json call = Json::object();
      call["id"] = c.id;
      call["type"] = "function";
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    j["tool_calls"] = std::move(calls);
  }
  if (m.role == "tool") {
    j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
  }
  return j;
}

bool has_late_system(const std::vector<ChatMessage>& messages) {
  for (size_t i = 1; i < messages.size(); ++i) {
    if (messages[i].role == "system") return true;
  }
  return false;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string token_text(const Json& config, const char* key) {
  const Json* v = member(config, key);
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() && v->contains("content") && (*v)["content"].is_string()) {
    return (*v)["content"].get<std::string>();
  }
  return {};
}

}  // namespace

TemplateInfo read_template_info(const std::string& model_dir, const Tokenizer& tokenizer) {
  TemplateInfo info;
  info.source = tokenizer.chat_template();
  if (info.source.empty()) {
    try {
      info.source = read_chat_template(model_dir);
    } catch (const Error&) {
      // No template: chat endpoints answer 400, plain completions still work.
    }
  }
  namespace fs = std::filesystem;
  fs::path cfg = fs::path(model_dir) / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(cfg, ec)) {
    Json j = Json::parse(read_file(cfg), nullptr, false);
    if (j.is_object()) {
      info.bos_token = token_text(j, "bos_token");
      info.eos_token = token_text(j, "eos_token");
    }
  }
  return info;
}

PromptBuilder::PromptBuilder(std::shared_ptr<const Tokenizer> tokenizer, TemplateInfo info)
    : tokenizer_(std::move(tokenizer)),
      info_(std::move(info)),
      template_(ChatTemplate::compile(info_.source, "chat template")),
      format_(info_.source.find("<function=") != std::string::npos ? ToolCallFormat::xml
                                                                   : ToolCallFormat::json),
      knows_thinking_(info_.source.find("<think>") != std::string::npos ||
                      tokenizer_->token_id("<think>").has_value()) {}

std::string PromptBuilder::render(const ChatRequest& request, bool add_generation_prompt,
                                  bool force_no_thinking) const {
  Json ctx = Json::object();
  if (!request.template_kwargs_json.empty()) {
    Json kwargs = Json::parse(request.template_kwargs_json, nullptr, false);
    if (kwargs.is_object()) {
      for (auto& [k, v] : kwargs.items()) ctx[k] = v;
    }
  }
  Json messages = Json::array();
  for (const ChatMessage& m : request.messages) messages.push_back(message_json(m));
  ctx["messages"] = std::move(messages);
  if (request.tool_choice != ToolChoice::none && !request.tools_json.empty()) {
    Json tools = Json::parse(request.tools_json, nullptr, false);
    if (tools.is_array() && !tools.empty()) ctx["tools"] = std::move(tools);
  }
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (force_no_thinking) {
    ctx["enable_thinking"] = false;
  } else if (request.enable_thinking) {
    ctx["enable_thinking"] = *request.enable_thinking;
  }
  if (!ctx.contains("bos_token")) ctx["bos_token"] = info_.bos_token;
  if (!ctx.contains("eos_token")) ctx["eos_token"] = info_.eos_token;
  return template_.render(ctx);
}

PromptPlan PromptBuilder::build(const ChatRequest& input) const {
  if (input.messages.empty()) throw invalid_field("messages", "at least one message is required");
  ChatRequest request = input;
  PromptPlan plan;

  if (request.tool_choice != ToolChoice::none && !request.tools_json.empty()) {
    plan.tools = tool_specs_from_json(request.tools_json);
  }
  // With a single tool, "required" can only mean that tool.
  if (request.tool_choice == ToolChoice::required && plan.tools.size() == 1) {
    request.tool_choice = ToolChoice::named;
    request.tool_choice_name = plan.tools[0].name;
  }
  const bool forced =
      request.tool_choice == ToolChoice::required || request.tool_choice == ToolChoice::named;
  if (forced && plan.tools.empty()) {
    throw invalid_field("tool_choice", "a required or named tool choice needs tools");
  }
  if (request.tool_choice == ToolChoice::named) {
    bool found = false;
    for (const ToolSpec& t : plan.tools) found = found || t.name == request.tool_choice_name;
    if (!found) {
      throw invalid_field("tool_choice", "names the tool '" + request.tool_choice_name +
                                             "', which is not in tools");
    }
  }

  // A final assistant message is a prefill: the model continues it.
  std::string prefill;
  if (request.messages.back().role == "assistant" && request.messages.back().tool_calls.empty()) {
    prefill = request.messages.back().content;
    if (prefill.empty()) request.messages.pop_back();
    if (request.messages.empty())
      throw invalid_field("messages", "has only an empty assistant message");
  }
  const bool use_prefill = !prefill.empty();
  const bool force_call = forced && !use_prefill;
  const bool json_output = request.json_output != JsonOutput::none;
  // Constrained output starts at the first token: no room for thinking first.
  const bool no_thinking = force_call || json_output;

  auto render_any = [&](bool add_generation_prompt) {
    try {
      return render(request, add_generation_prompt, no_thinking);
    } catch (const Error& e) {
      // Some templates refuse system messages after the first; Claude Code sends them.
      if (!has_late_system(request.messages)) throw ApiError(400, e.what());
      ChatRequest retry = request;
      for (size_t i = 1; i < retry.messages.size(); ++i) {
        if (retry.messages[i].role == "system") retry.messages[i].role = "user";
      }
      log_debug("chat template refused a late system message (", e.what(), "); sent as user");
      try {
        return render(retry, add_generation_prompt, no_thinking);
      } catch (const Error& e2) {
        throw ApiError(400, e2.what());
      }
    }
  };
  plan.text = render_any(!use_prefill);
  const std::string rendered = plan.text;
  if (use_prefill) {
    size_t at = plan.text.rfind(prefill);
    if (at == std::string::npos) {
      throw invalid_field("messages",
                          "the final assistant message cannot be continued: the chat "
                          "template changes its text");
    }
    plan.text.resize(at + prefill.size());
  }

  const PromptThinking thinking =
      knows_thinking_ ? prompt_thinking_state(plan.text) : PromptThinking::none;
  if (force_call) {
    if (thinking == PromptThinking::open) plan.text += "\n</think>\n\n";
    std::string prefix = "<tool_call>\n";
    if (request.tool_choice == ToolChoice::named) {
      if (format_ == ToolCallFormat::xml) {
        prefix += "<function=" + request.tool_choice_name + ">\n";
      } else {
        prefix += "{\"name\": " + dump(Json(request.tool_choice_name)) + ", \"arguments\": ";
      }
    }
    plan.text += prefix;
    plan.forced_output = prefix;
    plan.reasoning = ReasoningMode::off;
    if (format_ == ToolCallFormat::json) {
      // The engine keeps the call's JSON well-formed and valid for the tools' parameters, and
      // ends it; the parser gets the closing.
      plan.constraint = JsonOutput::object;
      plan.schema = forced_call_schema(
          plan.tools, request.tool_choice == ToolChoice::named ? request.tool_choice_name : "");
      plan.forced_suffix =
          request.tool_choice == ToolChoice::named ? "}\n</tool_call>" : "\n</tool_call>";
    } else {
      // The XML form: the engine keeps the function, its parameters and their values valid for
      // the tools, and ends the call at "</function>".
      plan.xml_call = forced_xml_call(
          plan.tools, request.tool_choice == ToolChoice::named ? request.tool_choice_name : "");
      if (plan.xml_call) plan.forced_suffix = "\n</tool_call>";
    }
  } else if (json_output) {
    if (thinking == PromptThinking::open) plan.text += "\n</think>\n\n";
    plan.constraint = request.json_output;
    plan.schema = request.json_schema;
    plan.reasoning = ReasoningMode::off;
  } else if (thinking == PromptThinking::open) {
    plan.reasoning = ReasoningMode::inside;
  } else if (thinking == PromptThinking::none && knows_thinking_) {
    plan.reasoning = ReasoningMode::detect;
  }
  plan.parse_tool_calls = !plan.tools.empty();
  if (plan.parse_tool_calls && !request.parallel_tool_calls) {
    plan.internal_stops.push_back({"</tool_call>", true});
  }
  plan.tokens = tokenizer_->encode(plan.text, true);
  plan.checkpoint_at =
      last_user_position(request, rendered, plan.tokens, !use_prefill, no_thinking);
  return plan;
}

int64_t PromptBuilder::last_user_position(const ChatRequest& request, const std::string& text,
                                          const std::vector<int32_t>& tokens,
                                          bool add_generation_prompt,
                                          bool force_no_thinking) const {
  // Render again with the last user message's text replaced: the two renderings agree up to
  // where that text starts, whatever the template writes around messages.
  int64_t last = -1;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    if (request.messages[i].role == "user") last = static_cast<int64_t>(i);
  }
  if (last < 0) return -1;
  ChatRequest probe = request;
  probe.messages[static_cast<size_t>(last)].content = "\x01\x02hibana";
  std::string other;
  try {
    other = render(probe, add_generation_prompt, force_no_thinking);
  } catch (const std::exception&) {
    return -1;
  }
  size_t same = 0;
  while (same < text.size() && same < other.size() && text[same] == other[same]) ++same;
  if (same == 0 || same >= text.size()) return -1;
  // Tokens of that prefix that the full prompt starts with (the last one may merge across the
  // cut, so it is not counted).
  std::vector<int32_t> head = tokenizer_->encode(std::string_view(text).substr(0, same), true);
  size_t agree = 0;
  while (agree < head.size() && agree < tokens.size() && head[agree] == tokens[agree]) ++agree;
  return agree > 1 ? static_cast<int64_t>(agree) - 1 : -1;
}

}  // namespace hibana::server
