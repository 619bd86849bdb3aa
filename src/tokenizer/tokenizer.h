// Byte-level BPE tokenizer as Qwen checkpoints ship it (tokenizer.json, or vocab.json +
// merges.txt + tokenizer_config.json), and a streaming detokenizer.
//
// Encoding matches the Hugging Face tokenizers package byte for byte (checked against
// tokenizers 0.23 by tests/tokenizer/golden_test.cpp): added tokens are cut out first (longest
// match at the leftmost position, honouring lstrip/rstrip/single_word/normalized), the rest is
// NFC-normalised when tokenizer.json says so, split by the pre-tokenizer regexes (PCRE2 with
// JIT) and byte-pair encoded. All methods are const and safe to call from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hibana {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `path` is a model directory (tokenizer.json, or vocab.json + merges.txt; plus
  // tokenizer_config.json and chat_template.jinja when present) or a tokenizer.json file.
  // Throws Error naming the file and the problem.
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  // Added/special tokens written in the text are matched whole when parse_special is true.
  // With parse_special false every added token (special or not, <think> included) is encoded as
  // ordinary text; the tokenizers package's encode_special_tokens only does that for special
  // ones. `text` should be UTF-8: invalid bytes are first replaced with U+FFFD (one per
  // maximal ill-formed subpart, like Python's errors="replace"), never an error.
  virtual std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const = 0;
  // Concatenated bytes of the tokens (special tokens included unless skip_special), with
  // invalid UTF-8 replaced as the ByteLevel decoder does (String::from_utf8_lossy). Ids
  // without a token (out of range, or holes) add nothing, as in tokenizers.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  // The raw bytes one token stands for (for an added token, its content as the ByteLevel
  // decoder reads it: the content itself for Qwen's; empty for ids without a token).
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;  // highest id + 1
  // The id of a token written as the vocabulary writes it, like tokenizers' token_to_id: added
  // tokens by content ("<|im_end|>"), model tokens in the byte-level alphabet ("Ġworld").
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // The chat template found beside the tokenizer (empty when there is none):
  // chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or the entry
  // named "default" of a list). The file wins, as in transformers.
  virtual const std::string& chat_template() const = 0;
};

// Turns a stream of ids into text without ever emitting a partial UTF-8 sequence: bytes of an
// incomplete character are held back until the token that completes it arrives. Bytes that can
// never complete a character come out as U+FFFD at once; everything push() and flush() return,
// concatenated, equals decode() of the same ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int32_t id);
  // Whatever is still held back (invalid or truncated UTF-8 comes out as U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace hibana
