// A JSON Schema compiled for constrained generation: a flat, read-only table of nodes that
// JsonRecogniser walks byte by byte. One compiled schema is shared by every choice of a request.
//
// The enforced subset: `type` (a name or an array of names; "integer" means no fraction and
// no exponent), `nullable`, `enum` and `const` (any JSON values, matched against their compact
// serialisation: the model writes one of them byte for byte), `properties`, `required`,
// `additionalProperties` (false, true or a schema), `items` (one schema), `minItems`,
// `maxItems`, `anyOf` / `oneOf` (alternatives tracked in parallel; oneOf's exclusivity is not
// checked), `allOf` (merged into one schema), `$ref` to a JSON pointer inside the same document
// ("#", "#/$defs/X", "#/definitions/X", ...), and the booleans `true` / `false`.
// Degraded to "anything": non-local `$ref`s, tuple `items` arrays and `prefixItems` (items
// become free), `patternProperties` (other keys become free), a `oneOf` next to an `anyOf`,
// nesting deeper than 64 schemas. Every other keyword (descriptions, formats, patterns,
// lengths, numeric bounds...) is ignored. Keys are matched as written: a declared key must be
// spelled as its compact JSON form, and in an object that declares keys, other keys may not
// use escapes (so that no key can pose as another). Malformed known keywords (a `type` that is not
// a type name, `properties` that is not an object, a `$ref` to nothing...) throw JsonSchemaError.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hibana {

// A schema that cannot be compiled: where (a path like "properties.unit.type", empty for the
// root) and what is wrong. what() is "PATH: PROBLEM".
class JsonSchemaError : public Error {
 public:
  JsonSchemaError(std::string path, std::string problem);
  const std::string& path() const { return path_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string path_;
  std::string problem_;
};

class JsonSchema {
 public:
  // Type bits. A number with a fraction or an exponent needs kFraction; "number" is both bits.
  static constexpr uint8_t kNull = 1, kBoolean = 2, kInteger = 4, kFraction = 8, kString = 16,
                           kArray = 32, kObject = 64, kAllTypes = 127;
  static constexpr uint32_t kAny = 0;    // the node of `true`
  static constexpr uint32_t kNever = 1;  // the node of `false`
  static constexpr uint32_t kNoNode = UINT32_MAX;
  static constexpr uint32_t kUnlimited = UINT32_MAX;

  struct Property {
    std::string name;  // as written in JSON, without the quotes (escapes included)
    uint32_t node;
  };

  struct Node {
    uint8_t types = kAllTypes;
    // No constraint at all (types, literals, keys, items): the recogniser skips the whole value.
    bool free = false;
    // Non-empty: the value must match one of these nodes (none of which has alternatives); the
    // node's own keywords are already merged into each.
    std::vector<uint32_t> alternatives;
    // enum / const: compact JSON texts, sorted; with has_literals the value is one of them.
    bool has_literals = false;
    std::vector<std::string> literals;
    std::vector<Property> properties;   // sorted by name
    std::vector<std::string> required;  // names as in Property::name
    uint32_t additional = kAny;         // other keys' values; kNever: no other keys
    uint32_t declared = 0;              // properties whose node is not kNever
    uint32_t items = kAny;
    uint32_t min_items = 0;
    uint32_t max_items = kUnlimited;
  };

  // Throws JsonSchemaError. With object_root the document must also be an object.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json& schema,
                                                   bool object_root = false);
  // Any JSON value (any object with object_root): syntax only.
  static std::shared_ptr<const JsonSchema> any(bool object_root);
  // An object {tag_key: T, value_key: V} (both keys required, no others) for one of the
  // variants (T, V's schema); each variant's schema is a document of its own (its $refs resolve
  // inside it). With object_values every V must be an object. Throws JsonSchemaError whose
  // path() is the tag of the variant at fault and problem() that document's own error.
  static std::shared_ptr<const JsonSchema> tagged_union(
      const std::string& tag_key, const std::string& value_key,
      const std::vector<std::pair<std::string, nlohmann::ordered_json>>& variants,
      bool object_values);

  uint32_t root() const { return root_; }
  const Node& node(uint32_t i) const { return nodes_[i]; }
  size_t size() const { return nodes_.size(); }

  // The property named exactly `name` (as written), or nullptr.
  static const Property* find(const Node& n, std::string_view name);
  // The first property whose name starts with `prefix` (properties are sorted: the others
  // follow it), or properties.end().
  static std::vector<Property>::const_iterator first_with_prefix(const Node& n,
                                                                 std::string_view prefix);
  // A short JSON text valid for the node ("" when none was found, e.g. for kNever): required
  // keys filled with their own minimal values, minItems items. Used to close a document early.
  std::string minimal_text(uint32_t node, int depth = 0) const;

  // The JSON text of a string's content as it appears between quotes (escapes included).
  static std::string encode_name(const std::string& name);

 private:
  friend class JsonSchemaCompiler;
  std::vector<Node> nodes_;
  uint32_t root_ = kAny;
};

}  // namespace hibana
