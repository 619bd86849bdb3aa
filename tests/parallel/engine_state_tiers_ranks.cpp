// The prefix cache's host-RAM and SSD tiers on a tensor-parallel model: rank 0 decides every
// spill, write-down and restore; each rank moves its own shard's bytes to and from tiers of its
// own (DIR/rank-R-of-N), in step, and the ranks agree before restored state is used. With a
// device pool of a few pages, interleaved agents come back to state restored from host RAM and
// from disk, and the greedy outputs (and log-probabilities, to float rounding) are the
// single-rank engine's. A restart finds every rank's blocks on disk; a directory written with
// another --tp is never read; a rank that lost its blocks makes every rank recompute.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "engine/engine.h"
#include "engine/generator.h"
#include "parallel/mpi_world.h"
#include "state/ssd_store.h"
#include "support/engine_turns.h"
#include "support/fixture_model.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;

using test::run_turn;
using test::Turn;

using test::append;
using test::text;
using test::tiered_options;

// Outputs of every turn, all log-probabilities and the cached-token counts of a replay.
struct Replay {
  std::vector<std::vector<int32_t>> outs;
  std::vector<float> logprobs;
  std::vector<int64_t> cached;
  void add(const Turn& t) {
    outs.push_back(t.tokens);
    logprobs.insert(logprobs.end(), t.logprobs.begin(), t.logprobs.end());
    cached.push_back(t.cached);
  }
};

// Six agents, three interleaved turns each: every returning turn appends the reply and a tool
// result; more state than the device pool and host RAM hold.
Replay agents(Engine& e, int64_t V) {
  Replay r;
  const int n = 6;
  std::vector<std::vector<int32_t>> hist(n);
  for (int a = 0; a < n; ++a) hist[a] = text(140 + 10 * a, a, V);
  for (int turn = 0; turn < 3; ++turn) {
    for (int a = 0; a < n; ++a) {
      Turn t = run_turn(e, hist[a], 8, static_cast<int64_t>(hist[a].size()));
      r.add(t);
      append(hist[a], t.tokens);
      append(hist[a], text(40, 100 + a + turn, V));
    }
  }
  return r;
}

void expect_same(const Replay& tp, const Replay& single) {
  EXPECT_EQ(tp.outs, single.outs);
  ASSERT_EQ(tp.logprobs.size(), single.logprobs.size());
  float worst = 0;
  for (size_t i = 0; i < tp.logprobs.size(); ++i)
    worst = std::max(worst, std::fabs(tp.logprobs[i] - single.logprobs[i]));
  // A rank resuming from state it did not restore moves them far more.
  EXPECT_LT(worst, 1e-3f);
}

uint64_t blocks_in(const std::string& dir) {
  uint64_t n = 0;
  for (const SsdStore::DirSummary& s : SsdStore::summarize(dir)) n += s.blocks;
  return n;
}

std::shared_ptr<Model> sharded(const std::string& name) {
  LoadOptions o;
  o.comm = test::world();
  return Model::load(test::fixture_model_dir(name), make_backend("cpu"), o);
}

class TiersRanks : public testing::TestWithParam<std::string> {};

TEST_P(TiersRanks, InterleavedAgentsRestoreFromHostRamAndDisk) {
  std::shared_ptr<Model> tp_model = sharded(GetParam());
  if (tp_model->rank() != 0) return follow_rank0(*tp_model);
  std::shared_ptr<const Model> whole = test::load_fixture_model(GetParam());
  const int64_t V = whole->config().vocab_size;
  test::TempDir tp_dir, single_dir;
  Replay tp, single;
  {
    Engine e(tp_model, tiered_options(*tp_model, tp_dir.path(), 12, 6));
    tp = agents(e, V);
    e.wait_idle();
    const EngineMetrics m = e.metrics();
    EXPECT_GT(m.host_hits, 0u) << "no block came back from host RAM";
    EXPECT_GT(m.host_written_down, 0u) << "host RAM never overflowed to the SSD";
    EXPECT_GT(m.ssd_hits, 1u) << "no block came back from the SSD (one read is the cost probe)";
    EXPECT_GT(m.ssd_hit_tokens, 0u);
    EXPECT_EQ(m.host_prefetched, 0u) << "prefetch is off with tensor parallelism";
  }
  {
    Engine e(whole, tiered_options(*whole, single_dir.path(), 12, 6));
    single = agents(e, V);
  }
  expect_same(tp, single);
  // Every rank wrote its own shard's blocks under its own directory.
  const std::string d = tp_dir.path();
  EXPECT_GT(blocks_in(d + "/rank-0-of-2"), 0u);
  EXPECT_EQ(blocks_in(d + "/rank-1-of-2"), blocks_in(d + "/rank-0-of-2"));
  for (const SsdStore::DirSummary& s : SsdStore::summarize(d))
    EXPECT_NE(s.part, "") << "a --tp 2 engine wrote where --tp 1 reads";
  EXPECT_TRUE(tp_model->release_followers());
}

// A conversation run by an engine on `opt` that is then shut down (every block flushed to
// disk on every rank); returns its history with a new user turn appended.
std::vector<int32_t> first_turn(const std::shared_ptr<const Model>& model, const EngineOptions& opt,
                                int64_t V, std::vector<int32_t>& reply) {
  std::vector<int32_t> hist = text(600, 7, V);
  {
    Engine e(model, opt);
    reply = run_turn(e, hist, 8, static_cast<int64_t>(hist.size())).tokens;
  }
  append(hist, reply);
  append(hist, text(30, 8, V));
  return hist;
}

// Restarts on the same directory resume from disk; a directory written with another --tp, or
// one rank's lost blocks, give a recomputation with the same outputs.
TEST_P(TiersRanks, RestartsFindTheirOwnTpBlocksOnly) {
  std::shared_ptr<Model> tp_model = sharded(GetParam());
  if (tp_model->rank() != 0) return follow_rank0(*tp_model);
  std::shared_ptr<const Model> whole = test::load_fixture_model(GetParam());
  const int64_t V = whole->config().vocab_size;
  EngineOptions off;
  off.gdn_mode = GdnMode::recurrent;
  off.prefix_cache = false;
  Engine plain(whole, off);
  std::vector<int32_t> reply;
  const std::vector<int32_t> prompt = text(600, 7, V);
  const Turn first = run_turn(plain, prompt, 8, -1);
  std::vector<int32_t> hist = prompt;
  append(hist, first.tokens);
  append(hist, text(30, 8, V));
  const Turn want = run_turn(plain, hist, 8, -1);

  auto second = [&](const std::shared_ptr<const Model>& m, const std::string& dir) {
    Engine e(m, tiered_options(*m, dir, 64, 64));
    Turn t = run_turn(e, hist, 8, -1);
    EXPECT_EQ(t.tokens, want.tokens);
    return std::make_pair(t, e.metrics());
  };
  {  // --tp 2, then --tp 2 again: every rank's blocks come back from its own directory
    SCOPED_TRACE("tp 2 after tp 2");
    test::TempDir dir;
    EXPECT_EQ(first_turn(tp_model, tiered_options(*tp_model, dir.path(), 64, 64), V, reply), hist);
    EXPECT_GT(blocks_in(dir.path() + "/rank-1-of-2"), 0u);
    auto [t, m] = second(tp_model, dir.path());
    EXPECT_GE(t.cached, 512);
    EXPECT_GT(m.ssd_hit_tokens, 0u);
    float worst = 0;
    for (size_t i = 0; i < t.logprobs.size(); ++i)
      worst = std::max(worst, std::fabs(t.logprobs[i] - want.logprobs[i]));
    EXPECT_LT(worst, 1e-3f);
  }
  // A cache written with another --tp is not read: --tp 1's by --tp 2 and the other way round.
  const std::shared_ptr<const Model> tp = tp_model;
  for (const auto& [writer, reader, label] :
       {std::tuple{whole, tp, "tp 2 after tp 1"}, std::tuple{tp, whole, "tp 1 after tp 2"}}) {
    SCOPED_TRACE(label);
    test::TempDir dir;
    first_turn(writer, tiered_options(*writer, dir.path(), 64, 64), V, reply);
    EXPECT_EQ(reply, first.tokens);
    auto [t, m] = second(reader, dir.path());
    EXPECT_EQ(t.cached, 0);
    EXPECT_EQ(m.restored_blocks, 0u);
  }
  {  // rank 1 lost its blocks (rank 0 still has its own): every rank recomputes
    SCOPED_TRACE("rank 1's blocks gone");
    test::TempDir dir;
    first_turn(tp_model, tiered_options(*tp_model, dir.path(), 64, 64), V, reply);
    EXPECT_GT(SsdStore::clear_dir(dir.path() + "/rank-1-of-2"), 0u);
    auto [t, m] = second(tp_model, dir.path());
    EXPECT_EQ(t.cached, 0) << "rank 0 resumed from blocks rank 1 could not restore";
    EXPECT_EQ(m.restored_blocks, 0u);
  }
  EXPECT_TRUE(tp_model->release_followers());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TiersRanks,
                         testing::Values("qwen3_dense", "qwen3_next", "qwen3_5"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace hibana
