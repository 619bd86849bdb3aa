#include "engine/json_constraint.h"

#include <algorithm>
#include <cmath>

namespace hibana {

JsonConstraint::JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                               std::vector<int32_t> end_tokens, bool object_only)
    : JsonConstraint(std::make_shared<TokenTrie>(std::move(token_bytes)), std::move(end_tokens),
                     JsonSchema::any(object_only)) {}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTrie> vocab,
                               std::vector<int32_t> end_tokens,
                               std::shared_ptr<const JsonSchema> schema)
    : vocab_(std::move(vocab)),
      end_tokens_(std::move(end_tokens)),
      recogniser_(std::move(schema)),
      probes_(vocab_->max_depth() + 1),
      at_(vocab_->max_depth() + 1) {}

void JsonConstraint::apply(float* logits, int64_t vocab) {
  allowed_.assign(static_cast<size_t>(std::max<int64_t>(vocab, 0)), 0);
  int64_t allowed = 0;
  if (recogniser_.complete()) {
    for (int32_t e : end_tokens_) {
      if (e >= 0 && e < vocab && !allowed_[e]) {
        allowed_[e] = 1;
        ++allowed;
      }
    }
  } else {
    // Depth-first over the trie: at_[d] is the state after the node's first d bytes (its own
    // slot probes_[d], or its parent's state when the byte changes nothing); a rejected byte
    // skips the node's whole subtree.
    const auto& nodes = vocab_->nodes();
    const auto& order = vocab_->order();
    at_[0] = &recogniser_.state();
    for (size_t i = 0; i < nodes.size();) {
      const TokenTrie::Node& n = nodes[i];
      const JsonRecogniser::State& parent = *at_[n.depth - 1];
      if (JsonRecogniser::inert(parent, n.byte)) {
        at_[n.depth] = &parent;
      } else {
        JsonRecogniser::State& s = probes_[n.depth];
        s = parent;
        if (!recogniser_.advance(s, n.byte)) {
          i = n.skip;
          continue;
        }
        at_[n.depth] = &s;
      }
      for (uint32_t k = n.tokens_begin; k < n.tokens_begin + n.tokens_count; ++k) {
        const int32_t t = order[k];
        if (t < vocab && !allowed_[t]) {
          allowed_[t] = 1;
          ++allowed;
        }
      }
      ++i;
    }
    for (int32_t e : end_tokens_) {  // not before the document is complete
      if (e >= 0 && e < vocab && allowed_[e]) {
        allowed_[e] = 0;
        --allowed;
      }
    }
  }
  if (allowed == 0) {
    // Nothing can continue (a vocabulary without the needed bytes): let an end token through so
    // the request finishes instead of sampling from an all -inf row.
    for (int32_t e : end_tokens_) {
      if (e >= 0 && e < vocab) allowed_[e] = 2;
    }
  }
  for (int64_t t = 0; t < vocab; ++t) {
    if (allowed_[t] == 0) {
      logits[t] = -INFINITY;
    } else if (allowed_[t] == 2) {
      logits[t] = 0.0f;
    }
  }
}

void JsonConstraint::accept(int32_t token) {
  const auto& bytes = vocab_->token_bytes();
  if (token >= 0 && token < static_cast<int32_t>(bytes.size())) recogniser_.feed(bytes[token]);
}

}  // namespace hibana
