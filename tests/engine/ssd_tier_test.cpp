// The SSD tier behind the prefix cache: with a device budget of a few pages, interleaved agents
// come back to state that was spilled to disk and restored; a restarted engine finds its state
// on disk; damaged or foreign blocks are never used. Outputs always equal the cache-off run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/engine.h"
#include "support/fixture_model.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Turn {
  std::vector<int32_t> tokens;
  int64_t cached = 0;
};

Turn run(Engine& e, const std::vector<int32_t>& prompt, int64_t n, int64_t checkpoint_at = -1) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.ignore_eos = true;
  r.checkpoint_at = checkpoint_at;
  auto s = e.submit(r);
  Turn t;
  StreamEvent ev;
  while (s->next(ev, SteadyClock::now() + 60s)) {
    if (ev.kind == StreamEvent::Kind::finished) break;
    t.tokens.push_back(ev.token);
  }
  t.cached = s->usage().cached_tokens;
  return t;
}

std::vector<int32_t> text(int64_t n, int32_t salt, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 53 + salt * 19 + 5) % vocab);
  return t;
}

void append(std::vector<int32_t>& a, const std::vector<int32_t>& b) { a.insert(a.end(), b.begin(), b.end()); }

EngineOptions exact() {
  EngineOptions o;
  o.gdn_mode = GdnMode::recurrent;
  return o;
}

class SsdTier : public testing::TestWithParam<std::string> {};

TEST_P(SsdTier, InterleavedAgentsRestoreFromDisk) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions tiny = exact();
  tiny.kv_cache_bytes = static_cast<int64_t>(model->state_spec().kv_bytes_per_token()) * 64 * 12;
  tiny.checkpoint_slots = 4;
  tiny.cache_dir = dir.path();
  EngineOptions off = exact();
  off.prefix_cache = false;
  Engine cached(model, tiny), plain(model, off);
  const int agents = 8;
  std::vector<std::vector<int32_t>> hist(agents), hist_plain(agents);
  for (int a = 0; a < agents; ++a) hist[a] = hist_plain[a] = text(140 + 10 * a, a, V);
  for (int turn = 0; turn < 3; ++turn) {
    for (int a = 0; a < agents; ++a) {
      const int64_t before = static_cast<int64_t>(hist[a].size());
      Turn t = run(cached, hist[a], 8, before);
      Turn p = run(plain, hist_plain[a], 8, before);
      ASSERT_EQ(t.tokens, p.tokens) << "agent " << a << " turn " << turn;
      if (turn > 0) {
        EXPECT_GE(t.cached, 128) << "agent " << a << " turn " << turn;
      }
      append(hist[a], t.tokens);
      append(hist[a], text(40, 100 + a + turn, V));
      hist_plain[a] = hist[a];
    }
  }
  cached.wait_idle();
  EngineMetrics m = cached.metrics();
  EXPECT_GT(m.spilled_bytes, 0u);
  EXPECT_GT(m.restored_blocks, 0u) << "no agent came back to a block on disk";
  EXPECT_GT(m.ssd_hit_tokens, 0u);
  EXPECT_GT(m.device_hit_tokens + m.ssd_hit_tokens, 0u);
}

// Device pool of a few pages, host tier of a few more, SSD below: interleaved agents come back
// to state restored from host RAM and from disk, and outputs equal the cache-off run.
TEST_P(SsdTier, HostTierBetweenDeviceAndDisk) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions tiered = exact();
  const int64_t kv_page = static_cast<int64_t>(model->state_spec().kv_bytes_per_token()) * 64;
  tiered.kv_cache_bytes = kv_page * 12;
  tiered.host_cache_bytes = kv_page * 8;
  tiered.checkpoint_slots = 4;
  tiered.cache_dir = dir.path();
  EngineOptions off = exact();
  off.prefix_cache = false;
  Engine cached(model, tiered), plain(model, off);
  const int agents = 8;
  std::vector<std::vector<int32_t>> hist(agents);
  for (int a = 0; a < agents; ++a) hist[a] = text(140 + 10 * a, a, V);
  for (int turn = 0; turn < 3; ++turn) {
    for (int a = 0; a < agents; ++a) {
      const int64_t before = static_cast<int64_t>(hist[a].size());
      Turn t = run(cached, hist[a], 8, before);
      ASSERT_EQ(t.tokens, run(plain, hist[a], 8, before).tokens) << "agent " << a << " turn " << turn;
      append(hist[a], t.tokens);
      append(hist[a], text(40, 100 + a + turn, V));
    }
  }
  cached.wait_idle();
  EngineMetrics m = cached.metrics();
  EXPECT_GT(m.host_hits, 0u) << "no block came back from host RAM";
  EXPECT_GT(m.host_written_down, 0u) << "host RAM never overflowed to the SSD";
  EXPECT_GT(m.ssd_hits, 0u) << "no block came back from the SSD";
  EXPECT_LE(m.host_bytes, static_cast<uint64_t>(tiered.host_cache_bytes));
}

// A returning conversation's blocks are read from the SSD into host RAM while its request
// waits in the queue; admission then restores them from RAM.
TEST_P(SsdTier, WaitingRequestsArePrefetchedIntoHostRam) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  std::vector<int32_t> hist = text(600, 7, V);
  {
    Engine first(model, opt);
    append(hist, run(first, hist, 8, static_cast<int64_t>(hist.size())).tokens);
  }  // shutdown flushes every block to disk
  append(hist, text(30, 8, V));
  EngineOptions tiered = opt;
  tiered.host_cache_bytes = int64_t(64) << 20;
  EngineOptions off = exact();
  off.prefix_cache = false;
  Engine second(model, tiered), plain(model, off);
  second.hold_admission(true);
  GenerationRequest r;
  r.prompt = hist;
  r.max_tokens = 8;
  r.ignore_eos = true;
  auto s = second.submit(r);
  for (int i = 0; i < 500 && second.metrics().host_prefetched < 9; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(second.metrics().host_prefetched, 9u) << "the 9 full blocks were not prefetched";
  second.hold_admission(false);
  std::vector<int32_t> got;
  StreamEvent ev;
  while (s->next(ev, SteadyClock::now() + 60s) && ev.kind != StreamEvent::Kind::finished) {
    got.push_back(ev.token);
  }
  EXPECT_EQ(got, run(plain, hist, 8).tokens);
  EXPECT_GE(s->usage().cached_tokens, 512);
  EXPECT_GT(second.metrics().host_hits, 0u);
}

TEST_P(SsdTier, ARestartedEngineFindsItsStateOnDisk) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  EngineOptions off = exact();
  off.prefix_cache = false;
  auto history = text(200, 3, V);
  Turn first;
  {
    Engine before(model, opt);
    first = run(before, history, 10);
  }  // clean shutdown: every block goes to disk
  append(history, first.tokens);
  const int64_t before_tool = static_cast<int64_t>(history.size());
  append(history, text(50, 4, V));
  Engine after(model, opt);
  Turn second = run(after, history, 10, before_tool);
  Engine plain(model, off);
  EXPECT_EQ(second.tokens, run(plain, history, 10, before_tool).tokens);
  EXPECT_GE(second.cached, 192);
  EXPECT_GT(after.metrics().ssd_hit_tokens, 0u);
}

TEST_P(SsdTier, DamagedOrForeignBlocksAreNeverUsed) {
  std::shared_ptr<const Model> model = test::load_fixture_model(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  EngineOptions off = exact();
  off.prefix_cache = false;
  auto history = text(200, 7, V);
  {
    Engine writer(model, opt);
    run(writer, history, 10);
  }
  // Flip one byte in the middle of every block file.
  int damaged = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.path())) {
    if (e.path().extension() != ".blk") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(e.path());
    f.seekg(static_cast<std::streamoff>(size / 2));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put(static_cast<char>(c ^ 0x5a));
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  append(history, text(30, 8, V));
  Engine reader(model, opt);
  Engine plain(model, off);
  EXPECT_EQ(run(reader, history, 10).tokens, run(plain, history, 10).tokens);
  EXPECT_GT(reader.metrics().ssd_corrupt, 0u);
  // A cache written by another model is ignored.
  std::shared_ptr<const Model> other = test::load_fixture_model("qwen3_dense");
  Engine stranger(other, opt);
  EXPECT_EQ(stranger.metrics().ssd_blocks, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SsdTier, testing::Values("qwen3_moe", "qwen3_next", "qwen3_5"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace hibana
