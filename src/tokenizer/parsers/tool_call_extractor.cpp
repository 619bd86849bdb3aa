#include "tokenizer/parsers/tool_call_extractor.h"

#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/python_text.h"
#include "tokenizer/json_text.h"
#include "tokenizer/parsers/parameter_value.h"
#include "tokenizer/parsers/text_scan.h"

namespace hibana::parsers {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";
constexpr size_t kMaxNameLength = 256;

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The arguments as json.dumps writes them, but with each number's text as the model wrote it:
// parsed (`args`), an integer past 64 bits or a long fraction would come back as a double.
// `source` holds the arguments object itself (key "") or the call object with it under `key`.
// A null member is {}; an object with a repeated key is written from `args` (one value each).
std::string arguments_text(std::string_view source, std::string_view key, const json& args) {
  std::optional<JsonText> text = rewrite_json(source);
  std::optional<std::string_view> value;
  if (text) value = key.empty() ? std::string_view(text->text) : text->member(key);
  if (value && *value != "null") return std::string(*value);
  return jinja::python_json_dumps(args);
}

}  // namespace

ToolCallExtractor::ToolCallExtractor(const std::vector<ToolSpec>& tools,
                                     std::function<std::string()> make_id)
    : schemas_(json::object()), any_name_(tools.empty()), make_id_(std::move(make_id)) {
  for (const ToolSpec& t : tools) {
    json schema =
        t.parameters_schema.empty() ? json() : json::parse(t.parameters_schema, nullptr, false);
    schemas_[t.name] = schema.is_discarded() ? json() : schema;
  }
}

const json* ToolCallExtractor::find_tool(const std::string& name) const {
  auto it = schemas_.find(name);
  return it == schemas_.end() ? nullptr : &*it;
}

void ToolCallExtractor::consume(size_t n) {
  raw_.append(buffer_, 0, n);
  buffer_.erase(0, n);
  searched_ = 0;
}

// Where `tag` first occurs in the buffer, resuming where the previous (failed) search of the
// same wait stopped, so a long call body streamed in small pieces is scanned once, not once per
// piece.
size_t ToolCallExtractor::find_tag(std::string_view buf, std::string_view tag) {
  const size_t from = searched_ >= tag.size() ? searched_ - (tag.size() - 1) : 0;
  const size_t at = buf.find(tag, from);
  searched_ = at == std::string_view::npos ? buf.size() : 0;
  return at;
}

void ToolCallExtractor::content_text(std::string_view text, OutputDelta& out) {
  std::string s = held_spaces_;
  s.append(text);
  held_spaces_.clear();
  if (after_call_) {
    size_t i = skip_spaces(s);
    if (i == s.size()) return;
    s.erase(0, i);
    after_call_ = false;
  }
  size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  held_spaces_ = s.substr(end);
  s.resize(end);
  out.content += s;
}

void ToolCallExtractor::emit(OutputDelta& out, const std::string& id, const std::string& name,
                             const std::string& arguments) {
  if (!out.tool_calls.empty() && out.tool_calls.back().index == index_ && id.empty()) {
    out.tool_calls.back().arguments += arguments;
    return;
  }
  out.tool_calls.push_back(ToolCallDelta{index_, id, name, arguments});
}

void ToolCallExtractor::malformed(OutputDelta& out) {
  std::string raw = std::move(raw_);
  raw_.clear();
  state_ = State::text;
  content_text(raw, out);
}

bool ToolCallExtractor::finish_json_call(const std::string& body, OutputDelta& out) {
  json call = json::parse(body, nullptr, false);
  if (call.is_discarded() || !call.is_object()) return false;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  if (!any_name_ && !find_tool(name->get<std::string>())) return false;
  json args = json::object();
  std::string text = "{}";
  const char* key = call.contains("arguments") ? "arguments" : "parameters";
  auto it = call.find(key);
  if (it != call.end()) {
    args = *it;
    const bool quoted = args.is_string();
    if (quoted) args = json::parse(args.get<std::string>(), nullptr, false);
    if (args.is_null()) args = json::object();
    if (args.is_discarded() || !args.is_object()) return false;
    if (nests_deeper_than(args, kMaxArgumentNesting)) return false;
    text = arguments_text(quoted ? it->get<std::string>() : body, quoted ? "" : key, args);
  }
  emit(out, make_id_(), name->get<std::string>(), text);
  ++index_;
  raw_.clear();
  after_call_ = true;
  state_ = State::text;
  return true;
}

void ToolCallExtractor::close_xml_call(OutputDelta& out) {
  emit(out, "", "", params_ ? "}" : "{}");
  ++index_;
  params_ = 0;
  raw_.clear();
  after_call_ = true;
}

void ToolCallExtractor::push(std::string_view text, OutputDelta& out) {
  buffer_.append(text);
  scan(out);
}

void ToolCallExtractor::scan(OutputDelta& out) {
  while (true) {
    std::string_view buf = buffer_;
    switch (state_) {
      case State::text: {
        size_t at = buf.find(kCallOpen);
        if (at == std::string_view::npos) {
          size_t hold = partial_tag_start(buf, {kCallOpen});
          content_text(buf.substr(0, hold), out);
          buffer_.erase(0, hold);
          return;
        }
        content_text(buf.substr(0, at), out);
        buffer_.erase(0, at);
        raw_ = std::move(held_spaces_);  // dropped before a call, restored if it is malformed
        held_spaces_.clear();
        consume(kCallOpen.size());
        state_ = State::call_start;
        continue;
      }
      case State::call_start: {
        size_t i = skip_spaces(buf);
        if (i == buf.size()) return;
        if (buf[i] == '{') {
          state_ = State::json_call;
        } else if (starts_with(buf.substr(i), kFunctionOpen)) {
          consume(i);
          state_ = State::xml_header;
        } else if (could_become(buf.substr(i), kFunctionOpen)) {
          return;
        } else {
          state_ = State::raw_call;
        }
        continue;
      }
      case State::json_call: {
        size_t end = find_tag(buf, kCallClose);
        if (end == std::string_view::npos) return;
        std::string body(buf.substr(0, end));
        consume(end + kCallClose.size());
        if (!finish_json_call(body, out)) malformed(out);
        continue;
      }
      case State::xml_header: {
        size_t close = buf.find('>');
        if (close == std::string_view::npos && buf.size() <= kMaxNameLength) return;
        if (close == std::string_view::npos || close > kMaxNameLength) {
          // No '>' in sight: not a function tag. Decided by position, not by what has arrived,
          // so that every split of the text gives the same result.
          state_ = State::raw_call;
          continue;
        }
        std::string name =
            jinja::py_strip(buf.substr(kFunctionOpen.size(), close - kFunctionOpen.size()),
                            std::nullopt, true, true);
        consume(close + 1);
        bool valid = !name.empty() && name.find_first_of("\n<") == std::string::npos &&
                     (any_name_ || find_tool(name));
        if (!valid) {
          state_ = State::raw_call;
          continue;
        }
        const json* schema = find_tool(name);
        tool_schema_ = schema && schema->is_object() ? schema : nullptr;
        emit(out, make_id_(), name, "");
        params_ = 0;
        state_ = State::xml_between;
        continue;
      }
      case State::xml_between:
      case State::xml_after_function: {
        size_t i = skip_spaces(buf);
        consume(i);
        buf = buffer_;
        if (buf.empty()) return;
        if (state_ == State::xml_between && starts_with(buf, kParamOpen)) {
          size_t close = buf.find('>');
          if (close == std::string_view::npos && buf.size() <= kMaxNameLength) return;
          if (close == std::string_view::npos || close > kMaxNameLength) {
            consume(1);  // not a real tag (whatever the split): dropped like other stray text
            continue;
          }
          param_name_ = jinja::py_strip(buf.substr(kParamOpen.size(), close - kParamOpen.size()),
                                        std::nullopt, true, true);
          consume(close + 1);
          state_ = State::xml_param;
          continue;
        }
        if (state_ == State::xml_between && starts_with(buf, kFunctionClose)) {
          consume(kFunctionClose.size());
          close_xml_call(out);
          state_ = State::xml_after_function;
          continue;
        }
        if (starts_with(buf, kCallClose)) {
          consume(kCallClose.size());
          if (state_ == State::xml_between) close_xml_call(out);
          state_ = State::text;
          continue;
        }
        if (state_ == State::xml_after_function && starts_with(buf, kFunctionOpen)) {
          state_ = State::xml_header;  // another function inside the same <tool_call>
          continue;
        }
        bool partial = could_become(buf, kCallClose) ||
                       (state_ == State::xml_between &&
                        (could_become(buf, kParamOpen) || could_become(buf, kFunctionClose))) ||
                       (state_ == State::xml_after_function && could_become(buf, kFunctionOpen));
        if (partial) return;
        consume(1);  // stray text between parameters is dropped
        continue;
      }
      case State::xml_param: {
        size_t end = find_tag(buf, kParamClose);
        if (end == std::string_view::npos) return;
        std::string value(buf.substr(0, end));
        consume(end + kParamClose.size());
        if (!value.empty() && value.front() == '\n') value.erase(0, 1);
        if (!value.empty() && value.back() == '\n') value.pop_back();
        const json* schema = nullptr;
        if (tool_schema_) {
          auto props = tool_schema_->find("properties");
          if (props != tool_schema_->end() && props->is_object()) {
            auto p = props->find(param_name_);
            if (p != props->end()) schema = &*p;
          }
        }
        std::string fragment = params_ ? ", " : "{";
        fragment += jinja::python_json_dumps(json(param_name_)) + ": " +
                    convert_parameter_text(value, schema);
        emit(out, "", "", fragment);
        ++params_;
        state_ = State::xml_between;
        continue;
      }
      case State::raw_call: {
        size_t end = find_tag(buf, kCallClose);
        if (end == std::string_view::npos) return;
        consume(end + kCallClose.size());
        malformed(out);
        continue;
      }
    }
  }
}

void ToolCallExtractor::finish(OutputDelta& out) {
  switch (state_) {
    case State::text:
      content_text(buffer_, out);
      break;
    case State::call_start:
    case State::json_call: {
      std::string body = buffer_;
      consume(buffer_.size());
      if (!finish_json_call(body, out)) malformed(out);
      break;
    }
    case State::xml_header:
    case State::raw_call:
      consume(buffer_.size());
      malformed(out);
      break;
    case State::xml_between:
    case State::xml_param:
      close_xml_call(out);  // cut off inside a call: keep the complete parameters
      break;
    case State::xml_after_function:
      break;
  }
  buffer_.clear();
  state_ = State::text;
  if (!after_call_) out.content += held_spaces_;
  held_spaces_.clear();
}

}  // namespace hibana::parsers
