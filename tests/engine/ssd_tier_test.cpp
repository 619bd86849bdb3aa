// The SSD tier behind the prefix cache: with a device budget of a few pages, interleaved agents
// come back to state that was spilled to disk and restored; a restarted engine finds its state
// on disk; damaged or foreign blocks are never used. Outputs always equal the cache-off run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine.h"
#include "support/engine_turns.h"
#include "support/fixture_model.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using test::Turn;

using test::append;
using test::text;
using test::tiered_options;

EngineOptions exact() {
  EngineOptions o;
  o.gdn_mode = GdnMode::recurrent;
  return o;
}

// The reference: the same engine with the prefix cache off.
EngineOptions cache_off() {
  EngineOptions o = exact();
  o.prefix_cache = false;
  return o;
}

// A 600-token conversation and its 8-token reply, run by an engine on `opt` that is then shut
// down (which flushes every block to `opt.cache_dir`): the history a returning request brings.
std::vector<int32_t> conversation_on_disk(const std::shared_ptr<const Model>& model,
                                          const EngineOptions& opt) {
  std::vector<int32_t> hist = text(600, 7, model->config().vocab_size);
  Engine first(model, opt);
  append(hist, test::run_turn(first, hist, 8, static_cast<int64_t>(hist.size())).tokens);
  return hist;
}

// Holds admission, submits `prompt` for 8 greedy tokens and waits (up to 30 s) until the
// prefetcher has read `blocks` blocks into host RAM; admission stays held.
std::shared_ptr<RequestStream> submit_held(Engine& e, const std::vector<int32_t>& prompt,
                                           uint64_t blocks) {
  e.hold_admission(true);
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 8;
  r.ignore_eos = true;
  auto s = e.submit(r);
  for (int i = 0; i < 3000 && e.metrics().host_prefetched < blocks; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  return s;
}

// The tokens of a stream, to its end.
std::vector<int32_t> tokens_of(RequestStream& s) {
  std::vector<int32_t> got;
  StreamEvent ev;
  while (s.next(ev, SteadyClock::now() + 60s) && ev.kind != StreamEvent::Kind::finished) {
    got.push_back(ev.token);
  }
  return got;
}

// "qwen3_next" runs on the CPU, "qwen3_next_cuda" on the GPU (there the blocks move between
// device memory and the tiers through the CUDA backend's batched, pinned copies).
bool on_cuda(const std::string& param) {
  return param.ends_with("_cuda");
}
std::string fixture_of(const std::string& param) {
  return on_cuda(param) ? param.substr(0, param.size() - 5) : param;
}
std::shared_ptr<const Model> model_of(const std::string& param) {
  return test::load_fixture_model(fixture_of(param), on_cuda(param) ? "cuda" : "cpu");
}

class SsdTier : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (on_cuda(GetParam()) && test::unavailable("cuda")) GTEST_SKIP();
  }
};

TEST_P(SsdTier, InterleavedAgentsRestoreFromDisk) {
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions tiny = exact();
  tiny.kv_cache_bytes = static_cast<int64_t>(model->state_spec().kv_bytes_per_token()) * 64 * 12;
  tiny.checkpoint_slots = 4;
  tiny.cache_dir = dir.path();
  const EngineOptions off = cache_off();
  Engine cached(model, tiny), plain(model, off);
  const int agents = 8;
  std::vector<std::vector<int32_t>> hist(agents), hist_plain(agents);
  for (int a = 0; a < agents; ++a) hist[a] = hist_plain[a] = text(140 + 10 * a, a, V);
  for (int turn = 0; turn < 3; ++turn) {
    for (int a = 0; a < agents; ++a) {
      const int64_t before = static_cast<int64_t>(hist[a].size());
      Turn t = test::run_turn(cached, hist[a], 8, before);
      Turn p = test::run_turn(plain, hist_plain[a], 8, before);
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
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  const EngineOptions tiered = tiered_options(*model, dir.path(), 12, 8);
  const EngineOptions off = cache_off();
  Engine cached(model, tiered), plain(model, off);
  const int agents = 8;
  std::vector<std::vector<int32_t>> hist(agents);
  for (int a = 0; a < agents; ++a) hist[a] = text(140 + 10 * a, a, V);
  for (int turn = 0; turn < 3; ++turn) {
    for (int a = 0; a < agents; ++a) {
      const int64_t before = static_cast<int64_t>(hist[a].size());
      Turn t = test::run_turn(cached, hist[a], 8, before);
      ASSERT_EQ(t.tokens, test::run_turn(plain, hist[a], 8, before).tokens)
          << "agent " << a << " turn " << turn;
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
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  std::vector<int32_t> hist = conversation_on_disk(model, opt);
  append(hist, text(30, 8, V));
  EngineOptions tiered = opt;
  tiered.host_cache_bytes = int64_t(64) << 20;
  const EngineOptions off = cache_off();
  Engine second(model, tiered), plain(model, off);
  auto s = submit_held(second, hist, 9);
  EXPECT_GE(second.metrics().host_prefetched, 9u) << "the 9 full blocks were not prefetched";
  second.hold_admission(false);
  EXPECT_EQ(tokens_of(*s), test::run_turn(plain, hist, 8).tokens);
  EXPECT_GE(s->usage().cached_tokens, 512);
  EXPECT_GT(second.metrics().host_hits, 0u);
}

// A conversation whose first blocks are still in the device pool while its later ones were
// pushed out to the SSD: the prefetcher starts past the blocks the device holds (the engine
// thread tells it how many) and warms host RAM with the SSD part while the request waits.
TEST_P(SsdTier, PrefetchStartsPastTheBlocksOnTheDevice) {
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  const EngineOptions tiered = tiered_options(*model, dir.path(), 12, 2);
  const EngineOptions off = cache_off();
  Engine e(model, tiered), plain(model, off);
  // 9 full blocks of A in the pool, then B takes 7 of its 12 pages: A's last 4 blocks are
  // evicted into host RAM (2 pages), which writes the older ones down to the SSD.
  std::vector<int32_t> a = text(600, 11, V);
  append(a, test::run_turn(e, a, 8, static_cast<int64_t>(a.size())).tokens);
  const std::vector<int32_t> b = text(420, 12, V);
  test::run_turn(e, b, 8, static_cast<int64_t>(b.size()));
  e.wait_idle();
  ASSERT_GT(e.metrics().host_written_down, 0u) << "nothing of A reached the SSD";
  ASSERT_EQ(e.metrics().host_prefetched, 0u);
  append(a, text(30, 13, V));
  auto s = submit_held(e, a, 2);
  EXPECT_GE(e.metrics().host_prefetched, 2u)
      << "the blocks on the SSD past the device's were not prefetched";
  e.hold_admission(false);
  EXPECT_EQ(tokens_of(*s), test::run_turn(plain, a, 8).tokens);
}

// Blocks the device pool holds are not read again into host RAM: after a restart, a request
// brings the first 4 of a conversation's 9 blocks into the pool; when the conversation comes
// back, only the blocks on the SSD past those 4 (its other 5 and their checkpoints) are read.
TEST_P(SsdTier, BlocksOnTheDeviceAreNotPrefetched) {
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  std::vector<int32_t> hist = conversation_on_disk(model, opt);
  uint64_t on_disk = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.path()))
    on_disk += e.path().extension() == ".blk";
  ASSERT_GE(on_disk, 9u);
  append(hist, text(30, 8, V));
  EngineOptions tiered = opt;
  tiered.host_cache_bytes = int64_t(64) << 20;
  Engine second(model, tiered);
  std::vector<int32_t> head(hist.begin(), hist.begin() + 4 * 64);
  append(head, text(40, 9, V));
  test::run_turn(second, head, 4,
                 4 * 64);             // its first 4 blocks: restored (read through RAM) or computed
  const uint64_t want = on_disk - 4;  // none of the 4 has a checkpoint on disk
  auto s = submit_held(second, hist, want);
  std::this_thread::sleep_for(100ms);  // a prefetcher reading more would have done so by now
  EXPECT_EQ(second.metrics().host_prefetched, want) << "blocks in the device pool were read";
  second.hold_admission(false);
  tokens_of(*s);
  EXPECT_GE(s->usage().cached_tokens, 512);
}

TEST_P(SsdTier, ARestartedEngineFindsItsStateOnDisk) {
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  const EngineOptions off = cache_off();
  auto history = text(200, 3, V);
  Turn first;
  {
    Engine before(model, opt);
    first = test::run_turn(before, history, 10);
  }  // clean shutdown: every block goes to disk
  append(history, first.tokens);
  const int64_t before_tool = static_cast<int64_t>(history.size());
  append(history, text(50, 4, V));
  Engine after(model, opt);
  // The metrics show what is on disk before the first request.
  EXPECT_GT(after.metrics().ssd_blocks, 0u);
  EXPECT_GT(after.metrics().ssd_bytes, 0u);
  Turn second = test::run_turn(after, history, 10, before_tool);
  Engine plain(model, off);
  EXPECT_EQ(second.tokens, test::run_turn(plain, history, 10, before_tool).tokens);
  EXPECT_GE(second.cached, 192);
  EXPECT_GT(after.metrics().ssd_hit_tokens, 0u);
}

TEST_P(SsdTier, DamagedOrForeignBlocksAreNeverUsed) {
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  const EngineOptions off = cache_off();
  auto history = text(200, 7, V);
  {
    Engine writer(model, opt);
    test::run_turn(writer, history, 10);
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
  EXPECT_EQ(test::run_turn(reader, history, 10).tokens, test::run_turn(plain, history, 10).tokens);
  EXPECT_GT(reader.metrics().ssd_corrupt, 0u);
  // A cache written by another model is ignored.
  std::shared_ptr<const Model> other = test::load_fixture_model("qwen3_dense");
  Engine stranger(other, opt);
  EXPECT_EQ(stranger.metrics().ssd_blocks, 0u);
}

// A hybrid conversation comes back with its first 4 blocks (and a checkpoint after them) in
// the device pool and the rest on disk, whose checkpoints turn out damaged: the lookup restores
// the later blocks but resumes from the device checkpoint, and the hit counts say the tokens it
// resumed came from the device, not from the SSD.
TEST_P(SsdTier, HitTokensCountTheTierTheResumedBlocksCameFrom) {
  std::shared_ptr<const Model> model = model_of(GetParam());
  if (model->state_spec().deltanet_layers == 0) GTEST_SKIP() << "no checkpoints";
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  std::vector<int32_t> hist = conversation_on_disk(model, opt);
  int damaged = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.path())) {
    if (e.path().extension() != ".blk") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    uint32_t kind = 0;
    f.seekg(12);
    f.read(reinterpret_cast<char*>(&kind), 4);
    if (kind != 2) continue;  // checkpoints only
    f.seekp(100);
    f.put('\x5a');
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  Engine second(model, opt);
  std::vector<int32_t> head(hist.begin(), hist.begin() + 4 * 64);
  append(head, text(40, 9, V));
  test::run_turn(second, head, 4,
                 4 * 64);  // computed: no checkpoint on disk within its first 4 blocks
  second.wait_idle();
  const EngineMetrics before = second.metrics();
  append(hist, text(30, 8, V));
  const Turn t = test::run_turn(second, hist, 8);
  second.wait_idle();
  const EngineMetrics after = second.metrics();
  ASSERT_EQ(t.cached, 256);
  EXPECT_GT(after.restored_blocks, before.restored_blocks);
  EXPECT_EQ(after.device_hit_tokens - before.device_hit_tokens, 256u);
  EXPECT_EQ(after.ssd_hit_tokens - before.ssd_hit_tokens, 0u);
}

// The same weights under another config.json value that changes what the state is (RoPE base,
// norm epsilon, experts per token) are another model: none of the first one's blocks is used.
TEST_P(SsdTier, SameWeightsWithAnotherConfigAreAnotherModel) {
  std::shared_ptr<const Model> model = model_of(GetParam());
  const int64_t V = model->config().vocab_size;
  test::TempDir dir;
  EngineOptions opt = exact();
  opt.cache_dir = dir.path();
  const std::vector<int32_t> prompt = text(200, 7, V);
  {
    Engine writer(model, opt);
    test::run_turn(writer, prompt, 4);
  }
  const fs::path source = test::fixture_model_dir(fixture_of(GetParam()));
  std::ifstream in(source / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  using Change = std::function<void(nlohmann::json&)>;
  std::vector<std::pair<std::string, Change>> changes = {
      {"rope_theta", [](nlohmann::json& c) { c["rope_parameters"]["rope_theta"] = 5000.0; }},
      {"rms_norm_eps", [](nlohmann::json& c) { c["rms_norm_eps"] = 1e-5; }}};
  if (config.contains("num_experts_per_tok")) {
    changes.push_back(
        {"num_experts_per_tok", [](nlohmann::json& c) { c["num_experts_per_tok"] = 1; }});
  }
  for (const auto& [key, change] : changes) {
    nlohmann::json changed = config;
    change(changed);
    test::TempDir copy;
    fs::copy(source, copy.path(), fs::copy_options::recursive);
    copy.write("config.json", changed.dump(2));
    std::shared_ptr<const Model> other = Model::load(copy.path(), make_cpu_backend());
    EXPECT_NE(other->fingerprint(), model->fingerprint()) << key;
    Engine stranger(other, opt);
    EXPECT_EQ(test::run_turn(stranger, prompt, 4).cached, 0)
        << "blocks of another " << key << " were used";
    EXPECT_EQ(stranger.metrics().ssd_hit_tokens, 0u) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SsdTier,
                         testing::Values("qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_next_cuda"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace hibana
