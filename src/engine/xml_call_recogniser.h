// A byte-level recogniser for one tool call in Qwen3-Coder's XML form, the part after
// "<tool_call>\n":
//
//   <function=NAME>\n                                 (already in the prompt for a named tool)
//   <parameter=P>\nVALUE\n</parameter>\n              (any number of times)
//   </function>
//
// NAME is one of the tools; each P is a declared parameter of that tool not written yet;
// </function> comes only once every required parameter is there. A text parameter's VALUE is
// any text without "</parameter>" (except the one that ends it, after a '\n'); any other
// VALUE is one JSON value valid for the parameter's schema (JsonRecogniser), ended by the
// '\n'. No value may contain "</tool_call>" (the server stops there). The caller appends
// "\n</tool_call>".
//
// The State is a small copyable value (a JSON value's state included: each JSON parameter has
// its own JsonRecogniser, whose pools the probes share), so RecogniserConstraint can try every
// token of a vocabulary (XmlCallConstraint).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/json_recogniser.h"
#include "engine/json_schema.h"
#include "engine/recogniser_constraint.h"

namespace hibana {

struct XmlToolSpec {
  struct Param {
    std::string name;  // as the model writes it: no '>', no '\n'
    bool text = true;  // the value is raw text (string-typed); else JSON of `node`
    uint32_t node = JsonSchema::kAny;
    bool required = false;
    // A text value that must be one of these (a string enum), sorted; empty: any text.
    std::vector<std::string> choices;
  };
  std::string name;                          // no '>', '<' or '\n'
  std::shared_ptr<const JsonSchema> schema;  // the compiled parameters: `node`s point into it
  std::vector<Param> params;
};

// A tool's spec from its name and parameters (a JSON Schema), with the parser's reading of
// values (parameter_value.h): a parameter is text unless its declared types leave out
// "string". Parameters whose names cannot be written in a tag ('>', '\n', surrounding spaces)
// are left out. Throws JsonSchemaError when the parameters do not compile.
XmlToolSpec xml_tool_spec(const std::string& name, const nlohmann::ordered_json& parameters);

// The tools a forced call may use. named: the one tool, whose "<function=NAME>\n" the prompt
// already holds.
struct XmlCallSpec {
  std::vector<XmlToolSpec> tools;
  bool named = false;
};

class XmlCallRecogniser {
 public:
  // Only the first 128 parameters of a tool (required ones first) are tracked: others may
  // repeat.
  explicit XmlCallRecogniser(std::shared_ptr<const XmlCallSpec> spec);

  bool feed(char c);
  bool feed(const std::string& bytes);  // all or nothing
  bool complete() const;
  // Bytes that complete the call when generation stops early (empty when complete()): the open
  // name or value is finished (a JSON value by its JsonRecogniser's closing()), the missing
  // required parameters get minimal values, then "</function>".
  std::string closing() const;

  struct State {
    uint8_t phase = 0;          // Phase
    uint8_t lit = 0;            // kLiteral: which literal
    uint8_t close = 0;          // bytes of "</parameter>" matched inside a value
    uint8_t stop = 0;           // bytes of "</tool_call>" matched inside a value
    bool after_nl = false;      // the value's last byte was '\n' (or the value is empty)
    bool close_nl = false;      // the "</parameter>" being matched follows a '\n'
    uint16_t pos = 0;           // bytes matched: of the literal, of the name being read
    uint16_t tool = 0;          // the tool (from kParamName on)
    uint16_t lo = 0, hi = 0;    // name phases, kChoice: the candidates (a sorted range)
    uint16_t param = 0;         // the parameter whose value is read
    uint64_t used[2] = {0, 0};  // parameters written (bit i: the tool's i-th, required first)
    JsonRecogniser::State json;
  };
  const State& state() const { return state_; }
  bool advance(State& s, char c);
  static bool inert(const State& s, char c);
  // A TokenTrie byte class whose bytes s accepts in any number and order (0: none): those
  // inert(s, c) accepts.
  static uint8_t open_class(const State& s);

 private:
  struct Tool {
    std::vector<uint32_t> sorted;     // parameter indices by name
    std::vector<int32_t> recogniser;  // per parameter: its JsonRecogniser in json_ (-1: text)
    std::vector<uint32_t> bit;        // per parameter: its bit in State::used (required first)
  };
  bool used(const State& s, uint32_t param) const;
  bool missing_required(const State& s) const;
  bool start_value(State& s);
  bool value_byte(State& s, char c);
  bool name_byte(State& s, char c, bool tool);
  bool choice_byte(State& s, char c);

  std::shared_ptr<const XmlCallSpec> spec_;
  std::vector<uint32_t> tools_sorted_;  // tool indices by name
  std::vector<Tool> tools_;
  std::vector<JsonRecogniser> json_;
  State state_;
};

// A LogitsProcessor for one XML tool call over a tokenizer's vocabulary; end_tokens are allowed
// only once the call is complete.
class XmlCallConstraint final : public RecogniserConstraint<XmlCallRecogniser> {
 public:
  XmlCallConstraint(std::shared_ptr<const TokenTrie> vocab, std::vector<int32_t> end_tokens,
                    std::shared_ptr<const XmlCallSpec> spec)
      : RecogniserConstraint(std::move(vocab), std::move(end_tokens),
                             XmlCallRecogniser(std::move(spec))) {}
};

}  // namespace hibana
