// tool_call_json_fuzz and tool_call_xml_fuzz: OutputParser fed generated text split into pieces
// at fuzzer-chosen points.
//
// Input: a flags byte (reasoning on, tool list given, well-formed mode, <think> opener, tool calls
// off), a count and the lengths of the pieces, then either the text itself or (well-formed mode)
// the fields from which a well-formed output is built: reasoning, content, trailing content, and
// calls in the target's form (Qwen3 JSON or Qwen3-Coder XML) with string arguments.
//
// Checked on every input, as output_parser.h promises: nothing throws; deltas follow the
// protocol (a call's first delta carries its id and name, later ones only arguments, calls in
// order) and add up to result(); the pieces give the same result as the whole text and as the
// text byte by byte; for valid UTF-8, each call's arguments are a JSON object; with a tool list,
// only listed names are called. On well-formed output, additionally: the calls come out with
// the generated names and arguments, reasoning and content equal the generated text (up to the
// whitespace the parser drops) and no tag text reaches them.
#pragma once

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/checks/check.h"
#include "tokenizer/output_parser.h"

namespace hibana::fuzz {

enum class ToolCallForm { json, xml };

inline constexpr std::string_view kOutputTags[] = {"<think>",      "</think>",    "<tool_call>",
                                                   "</tool_call>", "<function=",  "</function>",
                                                   "<parameter=",  "</parameter>"};

// Schemas of every kind the XML parameter typing knows.
inline const std::vector<ToolSpec>& fuzz_tools() {
  static const std::vector<ToolSpec> tools = tool_specs_from_json(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"location": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
      "properties": {"path": {"type": "string"}, "mode": {"type": "integer"},
        "force": {"type": "boolean"}, "tags": {"type": "array"}, "meta": {"type": "object"},
        "ratio": {"type": ["number", "null"]}, "level": {"enum": [1, 2, "max"]},
        "opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}},
    {"name": "ns.tool-1"}
  ])");
  return tools;
}

struct ParserRun {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
  bool operator==(const ParserRun& o) const {
    if (reasoning != o.reasoning || content != o.content || calls.size() != o.calls.size())
      return false;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].id != o.calls[i].id || calls[i].name != o.calls[i].name ||
          calls[i].arguments != o.calls[i].arguments)
        return false;
    }
    return true;
  }
};

// Feeds the pieces, checks the delta protocol, returns what the deltas add up to.
inline ParserRun run_output_parser(OutputParserOptions options,
                                   const std::vector<std::string_view>& pieces) {
  auto counter = std::make_shared<int>(0);
  options.make_id = [counter] { return "call_" + std::to_string((*counter)++); };
  OutputParser parser(std::move(options));
  ParserRun run;
  auto take = [&](const OutputDelta& d) {
    run.reasoning += d.reasoning;
    run.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (static_cast<size_t>(t.index) == run.calls.size()) {
        FUZZ_REQUIRE(!t.id.empty() && !t.name.empty(), "a call's first delta lacks id or name");
        run.calls.push_back(ParsedToolCall{t.id, t.name, ""});
      } else {
        FUZZ_REQUIRE(static_cast<size_t>(t.index) + 1 == run.calls.size(),
                     "tool call deltas out of order");
        FUZZ_REQUIRE(t.id.empty() && t.name.empty(), "a later delta repeats id or name");
      }
      run.calls.back().arguments += t.arguments;
    }
  };
  for (std::string_view p : pieces) take(parser.push(p));
  take(parser.finish());
  const ParsedOutput& r = parser.result();
  ParserRun from_result{r.reasoning, r.content, r.tool_calls};
  FUZZ_REQUIRE(from_result == run, "result() differs from the deltas");
  return run;
}

inline std::string without_tags(std::string s) {
  for (bool changed = true; changed;) {
    changed = false;
    for (std::string_view tag : kOutputTags) {
      for (size_t at = s.find(tag); at != std::string::npos; at = s.find(tag, at)) {
        s.erase(at, tag.size());
        changed = true;
      }
    }
  }
  return s;
}

inline std::string without_whitespace(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') out.push_back(c);
  return out;
}

inline bool has_tag(std::string_view s) {
  return std::any_of(std::begin(kOutputTags), std::end(kOutputTags),
                     [&](std::string_view tag) { return s.find(tag) != std::string_view::npos; });
}

struct WellFormed {
  std::string text;
  std::string reasoning, content;  // as generated, before the parser drops whitespace
  std::vector<std::pair<std::string, nlohmann::ordered_json>> calls;
};

inline WellFormed build_well_formed(ByteReader& in, ToolCallForm form, bool reasoning,
                                    bool think_opener) {
  auto field = [&in] {
    std::string s;
    for (size_t n = in.byte() % 48; n > 0 && !in.empty(); --n)
      s.push_back(static_cast<char>(in.byte()));
    return without_tags(force_utf8(s));
  };
  WellFormed w;
  const std::string r = field(), c = field();
  std::string trailing = field();
  if (!trailing.empty()) trailing.insert(0, ".");  // no tag can form across the calls
  if (reasoning) {
    w.reasoning = r;
    w.text += (think_opener ? "<think>\n" : "") + r + "\n</think>\n\n";
  }
  w.text += c;
  w.content = c + trailing;
  const std::vector<ToolSpec>& tools = fuzz_tools();
  for (int n = in.byte() % 4; n > 0; --n) {
    const std::string& name = tools[in.byte() % tools.size()].name;
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    std::string body = form == ToolCallForm::xml ? "<function=" + name + ">\n" : "";
    for (int k = 0, count = in.byte() % 4; k < count; ++k) {
      std::string key = "p";  // never a schema property: its value stays a string
      key += std::to_string(k);
      key += '_';
      for (char ch : field())
        if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') key.push_back(ch);
      const std::string value = field();
      args[key] = value;
      if (form == ToolCallForm::xml)
        body += "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
    }
    if (form == ToolCallForm::xml) {
      body += "</function>";
    } else {
      body = nlohmann::ordered_json{{"name", name}, {"arguments", args}}.dump();
    }
    w.text += "\n<tool_call>\n" + body + "\n</tool_call>";
    w.calls.emplace_back(name, std::move(args));
  }
  w.text += trailing.empty() ? "" : "\n" + trailing;
  return w;
}

inline std::string describe(const ParserRun& r) {
  std::string s =
      "reasoning=" +
      nlohmann::json(r.reasoning).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      " content=" +
      nlohmann::json(r.content).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const ParsedToolCall& c : r.calls) s += " call " + c.name + " " + c.arguments;
  return s;
}

inline void check_tool_calls(std::string_view data, ToolCallForm form) {
  ByteReader in(data);
  const uint8_t flags = in.byte();
  const bool well_formed = flags & 4;
  OutputParserOptions options;
  options.reasoning = flags & 1;
  options.tool_calls = well_formed || (flags & 0x18) != 0x18;
  if (flags & 2) options.tools = fuzz_tools();
  std::vector<size_t> lengths(in.byte() % 16);
  for (size_t& n : lengths) n = in.byte();

  WellFormed w;
  if (well_formed) {
    w = build_well_formed(in, form, options.reasoning, flags & 0x20);
  } else {
    w.text = std::string(in.rest());
  }
  const std::string& text = w.text;
  std::vector<std::string_view> pieces;
  size_t at = 0;
  for (size_t n : lengths) {
    n = std::min(n, text.size() - at);
    pieces.push_back(std::string_view(text).substr(at, n));
    at += n;
  }
  pieces.push_back(std::string_view(text).substr(at));

  const ParserRun whole = run_output_parser(options, {text});
  const ParserRun split = run_output_parser(options, pieces);
  FUZZ_REQUIRE(split == whole, "pieces parse differently from the whole text: " + describe(split) +
                                   " vs " + describe(whole));
  if (text.size() <= 1024) {
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
    const ParserRun bytewise = run_output_parser(options, bytes);
    FUZZ_REQUIRE(bytewise == whole, "byte-by-byte parse differs from the whole text: " +
                                        describe(bytewise) + " vs " + describe(whole));
  }

  const bool utf8 = is_valid_utf8(text);
  for (const ParsedToolCall& call : whole.calls) {
    if (utf8) {
      const auto args = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
      FUZZ_REQUIRE(!args.is_discarded() && args.is_object(),
                   "arguments are not a JSON object: " + call.arguments);
    }
    if (!options.tools.empty()) {
      FUZZ_REQUIRE(std::any_of(options.tools.begin(), options.tools.end(),
                               [&](const ToolSpec& t) { return t.name == call.name; }),
                   "called a tool that is not listed: " + call.name);
    }
  }

  if (!well_formed) return;
  FUZZ_REQUIRE(!has_tag(whole.reasoning) && !has_tag(whole.content),
               "tag text leaked: " + describe(whole));
  FUZZ_REQUIRE(without_whitespace(whole.reasoning) == without_whitespace(w.reasoning),
               "reasoning differs from the generated one: " + describe(whole));
  FUZZ_REQUIRE(without_whitespace(whole.content) == without_whitespace(w.content),
               "content differs from the generated one: " + describe(whole));
  FUZZ_REQUIRE(whole.calls.size() == w.calls.size(), "wrong number of calls: " + describe(whole));
  for (size_t i = 0; i < w.calls.size(); ++i) {
    FUZZ_REQUIRE(whole.calls[i].name == w.calls[i].first, "wrong name: " + describe(whole));
    FUZZ_REQUIRE(nlohmann::ordered_json::parse(whole.calls[i].arguments) == w.calls[i].second,
                 "wrong arguments: " + describe(whole));
  }
}

}  // namespace hibana::fuzz
