#include "state/block_key.h"

#include <cstdio>
#include <xxhash.h>

namespace hibana {

std::string BlockKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

BlockKey BlockKey::of(std::span<const uint8_t> bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.high64, h.low64};
}

BlockKey BlockKey::chain(const BlockKey& parent, std::span<const int32_t> tokens,
                         uint64_t fingerprint) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  const uint64_t head[3] = {parent.hi, parent.lo, fingerprint};
  XXH3_128bits_update(st, head, sizeof head);
  XXH3_128bits_update(st, tokens.data(), tokens.size_bytes());
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return {h.high64, h.low64};
}

}  // namespace hibana
