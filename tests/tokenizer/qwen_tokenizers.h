// The real Qwen tokenizers from ../shared/assets, loaded once per test binary (loading one
// takes a good part of a second).
#pragma once

#include <memory>
#include <string>

#include "support/paths.h"
#include "tokenizer/tokenizer.h"

namespace hibana::test {

inline std::string qwen3_tokenizer_dir() {
  return shared_assets() + "/qwen3-tokenizer";
}
inline std::string qwen2_tokenizer_dir() {
  return shared_assets() + "/qwen2-tokenizer";
}

// tokenizer.json form (Qwen3: 151643 model ids + 26 added tokens).
inline const Tokenizer& qwen3() {
  static const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(qwen3_tokenizer_dir());
  return *tokenizer;
}

// vocab.json + merges.txt + tokenizer_config.json form (Qwen2: the same BPE, 3 added tokens).
inline const Tokenizer& qwen2() {
  static const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(qwen2_tokenizer_dir());
  return *tokenizer;
}

}  // namespace hibana::test
