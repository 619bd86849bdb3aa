// Constrains generation to one JSON document, optionally one that satisfies a JSON Schema
// (json_schema.h says which keywords are enforced): tokens whose bytes cannot continue such a
// document are masked. Used for forced tool calls (tool_choice required / named) and JSON
// response formats.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/json_recogniser.h"
#include "engine/json_schema.h"
#include "engine/recogniser_constraint.h"
#include "engine/token_trie.h"

namespace hibana {

// A LogitsProcessor for one JSON document over a tokenizer's vocabulary. end_tokens are
// allowed only once the document is complete.
class JsonConstraint final : public RecogniserConstraint<JsonRecogniser> {
 public:
  // token_bytes[i] is the byte string of token i (the vocabulary trie is built here).
  JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                 std::vector<int32_t> end_tokens, bool object_only = true);
  // A vocabulary trie shared by many constraints, and the schema to satisfy (null: any JSON).
  JsonConstraint(std::shared_ptr<const TokenTrie> vocab, std::vector<int32_t> end_tokens,
                 std::shared_ptr<const JsonSchema> schema);
};

}  // namespace hibana
