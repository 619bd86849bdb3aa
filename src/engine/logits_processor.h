// A per-request hook between the model's logits and the sampler: it may forbid tokens (set
// their logit to -inf) and it learns each token that was chosen. Constrained decoding (forced
// tool calls, JSON output) is built on it.
#pragma once

#include <cstdint>
#include <string>

namespace hibana {

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // Called before sampling; must leave at least one token allowed.
  virtual void apply(float* logits, int64_t vocab) = 0;
  // Called with the token that was sampled.
  virtual void accept(int32_t token) = 0;
  // True once the constrained output is complete: the engine then ends the request (stop).
  virtual bool complete() const { return false; }
  // Text that completes the constrained output when generation ends before complete()
  // (max_tokens, the end of the context): the server appends it so that the output stays
  // well-formed. Empty when complete() or when there is nothing to complete. Called once the
  // request has finished, never while the engine is using the processor.
  virtual std::string closing() const { return {}; }
};

}  // namespace hibana
