#include "tokenizer/nfc.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <utility>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace hibana {

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// utf8proc's NFC of a stretch of well-formed UTF-8, appended to out.
void append_nfc(std::string_view text, std::string& out) {
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(result);
  if (n < 0) {
    throw Error(ErrorKind::internal,
                std::string("NFC normalisation failed: ") + utf8proc_errmsg(n));
  }
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

// Characters assigned after Unicode 9.0 that utf8proc (Unicode 15) would reorder, compose or
// combine: combining marks with a non-zero class and the one new composition second
// (U+11930). Derived from utf8proc's data and Unicode's DerivedAge; tokenizers 0.23 leaves
// text around them unnormalised, as tests/tokenizer/nfc_test.cpp checks.
constexpr std::pair<char32_t, char32_t> kNewerThanUnicode9[] = {
    {0x07FD, 0x07FD},   {0x0898, 0x089F},   {0x08CA, 0x08D3},   {0x09FE, 0x09FE},
    {0x0C3C, 0x0C3C},   {0x0D3B, 0x0D3C},   {0x0EBA, 0x0EBA},   {0x1715, 0x1715},
    {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFA},   {0xA82C, 0xA82C},   {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85},
    {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A},
    {0x11930, 0x11930}, {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0},
    {0x11A34, 0x11A34}, {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42},
    {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1},
    {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF},
    {0x1E4EC, 0x1E4EF},
};

}  // namespace

NfcNormalizer::NfcNormalizer()
    : inert_bits_(kTableLimit / 64, ~uint64_t{0}), opaque_bits_(kTableLimit / 64, 0) {
  auto clear = [&](char32_t cp) { inert_bits_[cp >> 6] &= ~(uint64_t{1} << (cp & 63)); };
  utf8proc_int32_t decomposition[16];
  std::string one;
  std::string normalized;
  for (char32_t cp = 0x80; cp < kTableLimit; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates never reach us
    const utf8proc_property_t* prop = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (prop->combining_class != 0) clear(cp);
    int boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(
        static_cast<utf8proc_int32_t>(cp), decomposition, 16, UTF8PROC_DECOMPOSE, &boundclass);
    if (n <= 0 || (n == 1 && static_cast<char32_t>(decomposition[0]) == cp)) continue;
    // Anything after the first character of a canonical decomposition may combine with what
    // precedes it (NFC_Quick_Check=Maybe); this is a superset of the composition seconds.
    for (utf8proc_ssize_t k = 1; k < n && k < 16; ++k) {
      const auto second = static_cast<char32_t>(decomposition[k]);
      if (second < kTableLimit) clear(second);
    }
    // Characters NFC replaces (singletons, exclusions) are never inert (NFC_Quick_Check=No).
    one.clear();
    utf8::append_codepoint(cp, one);
    normalized.clear();
    append_nfc(one, normalized);
    if (normalized != one) clear(cp);
  }
  for (const auto& [first, last] : kNewerThanUnicode9) {
    for (char32_t cp = first; cp <= last; ++cp) {
      inert_bits_[cp >> 6] |= uint64_t{1} << (cp & 63);
      opaque_bits_[cp >> 6] |= uint64_t{1} << (cp & 63);
    }
  }
}

bool NfcNormalizer::inert(char32_t cp) const {
  if (cp < kTableLimit) return (inert_bits_[cp >> 6] >> (cp & 63)) & 1;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class == 0;
}

std::string_view NfcNormalizer::normalize(std::string_view text, std::string& buffer) const {
  const size_t n = text.size();
  size_t boundary = 0;  // where a stretch would start: the last inert character (or after it)
  size_t copied = 0;    // text before this is already in buffer (once something changed)
  bool changed = false;
  size_t i = 0;
  while (i < n) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      boundary = i++;
      continue;
    }
    size_t len = utf8::lead_length(b);
    const char32_t cp = utf8::decode(text.data() + i, len);
    if (inert(cp)) {
      // An opaque character combines with nothing, so the stretch starts after it.
      boundary = opaque(cp) ? i + len : i;
      i += len;
      continue;
    }
    // Extend the stretch to the next inert character and normalise it whole.
    size_t end = i + len;
    while (end < n) {
      const auto c = static_cast<unsigned char>(text[end]);
      if (c < 0x80) break;
      len = utf8::lead_length(c);
      if (inert(utf8::decode(text.data() + end, len))) break;
      end += len;
    }
    const std::string_view stretch = text.substr(boundary, end - boundary);
    if (!changed) {
      // Nothing copied yet: normalise into the empty buffer and only keep it on a change.
      buffer.clear();
      append_nfc(stretch, buffer);
      if (buffer != stretch) {
        std::string normalized_stretch = std::move(buffer);
        buffer.assign(text.substr(0, boundary));
        buffer.append(normalized_stretch);
        changed = true;
        copied = end;
      }
    } else {
      buffer.append(text.substr(copied, boundary - copied));
      append_nfc(stretch, buffer);
      copied = end;
    }
    i = end;
  }
  if (!changed) return text;
  buffer.append(text.substr(copied));
  return buffer;
}

}  // namespace hibana
