#include "engine/json_schema.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace hibana {

using Json = nlohmann::ordered_json;

JsonSchemaError::JsonSchemaError(std::string path, std::string problem)
    : Error(ErrorKind::invalid_argument, path.empty() ? problem : path + ": " + problem),
      path_(std::move(path)),
      problem_(std::move(problem)) {}

namespace {

constexpr int kMaxDepth = 64;       // nested schemas compiled; deeper ones accept anything
constexpr int kMaxRefChain = 16;    // $ref -> $ref -> ... followed when merging
constexpr size_t kMaxLeaves = 256;  // alternatives of one node after flattening

std::string compact(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string index_path(const std::string& path, const char* key, size_t i) {
  return join(path, key) + "[" + std::to_string(i) + "]";
}

// Keywords that constrain values; every other keyword is an annotation or unsupported.
bool constrains(const std::string& k) {
  static const std::set<std::string> keys = {"type",
                                             "nullable",
                                             "enum",
                                             "const",
                                             "properties",
                                             "required",
                                             "additionalProperties",
                                             "items",
                                             "minItems",
                                             "maxItems",
                                             "anyOf",
                                             "oneOf",
                                             "allOf",
                                             "$ref",
                                             "patternProperties",
                                             "prefixItems"};
  return keys.count(k) > 0;
}

bool has_constraints(const Json& s) {
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (constrains(it.key())) return true;
  }
  return false;
}

void check_schema(const Json& s, const std::string& path) {
  if (!s.is_object() && !s.is_boolean()) {
    throw JsonSchemaError(path, "expected a schema (an object or a boolean)");
  }
}

uint8_t type_bit(const std::string& name) {
  if (name == "null") return JsonSchema::kNull;
  if (name == "boolean") return JsonSchema::kBoolean;
  if (name == "integer") return JsonSchema::kInteger;
  if (name == "number") return JsonSchema::kInteger | JsonSchema::kFraction;
  if (name == "string") return JsonSchema::kString;
  if (name == "array") return JsonSchema::kArray;
  if (name == "object") return JsonSchema::kObject;
  return 0;
}

uint8_t parse_types(const Json& t, const std::string& path) {
  auto one = [&](const Json& v) {
    if (!v.is_string()) throw JsonSchemaError(path, "expected a type name or an array of them");
    const uint8_t b = type_bit(v.get<std::string>());
    if (b == 0) throw JsonSchemaError(path, "unknown type '" + v.get<std::string>() + "'");
    return b;
  };
  if (t.is_string()) return one(t);
  if (!t.is_array() || t.empty()) {
    throw JsonSchemaError(path, "expected a type name or an array of them");
  }
  uint8_t m = 0;
  for (const Json& v : t) m |= one(v);
  return m;
}

Json types_json(uint8_t m) {
  Json out = Json::array();
  if (m & JsonSchema::kNull) out.push_back("null");
  if (m & JsonSchema::kBoolean) out.push_back("boolean");
  if (m & JsonSchema::kFraction) {
    out.push_back("number");  // a fraction without integers cannot be written in names
  } else if (m & JsonSchema::kInteger) {
    out.push_back("integer");
  }
  if (m & JsonSchema::kString) out.push_back("string");
  if (m & JsonSchema::kArray) out.push_back("array");
  if (m & JsonSchema::kObject) out.push_back("object");
  return out;
}

uint8_t value_type(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return JsonSchema::kNull;
    case Json::value_t::boolean:
      return JsonSchema::kBoolean;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return JsonSchema::kInteger;
    case Json::value_t::number_float:
      return JsonSchema::kFraction;
    case Json::value_t::string:
      return JsonSchema::kString;
    case Json::value_t::array:
      return JsonSchema::kArray;
    default:
      return JsonSchema::kObject;
  }
}

uint32_t count(const Json& s, const char* key, const std::string& path, uint32_t fallback) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    throw JsonSchemaError(join(path, key), "expected a non-negative integer");
  }
  return static_cast<uint32_t>(std::min<uint64_t>(it->get<uint64_t>(), JsonSchema::kUnlimited));
}

// Both schemas at once (approximately: see the keyword cases). Booleans are identities or
// absorbing; keywords only one side has are copied.
Json merge(const Json& a, const Json& b, const std::string& path) {
  check_schema(a, path);
  check_schema(b, path);
  if (a.is_boolean()) return a.get<bool>() ? b : a;
  if (b.is_boolean()) return b.get<bool>() ? a : b;
  Json out = a;
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    if (!out.contains(k)) {
      out[k] = v;
      continue;
    }
    Json& o = out[k];
    if (k == "type") {
      const uint8_t m = parse_types(o, join(path, k)) & parse_types(v, join(path, k));
      if (m == 0) return Json(false);
      o = types_json(m);
    } else if (k == "properties" && o.is_object() && v.is_object()) {
      for (auto p = v.begin(); p != v.end(); ++p) {
        o[p.key()] = o.contains(p.key())
                         ? merge(o[p.key()], p.value(), join(join(path, k), p.key()))
                         : p.value();
      }
    } else if ((k == "required" || k == "allOf") && o.is_array() && v.is_array()) {
      for (const Json& r : v) {
        if (k == "allOf" || std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
      }
    } else if (k == "enum" && o.is_array() && v.is_array()) {
      Json both = Json::array();
      for (const Json& e : o) {
        if (std::find(v.begin(), v.end(), e) != v.end()) both.push_back(e);
      }
      o = std::move(both);
    } else if (k == "const") {
      if (o != v) return Json(false);
    } else if (k == "additionalProperties" || (k == "items" && !o.is_array() && !v.is_array())) {
      o = merge(o, v, join(path, k));
    } else if ((k == "minItems" || k == "maxItems") && o.is_number_integer() &&
               v.is_number_integer()) {
      o = k == "minItems" ? std::max(o.get<int64_t>(), v.get<int64_t>())
                          : std::min(o.get<int64_t>(), v.get<int64_t>());
    } else if (k == "nullable" && o.is_boolean() && v.is_boolean()) {
      o = o.get<bool>() && v.get<bool>();
    }
    // Anything else (a second anyOf / oneOf / $ref...): a's is kept, b's dropped.
  }
  return out;
}

}  // namespace

// Compiles one document (its $refs resolve inside it) into a schema's node table.
class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(JsonSchema& out, const Json& doc) : out_(out), doc_(doc) {}

  static void init(JsonSchema& s) {
    s.nodes_.clear();
    s.nodes_.emplace_back();  // kAny
    JsonSchema::Node never;
    never.types = 0;
    s.nodes_.push_back(never);  // kNever
  }

  uint32_t compile(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) return JsonSchema::kAny;
    if (s.is_boolean()) return s.get<bool>() ? JsonSchema::kAny : JsonSchema::kNever;
    check_schema(s, path);
    if (auto it = s.find("$ref"); it != s.end()) return reference(s, *it, path, depth);
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->empty()) {
        throw JsonSchemaError(join(path, "allOf"), "expected a non-empty array of schemas");
      }
      Json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string p = index_path(path, "allOf", i);
        merged = merge(merged, deref((*it)[i], p), p);
      }
      return compile(merged, path, depth + 1);
    }
    const char* alt_key = s.contains("anyOf") ? "anyOf" : s.contains("oneOf") ? "oneOf" : nullptr;
    if (alt_key) {
      const Json& alts = s[alt_key];
      if (!alts.is_array() || alts.empty()) {
        throw JsonSchemaError(join(path, alt_key), "expected a non-empty array of schemas");
      }
      Json rest = s;
      rest.erase("anyOf");
      rest.erase("oneOf");
      const bool own = has_constraints(rest);
      JsonSchema::Node n;
      for (size_t i = 0; i < alts.size(); ++i) {
        const std::string p = index_path(path, alt_key, i);
        n.alternatives.push_back(own ? compile(merge(rest, deref(alts[i], p), p), p, depth + 1)
                                     : compile(alts[i], p, depth + 1));
      }
      return add(std::move(n));
    }
    return leaf(s, path, depth);
  }

 private:
  uint32_t add(JsonSchema::Node n) {
    out_.nodes_.push_back(std::move(n));
    return static_cast<uint32_t>(out_.nodes_.size() - 1);
  }

  // The schema a local $ref points at; nullptr for a non-local one (not enforced).
  const Json* resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') return nullptr;
    if (ref == "#") return &doc_;
    try {
      Json::json_pointer ptr(ref.substr(1));
      if (doc_.contains(ptr)) return &doc_.at(ptr);
    } catch (const std::exception&) {
      throw JsonSchemaError(path, "malformed reference '" + ref + "'");
    }
    throw JsonSchemaError(path, "'" + ref + "' points to nothing in the schema");
  }

  // s with its $ref chain replaced by what it points at (for merging).
  Json deref(const Json& s, const std::string& path) {
    Json cur = s;
    for (int i = 0; i < kMaxRefChain && cur.is_object() && cur.contains("$ref"); ++i) {
      const Json ref = cur["$ref"];
      if (!ref.is_string()) throw JsonSchemaError(join(path, "$ref"), "expected a string");
      cur.erase("$ref");
      if (const Json* target = resolve(ref.get<std::string>(), join(path, "$ref"))) {
        cur = merge(cur, *target, path);
      }
    }
    if (cur.is_object()) cur.erase("$ref");  // a cycle: the rest is enforced
    return cur;
  }

  uint32_t reference(const Json& s, const Json& ref_json, const std::string& path, int depth) {
    if (!ref_json.is_string()) throw JsonSchemaError(join(path, "$ref"), "expected a string");
    const std::string ref = ref_json.get<std::string>();
    const Json* target = resolve(ref, join(path, "$ref"));
    Json rest = s;
    rest.erase("$ref");
    const bool siblings = has_constraints(rest);
    if (!target) return siblings ? compile(rest, path, depth + 1) : JsonSchema::kAny;
    if (siblings) return compile(merge(rest, *target, path), path, depth + 1);
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    // Reserve the node first: a recursive schema refers back to it.
    const uint32_t slot = add(JsonSchema::Node{});
    refs_[ref] = slot;
    std::string target_path = ref.size() > 2 ? ref.substr(2) : "";
    std::replace(target_path.begin(), target_path.end(), '/', '.');
    const uint32_t n = compile(*target, target_path, depth + 1);
    JsonSchema::Node copy = out_.nodes_[n];
    out_.nodes_[slot] = std::move(copy);
    return slot;
  }

  uint32_t leaf(const Json& s, const std::string& path, int depth) {
    JsonSchema::Node n;
    if (auto it = s.find("type"); it != s.end()) n.types = parse_types(*it, join(path, "type"));
    bool nullable = false;
    if (auto it = s.find("nullable"); it != s.end() && it->is_boolean()) nullable = *it;
    if (nullable) n.types |= JsonSchema::kNull;

    auto en = s.find("enum");
    auto cn = s.find("const");
    if (en != s.end() || cn != s.end()) {
      Json values = Json::array();
      if (en != s.end()) {
        if (!en->is_array()) throw JsonSchemaError(join(path, "enum"), "expected an array");
        values = *en;
      }
      if (cn != s.end()) {
        if (en == s.end() || std::find(values.begin(), values.end(), *cn) != values.end()) {
          values = Json::array({*cn});
        } else {
          values = Json::array();
        }
      }
      if (nullable) values.push_back(nullptr);
      n.has_literals = true;
      for (const Json& v : values) {
        if (value_type(v) & n.types) n.literals.push_back(compact(v));
      }
      std::sort(n.literals.begin(), n.literals.end());
      n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
      if (n.literals.empty()) n.types = 0;
    }

    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) {
        throw JsonSchemaError(join(path, "properties"), "expected an object of schemas");
      }
      for (auto p = it->begin(); p != it->end(); ++p) {
        const uint32_t node =
            compile(p.value(), join(join(path, "properties"), p.key()), depth + 1);
        n.properties.push_back({JsonSchema::encode_name(p.key()), node});
      }
      std::sort(n.properties.begin(), n.properties.end(),
                [](const auto& a, const auto& b) { return a.name < b.name; });
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) throw JsonSchemaError(join(path, "required"), "expected an array");
      for (const Json& r : *it) {
        if (!r.is_string()) {
          throw JsonSchemaError(join(path, "required"), "expected an array of strings");
        }
        n.required.push_back(JsonSchema::encode_name(r.get<std::string>()));
      }
      std::sort(n.required.begin(), n.required.end());
      n.required.erase(std::unique(n.required.begin(), n.required.end()), n.required.end());
    }
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      n.additional = compile(*it, join(path, "additionalProperties"), depth + 1);
    }
    if (s.contains("patternProperties")) n.additional = JsonSchema::kAny;  // not enforced
    if (auto it = s.find("items"); it != s.end() && !it->is_array()) {
      n.items = compile(*it, join(path, "items"), depth + 1);
    }
    if (s.contains("prefixItems")) n.items = JsonSchema::kAny;  // tuples: not enforced
    n.min_items = count(s, "minItems", path, 0);
    n.max_items = count(s, "maxItems", path, JsonSchema::kUnlimited);

    // Objects and arrays that cannot be written are ruled out here, so that the recogniser
    // never starts one it cannot finish.
    for (const auto& p : n.properties) n.declared += p.node != JsonSchema::kNever;
    for (const std::string& r : n.required) {
      const JsonSchema::Property* p = JsonSchema::find(n, r);
      const uint32_t value = p ? p->node : n.additional;
      if (value == JsonSchema::kNever) n.types &= ~JsonSchema::kObject;
    }
    if (n.min_items > n.max_items || (n.min_items > 0 && n.items == JsonSchema::kNever)) {
      n.types &= ~JsonSchema::kArray;
    }
    return add(std::move(n));
  }

  JsonSchema& out_;
  const Json& doc_;
  std::map<std::string, uint32_t> refs_;
};

namespace {

// Replaces every node's alternatives by the nodes without alternatives they lead to.
void flatten(std::vector<JsonSchema::Node>& nodes) {
  for (auto& n : nodes) {
    if (n.alternatives.empty()) continue;
    std::vector<uint32_t> leaves, stack(n.alternatives.rbegin(), n.alternatives.rend());
    std::set<uint32_t> seen;
    while (!stack.empty() && leaves.size() < kMaxLeaves) {
      const uint32_t a = stack.back();
      stack.pop_back();
      if (!seen.insert(a).second) continue;
      const auto& alts = nodes[a].alternatives;
      if (alts.empty()) {
        if (nodes[a].types != 0) leaves.push_back(a);
      } else {
        stack.insert(stack.end(), alts.rbegin(), alts.rend());
      }
    }
    n.alternatives = std::move(leaves);
    if (n.alternatives.empty()) n.types = 0;  // nothing can match
  }
}

void mark_free(std::vector<JsonSchema::Node>& nodes) {
  for (auto& n : nodes) {
    n.free = n.types == JsonSchema::kAllTypes && !n.has_literals && n.alternatives.empty() &&
             n.properties.empty() && n.required.empty() && n.additional == JsonSchema::kAny &&
             n.items == JsonSchema::kAny && n.min_items == 0 &&
             n.max_items == JsonSchema::kUnlimited;
  }
}

// A copy of `node` that only accepts types in `mask` (after flatten).
uint32_t restrict_types(std::vector<JsonSchema::Node>& nodes, uint32_t node, uint8_t mask) {
  JsonSchema::Node n = nodes[node];
  if (!n.alternatives.empty()) {
    std::vector<uint32_t> kept;
    for (uint32_t a : n.alternatives) {
      if (nodes[a].types & mask) kept.push_back(restrict_types(nodes, a, mask));
    }
    n.alternatives = std::move(kept);
    if (n.alternatives.empty()) n.types = 0;
  } else {
    n.types &= mask;
    if (n.has_literals) {
      std::vector<std::string> kept;
      for (std::string& l : n.literals) {
        if (value_type(Json::parse(l)) & mask) kept.push_back(std::move(l));
      }
      n.literals = std::move(kept);
      if (n.literals.empty()) n.types = 0;
    }
  }
  nodes.push_back(std::move(n));
  return static_cast<uint32_t>(nodes.size() - 1);
}

}  // namespace

std::shared_ptr<const JsonSchema> JsonSchema::compile(const Json& schema, bool object_root) {
  auto s = std::make_shared<JsonSchema>();
  JsonSchemaCompiler::init(*s);
  s->root_ = JsonSchemaCompiler(*s, schema).compile(schema, "", 0);
  flatten(s->nodes_);
  if (object_root) s->root_ = restrict_types(s->nodes_, s->root_, kObject);
  mark_free(s->nodes_);
  return s;
}

std::shared_ptr<const JsonSchema> JsonSchema::any(bool object_root) {
  static const std::shared_ptr<const JsonSchema> any_value = compile(Json(true), false);
  static const std::shared_ptr<const JsonSchema> any_object = compile(Json(true), true);
  return object_root ? any_object : any_value;
}

std::shared_ptr<const JsonSchema> JsonSchema::tagged_union(
    const std::string& tag_key, const std::string& value_key,
    const std::vector<std::pair<std::string, Json>>& variants, bool object_values) {
  auto s = std::make_shared<JsonSchema>();
  JsonSchemaCompiler::init(*s);
  std::vector<uint32_t> values;
  for (const auto& [tag, doc] : variants) {
    try {
      values.push_back(JsonSchemaCompiler(*s, doc).compile(doc, "", 0));
    } catch (const JsonSchemaError& e) {
      throw JsonSchemaError(tag, e.what());
    }
  }
  flatten(s->nodes_);
  Node root;
  for (size_t i = 0; i < variants.size(); ++i) {
    const uint32_t value =
        object_values ? restrict_types(s->nodes_, values[i], kObject) : values[i];
    Node tag;
    tag.types = kString;
    tag.has_literals = true;
    tag.literals = {compact(Json(variants[i].first))};
    s->nodes_.push_back(tag);
    Node obj;
    obj.types = kObject;
    obj.properties = {{encode_name(tag_key), static_cast<uint32_t>(s->nodes_.size() - 1)},
                      {encode_name(value_key), value}};
    std::sort(obj.properties.begin(), obj.properties.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    obj.required = {encode_name(tag_key), encode_name(value_key)};
    std::sort(obj.required.begin(), obj.required.end());
    obj.additional = kNever;
    obj.declared = 2;
    s->nodes_.push_back(std::move(obj));
    root.alternatives.push_back(static_cast<uint32_t>(s->nodes_.size() - 1));
  }
  if (root.alternatives.empty()) root.types = 0;
  s->nodes_.push_back(std::move(root));
  s->root_ = static_cast<uint32_t>(s->nodes_.size() - 1);
  mark_free(s->nodes_);
  return s;
}

const JsonSchema::Property* JsonSchema::find(const Node& n, std::string_view name) {
  auto it = first_with_prefix(n, name);
  return it != n.properties.end() && it->name == name ? &*it : nullptr;
}

std::vector<JsonSchema::Property>::const_iterator JsonSchema::first_with_prefix(
    const Node& n, std::string_view prefix) {
  return std::lower_bound(n.properties.begin(), n.properties.end(), prefix,
                          [](const Property& p, std::string_view v) { return p.name < v; });
}

std::string JsonSchema::minimal_text(uint32_t node, int depth) const {
  if (depth > 16 || node >= nodes_.size()) return "";
  const Node& n = nodes_[node];
  if (!n.alternatives.empty()) {
    for (uint32_t a : n.alternatives) {
      std::string t = minimal_text(a, depth + 1);
      if (!t.empty()) return t;
    }
    return "";
  }
  if (n.has_literals) return n.literals.empty() ? "" : n.literals.front();
  if (n.types & kNull) return "null";
  if (n.types & kBoolean) return "false";
  if (n.types & kInteger) return "0";
  if (n.types & kFraction) return "0.5";
  if (n.types & kString) return "\"\"";
  if (n.types & kObject) {
    std::string out = "{";
    for (const std::string& r : n.required) {
      const Property* p = find(n, r);
      std::string v = minimal_text(p ? p->node : n.additional, depth + 1);
      if (v.empty()) return "";
      if (out.size() > 1) out += ",";
      out += "\"" + r + "\":" + v;
    }
    return out + "}";
  }
  if (n.types & kArray) {
    std::string item = n.min_items > 0 ? minimal_text(n.items, depth + 1) : "";
    if (n.min_items > 0 && item.empty()) return "";
    std::string out = "[";
    for (uint32_t i = 0; i < n.min_items && i < 1024; ++i) out += (i ? "," : "") + item;
    return out + "]";
  }
  return "";
}

std::string JsonSchema::encode_name(const std::string& name) {
  std::string s = compact(Json(name));
  return s.substr(1, s.size() - 2);
}

}  // namespace hibana
