// The pre-tokenizer: cuts text into the pieces BPE sees, with the regexes tokenizer.json names
// (Split, "Isolated": every match and every gap between matches is a piece). Runs on PCRE2 with
// its JIT, UTF and Unicode properties (internal to src/tokenizer/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hibana {

struct Piece {
  uint32_t begin;
  uint32_t end;
};

// Rewrites a pattern written for Oniguruma / Rust regex (what the tokenizers package runs) into
// PCRE2 syntax with the same meaning: \s and \S become explicit White_Space classes, because
// PCRE2's \s also takes U+180E (it follows an older Unicode there).
std::string to_pcre2_pattern(std::string_view pattern);

class RegexSplitter {
 public:
  // Throws Error(corrupt_data) naming `source` when a pattern does not compile.
  RegexSplitter(const std::vector<std::string>& patterns, const std::string& source);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Per-thread matching state (PCRE2 match data, JIT stack); reuse it across calls.
  class Scratch;
  std::unique_ptr<Scratch> make_scratch() const;

  // Replaces `out` with the pieces of `text` (well-formed UTF-8), in order, none empty.
  void split(std::string_view text, Scratch& scratch, std::vector<Piece>& out) const;

  bool empty() const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> patterns_;
};

class RegexSplitter::Scratch {
 public:
  ~Scratch();

 private:
  friend class RegexSplitter;
  struct State;
  std::vector<std::unique_ptr<State>> states_;  // one per pattern
  std::vector<Piece> level_;                    // pieces between passes of a multi-regex split
};

}  // namespace hibana
