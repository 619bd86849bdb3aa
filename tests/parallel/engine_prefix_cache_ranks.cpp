// The serving engine on a tensor-parallel model, prefix cache on: agents come back with longer
// and rewritten histories, rank 0 resumes them from shared KV pages and recurrent checkpoints
// (slot copies the other ranks make on their shards too), and the greedy outputs must be the
// single-rank engine's. Rank 0 drives and checks; the other ranks follow its passes and copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "support/engine_turns.h"
#include "parallel/mpi_world.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;

using test::run_turn;
using test::Turn;

std::vector<int32_t> text(int64_t n, int32_t salt, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 41 + salt * 17 + 3) % vocab);
  return t;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Two agents sharing a system prompt, each: a first turn, a returning turn with a tool result
// appended (resumed from the cache), then that tool result rewritten (resumed from the
// checkpoint before it). Every turn's output, in order; `cached` gets the reused prompt tokens.
std::vector<std::vector<int32_t>> conversations(Engine& e, int64_t V, std::vector<int64_t>& cached,
                                                std::vector<float>& logprobs) {
  std::vector<std::vector<int32_t>> outs;
  const auto system = text(64, 9, V);
  std::vector<std::vector<int32_t>> history = {cat(system, text(86, 1, V)),
                                               cat(system, text(100, 2, V))};
  std::vector<int64_t> before_tool(2);
  for (int turn = 0; turn < 3; ++turn) {
    for (int a = 0; a < 2; ++a) {  // the agents' turns interleave
      const int32_t salt = 10 * (a + 1) + turn;
      Turn t;
      if (turn == 0) {
        t = run_turn(e, history[a], 12, -1);
        history[a] = cat(history[a], t.tokens);
        before_tool[a] = static_cast<int64_t>(history[a].size());
      } else {  // turn 1: a tool result; turn 2: the same call retried, another result
        t = run_turn(e, cat(history[a], text(60 + 30 * turn, salt, V)), 12, before_tool[a]);
      }
      outs.push_back(t.tokens);
      cached.push_back(t.cached);
      logprobs.insert(logprobs.end(), t.logprobs.begin(), t.logprobs.end());
    }
  }
  return outs;
}

class EngineRanks : public testing::TestWithParam<std::string> {};

TEST_P(EngineRanks, PrefixCacheGivesTheSingleRankEnginesOutputs) {
  LoadOptions o;
  o.comm = test::world();
  std::shared_ptr<Model> sharded =
      Model::load(test::fixture_model_dir(GetParam()), make_backend("cpu"), o);
  if (sharded->rank() != 0) {
    follow_rank0(*sharded);
    return;
  }
  std::shared_ptr<const Model> whole = test::load_fixture_model(GetParam());
  const int64_t V = whole->config().vocab_size;
  for (GdnMode mode : {GdnMode::recurrent, GdnMode::aligned_chunks}) {
    SCOPED_TRACE(mode == GdnMode::recurrent ? "recurrent" : "chunked");
    EngineOptions eo;
    eo.gdn_mode = mode;
    eo.max_sequences = 4;
    std::vector<int64_t> tp_cached, single_cached;
    std::vector<float> tp_logprobs, single_logprobs;
    std::vector<std::vector<int32_t>> tp_outs, single_outs;
    {
      Engine e(sharded, eo);
      tp_outs = conversations(e, V, tp_cached, tp_logprobs);
      e.wait_idle();
      if (whole->state_spec().deltanet_layers > 0) {
        EXPECT_GT(e.metrics().cache_checkpoints, 0);
      }
    }
    {
      Engine e(whole, eo);
      single_outs = conversations(e, V, single_cached, single_logprobs);
    }
    EXPECT_EQ(tp_outs, single_outs);
    EXPECT_EQ(tp_cached, single_cached);
    // And each token's log-probability within float rounding of the single-rank one (a stale
    // recurrent state on one rank moves them far more, even where the argmax survives).
    ASSERT_EQ(tp_logprobs.size(), single_logprobs.size());
    float worst = 0;
    for (size_t i = 0; i < tp_logprobs.size(); ++i)
      worst = std::max(worst, std::fabs(tp_logprobs[i] - single_logprobs[i]));
    EXPECT_LT(worst, 1e-3f);
    std::printf("%s: largest log-probability difference %.2g\n", GetParam().c_str(), worst);
    // Returning and rewritten turns resume past the shared system prompt, from the cache.
    for (size_t i = 2; i < tp_cached.size(); ++i) EXPECT_GE(tp_cached[i], 128) << "turn " << i;
  }
  EXPECT_TRUE(sharded->release_followers());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineRanks,
                         testing::Values("qwen3_dense", "qwen3_next", "qwen3_5"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace hibana
