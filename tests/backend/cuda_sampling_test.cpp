// Logits summaries on CUDA (backend/cuda/sampling.cu) against summarise_row: the same
// entries in the same order (ties to the lower token, -0 equal to +0), the same maximum, the
// sums within rounding of another summation order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "core/logits_summary.h"
#include "core/tensor.h"

namespace hibana {
namespace {

TEST(CudaSampling, SummariesMatchTheHostReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
  auto gpu = make_cuda_backend();
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t V : {5, 1000, 151936}) {
    const int64_t R = 6;
    std::vector<float> host(static_cast<size_t>(R * V));
    for (int64_t r = 0; r < R; ++r) {
      float* row = host.data() + r * V;
      for (int64_t v = 0; v < V; ++v) {
        // Rows 0-1: many ties (eighths); row 2: a few values only; row 3: -inf mixed in and
        // +-0 at the top; the rest continuous.
        const float x = normal(gen);
        row[v] = r < 2 ? std::round(x * 8.0f) / 8.0f : r == 2 ? std::round(x / 4.0f) : x;
        if (r == 3) row[v] = v % 3 == 0 ? -INFINITY : -std::fabs(x) - 1.0f;
      }
      if (r == 3) {
        row[V / 2] = -0.0f;
        row[V - 1] = 0.0f;
      }
    }
    OwnedTensor dev = make_uninit_tensor(DType::f32, {R, V}, Device::cuda);
    copy_bytes(dev.tensor.data, Device::cuda, host.data(), Device::cpu, host.size() * 4);
    const std::vector<float> temperature = {-1.0f, 0.0f, 0.7f, 1.0f, 2.0f, 0.3f};
    for (int64_t k : {1, 2, 64, 256}) {
      SCOPED_TRACE("V " + std::to_string(V) + ", k " + std::to_string(k));
      const int64_t W = summary_words(k);
      OwnedTensor out = make_uninit_tensor(DType::i32, {R, W}, Device::cuda);
      gpu->logits_summary(dev.tensor, temperature, k, out.tensor);
      std::vector<int32_t> got(static_cast<size_t>(R * W));
      copy_to_host(out.tensor, got.data());
      for (int64_t r = 0; r < R; ++r) {
        std::vector<int32_t> want(static_cast<size_t>(W));
        summarise_row(host.data() + r * V, V, temperature[r], k, want.data());
        const LogitsSummary a = unpack_summary(got.data() + r * W, k);
        const LogitsSummary b = unpack_summary(want.data(), k);
        EXPECT_EQ(a.id, b.id) << "row " << r;
        EXPECT_EQ(a.value, b.value) << "row " << r;
        EXPECT_EQ(a.max, b.max) << "row " << r;
        EXPECT_NEAR(a.sum1, b.sum1, 1e-6 * b.sum1) << "row " << r;
        EXPECT_NEAR(a.sumt, b.sumt, 1e-6 * b.sumt) << "row " << r;
        EXPECT_EQ(a.sum1 == 0.0, temperature[r] < 0.0f) << "row " << r;
        EXPECT_EQ(a.sumt == 0.0, temperature[r] <= 0.0f) << "row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace hibana
