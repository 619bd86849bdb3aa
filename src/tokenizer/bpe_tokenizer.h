// The byte-level BPE tokenizer behind Tokenizer (internal to src/tokenizer/): added tokens are
// cut out first, the text between them is NFC-normalised and split by the pre-tokenizer
// regexes, and each piece is byte-pair encoded (through a per-thread word cache).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_spec.h"
#include "tokenizer/vocabulary.h"
#include "tokenizer/word_cache.h"

namespace hibana {

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(const TokenizerSpec& spec);

  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const override;
  std::string token_bytes(int32_t id) const override { return std::string(vocab_.bytes(id)); }
  int64_t vocab_size() const override { return vocab_.size(); }
  std::optional<int32_t> token_id(std::string_view token) const override {
    return vocab_.find_text(token);
  }
  bool is_special(int32_t id) const override { return vocab_.is_special(id); }
  const std::string& chat_template() const override { return chat_template_; }

 private:
  // Everything one encode() call writes, kept between calls so that encoding allocates
  // nothing once warm. Each concurrent caller leases its own.
  struct Scratch {
    std::unique_ptr<RegexSplitter::Scratch> regex;
    BpeModel::Scratch bpe;
    WordCache cache;
    std::vector<Piece> pieces;
    std::string repaired;    // the input with invalid UTF-8 replaced
    std::string normalized;  // NFC output
    std::string prefixed;    // text with ByteLevel's prefix space
  };
  class ScratchLease;

  // Text between raw added tokens: normalise, then look for normalized added tokens.
  void encode_segment(std::string_view text, bool parse_special, Scratch& s,
                      std::vector<int32_t>& out) const;
  // Normalised text without added tokens: pre-tokenize and BPE.
  void encode_plain(std::string_view text, Scratch& s, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const;

  Vocabulary vocab_;
  BpeModel bpe_;
  RegexSplitter splitter_;
  std::optional<NfcNormalizer> nfc_;
  AddedTokenMatcher raw_added_;         // matched on the text as given
  AddedTokenMatcher normalized_added_;  // matched on the NFC-normalised text
  bool ignore_merges_;
  bool add_prefix_space_;
  std::string chat_template_;

  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<Scratch>> pool_;
};

}  // namespace hibana
