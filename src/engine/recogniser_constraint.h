// The token walk shared by the byte-recogniser constraints (JsonConstraint, XmlCallConstraint):
// a LogitsProcessor that masks every token whose bytes the recogniser cannot take next.
//
// A Recogniser provides a small copyable State and:
//   const State& state() const;                 the committed state
//   bool advance(State& s, char c);             probe one byte on a copy (false: rejected)
//   static bool inert(const State& s, char c);  advance(s, c) would accept c and change nothing
//   static uint8_t open_class(const State& s);  a TokenTrie::ByteClass whose bytes s accepts in
//                                               any number and order (0: none)
//   bool feed(const std::string& bytes);        commit a chosen token's bytes
//   bool complete() const;  std::string closing() const;
// Probing copies state() and advances the copy past the committed state; a probe is valid until
// the next advance() of a copy that is not derived from it (what a depth-first walk does).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/logits_processor.h"
#include "engine/token_trie.h"

namespace hibana {

template <typename Recogniser>
class RecogniserConstraint : public LogitsProcessor {
 public:
  using State = typename Recogniser::State;

  // end_tokens are allowed only once the recogniser is complete.
  RecogniserConstraint(std::shared_ptr<const TokenTrie> vocab, std::vector<int32_t> end_tokens,
                       Recogniser recogniser)
      : vocab_(std::move(vocab)),
        end_tokens_(std::move(end_tokens)),
        recogniser_(std::move(recogniser)),
        probes_(vocab_->max_depth() + 1),
        at_(vocab_->max_depth() + 1) {}

  void apply(float* logits, int64_t vocab) override {
    allowed_.assign(static_cast<size_t>(std::max<int64_t>(vocab, 0)), 0);
    int64_t allowed = 0;
    if (recogniser_.complete()) {
      for (int32_t e : end_tokens_) {
        if (e >= 0 && e < vocab && !allowed_[e]) {
          allowed_[e] = 1;
          ++allowed;
        }
      }
    } else {
      // Depth-first over the trie: at_[d] is the state after the node's first d bytes (its own
      // slot probes_[d], or its parent's state when the byte changes nothing); a rejected byte
      // skips the node's whole subtree.
      const auto& nodes = vocab_->nodes();
      const auto& order = vocab_->order();
      const auto& classes = vocab_->subtree_classes();
      at_[0] = &recogniser_.state();
      for (size_t i = 0; i < nodes.size();) {
        const TokenTrie::Node& n = nodes[i];
        const State& parent = *at_[n.depth - 1];
        if (Recogniser::open_class(parent) & classes[i]) {
          // Every byte below is one the state accepts in any number: the whole subtree's tokens
          // are allowed (inside a string, nearly the whole vocabulary at a few top nodes).
          for (uint32_t k = n.first, end = vocab_->subtree_end(i); k < end; ++k) {
            const int32_t t = order[k];
            if (t < vocab && !allowed_[t]) {
              allowed_[t] = 1;
              ++allowed;
            }
          }
          i = n.skip;
          continue;
        }
        if (Recogniser::inert(parent, n.byte)) {
          at_[n.depth] = &parent;
        } else {
          State& s = probes_[n.depth];
          s = parent;
          if (!recogniser_.advance(s, n.byte)) {
            i = n.skip;
            continue;
          }
          at_[n.depth] = &s;
        }
        for (uint32_t k = n.tokens_begin; k < n.tokens_begin + n.tokens_count; ++k) {
          const int32_t t = order[k];
          if (t < vocab && !allowed_[t]) {
            allowed_[t] = 1;
            ++allowed;
          }
        }
        ++i;
      }
      for (int32_t e : end_tokens_) {  // not before the output is complete
        if (e >= 0 && e < vocab && allowed_[e]) {
          allowed_[e] = 0;
          --allowed;
        }
      }
    }
    if (allowed == 0) {
      // Nothing can continue (a vocabulary without the needed bytes): let an end token through
      // so the request finishes instead of sampling from an all -inf row.
      for (int32_t e : end_tokens_) {
        if (e >= 0 && e < vocab) allowed_[e] = 2;
      }
    }
    for (int64_t t = 0; t < vocab; ++t) {
      if (allowed_[t] == 0) {
        logits[t] = -INFINITY;
      } else if (allowed_[t] == 2) {
        logits[t] = 0.0f;
      }
    }
  }

  void accept(int32_t token) override {
    const auto& bytes = vocab_->token_bytes();
    if (token >= 0 && token < static_cast<int32_t>(bytes.size())) recogniser_.feed(bytes[token]);
  }
  bool complete() const override { return recogniser_.complete(); }
  std::string closing() const override { return recogniser_.closing(); }

 protected:
  std::shared_ptr<const TokenTrie> vocab_;
  std::vector<int32_t> end_tokens_;
  Recogniser recogniser_;
  std::vector<State> probes_;  // the walk's states, one slot per trie depth
  std::vector<const State*> at_;
  std::vector<uint8_t> allowed_;
};

}  // namespace hibana
