// The engine's memory: the state pool and the tiers behind the prefix cache. Private to
// src/engine/ (engine.cpp schedules, engine_tiers.cpp sets up, measures and prefetches).
#pragma once

#include <chrono>
#include <memory>

#include "engine/engine.h"
#include "state/host_store.h"
#include "state/prefix_cache.h"
#include "state/ssd_store.h"
#include "state/state_pool.h"

namespace hibana {

inline double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Engine::Pools {
  StatePool pool;
  std::unique_ptr<SsdStore> ssd;       // null without a cache directory
  std::unique_ptr<HostStore> host;     // null without a host-RAM budget
  std::unique_ptr<PrefixCache> cache;  // null with prefix caching off
  Pools(const StateSpec& spec, int64_t page_size, int64_t pages, int64_t slots)
      : pool(spec, page_size, pages, slots) {}
};

}  // namespace hibana
