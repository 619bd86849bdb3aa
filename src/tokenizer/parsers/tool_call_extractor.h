// Second stage of output parsing: finds <tool_call> blocks in content and turns them into
// tool-call deltas, call by call in whichever form the model wrote (JSON or XML).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/output_parser.h"

namespace hibana::parsers {

class ToolCallExtractor {
 public:
  ToolCallExtractor(const std::vector<ToolSpec>& tools, std::function<std::string()> make_id);

  void push(std::string_view text, OutputDelta& out);
  void finish(OutputDelta& out);

 private:
  enum class State {
    text,
    call_start,
    json_call,
    xml_header,
    xml_between,
    xml_param,
    xml_after_function,
    raw_call
  };

  void scan(OutputDelta& out);
  void consume(size_t n);
  size_t find_tag(std::string_view buf, std::string_view tag);
  void content_text(std::string_view text, OutputDelta& out);
  void emit(OutputDelta& out, const std::string& id, const std::string& name,
            const std::string& arguments);
  bool finish_json_call(const std::string& body, OutputDelta& out);
  void close_xml_call(OutputDelta& out);
  void malformed(OutputDelta& out);
  const nlohmann::ordered_json* find_tool(const std::string& name) const;

  nlohmann::ordered_json schemas_;  // tool name -> parameters schema (null when unknown)
  bool any_name_ = true;
  std::function<std::string()> make_id_;

  State state_ = State::text;
  std::string buffer_;       // text not yet consumed
  size_t searched_ = 0;      // bytes of buffer_ already searched for the awaited closing tag
  std::string raw_;          // the current call's text, for the malformed fallback
  std::string held_spaces_;  // trailing whitespace of content, dropped before a call
  bool after_call_ = false;  // whitespace after a call is dropped
  int index_ = 0;            // index of the next (or current) call
  int params_ = 0;           // parameters emitted in the current XML call
  std::string param_name_;
  const nlohmann::ordered_json* tool_schema_ = nullptr;
};

}  // namespace hibana::parsers
