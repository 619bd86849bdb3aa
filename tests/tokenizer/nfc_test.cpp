// The fast NFC path must agree with utf8proc's plain NFC everywhere, including where it skips
// utf8proc because nothing can change.
#include "tokenizer/nfc.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <random>

#include "tokenizer/utf8.h"

namespace hibana {
namespace {

std::string reference_nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  std::string result(reinterpret_cast<char*>(out));
  std::free(out);
  return result;
}

TEST(Nfc, KnownCases) {
  NfcNormalizer nfc;
  std::string buffer;
  EXPECT_EQ(nfc.normalize("plain", buffer), "plain");
  EXPECT_EQ(nfc.normalize("cafe\u0301", buffer), "caf\u00e9");
  EXPECT_EQ(nfc.normalize("\u1100\u1161\u11a8", buffer), "\uac01");
  EXPECT_EQ(nfc.normalize("\uac00\u11a8", buffer), "\uac01");  // LV syllable + T jamo
  EXPECT_EQ(nfc.normalize("\u212b", buffer), "\u00c5");        // ANGSTROM SIGN (singleton)
  EXPECT_EQ(nfc.normalize("a\u0323\u0302x", buffer),
            "\u1ead"
            "x");
  EXPECT_EQ(nfc.normalize("q\u0307\u0323", buffer), "q\u0323\u0307");  // reordered only
  EXPECT_EQ(nfc.normalize("\u09c7\u09be", buffer), "\u09cb");          // a vowel-sign second
  // tokenizers normalises with Unicode 9.0 data: marks and compositions added later are left
  // alone (utf8proc alone would reorder the first and compose the second to U+11938).
  EXPECT_EQ(nfc.normalize("a\u1ac1\u0316", buffer), "a\u1ac1\u0316");
  EXPECT_EQ(nfc.normalize("\U00011935\U00011930", buffer), "\U00011935\U00011930");
  EXPECT_EQ(nfc.normalize("e\u0301\u1ac1\u0316", buffer), "\u00e9\u1ac1\u0316");
  // Unchanged text comes back as the same view, not a copy.
  const std::string already = "déjà vu 中文 😀";
  EXPECT_EQ(nfc.normalize(already, buffer).data(), already.data());
}

// Only characters of Unicode 9.0 and earlier, where tokenizers and utf8proc agree.
TEST(Nfc, AgreesWithUtf8procOnRandomMixtures) {
  NfcNormalizer nfc;
  // Starters, combining marks of several classes, Hangul jamo and syllables, singletons,
  // composition exclusions, Indic two-part vowels, and plain ASCII.
  const std::vector<char32_t> pool = {
      'a',    'e',     'o',    'A',    'x',     ' ',     0x00E9,  0x00C5,  0x0300,  0x0301,
      0x0302, 0x0308,  0x0323, 0x0327, 0x0345,  0x0344,  0x0340,  0x0F73,  0x0F71,  0x0F72,
      0x05B8, 0x05C1,  0x05E9, 0x1100, 0x1161,  0x11A8,  0xAC00,  0xAC01,  0x212B,  0x2126,
      0xF900, 0x2F800, 0x0915, 0x093C, 0x0958,  0x09C7,  0x09BE,  0x09D7,  0x0B47,  0x0B3E,
      0x0BC6, 0x0BD7,  0x0CBF, 0x0CD5, 0x1B05,  0x1B35,  0x3099,  0x304B,  0x30AB,  0x1E9B,
      0x1E0A, 0x0386,  0x1F00, 0x0313, 0x1D15E, 0x1D165, 0x11131, 0x11127, 0x110BA, 0x110AB,
      0x4E2D, 0x1F600, 0xFB1D, 0x05B4};
  std::mt19937 rng(1234);
  std::string buffer;
  for (int round = 0; round < 20000; ++round) {
    std::string s;
    const size_t n = 1 + rng() % 8;
    for (size_t i = 0; i < n; ++i) utf8::append_codepoint(pool[rng() % pool.size()], s);
    ASSERT_EQ(std::string(nfc.normalize(s, buffer)), reference_nfc(s)) << "round " << round;
  }
}

}  // namespace
}  // namespace hibana
