// Shared by the engine tests (prefix cache, tiers, the 2-rank ones): one generation turn run
// to its end, with what the engine reports about it, and filler prompts.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hibana::test {

struct Turn {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each token
  int64_t cached = 0;
};

// Greedy-continues `prompt` for n tokens (EOS ignored), checkpointing at `checkpoint_at` (-1:
// the engine's default).
inline Turn run_turn(Engine& e, const std::vector<int32_t>& prompt, int64_t n,
                     int64_t checkpoint_at = -1) {
  using namespace std::chrono_literals;
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.ignore_eos = true;
  r.checkpoint_at = checkpoint_at;
  r.top_logprobs = 0;
  auto s = e.submit(r);
  Turn t;
  StreamEvent ev;
  while (s->next(ev, SteadyClock::now() + 120s)) {
    if (ev.kind == StreamEvent::Kind::finished) {
      EXPECT_NE(ev.finish, FinishReason::error) << ev.error;
      break;
    }
    t.tokens.push_back(ev.token);
    t.logprobs.push_back(ev.logprob);
  }
  t.cached = s->usage().cached_tokens;
  return t;
}

// Filler prompt tokens, different for each salt: (i * 53 + salt * 19 + 5) % vocab.
inline std::vector<int32_t> text(int64_t n, int32_t salt, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 53 + salt * 19 + 5) % vocab);
  return t;
}

inline void append(std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

// Exact (recurrent DeltaNet) engine options with a device pool of `device_pages` KV pages of
// 64 tokens (of this model's, i.e. this rank's, heads), a host tier of `host_pages` more, four
// checkpoint slots and the SSD tier in `dir`.
inline EngineOptions tiered_options(const Model& model, const std::string& dir,
                                    int64_t device_pages, int64_t host_pages) {
  EngineOptions o;
  o.gdn_mode = GdnMode::recurrent;
  const int64_t kv_page = static_cast<int64_t>(model.state_spec().kv_bytes_per_token()) * 64;
  o.kv_cache_bytes = kv_page * device_pages;
  o.host_cache_bytes = kv_page * host_pages;
  o.checkpoint_slots = 4;
  o.cache_dir = dir;
  return o;
}

}  // namespace hibana::test
