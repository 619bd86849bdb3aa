// xml_tool_spec(): a tool's parameters as XmlCallRecogniser reads them.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/xml_call_recogniser.h"
#include "tokenizer/parsers/parameter_value.h"

namespace hibana {

namespace {

using Json = nlohmann::ordered_json;

// A name the parser reads back as written: no '>' or '\n' (which end or break the tag), no
// spaces around it (which it strips).
bool writable(const std::string& name) {
  if (name.empty() || name.find_first_of(">\n<") != std::string::npos) return false;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  return !space(name.front()) && !space(name.back());
}

// The raw text of a property name as the compiled schema writes it (JSON escapes included).
std::string decoded(const std::string& name) {
  if (name.find('\\') == std::string::npos) return name;
  Json j = Json::parse("\"" + name + "\"", nullptr, false);
  return j.is_string() ? j.get<std::string>() : std::string();
}

// A string enum's values, when every value is a string that a text value can carry.
std::vector<std::string> text_choices(const JsonSchema::Node& n) {
  std::vector<std::string> out;
  if (!n.has_literals || !n.alternatives.empty()) return out;
  for (const std::string& lit : n.literals) {
    Json j = Json::parse(lit, nullptr, false);
    if (!j.is_string()) return {};
    std::string s = j.get<std::string>();
    if (s.find('\n') != std::string::npos || s.find("</") != std::string::npos) return {};
    out.push_back(std::move(s));
  }
  if (out.size() >= UINT16_MAX) return {};  // State counts them in 16 bits
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

XmlToolSpec xml_tool_spec(const std::string& name, const Json& parameters) {
  XmlToolSpec spec;
  spec.name = name;
  spec.schema = JsonSchema::compile(parameters, true);
  const JsonSchema::Node& root = spec.schema->node(spec.schema->root());
  const Json* raw_props = nullptr;
  if (parameters.is_object()) {
    auto it = parameters.find("properties");
    if (it != parameters.end() && it->is_object()) raw_props = &*it;
  }
  for (const JsonSchema::Property& p : root.properties) {
    if (p.node == JsonSchema::kNever) continue;
    if (spec.params.size() == UINT16_MAX) break;  // State counts parameters in 16 bits
    XmlToolSpec::Param param;
    param.name = decoded(p.name);
    if (!writable(param.name)) continue;
    // The parser types a value by the parameter's schema as written in `properties` (a
    // parameter it does not find there stays text).
    const Json* raw = nullptr;
    if (raw_props) {
      auto it = raw_props->find(param.name);
      if (it != raw_props->end()) raw = &*it;
    }
    param.text = parsers::parameter_keeps_text(raw);
    param.node = p.node;
    param.required =
        std::find(root.required.begin(), root.required.end(), p.name) != root.required.end();
    if (param.text) param.choices = text_choices(spec.schema->node(p.node));
    spec.params.push_back(std::move(param));
  }
  return spec;
}

}  // namespace hibana
