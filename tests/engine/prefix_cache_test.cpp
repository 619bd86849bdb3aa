// The prefix cache: agents come back with longer (sometimes rewritten) histories. With the cache
// on, outputs must equal the cache-off outputs while most of the prompt is resumed, not
// recomputed — for dense and hybrid models, for appended tool results, a rewritten last turn
// and interleaved agents.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "support/engine_turns.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;

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

// One agent: system + task, then tool results appended, then the last turn rewritten.
// Returns every turn's output; `cached` collects how many prompt tokens each turn reused.
std::vector<std::vector<int32_t>> conversation(Engine& e, int64_t V, int32_t salt,
                                               std::vector<int64_t>* cached) {
  std::vector<std::vector<int32_t>> outs;
  auto history = text(150, salt, V);
  auto t1 = test::run_turn(e, history, 20, -1);
  outs.push_back(t1.tokens);
  history = cat(history, t1.tokens);
  const int64_t before_tool = static_cast<int64_t>(history.size());
  auto with_tool = cat(history, text(70, salt + 1, V));
  auto t2 = test::run_turn(e, with_tool, 20, before_tool);
  outs.push_back(t2.tokens);
  // The agent rewrites the tool result (a retried call): only the tail differs.
  auto rewritten = cat(history, text(90, salt + 2, V));
  auto t3 = test::run_turn(e, rewritten, 20, before_tool);
  outs.push_back(t3.tokens);
  if (cached) *cached = {t1.cached, t2.cached, t3.cached};
  return outs;
}

class PrefixCacheTest : public testing::TestWithParam<std::string> {};

TEST_P(PrefixCacheTest, SameOutputsWhileReusingMostOfThePrompt) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  EngineOptions on, off;
  on.gdn_mode = off.gdn_mode = GdnMode::recurrent;  // bit-exact whatever the chunking
  off.prefix_cache = false;
  Engine cached(model, on), plain(model, off);
  std::vector<int64_t> reused;
  auto with = conversation(cached, V, 1, &reused);
  auto without = conversation(plain, V, 1, nullptr);
  EXPECT_EQ(with, without);
  EXPECT_EQ(reused[0], 0);
  // Turn 2 resumes at least up to the page boundary before the appended tool result...
  EXPECT_GE(reused[1], 128) << "turn 2 reused " << reused[1];
  // ...and the rewritten turn 3 resumes at the checkpoint before the tool result (170 tokens of
  // history: the boundary at 128), recomputing only the tail.
  EXPECT_GE(reused[2], 128) << "turn 3 reused " << reused[2];
  EXPECT_GT(cached.metrics().prefix_hit_tokens, 0u);
}

TEST_P(PrefixCacheTest, InterleavedAgentsGetTheirOwnOutputs) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  EngineOptions on, off;
  on.gdn_mode = off.gdn_mode = GdnMode::recurrent;
  off.prefix_cache = false;
  Engine cached(model, on), plain(model, off);
  // Two agents whose turns alternate, sharing the same 64-token system prompt.
  auto system = text(64, 9, V);
  std::vector<int32_t> a = cat(system, text(80, 1, V)), b = cat(system, text(100, 2, V));
  std::vector<int32_t> a2 = a, b2 = b;
  for (int turn = 0; turn < 3; ++turn) {
    auto ra = test::run_turn(cached, a, 10, -1), rb = test::run_turn(cached, b, 10, -1);
    auto pa = test::run_turn(plain, a2, 10, -1), pb = test::run_turn(plain, b2, 10, -1);
    EXPECT_EQ(ra.tokens, pa.tokens) << "agent A, turn " << turn;
    EXPECT_EQ(rb.tokens, pb.tokens) << "agent B, turn " << turn;
    if (turn > 0) {
      EXPECT_GT(ra.cached, 64);
      EXPECT_GT(rb.cached, 64);
    }
    a = cat(cat(a, ra.tokens), text(30, 10 + turn, V));
    b = cat(cat(b, rb.tokens), text(30, 20 + turn, V));
    a2 = cat(cat(a2, pa.tokens), text(30, 10 + turn, V));
    b2 = cat(cat(b2, pb.tokens), text(30, 20 + turn, V));
  }
}

// The default (aligned chunked) mode must reuse state too; its outputs are checked against
// the cache-off run as well (the fixture models' clear margins make ties unlikely).
TEST_P(PrefixCacheTest, DefaultModeReusesState) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  EngineOptions on, off;
  off.prefix_cache = false;
  Engine cached(model, on), plain(model, off);
  std::vector<int64_t> reused;
  auto with = conversation(cached, V, 5, &reused);
  EXPECT_EQ(with, conversation(plain, V, 5, nullptr));
  EXPECT_GE(reused[1], 128);
}

// Checkpoint policy, rule 3: a sequence keeps only the checkpoint at its latest page boundary.
// When that boundary is a kept one too (checkpoint_at here), the one before it is dropped: the
// 600-token prompt's first pass ends at 512 (the token budget), its second at checkpoint_at.
TEST_P(PrefixCacheTest, AKeptCheckpointReplacesTheSequencesEarlierBoundaryOne) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  if (model->state_spec().deltanet_layers == 0) GTEST_SKIP() << "no recurrent state";
  const int64_t V = model->config().vocab_size;
  EngineOptions on;
  on.step_token_budget = 512;
  Engine e(model, on);
  test::run_turn(e, text(600, 3, V), 4, 576);
  e.wait_idle();
  EXPECT_EQ(e.metrics().cache_checkpoints, 1) << "the checkpoint at 512 was kept";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheTest,
                         testing::Values("qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace hibana
