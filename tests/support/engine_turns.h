// Shared by the engine tests (prefix cache, tiers, the 2-rank ones): one generation turn run
// to its end, with what the engine reports about it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
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

}  // namespace hibana::test
