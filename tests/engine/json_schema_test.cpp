// JSON Schema enforcement by JsonRecogniser, keyword by keyword: valid documents are accepted,
// and invalid ones are rejected at the first byte that cannot lead to a valid document.
#include "engine/json_schema.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/json_recogniser.h"

namespace hibana {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> compile(const std::string& schema, bool object_root = false) {
  return JsonSchema::compile(Json::parse(schema), object_root);
}

// How many bytes of `doc` the recogniser takes, fed one at a time; doc.size() + 1 when it takes
// them all and the document is complete.
size_t taken(const std::shared_ptr<const JsonSchema>& schema, const std::string& doc) {
  JsonRecogniser r(schema);
  for (size_t i = 0; i < doc.size(); ++i) {
    if (!r.feed(doc[i])) return i;
  }
  return r.complete() ? doc.size() + 1 : doc.size();
}

bool accepts(const std::shared_ptr<const JsonSchema>& schema, const std::string& doc) {
  return taken(schema, doc) == doc.size() + 1;
}

// The byte where `doc` is rejected: the position of the first occurrence of `at` after `from`.
void expect_rejected_at(const std::shared_ptr<const JsonSchema>& schema, const std::string& doc,
                        const std::string& at, size_t from = 0) {
  const size_t where = doc.find(at, from);
  ASSERT_NE(where, std::string::npos) << at;
  EXPECT_EQ(taken(schema, doc), where) << doc << " should stop at '" << at << "'";
}

TEST(JsonSchema, TypesAreEnforcedByteByByte) {
  auto s = compile(R"({"type": "object", "properties": {
      "s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"},
      "b": {"type": "boolean"}, "z": {"type": "null"}, "a": {"type": "array"},
      "o": {"type": "object"}, "u": {"type": ["string", "null"]},
      "q": {"type": "string", "nullable": true}}})");
  EXPECT_TRUE(accepts(s, R"({"s": "x", "i": -12, "n": 1.5e3, "b": true, "z": null})"));
  EXPECT_TRUE(accepts(s, R"({"a": [1, "x"], "o": {"k": [null]}, "u": "y", "q": "z"})"));
  EXPECT_TRUE(accepts(s, R"({"u": null, "q": null, "n": 7})"));
  expect_rejected_at(s, R"({"s": 1})", "1");
  expect_rejected_at(s, R"({"i": 1.5})", ".");
  expect_rejected_at(s, R"({"i": 1e3})", "e");
  expect_rejected_at(s, R"({"b": null})", "n", 5);
  expect_rejected_at(s, R"({"z": 0})", "0");
  expect_rejected_at(s, R"({"a": {}})", "{", 1);
  expect_rejected_at(s, R"({"o": []})", "[");
  expect_rejected_at(s, R"({"u": 1})", "1");
  expect_rejected_at(s, R"(["x"])", "[");  // the root is an object
}

// Numbers the server passes on exactly: longer integer parts came back as doubles (a 155-digit
// integer argument was returned as 1.5e+155), and a model can run on writing digits.
TEST(JsonSchema, NumbersStayWithinWhatPassesThroughExactly) {
  auto s = compile(R"({"type": "object", "properties": {
      "i": {"type": "integer"}, "n": {"type": "number"}}})");
  const std::string d18(18, '7'), f20(20, '3');
  EXPECT_TRUE(accepts(s, "{\"i\": -" + d18 + ", \"n\": " + d18 + "." + f20 + "e-123}"));
  expect_rejected_at(s, "{\"i\": " + d18 + "7}", "7}");    // the 19th digit
  expect_rejected_at(s, "{\"n\": 1." + f20 + "3}", "3}");  // the 21st
  expect_rejected_at(s, R"({"n": 1e+1234})", "4");
}

TEST(JsonSchema, AdditionalProperties) {
  auto closed = compile(R"({"properties": {"a": {}, "ab": {}}, "additionalProperties": false})");
  EXPECT_TRUE(accepts(closed, R"({"a": 1, "ab": 2})"));
  expect_rejected_at(closed, R"({"b": 1})", "b");
  expect_rejected_at(closed, R"({"abc": 1})", "c");
  expect_rejected_at(closed, R"({"a": 1, "ab": 2, "x": 3})", ",", 12);  // no key is left
  auto typed = compile(R"({"properties": {"a": {"type": "string"}},
                           "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(accepts(typed, R"({"a": "x", "other": 2})"));
  expect_rejected_at(typed, R"({"other": "x"})", "\"x");
  expect_rejected_at(typed, R"({"a\u0041": 1})", "\\");  // undeclared keys are written plainly
  auto open = compile(R"({"properties": {"a": {"type": "string"}}})");
  EXPECT_TRUE(accepts(open, R"({"zz": [1, {"y": null}], "a": "x"})"));
}

TEST(JsonSchema, RequiredKeysBeforeTheObjectCloses) {
  auto s = compile(R"({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"]})");
  EXPECT_TRUE(accepts(s, R"({"a": 1})"));
  EXPECT_TRUE(accepts(s, R"({"b": 1, "a": 2})"));
  expect_rejected_at(s, "{}", "}");
  expect_rejected_at(s, R"({"b": 1})", "}");
  auto nested = compile(R"({"properties": {"o": {"type": "object", "required": ["x"]}}})");
  expect_rejected_at(nested, R"({"o": {"y": 1}})", "}");
  EXPECT_TRUE(accepts(nested, R"({"o": {"y": 1, "x": 2}})"));
}

TEST(JsonSchema, EnumAndConstAreWrittenExactly) {
  auto s = compile(R"({"properties": {
      "u": {"enum": ["celsius", "fahrenheit", 3, 30.5, null, {"k": [1]}]},
      "c": {"const": "fixed"}, "t": {"type": "string", "enum": ["x", 1]}}})");
  for (const char* ok :
       {R"({"u": "celsius"})", R"({"u": "fahrenheit"})", R"({"u": 3})", R"({"u": 30.5})",
        R"({"u": null})", R"({"u": {"k":[1]}})", R"({"c": "fixed", "t": "x"})"}) {
    EXPECT_TRUE(accepts(s, ok)) << ok;
  }
  expect_rejected_at(s, R"({"u": "celsiux"})", "x");
  expect_rejected_at(s, R"({"u": "cel"})", "\"}");  // a prefix of a value is not a value
  expect_rejected_at(s, R"({"u": "celsius2"})", "2");
  expect_rejected_at(s, R"({"u": 4})", "4");
  expect_rejected_at(s, R"({"u": 30})", "}");  // 30 is not 30.5
  expect_rejected_at(s, R"({"u": 3.0})", ".");
  expect_rejected_at(s, R"({"u": {"k": [1]}})", " [");  // compact form only
  expect_rejected_at(s, R"({"u": true})", "t");
  expect_rejected_at(s, R"({"c": "fixe"})", "\"}");
  expect_rejected_at(s, R"({"t": 1})", "1");  // the enum value 1 is not a string
  auto none = compile(R"({"properties": {"a": {"enum": []}}})");
  expect_rejected_at(none, R"({"a": "x"})", "\"x");
}

TEST(JsonSchema, KeysNeverRepeat) {
  auto any = JsonSchema::any(true);
  expect_rejected_at(any, R"({"a": 1, "a": 2})", "\":", 9);
  EXPECT_TRUE(accepts(any, R"({"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]})"));
  auto s = compile(R"({"properties": {"a": {}, "b": {}}, "additionalProperties": false})");
  expect_rejected_at(s, R"({"a": 1, "a": 2})", "a", 6);  // only "b" is left
}

TEST(JsonSchema, AnyOfBranchesLiveInParallel) {
  auto s = compile(R"({"properties": {"v": {"anyOf": [
      {"type": "string", "enum": ["a"]},
      {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
       "additionalProperties": false},
      {"type": "array", "items": {"type": "boolean"}}]}}})");
  EXPECT_TRUE(accepts(s, R"({"v": "a"})"));
  EXPECT_TRUE(accepts(s, R"({"v": {"x": 1}})"));
  EXPECT_TRUE(accepts(s, R"({"v": [true, false]})"));
  expect_rejected_at(s, R"({"v": "b"})", "b");
  expect_rejected_at(s, R"({"v": {}})", "}");
  expect_rejected_at(s, R"({"v": [1]})", "1");
  expect_rejected_at(s, R"({"v": 1})", "1");
  // Two object readings of the same text: each key and value keeps some alive.
  auto two = compile(R"({"oneOf": [
      {"properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false},
      {"properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["b"],
       "additionalProperties": false}]})");
  EXPECT_TRUE(accepts(two, R"({"a": 1})"));
  EXPECT_TRUE(accepts(two, R"({"a": "s", "b": 2})"));
  expect_rejected_at(two, R"({"a": "s"})", "}");
  expect_rejected_at(two, R"({"a": 1, "b": 2})", ",");
  // The node's own keywords hold in every alternative.
  auto merged = compile(R"({"type": "object", "required": ["k"],
                            "anyOf": [{"properties": {"k": {"const": 1}}},
                                      {"properties": {"k": {"const": 2}}}]})");
  EXPECT_TRUE(accepts(merged, R"({"k": 2})"));
  expect_rejected_at(merged, R"({"k": 3})", "3");
  expect_rejected_at(merged, R"({"j": 1})", "}");
}

TEST(JsonSchema, LocalReferencesAndRecursion) {
  auto s = compile(R"({"$defs": {
      "unit": {"enum": ["c", "f"]},
      "node": {"type": "object", "properties": {
          "v": {"$ref": "#/$defs/unit"},
          "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        "required": ["v"], "additionalProperties": false}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(accepts(s, R"({"v": "c", "next": {"v": "f", "next": {"v": "c", "next": null}}})"));
  expect_rejected_at(s, R"({"v": "c", "next": {"v": "x"}})", "x\"}");
  expect_rejected_at(s, R"({"next": null})", "}");
  auto old = compile(R"({"definitions": {"n": {"type": "integer"}},
                         "properties": {"a": {"$ref": "#/definitions/n", "description": "d"}}})");
  EXPECT_TRUE(accepts(old, R"({"a": 5})"));
  expect_rejected_at(old, R"({"a": "5"})", "\"5");
  // A reference with constraints next to it: both hold.
  auto both = compile(R"({"$defs": {"o": {"properties": {"x": {"type": "integer"}}}},
                          "properties": {"p": {"$ref": "#/$defs/o", "required": ["x"]}}})");
  EXPECT_TRUE(accepts(both, R"({"p": {"x": 1}})"));
  expect_rejected_at(both, R"({"p": {}})", "}");
  // A cycle of references with nothing else compiles (and accepts anything it can).
  EXPECT_NO_THROW(compile(R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                              "properties": {"x": {"$ref": "#/$defs/a"}}})"));
}

TEST(JsonSchema, ArraysItemsAndBounds) {
  auto s = compile(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1,
                       "maxItems": 2})");
  EXPECT_TRUE(accepts(s, "[1]"));
  EXPECT_TRUE(accepts(s, "[1, 2]"));
  expect_rejected_at(s, "[]", "]");
  expect_rejected_at(s, "[1, 2, 3]", ",", 3);
  expect_rejected_at(s, R"([1, "a"])", "\"");
  auto none = compile(R"({"type": "object", "properties": {"a": {"maxItems": 0}}})");
  EXPECT_TRUE(accepts(none, R"({"a": []})"));
  expect_rejected_at(none, R"({"a": [1]})", "1");
}

TEST(JsonSchema, AllOfAndBooleanSchemas) {
  auto s = compile(R"({"allOf": [
      {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})");
  EXPECT_TRUE(accepts(s, R"({"a": 1, "b": "x"})"));
  expect_rejected_at(s, R"({"a": 1})", "}");
  expect_rejected_at(s, R"({"b": 1})", "1");
  auto forbidden = compile(R"({"properties": {"a": false, "b": true}})");
  EXPECT_TRUE(accepts(forbidden, R"({"b": [1], "c": 2})"));
  expect_rejected_at(forbidden, R"({"a": 1})", "\":");
  EXPECT_TRUE(accepts(compile("true"), "[1, {\"x\": null}]"));
  EXPECT_EQ(taken(compile("false"), "{}"), 0u);
}

TEST(JsonSchema, UnsupportedKeywordsAcceptAnything) {
  auto s = compile(R"({"type": "object", "properties": {
      "p": {"type": "string", "pattern": "^x$", "minLength": 5, "format": "date"},
      "n": {"type": "integer", "minimum": 10, "multipleOf": 3},
      "r": {"$ref": "https://example.com/schema.json"},
      "t": {"type": "array", "items": [{"type": "string"}]},
      "m": {"patternProperties": {"^x": {"type": "string"}}, "additionalProperties": false}},
      "x-vendor": {"anything": 1}})");
  EXPECT_TRUE(accepts(s, R"({"p": "ab", "n": 1, "r": [true], "t": [1, 2], "m": {"y": 1}})"));
}

TEST(JsonSchema, MalformedSchemasThrowWithThePath) {
  auto error = [](const std::string& schema) {
    try {
      compile(schema);
    } catch (const JsonSchemaError& e) {
      return e.path() + " | " + e.problem();
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(R"({"type": 5})"), "type | expected a type name or an array of them");
  EXPECT_EQ(error(R"({"properties": {"a": {"type": "strin"}}})"),
            "properties.a.type | unknown type 'strin'");
  EXPECT_EQ(error(R"({"properties": []})"), "properties | expected an object of schemas");
  EXPECT_EQ(error(R"({"properties": {"a": 3}})"),
            "properties.a | expected a schema (an object or a boolean)");
  EXPECT_EQ(error(R"({"required": "a"})"), "required | expected an array");
  EXPECT_EQ(error(R"({"enum": 3})"), "enum | expected an array");
  EXPECT_EQ(error(R"({"minItems": -1})"), "minItems | expected a non-negative integer");
  EXPECT_EQ(error(R"({"anyOf": []})"), "anyOf | expected a non-empty array of schemas");
  EXPECT_EQ(error(R"({"items": {"$ref": "#/$defs/missing"}})"),
            "items.$ref | '#/$defs/missing' points to nothing in the schema");
  EXPECT_EQ(error(R"({"$ref": 1})"), "$ref | expected a string");
  EXPECT_EQ(error("[]"), " | expected a schema (an object or a boolean)");
}

TEST(JsonSchema, TaggedUnionPicksOneVariant) {
  auto s = JsonSchema::tagged_union(
      "name", "arguments",
      {{"get_weather", Json::parse(R"({"properties": {"unit": {"enum": ["c", "f"]}},
                                        "required": ["unit"]})")},
       {"search", Json::parse(R"({"properties": {"q": {"type": "string"}}, "required": ["q"],
                                   "additionalProperties": false})")},
       {"noop", Json(true)}},
      true);
  EXPECT_TRUE(accepts(s, R"({"name": "search", "arguments": {"q": "x"}})"));
  EXPECT_TRUE(accepts(s, R"({"arguments": {"unit": "f"}, "name": "get_weather"})"));
  EXPECT_TRUE(accepts(s, R"({"name": "noop", "arguments": {}})"));
  expect_rejected_at(s, R"({"name": "get_weather", "arguments": {"q": "x"}})", "}");
  expect_rejected_at(s, R"({"name": "nope"})", "p");
  expect_rejected_at(s, R"({"name": "noop", "arguments": []})", "[");
  expect_rejected_at(s, R"({"name": "noop"})", "}");
  expect_rejected_at(s, R"({"name": "noop", "arguments": {}, "x": 1})", ",", 30);
  try {
    JsonSchema::tagged_union("name", "arguments", {{"bad", Json::parse(R"({"type": 5})")}}, true);
    ADD_FAILURE() << "no error";
  } catch (const JsonSchemaError& e) {
    EXPECT_EQ(e.path(), "bad");
    EXPECT_EQ(e.problem(), "type: expected a type name or an array of them");
  }
}

// Whatever the prefix of a valid document, prefix + closing() is a complete valid document.
TEST(JsonSchema, ClosingSatisfiesTheSchema) {
  auto s = compile(R"({"type": "object", "properties": {
      "unit": {"enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"},
                                            "minItems": 2},
      "where": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": false},
      "mode": {"anyOf": [{"const": "fast"}, {"type": "boolean"}]}},
      "required": ["unit", "days", "tags", "where"], "additionalProperties": false})");
  const std::string doc =
      R"({"where": {"city": "Paris \u00e9"}, "days": -12, "tags": ["a", "b\n"], )"
      R"("mode": "fast", "unit": "fahrenheit"})";
  ASSERT_TRUE(accepts(s, doc));
  for (size_t cut = 0; cut <= doc.size(); ++cut) {
    JsonRecogniser r(s);
    ASSERT_TRUE(r.feed(doc.substr(0, cut))) << cut;
    const std::string full = doc.substr(0, cut) + r.closing();
    EXPECT_TRUE(accepts(s, full)) << full;
    EXPECT_TRUE(Json::accept(full)) << full;
  }
  JsonRecogniser r(s);
  EXPECT_EQ(r.closing(), R"({"days":0,"tags":["",""],"unit":"celsius","where":{"city":""}})");
  ASSERT_TRUE(r.feed(R"({"unit": "fahr)"));
  EXPECT_EQ(r.closing(), R"(enheit","days":0,"tags":["",""],"where":{"city":""}})");
  JsonRecogniser k(s);
  ASSERT_TRUE(k.feed(R"({"ta)"));
  EXPECT_EQ(k.closing(), R"(gs":["",""],"days":0,"unit":"celsius","where":{"city":""}})");
}

// When the schema leaves no way to finish, closing() still gives well-formed JSON.
TEST(JsonSchema, ClosingAnUnsatisfiableSchemaIsStillJson) {
  auto s = compile(R"({"type": "object", "properties": {"a": {"anyOf": [
      {"type": "array", "items": false, "minItems": 1}]}}, "required": ["a"]})");
  JsonRecogniser r(s);
  ASSERT_TRUE(r.feed("{"));
  std::string full = "{";
  full += r.closing();
  EXPECT_TRUE(Json::accept(full)) << full;
}

}  // namespace
}  // namespace hibana
