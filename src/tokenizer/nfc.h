// NFC normalisation as the tokenizers package does it, with a fast path (internal to
// src/tokenizer/). Most text is already in NFC and most characters can never change under it,
// so the text is scanned once with a table of such "inert" characters and utf8proc only sees
// the short stretches around the others.
//
// tokenizers normalises with Unicode 9.0 data (its unicode-normalization-alignments crate), so
// combining marks and compositions added in Unicode 10.0 and later are, to it, unassigned
// characters: starters that never combine. utf8proc knows them (Unicode 15), so such
// characters are kept away from it and copied as they are; the list is in nfc.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hibana {

class NfcNormalizer {
 public:
  NfcNormalizer();  // builds the table from utf8proc's Unicode data (a few milliseconds)

  // The NFC form of `text` (well-formed UTF-8): `text` itself when nothing changes, else a view
  // of `buffer`, which it overwrites.
  std::string_view normalize(std::string_view text, std::string& buffer) const;

 private:
  // A character is inert when it is a starter (combining class 0) with NFC_Quick_Check=Yes: NFC
  // leaves it alone and nothing before it can combine with it or anything after it, so the
  // text can be normalised piecewise, cut before every inert character.
  bool inert(char32_t cp) const;
  // Newer than Unicode 9.0 and not inert to utf8proc: inert to tokenizers, never shown to
  // utf8proc.
  bool opaque(char32_t cp) const {
    return cp < kTableLimit && ((opaque_bits_[cp >> 6] >> (cp & 63)) & 1);
  }

  static constexpr char32_t kTableLimit = 0x30000;  // no decompositions above this
  std::vector<uint64_t> inert_bits_;
  std::vector<uint64_t> opaque_bits_;
};

}  // namespace hibana
