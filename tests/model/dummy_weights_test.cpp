// Dummy weights (benchmarks at real shapes): the fp8 generator's codes, and the pooled source
// for weights bound for a device — views into a few pools of random values, every matrix at an
// address of its own (move_weights gives views of equal address and size one device copy), far
// less host memory than the model's bytes, and a model that runs like any other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/numeric.h"
#include "io/mapped_file.h"
#include "model/weight_source.h"
#include "model/weights.h"
#include "state/state_pool.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

ModelConfig config_at(const std::string& path) {
  return parse_model_config(read_text_file(path), path);
}

ModelConfig fixture_config(const std::string& name) {
  return config_at(test::fixture_model_dir(name) + "/config.json");
}

// Every matrix of the model (the embedding, every layer's), with fn(weight).
template <typename Fn>
void each_matrix(const ModelWeights& w, Fn&& fn) {
  fn(w.embed);
  for (const LayerWeights& l : w.layers)
    for_each_matrix(l, [&](const Weight& m, MatrixRole) { fn(m); });
}

TEST(DummyWeights, Fp8CodesHaveExponentsBelowEightAndVary) {
  for (bool pooled : {false, true}) {
    SCOPED_TRACE(pooled ? "pooled" : "own memory");
    const ModelWeights w =
        make_dummy_weights(fixture_config("qwen3_next"), DType::f8_e4m3, 3, false, pooled);
    std::set<uint8_t> seen;
    int64_t matrices = 0;
    each_matrix(w, [&](const Weight& m) {
      if (m.w.dtype != DType::f8_e4m3) return;
      ++matrices;
      ASSERT_FALSE(m.scale.empty());
      const auto* b = static_cast<const uint8_t*>(m.w.data);
      for (int64_t i = 0; i < m.w.numel(); ++i) {
        // Exponent field (bits 6..3) below 8: |x| < 2 before the block scale, never NaN.
        ASSERT_EQ(b[i] & 0x40, 0) << "code " << int(b[i]);
        seen.insert(b[i]);
      }
    });
    EXPECT_GT(matrices, 4);
    EXPECT_EQ(seen.size(), 128u);  // every code with bit 6 clear turns up
  }
}

TEST(DummyWeights, PooledMatricesAreDistinctViewsOfLittleHostMemory) {
  // Qwen3-0.6B's shapes (1.5 GB of bf16 matrices): pools for 1024, 2048 and 3072 columns.
  const ModelConfig c =
      config_at(std::string(HIBANA_TEST_DATA_DIR) + "/../bench/configs/qwen3-0.6b.json");
  const ModelWeights w = make_dummy_weights(c, DType::bf16, 1, false, true);
  std::set<std::pair<const void*, size_t>> views;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
  size_t bytes = 0;
  each_matrix(w, [&](const Weight& m) {
    EXPECT_TRUE(views.emplace(m.w.data, m.w.nbytes()).second) << "two matrices share a view";
    const auto at = reinterpret_cast<uintptr_t>(m.w.data);
    spans.emplace_back(at, at + m.w.nbytes());
    bytes += m.w.nbytes();
    // The values of a 1/sqrt(cols) scale, not another pool's.
    const float bound = 0.1f / std::sqrt(static_cast<float>(m.cols())) * 1.7320508f * 1.01f;
    const auto* v = static_cast<const uint16_t*>(m.w.data);
    float largest = 0.0f;
    for (int64_t i = 0; i < std::min<int64_t>(m.w.numel(), 4096); ++i)
      largest = std::max(largest, std::fabs(bf16_to_f32(v[i])));
    EXPECT_LE(largest, bound);
    EXPECT_GT(largest, bound / 2);
  });
  // The host memory the views cover, overlaps counted once.
  std::sort(spans.begin(), spans.end());
  size_t covered = 0;
  uintptr_t end = 0;
  for (const auto& [b, e] : spans) {
    const uintptr_t from = std::max(b, end);
    if (e > from) covered += e - from;
    end = std::max(end, e);
  }
  EXPECT_GT(bytes, size_t{1} << 30);
  EXPECT_LT(covered, bytes / 3) << "pooled matrices should share a few pools";
}

// Stacks of 2 KiB matrices: a stack 32 offsets (2 KiB) after another would start on its
// second matrix, which move_weights would then copy to the device once for both.
TEST(DummyWeights, PooledStacksNeverShareAView) {
  auto src = make_dummy_source(DType::bf16, 1, false, true);
  std::set<std::pair<const void*, size_t>> views;
  for (int call = 0; call < 40; ++call) {
    for (const Weight& w : src->stacked("experts", 40, 1, 1024)) {
      EXPECT_TRUE(views.emplace(w.w.data, w.w.nbytes()).second) << "stack " << call;
    }
  }
}

TEST(DummyWeights, PooledModelRunsOnTheCpu) {
  const ModelConfig c = fixture_config("qwen3_next");
  auto model = std::make_unique<Model>(c, make_dummy_weights(c, DType::bf16, 5, true, true),
                                       std::shared_ptr<Backend>(make_cpu_backend()));
  StatePool pool(model->state_spec(), 16, 4, 1);
  SequenceState seq(pool);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  seq.reserve(static_cast<int64_t>(tokens.size()));
  SequenceInput in;
  in.tokens = std::span<const int32_t>(tokens.data(), tokens.size());
  in.start_pos = 0;
  in.pages = seq.pages();
  in.slot = seq.slot();
  in.logits = LogitsMode::all;
  ForwardOutput out;
  model->forward(std::span<const SequenceInput>(&in, 1), pool.views(), {}, out);
  ASSERT_EQ(out.logits.size(), tokens.size() * static_cast<size_t>(c.vocab_size));
  EXPECT_TRUE(
      std::all_of(out.logits.begin(), out.logits.end(), [](float x) { return std::isfinite(x); }));
  EXPECT_NE(*std::max_element(out.logits.begin(), out.logits.end()),
            *std::min_element(out.logits.begin(), out.logits.end()));
}

}  // namespace
}  // namespace hibana
