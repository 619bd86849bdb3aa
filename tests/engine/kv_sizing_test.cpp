// `--kv-cache-size auto`: how the device pool of KV pages is sized from the device's memory.
#include "engine/kv_sizing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "engine/engine.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

constexpr int64_t GiB = int64_t(1) << 30;

TEST(KvSizing, ABackendWithoutDeviceMemoryGetsTheDefault) {
  const KvSizing s = auto_kv_cache_bytes({}, false, 5 * GiB);
  EXPECT_EQ(s.bytes, kDefaultKvCacheBytes);
  EXPECT_NE(s.why.find("without device memory"), std::string::npos) << s.why;
}

TEST(KvSizing, ALargeGpuKeepsATenthForActivationsAndRoomForTheRecurrentSlots) {
  // An H200 after an 8B model: 120 GiB free of 140; a tenth (14 GiB) kept, 5 GiB of slots.
  const KvSizing s = auto_kv_cache_bytes({120 * GiB, 140 * GiB}, false, 5 * GiB);
  EXPECT_EQ(s.bytes, 120 * GiB - 14 * GiB - 5 * GiB);
  EXPECT_NE(s.why.find("120.0 GiB free of 140.0 GiB"), std::string::npos) << s.why;
  EXPECT_NE(s.why.find("14.0 GiB kept"), std::string::npos) << s.why;
}

TEST(KvSizing, ASmallGpuKeepsAtLeastTwoGiB) {
  const KvSizing s = auto_kv_cache_bytes({10 * GiB, 12 * GiB}, false, 0);
  EXPECT_EQ(s.bytes, 8 * GiB);
}

TEST(KvSizing, UnifiedMemoryTakesHalfOfWhatIsLeft) {
  const KvSizing s = auto_kv_cache_bytes({60 * GiB, 120 * GiB}, true, 4 * GiB);
  EXPECT_EQ(s.bytes, (60 * GiB - 12 * GiB - 4 * GiB) / 2);
  EXPECT_NE(s.why.find("shared with the host"), std::string::npos) << s.why;
}

TEST(KvSizing, AFullDeviceStillGetsTheMinimumAndSaysSo) {
  const KvSizing s = auto_kv_cache_bytes({GiB, 80 * GiB}, false, 0);
  EXPECT_EQ(s.bytes, int64_t(256) << 20);
  EXPECT_NE(s.why.find("too little is free"), std::string::npos) << s.why;
}

// An engine asked for 0 bytes sizes its pool: on the CPU the default, on a GPU from its free
// memory (more than the default on any lab card, and the reserve is still free afterwards).
TEST(KvSizing, AnEngineGivenZeroSizesItsPoolOnTheCpuAndOnCuda) {
  for (const char* backend : {"cpu", "cuda"}) {
    if (test::unavailable(backend)) continue;
    std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next", backend);
    EngineOptions opt;
    opt.kv_cache_bytes = 0;
    Engine engine(model, opt);
    const int64_t kv = engine.metrics().kv_bytes;
    const Backend::MemoryInfo m = model->backend().memory_info();
    if (m.total == 0) {
      EXPECT_GT(kv, kDefaultKvCacheBytes - (int64_t(1) << 20)) << backend;
      EXPECT_LE(kv, kDefaultKvCacheBytes) << backend;
    } else {
      EXPECT_GT(kv, kDefaultKvCacheBytes) << backend;
      EXPECT_GE(m.free, std::max<int64_t>(2 * GiB, m.total / 10) - (int64_t(64) << 20)) << backend;
    }
  }
}

}  // namespace
}  // namespace hibana
