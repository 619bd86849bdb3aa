// How large the device pool of KV pages is when the user leaves it to the engine
// (`--kv-cache-size auto`, the default of `hibana serve`).
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace hibana {

// The size the engine uses when it cannot see a device's memory (the CPU backend).
constexpr int64_t kDefaultKvCacheBytes = int64_t(1) << 30;

struct KvSizing {
  int64_t bytes = 0;  // of KV pages
  std::string why;    // one line for the log: where the figure comes from
};

// A discrete GPU gives its KV pages what is free once the weights are loaded, less a reserve
// for what grows later (activations, the scratch pool, decode graphs: the larger of 2 GiB and a
// tenth of the card) and less `other_state_bytes` (the recurrent slots allocated beside the
// pages). A GPU sharing the host's memory (unified memory) takes half of that: the operating
// system and its page cache live there too. Without device memory (`memory.total` 0) the size
// is kDefaultKvCacheBytes. Never less than 256 MiB (an allocation that then fails says so).
KvSizing auto_kv_cache_bytes(const Backend::MemoryInfo& memory, bool unified,
                             int64_t other_state_bytes);

}  // namespace hibana
