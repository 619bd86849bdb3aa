// Backend::prefetch on CUDA (HIBANA_CUDA_L2_PREFETCH=1): L2 prefetches on a second stream,
// forked and joined inside a recorded step. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "support/cuda_fixture.h"
#include "support/cuda_weights.h"
#include "support/random.h"
#include "support/scoped_env.h"

namespace hibana {
namespace {

using test::make_weight;
using test::randn;
using test::ScopedEnv;
using test::TestWeight;

// Every test records with the switch on (and skips where graphs are off).
class CudaPrefetch : public test::CudaFixture {
 public:
  void SetUp() override {
    CudaFixture::SetUp();
    if (!IsSkipped() && !gpu->can_capture()) GTEST_SKIP() << "graphs are off";
  }

 private:
  ScopedEnv on_{"HIBANA_CUDA_L2_PREFETCH", "1"};
};

// Two dependent products recorded with a prefetch before each (the second also naming an empty
// weight and a null one): the recording still ends in one graph, and its replays give the bits
// the products give run one by one (the prefetches only read weights).
TEST_F(CudaPrefetch, ARecordedStepWithPrefetchesReplaysWithTheProductsBits) {
  const int64_t M = 2, K = 1024, N = 768;
  const std::vector<float> x = randn(M * K, 41);
  const Tensor xd = upload(x.data(), DType::f32, {M, K});
  const TestWeight w1 = make_weight(*this, DType::bf16, N, K, 42);
  const TestWeight w2 = make_weight(*this, DType::f8_e4m3, K, N, 43);
  Tensor y = device_f32(M, N), z = device_f32(M, K);
  gpu->matmul(xd, w1.dev, y);
  gpu->matmul(y, w2.dev, z);
  const std::vector<float> ref = download(z);

  Tensor y2 = device_f32(M, N, std::nanf("")), z2 = device_f32(M, K, std::nanf(""));
  const Weight none;
  gpu->begin_capture();
  gpu->prefetch({&w1.dev});
  gpu->matmul(xd, w1.dev, y2);
  gpu->prefetch({&w2.dev, &none, nullptr});
  gpu->matmul(y2, w2.dev, z2);
  const std::shared_ptr<void> graph = gpu->end_capture();
  ASSERT_NE(graph, nullptr) << "the recording failed";
  for (int replay = 0; replay < 2; ++replay) {
    gpu->replay(graph);
    gpu->synchronize();
    EXPECT_EQ(std::memcmp(download(z2).data(), ref.data(), ref.size() * sizeof(float)), 0)
        << "replay " << replay;
  }
}

// A recording that breaks after a prefetch (a wait for the device cannot be recorded: it throws
// and invalidates the recording) ends without a throw and without a graph; the stream is then
// usable op by op, and the next recording, prefetch and all, succeeds.
TEST_F(CudaPrefetch, ARecordingThatBreaksAfterAPrefetchLeavesTheStreamUsable) {
  const int64_t M = 1, K = 512, N = 256;
  const std::vector<float> x = randn(M * K, 44);
  const Tensor xd = upload(x.data(), DType::f32, {M, K});
  const TestWeight w = make_weight(*this, DType::bf16, N, K, 45);
  Tensor y = device_f32(M, N, std::nanf(""));
  gpu->begin_capture();
  gpu->prefetch({&w.dev});
  gpu->matmul(xd, w.dev, y);
  EXPECT_ANY_THROW(gpu->synchronize());
  std::shared_ptr<void> graph;
  EXPECT_NO_THROW(graph = gpu->end_capture());
  EXPECT_EQ(graph, nullptr);

  gpu->matmul(xd, w.dev, y);  // op by op
  const std::vector<float> ref = download(y);
  ASSERT_FALSE(std::isnan(ref[0]));
  Tensor y2 = device_f32(M, N, std::nanf(""));
  gpu->begin_capture();
  gpu->prefetch({&w.dev});
  gpu->matmul(xd, w.dev, y2);
  graph = gpu->end_capture();
  ASSERT_NE(graph, nullptr);
  gpu->replay(graph);
  EXPECT_EQ(std::memcmp(download(y2).data(), ref.data(), ref.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace hibana
