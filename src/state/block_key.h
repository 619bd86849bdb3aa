// 128-bit keys of state blocks: a block of tokens is named by the hash chain of every block
// before it, its own tokens and the model's fingerprint, so equal keys mean equal state.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace hibana {

struct BlockKey {
  uint64_t hi = 0, lo = 0;
  bool operator==(const BlockKey& o) const { return hi == o.hi && lo == o.lo; }
  std::string hex() const;
  // xxh3-128 of arbitrary bytes.
  static BlockKey of(std::span<const uint8_t> bytes);
  // The key of a block of tokens following `parent` ({} for the first block).
  static BlockKey chain(const BlockKey& parent, std::span<const int32_t> tokens,
                        uint64_t fingerprint);
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    return static_cast<size_t>(k.hi ^ (k.lo * 0x9e3779b97f4a7c15ull));
  }
};

}  // namespace hibana
