#include "engine/token_trie.h"

#include <algorithm>

namespace hibana {

TokenTrie::TokenTrie(std::shared_ptr<const std::vector<std::string>> token_bytes)
    : token_bytes_(std::move(token_bytes)) {
  const auto& bytes = *token_bytes_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    // Longer tokens cannot be walked (depth is 16 bits); none of a real vocabulary is.
    if (!bytes[i].empty() && bytes[i].size() < UINT16_MAX) {
      order_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  std::vector<uint32_t> path;  // path[d - 1]: the open node at depth d
  const std::string* prev = nullptr;
  for (size_t k = 0; k < order_.size(); ++k) {
    const std::string& s = bytes[order_[k]];
    size_t common = 0;
    if (prev) {
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    }
    // Nodes deeper than the shared prefix are finished.
    while (path.size() > common) {
      nodes_[path.back()].skip = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(Node{0, 0, static_cast<uint32_t>(k), 0, static_cast<uint16_t>(d + 1), s[d]});
    }
    Node& end = nodes_[path.back()];
    if (end.tokens_count == 0) end.tokens_begin = static_cast<uint32_t>(k);
    if (end.tokens_count < UINT16_MAX) ++end.tokens_count;
    max_depth_ = std::max(max_depth_, s.size());
    prev = &s;
  }
  for (uint32_t n : path) nodes_[n].skip = static_cast<uint32_t>(nodes_.size());
  // Bottom up: a node's classes are its byte's, less any that a child's subtree lacks.
  subtree_classes_.resize(nodes_.size());
  for (size_t i = nodes_.size(); i-- > 0;) {
    uint8_t c = byte_classes(nodes_[i].byte);
    for (size_t j = i + 1; j < nodes_[i].skip; j = nodes_[j].skip) c &= subtree_classes_[j];
    subtree_classes_[i] = c;
  }
}

uint8_t TokenTrie::byte_classes(char c) {
  const auto u = static_cast<unsigned char>(c);
  const bool json = u >= 0x20 && c != '"' && c != '\\';
  return static_cast<uint8_t>((json ? kJsonStringByte : 0) |
                              (json && c != '<' ? kXmlJsonStringByte : 0) |
                              (c != '<' && c != '\n' ? kXmlTextByte : 0));
}

}  // namespace hibana
