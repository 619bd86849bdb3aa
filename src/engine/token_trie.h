// A vocabulary's token byte strings as a trie laid out in depth-first order, built once per
// model and shared read-only. A walk over it (JsonConstraint) feeds each shared prefix once and
// skips a whole subtree as soon as its prefix is rejected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hibana {

class TokenTrie {
 public:
  struct Node {
    uint32_t skip;          // index of the first node after this one's subtree
    uint32_t tokens_begin;  // tokens whose bytes end here: order()[tokens_begin, +tokens_count)
    uint32_t first;         // the subtree's tokens: order()[first, subtree_end(this node))
    uint16_t tokens_count;
    uint16_t depth;  // bytes from the root (1 for a token's first byte)
    char byte;
  };

  // Byte classes that recognisers' inert states accept (RecogniserConstraint skips a subtree
  // whose every byte is in the class its state accepts unchanged).
  enum ByteClass : uint8_t {
    kJsonStringByte = 1,     // >= 0x20, not '"' or '\\': plain bytes of a JSON string
    kXmlJsonStringByte = 2,  // that, and not '<'
    kXmlTextByte = 4,        // not '<' or '\n'
  };
  static uint8_t byte_classes(char c);

  // token_bytes[i]: the bytes of token i (empty ones are left out).
  explicit TokenTrie(std::shared_ptr<const std::vector<std::string>> token_bytes);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& order() const { return order_; }
  const std::vector<std::string>& token_bytes() const { return *token_bytes_; }
  size_t max_depth() const { return max_depth_; }
  // Per node: the ByteClass bits that every byte of its subtree (its own included) has.
  const std::vector<uint8_t>& subtree_classes() const { return subtree_classes_; }
  uint32_t subtree_end(size_t node) const {
    const uint32_t skip = nodes_[node].skip;
    return skip < nodes_.size() ? nodes_[skip].first : static_cast<uint32_t>(order_.size());
  }

 private:
  std::shared_ptr<const std::vector<std::string>> token_bytes_;
  std::vector<Node> nodes_;
  std::vector<int32_t> order_;  // token ids sorted by their bytes
  size_t max_depth_ = 0;
  std::vector<uint8_t> subtree_classes_;
};

}  // namespace hibana
