#include "tokenizer/output_parser.h"

#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "tokenizer/parsers/reasoning_splitter.h"
#include "tokenizer/parsers/tool_call_extractor.h"

namespace hibana {

namespace {

std::function<std::string()> random_ids() {
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [rng] {
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += alphabet[(*rng)() % (sizeof(alphabet) - 1)];
    return id;
  };
}

}  // namespace

struct OutputParser::Impl {
  explicit Impl(OutputParserOptions o)
      : options(std::move(o)),
        splitter(options.reasoning, options.tool_calls),
        extractor(options.tools, options.make_id ? options.make_id : random_ids()) {}

  OutputDelta route(parsers::Split split, bool final) {
    OutputDelta out;
    out.reasoning = std::move(split.reasoning);
    if (options.tool_calls) {
      extractor.push(split.content, out);
      if (final) extractor.finish(out);
    } else {
      out.content = std::move(split.content);
    }
    record(out);
    return out;
  }

  void record(const OutputDelta& d) {
    result.reasoning += d.reasoning;
    result.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (static_cast<size_t>(t.index) >= result.tool_calls.size()) {
        result.tool_calls.resize(static_cast<size_t>(t.index) + 1);
      }
      ParsedToolCall& call = result.tool_calls[static_cast<size_t>(t.index)];
      if (!t.id.empty()) call.id = t.id;
      if (!t.name.empty()) call.name = t.name;
      call.arguments += t.arguments;
    }
  }

  OutputParserOptions options;
  parsers::ReasoningSplitter splitter;
  parsers::ToolCallExtractor extractor;
  ParsedOutput result;
  bool finished = false;
};

OutputParser::OutputParser(OutputParserOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

OutputDelta OutputParser::push(std::string_view text) {
  if (impl_->finished) return {};
  return impl_->route(impl_->splitter.push(text), false);
}

OutputDelta OutputParser::finish() {
  if (impl_->finished) return {};
  impl_->finished = true;
  return impl_->route(impl_->splitter.finish(), true);
}

const ParsedOutput& OutputParser::result() const {
  return impl_->result;
}

std::vector<ToolSpec> tool_specs_from_json(const std::string& tools_json) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
  check(!tools.is_discarded() && tools.is_array(), ErrorKind::invalid_argument,
        "tools must be a JSON array");
  std::vector<ToolSpec> specs;
  for (const auto& t : tools) {
    const auto& fn = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
    ToolSpec spec;
    spec.name = fn["name"].get<std::string>();
    if (fn.contains("parameters")) spec.parameters_schema = fn["parameters"].dump();
    specs.push_back(std::move(spec));
  }
  return specs;
}

PromptThinking prompt_thinking_state(std::string_view prompt) {
  size_t header = prompt.rfind("<|im_start|>assistant");
  std::string_view tail = header == std::string_view::npos ? prompt : prompt.substr(header);
  size_t open = tail.rfind("<think>");
  if (open == std::string_view::npos) return PromptThinking::none;
  size_t close = tail.rfind("</think>");
  return close != std::string_view::npos && close > open ? PromptThinking::closed
                                                         : PromptThinking::open;
}

}  // namespace hibana
