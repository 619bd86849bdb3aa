#include "engine/json_constraint.h"

namespace hibana {

JsonConstraint::JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                               std::vector<int32_t> end_tokens, bool object_only)
    : JsonConstraint(std::make_shared<TokenTrie>(std::move(token_bytes)), std::move(end_tokens),
                     JsonSchema::any(object_only)) {}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTrie> vocab,
                               std::vector<int32_t> end_tokens,
                               std::shared_ptr<const JsonSchema> schema)
    : RecogniserConstraint(std::move(vocab), std::move(end_tokens),
                           JsonRecogniser(std::move(schema))) {}

}  // namespace hibana
