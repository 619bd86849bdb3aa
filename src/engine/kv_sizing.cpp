#include "engine/kv_sizing.h"

#include <algorithm>

#include "core/byte_text.h"

namespace hibana {

KvSizing auto_kv_cache_bytes(const Backend::MemoryInfo& memory, bool unified,
                             int64_t other_state_bytes) {
  if (memory.total <= 0) {
    return {kDefaultKvCacheBytes, "the default for a backend without device memory"};
  }
  constexpr int64_t kMinimum = int64_t(256) << 20;
  const int64_t reserve = std::max<int64_t>(int64_t(2) << 30, memory.total / 10);
  const int64_t state = std::max<int64_t>(0, other_state_bytes);
  int64_t usable = memory.free - reserve - state;
  if (unified) usable /= 2;
  KvSizing s;
  s.bytes = std::max(kMinimum, usable);
  s.why = byte_text(memory.free) + " free of " + byte_text(memory.total) + ", less " +
          byte_text(reserve) + " kept for activations and " + byte_text(state) +
          " of recurrent state" + (unified ? ", halved (memory shared with the host)" : "") +
          (usable < kMinimum ? "; too little is free, so the minimum of 256 MiB" : "");
  return s;
}

}  // namespace hibana
