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
    uint16_t tokens_count;
    uint16_t depth;  // bytes from the root (1 for a token's first byte)
    char byte;
  };

  // token_bytes[i]: the bytes of token i (empty ones are left out).
  explicit TokenTrie(std::shared_ptr<const std::vector<std::string>> token_bytes);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& order() const { return order_; }
  const std::vector<std::string>& token_bytes() const { return *token_bytes_; }
  size_t max_depth() const { return max_depth_; }

 private:
  std::shared_ptr<const std::vector<std::string>> token_bytes_;
  std::vector<Node> nodes_;
  std::vector<int32_t> order_;  // token ids sorted by their bytes
  size_t max_depth_ = 0;
};

}  // namespace hibana
