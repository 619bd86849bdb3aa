// Checks a RecogniserConstraint's masks against brute force: at every prefix of a document,
// the tokens apply() leaves unmasked must be exactly those a copy of the recogniser (fed the
// same prefix) accepts, byte by byte. The vocabulary is random byte strings over an alphabet
// that has every byte the recognisers treat specially (quotes, escapes, '<', newlines,
// control and UTF-8 bytes), plus each of those bytes alone, so the document can be fed one
// byte at a time.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace hibana::test {

// Token 0 has no bytes (the end token); then every printable ASCII byte and the alphabet's
// others alone; then random strings over the alphabet.
inline std::shared_ptr<std::vector<std::string>> random_vocabulary(uint32_t seed, int count) {
  const std::string alphabet =
      "abcdefghijklmnopqrstuvwxyzAB_0123456789 \"\\{}[]:,.-+eE<>/=\n\t\x01\xc3\xa9";
  auto v = std::make_shared<std::vector<std::string>>();
  v->push_back("");
  for (int c = 0x20; c < 0x7f; ++c) v->push_back(std::string(1, static_cast<char>(c)));
  for (char c : std::string("\n\t\x01\xc3\xa9")) v->push_back(std::string(1, c));
  // Pieces that cross the recognisers' structure in one token.
  for (const char* piece : {"</parameter>", "\n</parameter>\n<", "</function>",
                            "<parameter=", "<function=", "\":", "\", \"", "{\"", "\"}",
                            "a</param>b", "x\n</", "\\\"", "\\u00", "e9\"", "1, ", "]}"}) {
    v->push_back(piece);
  }
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> len(2, 9), pick(0, static_cast<int>(alphabet.size()) - 1),
      letter(0, 27);
  while (static_cast<int>(v->size()) < count) {
    std::string s;
    const int n = len(gen);
    for (int i = 0; i < n; ++i) s += gen() % 4 ? alphabet[letter(gen)] : alphabet[pick(gen)];
    v->push_back(s);
  }
  return v;
}

// Feeds `doc` byte by byte (through the single-byte tokens) to `constraint` and to
// `reference`, comparing the mask with brute force before every byte and at the end.
template <typename Constraint, typename Recogniser>
void expect_masks_match_brute_force(Constraint& constraint, Recogniser reference,
                                    const std::vector<std::string>& vocab, const std::string& doc) {
  const int64_t V = static_cast<int64_t>(vocab.size());
  for (size_t at = 0; at <= doc.size(); ++at) {
    std::vector<float> logits(static_cast<size_t>(V), 1.0f);
    constraint.apply(logits.data(), V);
    // Once complete, only the end token; before, what the recogniser accepts (and the end
    // token only as the way out when nothing is).
    std::vector<bool> want(static_cast<size_t>(V), false);
    bool any = false;
    for (int64_t t = 1; t < V && !reference.complete(); ++t) {
      Recogniser probe = reference;
      want[t] = probe.feed(vocab[t]);
      any = any || want[t];
    }
    want[0] = !any;
    int wrong = 0;
    for (int64_t t = 0; t < V && wrong < 5; ++t) {
      if ((logits[t] != -INFINITY) != want[t]) {
        ADD_FAILURE() << "after " << at << " bytes ('" << doc.substr(0, at) << "'): token " << t
                      << " '" << vocab[t] << "' " << (want[t] ? "masked" : "allowed");
        ++wrong;
      }
    }
    if (wrong) return;
    if (at == doc.size()) break;
    const int32_t byte_token = static_cast<int32_t>(
        std::find(vocab.begin() + 1, vocab.end(), std::string(1, doc[at])) - vocab.begin());
    ASSERT_LT(byte_token, V) << "no single-byte token for '" << doc[at] << "'";
    ASSERT_TRUE(reference.feed(vocab[byte_token])) << "the document itself is refused at " << at;
    constraint.accept(byte_token);
  }
}

}  // namespace hibana::test
