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
#include "engine/logits_processor.h"
#include "engine/token_trie.h"

namespace hibana {

// A LogitsProcessor for one JSON document over a tokenizer's vocabulary. end_tokens are
// allowed only once the document is complete.
class JsonConstraint final : public LogitsProcessor {
 public:
  // token_bytes[i] is the byte string of token i (the vocabulary trie is built here).
  JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                 std::vector<int32_t> end_tokens, bool object_only = true);
  // A vocabulary trie shared by many constraints, and the schema to satisfy (null: any JSON).
  JsonConstraint(std::shared_ptr<const TokenTrie> vocab, std::vector<int32_t> end_tokens,
                 std::shared_ptr<const JsonSchema> schema);
  void apply(float* logits, int64_t vocab) override;
  void accept(int32_t token) override;
  bool complete() const override { return recogniser_.complete(); }
  std::string closing() const override { return recogniser_.closing(); }

 private:
  std::shared_ptr<const TokenTrie> vocab_;
  std::vector<int32_t> end_tokens_;
  JsonRecogniser recogniser_;
  std::vector<JsonRecogniser::State> probes_;  // the walk's states, one slot per trie depth
  std::vector<const JsonRecogniser::State*> at_;
  std::vector<uint8_t> allowed_;
};

}  // namespace hibana
