// Logits summaries on CUDA (backend/cuda/sampling.cu) against summarise_row: the same
// entries in the same order (ties to the lower token, -0 equal to +0), the same maximum, the
// sums within rounding of another summation order; and a row's summary the same bits alone as
// in a batch (the kernel cuts a row in chunks by the vocabulary alone).
#include <gtest/gtest.h>

#include <algorithm>
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
    // (70 rows at V 1000: more than the kernel's arguments carry temperatures for)
    const int64_t R = V == 1000 ? 70 : 6;
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
      // Row 5: a whole chunk of the kernel's (8192 entries) at -inf, as masked tokens are
      // (its sums relative to its own maximum would be NaN).
      if (r == 5 && V > 16384) std::fill(row + 8192, row + 16384, -INFINITY);
    }
    OwnedTensor dev = make_uninit_tensor(DType::f32, {R, V}, Device::cuda);
    copy_bytes(dev.tensor.data, Device::cuda, host.data(), Device::cpu, host.size() * 4);
    const float pattern[6] = {-1.0f, 0.0f, 0.7f, 1.0f, 2.0f, 0.3f};
    std::vector<float> temperature;
    for (int64_t r = 0; r < R; ++r) temperature.push_back(pattern[r % 6]);
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
        OwnedTensor alone = make_uninit_tensor(DType::i32, {1, W}, Device::cuda);
        gpu->logits_summary(dev.tensor.slice_rows(r, r + 1), {temperature[r]}, k, alone.tensor);
        std::vector<int32_t> one(static_cast<size_t>(W));
        copy_to_host(alone.tensor, one.data());
        // (words 0-5: the sums, the maximum and the count; then the entries held)
        const LogitsSummary c = unpack_summary(one.data(), k);
        EXPECT_EQ(0, std::memcmp(one.data(), got.data() + r * W, 6 * sizeof(int32_t)))
            << "row " << r << " alone";
        EXPECT_EQ(c.id, a.id) << "row " << r << " alone";
        EXPECT_EQ(0, std::memcmp(c.value.data(), a.value.data(), a.value.size() * sizeof(float)))
            << "row " << r << " alone";
      }
    }
  }
}

}  // namespace
}  // namespace hibana
