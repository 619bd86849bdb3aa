// Engines sharing one GPU: each engine thread queues its ops on the backend's stream and
// records decode graphs while the other works. A graph must hold its own thread's ops only.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "support/engine_turns.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

using test::text;

// Two engines on one model decode different prompts at the same time, each recording decode
// graphs for the batch and page-count buckets it meets (several per prompt): every sequence
// gets the tokens an engine alone gives it. (When every thread recorded on the one stream, the
// other engine's ops landed in the graph being recorded: the capture failed with "unjoined
// work" and one engine's steps were lost.)
TEST(CudaEngines, TwoEnginesDecodingAtOnceGetTheirSoloTokens) {
  if (test::unavailable("cuda")) GTEST_SKIP();
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next", "cuda");
  const int64_t V = model->config().vocab_size;
  EngineOptions opt;
  opt.gdn_mode = GdnMode::recurrent;
  opt.prefix_cache = false;
  const int kPrompts = 4;
  std::vector<std::vector<int32_t>> prompts[2];
  std::vector<std::vector<int32_t>> solo[2];
  {
    Engine alone(model, opt);
    for (int who = 0; who < 2; ++who) {
      for (int i = 0; i < kPrompts; ++i) {
        prompts[who].push_back(text(40 + 70 * i + 13 * who, 10 * who + i, V));
        solo[who].push_back(test::run_turn(alone, prompts[who].back(), 72).tokens);
      }
    }
  }
  for (int round = 0; round < 5; ++round) {
    Engine a(model, opt), b(model, opt);
    std::vector<std::vector<int32_t>> got[2];
    auto run = [&](Engine& e, int who) {
      for (const std::vector<int32_t>& p : prompts[who]) {
        got[who].push_back(test::run_turn(e, p, 72).tokens);
      }
    };
    std::thread other(run, std::ref(b), 1);
    run(a, 0);
    other.join();
    for (int who = 0; who < 2; ++who) {
      for (int i = 0; i < kPrompts; ++i) {
        EXPECT_EQ(got[who][i], solo[who][i]) << "round " << round << ", engine " << who
                                             << ", prompt " << i;
      }
    }
  }
}

}  // namespace
}  // namespace hibana
