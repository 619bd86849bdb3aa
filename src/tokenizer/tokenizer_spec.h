// What the tokenizer files on disk say, read into plain data before any table is built
// (internal to src/tokenizer/). Two on-disk forms lead here: tokenizer.json (the tokenizers
// package's single file) and vocab.json + merges.txt + tokenizer_config.json (the older
// transformers form).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hibana {

struct AddedTokenSpec {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched on the NFC-normalised text rather than the raw text
  bool special = false;     // dropped by decode(skip_special = true)
};

struct TokenizerSpec {
  std::string source;  // the file the model came from, for messages
  // Vocabulary entries as written: text in the byte-level alphabet ("Ġworld") and id.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Merge rules in rank order, as the two texts they join.
  std::vector<std::pair<std::string, std::string>> merges;
  bool ignore_merges = false;  // a pre-token that is itself in the vocabulary skips the merges
  std::vector<AddedTokenSpec> added_tokens;
  bool nfc = false;  // NFC-normalise the text between added tokens
  // Split regexes (Oniguruma syntax, as tokenizers writes them), applied in order; every match
  // and every gap between matches becomes a piece ("Isolated" behaviour).
  std::vector<std::string> split_patterns;
  bool add_prefix_space = false;  // ByteLevel pre-tokenizer: prepend " " to each text segment
  std::string chat_template;
};

// GPT-2's pre-tokenizer regex (what a ByteLevel pre-tokenizer with use_regex applies).
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2/Qwen3's pre-tokenizer regex (what Qwen2Tokenizer uses for vocab.json + merges.txt).
inline constexpr const char* kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Reads a tokenizer.json file. Throws Error naming the file and the problem.
TokenizerSpec read_tokenizer_json(const std::string& path);

// Reads vocab.json + merges.txt (+ tokenizer_config.json, added_tokens.json) in `dir`.
TokenizerSpec read_vocab_and_merges(const std::string& dir);

}  // namespace hibana
